// Package telemetry is what dsh says about itself while it runs: the hook
// through which the events sessions commit become metrics and traces
// ([Observer], installed with supervisor.Config.Observers).
//
// The committed events are the telemetry source: everything a turn did
// (its steps, model calls with their chunks and usage, tool calls with
// their results) is in the session's log, so an Observer reads it there
// rather than being fed by calls spread through the agent loop.
package telemetry
