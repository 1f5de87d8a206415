package console

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func get(t *testing.T, method, path string) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	Handler().ServeHTTP(w, httptest.NewRequest(method, path, nil))
	return w
}

func checkHeaders(t *testing.T, path string, w *httptest.ResponseRecorder) {
	t.Helper()
	want := map[string]string{
		"Content-Security-Policy": csp,
		"X-Content-Type-Options":  "nosniff",
		"Referrer-Policy":         "no-referrer",
		"Cache-Control":           "no-store",
	}
	for k, v := range want {
		if got := w.Header().Get(k); got != v {
			t.Errorf("%s: %s = %q, want %q", path, k, got, v)
		}
	}
}

func TestServesFiles(t *testing.T) {
	for _, c := range []struct{ path, ctype, contains string }{
		{"/ui/", "text/html; charset=utf-8", `<script src="app.js"`},
		{"/ui/index.html", "text/html; charset=utf-8", `data-testid="token-input"`},
		{"/ui/app.js", "text/javascript; charset=utf-8", "sessionStorage"},
		{"/ui/style.css", "text/css; charset=utf-8", "body"},
	} {
		w := get(t, http.MethodGet, c.path)
		if w.Code != http.StatusOK {
			t.Fatalf("%s: status %d", c.path, w.Code)
		}
		if got := w.Header().Get("Content-Type"); got != c.ctype {
			t.Errorf("%s: Content-Type %q, want %q", c.path, got, c.ctype)
		}
		if !strings.Contains(w.Body.String(), c.contains) {
			t.Errorf("%s: body lacks %q", c.path, c.contains)
		}
		checkHeaders(t, c.path, w)
	}
}

// The CSP forbids inline code, so the page must have none (it would
// silently not run).
func TestNoInlineCode(t *testing.T) {
	page := get(t, http.MethodGet, "/ui/").Body.String()
	for _, bad := range []string{"<script>", "style=", " onclick", " onload", "javascript:"} {
		if strings.Contains(page, bad) {
			t.Errorf("index.html contains %q", bad)
		}
	}
	if js := get(t, http.MethodGet, "/ui/app.js").Body.String(); strings.Contains(js, "innerHTML") {
		t.Error("app.js uses innerHTML")
	}
}

func TestRedirect(t *testing.T) {
	w := get(t, http.MethodGet, "/ui")
	if w.Code != http.StatusMovedPermanently || w.Header().Get("Location") != "/ui/" {
		t.Fatalf("/ui: status %d, Location %q", w.Code, w.Header().Get("Location"))
	}
	checkHeaders(t, "/ui", w)
}

func TestNotFound(t *testing.T) {
	for _, p := range []string{
		"/ui/nope.js", "/ui/missing", "/ui/static/", "/ui/static/app.js", "/ui/../console.go",
		"/ui/%2e%2e/console.go", "/ui/a/", "/ui/.hidden.js", "/ui/console.go", "/other",
	} {
		w := get(t, http.MethodGet, p)
		if w.Code != http.StatusNotFound {
			t.Errorf("%s: status %d, want 404", p, w.Code)
		}
		if strings.Contains(w.Body.String(), "<a href") {
			t.Errorf("%s: looks like a directory listing", p)
		}
		checkHeaders(t, p, w)
	}
}

func TestMethods(t *testing.T) {
	if w := get(t, http.MethodHead, "/ui/app.js"); w.Code != http.StatusOK || w.Body.Len() != 0 {
		t.Errorf("HEAD: status %d, %d body bytes", w.Code, w.Body.Len())
	}
	w := get(t, http.MethodPost, "/ui/")
	if w.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: status %d, want 405", w.Code)
	}
	checkHeaders(t, "POST /ui/", w)
}
