// Package console serves IronClaw's web console: a few static files,
// embedded in the binary, that talk to the HTTP API from the operator's
// browser. The files hold no data, so they are served without a token;
// the page asks for the operator token and sends it with each API call.
package console

import (
	"bytes"
	"embed"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed static
var static embed.FS

// Prefix is where the caller mounts Handler.
const Prefix = "/ui/"

// csp allows nothing but this origin; the page has no inline script or
// style, so even an injected tag could not run.
const csp = "default-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self'; " +
	"script-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

// types is fixed rather than left to the mime package, which reads the
// host's mime.types: with nosniff a wrong type would stop the script.
var types = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
}

// Handler serves the console under Prefix (it expects the full request
// path, not one with the prefix stripped) and redirects /ui to /ui/.
func Handler() http.Handler {
	return http.HandlerFunc(serve)
}

func serve(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Frame-Options", "DENY") // for browsers that predate frame-ancestors

	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	p := r.URL.Path
	if p == strings.TrimSuffix(Prefix, "/") {
		http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
		return
	}
	name, ok := strings.CutPrefix(p, Prefix)
	if !ok {
		http.NotFound(w, r)
		return
	}
	if name == "" {
		name = "index.html"
	}
	// Only flat file names: no directories, so no listings and no way up.
	ctype, known := types[path.Ext(name)]
	if !known || strings.ContainsAny(name, "/\\") || strings.HasPrefix(name, ".") {
		http.NotFound(w, r)
		return
	}
	body, err := static.ReadFile("static/" + name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	h.Set("Content-Type", ctype)
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(body))
}
