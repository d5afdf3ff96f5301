package httpapi

import (
	"embed"
	"net/http"
)

// The web page: web/index.html with its script and style sheet, embedded
// (no build step, nothing fetched from elsewhere). It needs no token to
// load; it asks for one when the API answers UNAUTHORIZED, and streams
// events with fetch so the token rides in the Authorization header.
//
//go:embed web/index.html web/app.js web/app.css
var webFiles embed.FS

var webTypes = map[string]string{
	"index.html": "text/html; charset=utf-8",
	"app.js":     "text/javascript; charset=utf-8",
	"app.css":    "text/css; charset=utf-8",
}

// webFile serves one embedded file.
func webFile(name string) http.HandlerFunc {
	b, err := webFiles.ReadFile("web/" + name)
	if err != nil {
		panic(err) // unreachable: embedded above
	}
	return func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		h.Set("Content-Type", webTypes[name])
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		_, _ = w.Write(b)
	}
}
