// Package httpapi is the HTTP face of dsh (`dsh serve`): JSON routes for
// the verbs of a place where sessions live (a [Backend], which is
// supervisor.Sessions: a *supervisor.Host, or a cluster's client),
// Server-Sent Events for a session's log, and the error envelope every
// failure is answered with.
//
// # Serving
//
// A [Server] is an http.Handler over a [Backend]:
//
//	srv, err := httpapi.New(httpapi.Config{Backend: host, Token: token})
//	hs := &http.Server{Addr: addr, Handler: srv}
//	hs.RegisterOnShutdown(srv.Close) // ends the event streams at an event boundary
//	err = hs.ListenAndServe()
//	// after hs.Shutdown: srv.Wait(), then close the host
//
// The Backend is a *supervisor.Host for the sessions of one process, or a
// *cluster.Client for those of a cluster (dsh serve --peers dials one with
// the members' shared store, so listing activates nothing). Example runs
// one in-memory host behind a server.
//
// # Routes
//
//	POST /v1/sessions                 create: {"id"?, "system"?} → 201 {"id"}
//	GET  /v1/sessions                 list (?limit=&after=): id, created, status, events, turns, tokens, title
//	GET  /v1/sessions/{id}            one session, as listed
//	POST /v1/sessions/{id}/messages   {"text", "mode"?, "id"?} → 202 {"id"}; ?wait=true → 200 {"id","turn","reason"}
//	GET  /v1/sessions/{id}/messages   the derived, model-visible messages
//	POST /v1/sessions/{id}/cancel     cancel the running turn (cause user) → 202
//	POST /v1/sessions/{id}/fork       {"at": SEQ} → 201 {"id"}
//	GET  /v1/sessions/{id}/events     SSE: the log from ?from= (or after Last-Event-ID), then live
//	GET  /openapi.json                the OpenAPI 3.1 document of all of the above (openapi.json), without auth
//	GET  /healthz                     liveness, without auth
//	GET  /metrics                     Prometheus text (Config.Metrics; absent without it), with auth
//
// The tests check every response they get against openapi.json (with
// kin-openapi), so the document and the server cannot drift apart.
//
// Listing and describing a session never resume it (resuming appends to
// its log): a stored session is read through the backend's Peek (a
// cluster's client dialed with the members' shared store reads the store,
// so its listing activates nothing). A session's
// status is idle or running (resident), passivated (stored after this
// host passivated it) or stored. Its title is the last session/title
// event's, else the first line of its first user message.
//
// # Messages
//
// A message's mode is followup (default: its own later turn), steer (the
// running turn's next step, or a turn when idle) or inject (staged until
// the next waking input). A client message id ("id") makes a retry safe:
// the message id is derived from the session and the client's id, and a
// request whose message is in the log already (taken into a turn or
// pending in the inbox) is answered as delivered without sending it again.
// ?wait=true answers once the turn that takes the message has ended and
// the session is durable, with that turn's number and end reason.
//
// # Event streams
//
// Each SSE event has the event's seq as its id, its type as its event
// name and its log line as its data, so a client that reconnects with
// Last-Event-ID resumes exactly after the last event it saw. A comment
// is sent when nothing else was for Config.KeepAlive. A client that does
// not read is disconnected (a write that does not complete within
// Config.WriteTimeout, or the host dropping a subscriber that fell
// Config.SubscriberBuffer events behind); it never stalls the session.
// [Server.Close] ends every stream at an event boundary.
//
// # The web page
//
// GET / serves a page (web/, embedded: plain HTML, CSS and JavaScript, no
// build step, nothing loaded from elsewhere) that lists the sessions with
// their live status, creates one, streams a session's transcript as it
// is written (user messages, the assistant's text and reasoning, tool
// calls and results, turn ends with their reasons), sends a followup or a
// steer, and cancels the running turn. With a token it asks for it once
// (kept for the tab) and streams events with fetch, so the token rides
// in the Authorization header (an EventSource cannot send one); it
// resumes a dropped stream with Last-Event-ID. cmd/dsh drives it in a
// real chromium (TestServePageInABrowser).
//
// # Load
//
// BenchmarkStreams1000 runs 1,000 sessions with one event stream each, one
// turn each at a model's pace, and reports the delivery latency from commit
// to the client (p50, p99) and the process CPU per chunk over HTTP and
// through the in-process Host.Subscribe, and their ratio (clients in the
// same process: their parsing counts).
//
// # Errors and safety
//
// Every failure is {"error": {"code", "message"}}: NO_SESSION 404, EXISTS
// 409, IN_USE 409 (another process writes the session), INBOX_FULL 429,
// NOT_DURABLE 503 (its last write failed), CLOSED 503 (shutting down),
// BAD_REQUEST 400 (unknown field, wrong type, text too long), UNAUTHORIZED
// 401, FORBIDDEN 403 (a foreign Host header or origin), TOO_LARGE 413
// (the body cap), INTERNAL 500 (a generic message; the error goes to
// Config.Logger). With Config.Token every /v1 route needs it as a bearer
// token, compared in constant time. Config.LoopbackOnly refuses a Host
// header that is not a loopback name or address (DNS rebinding against
// an unauthenticated server). A request with a foreign Origin is refused
// unless it is Config.CORSOrigin.
package httpapi
