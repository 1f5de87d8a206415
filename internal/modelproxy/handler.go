package modelproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ironclaw/ironclaw/internal/audit"
)

// relayBuf is the copy buffer size; every read is written and flushed at once.
const relayBuf = 32 << 10

// Handler returns the proxy's HTTP handler (see the package comment for routes).
func (p *Proxy) Handler() http.Handler { return http.HandlerFunc(p.serve) }

// exchange is what the audit record of one request says.
type exchange struct {
	provider   Provider
	session    string
	model      string
	path       string
	status     int
	inTok      int64
	outTok     int64
	reqBytes   int64
	respBytes  int64
	upstream   string
	truncated  bool
	errCode    string
	start      time.Time
	authorized bool
}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	path := r.URL.EscapedPath()
	rt, ok := routes[path]
	if !ok {
		prov := OpenAI
		if strings.HasPrefix(path, "/anthropic/") {
			prov = Anthropic
		}
		writeError(w, prov, http.StatusNotFound, "not_found", "no such model endpoint")
		return
	}
	if r.Method != rt.method {
		w.Header().Set("Allow", rt.method)
		writeError(w, rt.provider, http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed")
		return
	}
	g := p.lookup(clientToken(r))
	if g == nil {
		writeError(w, rt.provider, http.StatusUnauthorized, "unauthorized", "missing, unknown or revoked proxy token")
		return
	}
	x := &exchange{provider: rt.provider, session: g.session, path: path, start: start, authorized: true}
	tgt := p.targets[rt.provider]
	x.upstream = tgt.upstream
	defer p.record(r.Context(), x)

	fail := func(status int, code, msg string) {
		x.status, x.errCode = status, code
		writeError(w, rt.provider, status, code, msg)
	}

	if ok, wait := g.allow(start, p.cfg.RequestsPerMinute); !ok {
		w.Header().Set("Retry-After", strconv.Itoa(int(wait/time.Second)+1))
		fail(http.StatusTooManyRequests, "rate_limited",
			"requests-per-minute budget exhausted: at most "+strconv.Itoa(p.cfg.RequestsPerMinute)+" requests per minute per proxy token")
		return
	}
	if lim := p.cfg.TokensPerSession; lim > 0 && g.tokensUsed() >= lim {
		fail(http.StatusTooManyRequests, "limit_exceeded",
			"token budget exhausted: "+strconv.FormatInt(lim, 10)+" input+output tokens per session used up")
		return
	}

	var body []byte
	if rt.method == http.MethodPost {
		if r.ContentLength > p.cfg.MaxRequestBytes {
			fail(http.StatusRequestEntityTooLarge, "too_large", "request body over "+strconv.FormatInt(p.cfg.MaxRequestBytes, 10)+" bytes")
			return
		}
		var err error
		body, err = io.ReadAll(io.LimitReader(r.Body, p.cfg.MaxRequestBytes+1))
		x.reqBytes = int64(len(body))
		if err != nil {
			fail(http.StatusBadRequest, "invalid_argument", "cannot read request body")
			return
		}
		if int64(len(body)) > p.cfg.MaxRequestBytes {
			fail(http.StatusRequestEntityTooLarge, "too_large", "request body over "+strconv.FormatInt(p.cfg.MaxRequestBytes, 10)+" bytes")
			return
		}
		var m struct {
			Model json.RawMessage `json:"model"`
		}
		jerr := json.Unmarshal(body, &m)
		if jerr == nil && len(m.Model) > 0 {
			var s string
			if json.Unmarshal(m.Model, &s) == nil {
				x.model = s
			}
		}
		if p.models != nil {
			if jerr != nil {
				fail(http.StatusBadRequest, "invalid_argument", "request body is not a JSON object")
				return
			}
			if !p.models[x.model] {
				fail(http.StatusBadRequest, "invalid_argument", "model not allowed by this proxy: "+strconv.Quote(x.model))
				return
			}
		}
	}

	if tgt.base == nil {
		fail(http.StatusServiceUnavailable, "unavailable", "provider "+string(rt.provider)+" is not configured")
		return
	}

	u := *tgt.base
	u.Path = tgt.base.Path + rt.sub
	u.RawPath = ""
	u.RawQuery = r.URL.RawQuery
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	out, err := http.NewRequestWithContext(r.Context(), rt.method, u.String(), rd)
	if err != nil {
		p.logf("modelproxy: build upstream request: %v", err)
		fail(http.StatusInternalServerError, "internal", "cannot build upstream request")
		return
	}
	out.Header = r.Header.Clone()
	removeHop(out.Header)
	for _, k := range clientOnly {
		out.Header.Del(k)
	}
	out.Header.Set("Accept-Encoding", "identity")
	switch rt.provider {
	case OpenAI:
		if tgt.key != "" {
			out.Header.Set("Authorization", "Bearer "+tgt.key)
		}
	case Anthropic:
		if tgt.key != "" {
			out.Header.Set("X-Api-Key", tgt.key)
		}
		if out.Header.Get("Anthropic-Version") == "" {
			out.Header.Set("Anthropic-Version", DefaultAnthropicVersion)
		}
	}

	resp, err := tgt.rt.RoundTrip(out)
	if err != nil {
		if r.Context().Err() != nil {
			x.status, x.errCode = 499, "client_closed"
			return
		}
		// The error names the URL, never the key (it is in a header).
		p.logf("modelproxy: %s upstream: %v", rt.provider, err)
		fail(http.StatusBadGateway, "bad_gateway", "upstream request failed")
		return
	}
	defer resp.Body.Close()

	x.status = resp.StatusCode
	h := w.Header()
	for k, vs := range resp.Header {
		h[k] = vs
	}
	removeHop(h)
	h.Del("Set-Cookie")
	if resp.ContentLength < 0 || resp.ContentLength > p.cfg.MaxResponseBytes {
		h.Del("Content-Length")
	}
	w.WriteHeader(resp.StatusCode)

	var usage usageSink
	if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct == "text/event-stream" {
		usage = &sseUsage{}
	} else if ct == "application/json" && resp.StatusCode < 300 {
		usage = newJSONUsage()
	}

	rc := http.NewResponseController(w)
	buf := make([]byte, relayBuf)
	limit := p.cfg.MaxResponseBytes
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			if x.respBytes+int64(n) > limit {
				chunk = chunk[:limit-x.respBytes]
				x.truncated = true
			}
			if usage != nil {
				usage.Write(chunk)
			}
			wn, werr := w.Write(chunk)
			x.respBytes += int64(wn)
			if werr != nil {
				break // client gone
			}
			if err := rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
				break
			}
			if x.truncated {
				break
			}
		}
		if rerr != nil {
			if rerr != io.EOF {
				p.logf("modelproxy: %s upstream body: %v", rt.provider, rerr)
			}
			break
		}
	}
	if usage != nil {
		x.inTok, x.outTok = usage.Usage()
		if n := x.inTok + x.outTok; n > 0 {
			g.addTokens(n)
		}
	}
	if x.truncated {
		p.logf("modelproxy: %s response cut at %d bytes", rt.provider, limit)
		// The deferred record runs while panicking. Abort the connection so the client sees a broken response, not a
		// short one that looks complete.
		panic(http.ErrAbortHandler)
	}
}

// record appends x to the audit log (asynchronously: the response is
// complete before the fsync).
func (p *Proxy) record(ctx context.Context, x *exchange) {
	if x == nil || p.cfg.Log == nil {
		return
	}
	data := map[string]any{
		"provider":       string(x.provider),
		"model":          x.model,
		"path":           x.path,
		"status":         x.status,
		"input_tokens":   x.inTok,
		"output_tokens":  x.outTok,
		"latency_ms":     time.Since(x.start).Milliseconds(),
		"request_bytes":  x.reqBytes,
		"response_bytes": x.respBytes,
		"upstream":       x.upstream,
	}
	if x.truncated {
		data["truncated"] = true
	}
	if x.errCode != "" {
		data["error"] = x.errCode
	}
	e := audit.Entry{Session: x.session, Actor: Actor, Kind: audit.KindModelRequest, Data: data}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	p.auditWG.Add(1)
	go func() {
		defer p.auditWG.Done()
		defer cancel()
		if _, err := p.cfg.Log.Append(actx, e); err != nil {
			p.logf("modelproxy: audit: %v", err)
		}
	}()
}

// writeError writes an error in the provider's shape; both shapes also carry
// the daemon's {"error":{"code","message"}}.
func writeError(w http.ResponseWriter, prov Provider, status int, code, msg string) {
	var v any
	if prov == Anthropic {
		v = map[string]any{"type": "error", "error": map[string]any{
			"type": anthropicType(status), "code": code, "message": msg}}
	} else {
		v = map[string]any{"error": map[string]any{
			"type": openaiType(status), "code": code, "message": msg, "param": nil}}
	}
	b, _ := json.Marshal(v)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

func anthropicType(status int) string {
	switch status {
	case 400, 405:
		return "invalid_request_error"
	case 401:
		return "authentication_error"
	case 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 413:
		return "request_too_large"
	case 429:
		return "rate_limit_error"
	case 503:
		return "overloaded_error"
	}
	return "api_error"
}

func openaiType(status int) string {
	switch status {
	case 400, 404, 405, 413:
		return "invalid_request_error"
	case 401:
		return "authentication_error"
	case 429:
		return "rate_limit_exceeded"
	}
	return "server_error"
}
