package e2b

import (
	"context"
	"errors"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/e2b/auth"
)

// A port preview (any port but envd's) is served through the native API's
// port URLs: the first request for a (principal, sandbox, port) asks the
// native API for one (POST /v1/sandboxes/{id}/ports, which checks policy
// ports.inbound and the sandbox's ports, and is audited), and every
// request is reverse-proxied to it on the daemon's ports listener, which
// bounds inbound connections. The URL is kept until shortly before it
// expires.

// maxPreviewURLs bounds the URLs held; at the bound, expired ones are
// dropped first, then the table is emptied (URLs are cheap to ask again).
const maxPreviewURLs = 4096

// previewMargin is how long before its expiry a URL is no longer used.
const previewMargin = 30 * time.Second

type previewKey struct {
	principal, id string
	port          int
}

type previewURL struct {
	target  *url.URL
	expires time.Time
}

type previews struct {
	logf func(string, ...any)
	mu   sync.Mutex
	urls map[previewKey]previewURL
	// proxy forwards to the ports listener; the target is chosen per
	// request (Rewrite reads it from the request's context).
	proxy *httputil.ReverseProxy
}

type targetKey struct{}

func newPreviews(logf func(string, ...any)) *previews {
	p := &previews{logf: logf, urls: map[previewKey]previewURL{}}
	p.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := pr.In.Context().Value(targetKey{}).(*url.URL)
			pr.SetURL(t)
			// The port URL's path ends in "/", the request's begins with
			// one.
			pr.Out.URL.Path = strings.TrimSuffix(t.Path, "/") + pr.In.URL.Path
			pr.Out.URL.RawPath = ""
			pr.Out.Header.Del("X-Access-Token")
			pr.Out.Header.Del("E2B-Traffic-Access-Token")
			pr.Out.Header.Del("E2b-Sandbox-Id")
			pr.Out.Header.Del("E2b-Sandbox-Port")
			pr.SetXForwarded()
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			logf("e2b: preview %s: %v", r.URL.Path, err)
			writeError(w, http.StatusBadGateway, "the sandbox's port did not answer")
		},
	}
	return p
}

func (p *previews) serve(w http.ResponseWriter, r *http.Request, who *auth.Principal, id string, port int) {
	target, err := p.url(r, who, id, port)
	if err != nil {
		status, msg := http.StatusBadGateway, err.Error()
		var ce *client.Error
		if errors.As(err, &ce) {
			status, msg = ce.Status, ce.Message
		}
		writeError(w, status, "port "+strconv.Itoa(port)+": "+msg)
		return
	}
	ctx := r.Context()
	p.proxy.ServeHTTP(w, r.WithContext(contextWith(ctx, target)))
}

func (p *previews) url(r *http.Request, who *auth.Principal, id string, port int) (*url.URL, error) {
	k := previewKey{who.Name, id, port}
	now := time.Now()
	p.mu.Lock()
	u, ok := p.urls[k]
	p.mu.Unlock()
	if ok && now.Before(u.expires.Add(-previewMargin)) {
		return u.target, nil
	}
	pu, err := who.API.OpenPort(r.Context(), id, port, 0)
	if err != nil {
		return nil, err
	}
	t, err := url.Parse(pu.URL)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.urls) >= maxPreviewURLs {
		for key, v := range p.urls {
			if !now.Before(v.expires.Add(-previewMargin)) {
				delete(p.urls, key)
			}
		}
		if len(p.urls) >= maxPreviewURLs {
			clear(p.urls)
		}
	}
	p.urls[k] = previewURL{target: t, expires: pu.ExpiresAt}
	return t, nil
}

func contextWith(ctx context.Context, t *url.URL) context.Context {
	return context.WithValue(ctx, targetKey{}, t)
}
