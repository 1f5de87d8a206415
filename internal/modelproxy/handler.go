package modelproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/errdefs"
)

// relayBuf is the copy buffer size; every read is written and flushed at once.
const relayBuf = 32 << 10

// relayBufs recycles relay buffers: a fresh 32 KiB per request is most of
// the proxy's allocation, and on a VM where a fresh page costs a fault,
// much of its time. A pooled buffer holds no data between requests that
// matters: each read overwrites what it relays.
var relayBufs = sync.Pool{New: func() any { b := make([]byte, relayBuf); return &b }}

// Handler serves the daemon's host route (see the package comment for
// routes): it accepts host tokens only.
func (p *Proxy) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.serve(w, r, p.hostGrant)
	})
}

// SandboxHandler serves the proxy on the loopback of sandbox session: it
// accepts that sandbox's token only, and nothing once Revoke(session) ran.
func (p *Proxy) SandboxHandler(session string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.serve(w, r, func(tok string) *grant { return p.sandboxGrant(session, tok) })
	})
}

// exchange is what the audit record of one request says.
type exchange struct {
	provider   Provider
	session    string
	principal  string
	model      string
	path       string
	status     int
	inTok      int64
	outTok     int64
	usageFinal bool
	reserved   int64
	charged    int64
	reqBytes   int64
	respBytes  int64
	upstream   string
	truncated  bool
	errCode    string
	refused    string
	start      time.Time
	// intent is the request's audit record, made durable before anything
	// went upstream; record ends it.
	intent *audit.Intent
}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request, auth func(tok string) *grant) {
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
	g := auth(clientToken(r))
	if g == nil {
		writeError(w, rt.provider, http.StatusUnauthorized, "unauthorized", "missing, unknown, expired or revoked proxy token")
		return
	}
	x := &exchange{provider: rt.provider, session: g.session, principal: g.principal, path: path, start: start}
	tgt := p.targets[rt.provider]
	x.upstream = tgt.upstream
	defer p.record(r.Context(), x)

	// refuse answers before anything went upstream; reason is the audit
	// record's refusal reason.
	refuse := func(status int, code, reason, msg string) {
		x.status, x.errCode, x.refused = status, code, reason
		writeError(w, rt.provider, status, code, msg)
	}

	if ok, wait := g.allow(p.now(), p.cfg.RequestsPerMinute); !ok {
		w.Header().Set("Retry-After", strconv.Itoa(int(wait/time.Second)+1))
		refuse(http.StatusTooManyRequests, "rate_limited", "rate_limited",
			"requests-per-minute budget exhausted: at most "+strconv.Itoa(p.cfg.RequestsPerMinute)+" requests per minute per proxy token")
		return
	}

	rc := http.NewResponseController(w)
	var body []byte
	pl := &plan{n: 1}
	if rt.method == http.MethodPost {
		var status int
		var reason, msg string
		body, status, reason, msg = p.readBody(r, rc)
		x.reqBytes = int64(len(body))
		if status != 0 {
			code := "invalid_argument"
			if status == http.StatusRequestEntityTooLarge {
				code = "too_large"
			}
			refuse(status, code, reason, msg)
			return
		}
		jb, err := parseBody(body)
		if err == nil {
			x.model, err = modelOf(jb)
		}
		if err == nil {
			err = pl.read(rt, jb)
		}
		if err != nil {
			reason := "invalid_json"
			var be *bodyError
			if errors.As(err, &be) {
				reason = be.reason
			}
			refuse(http.StatusBadRequest, "invalid_argument", reason, err.Error())
			return
		}
		if p.models != nil && !p.models[x.model] {
			refuse(http.StatusBadRequest, "invalid_argument", "model_not_allowed", "model not allowed by this proxy: "+strconv.Quote(x.model))
			return
		}
		pl.body = jb
	}

	if tgt.base == nil {
		refuse(http.StatusServiceUnavailable, "unavailable", "provider_unavailable", "provider "+string(rt.provider)+" is not configured")
		return
	}

	pl.inEst = (int64(len(body)) + InputBytesPerToken - 1) / InputBytesPerToken
	res, ref, err := p.reserve(r.Context(), g, pl.reserve(p.cfg.DefaultMaxOutput))
	if err != nil {
		p.logf("%v", err)
		refuse(http.StatusServiceUnavailable, "unavailable", "budget_unavailable", "the token budget cannot be read now; retry later")
		return
	}
	if ref != nil {
		refuse(http.StatusTooManyRequests, "limit_exceeded", ref.reason, ref.msg)
		return
	}
	x.reserved = res.amount
	// Until the request is known to have cost less, it costs its whole
	// reservation: every way out below that does not set charged (a
	// panic, a cut) is charged that.
	x.charged = res.amount
	defer func() { p.settle(res, x.charged) }()
	if pl.body != nil {
		body = pl.rewrite()
	}

	u := tgt.urls[rt.sub]
	if r.URL.RawQuery != "" {
		u += "?" + r.URL.RawQuery
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	out, err := http.NewRequestWithContext(r.Context(), rt.method, u, rd)
	if err != nil {
		p.logf("modelproxy: build upstream request: %v", err)
		x.charged = 0
		refuse(http.StatusInternalServerError, "internal", "internal", "cannot build upstream request")
		return
	}
	out.Header = upstreamHeaders(rt.provider, r.Header)
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

	// Sending the request is the action: its record is made durable
	// first, and if it cannot be, nothing goes upstream.
	if p.cfg.Log != nil {
		x.intent, err = p.cfg.Log.Begin(r.Context(), audit.Entry{Session: x.session, Actor: Actor, Kind: audit.KindModelRequest,
			Data: map[string]any{"provider": string(x.provider), "principal": x.principal, "model": x.model, "path": x.path,
				"request_bytes": x.reqBytes, "reserved_tokens": x.reserved, "upstream": x.upstream}})
		if err != nil {
			p.logf("modelproxy: audit: %v", err)
			x.charged = 0
			if errdefs.Class(err) == errdefs.ErrInsufficientStorage {
				refuse(http.StatusInsufficientStorage, "insufficient_storage", "audit_unavailable", "the daemon's disk is full: the request was not sent")
			} else {
				refuse(http.StatusServiceUnavailable, "unavailable", "audit_unavailable", "the request's audit record could not be written: it was not sent")
			}
			return
		}
	}
	resp, err := tgt.rt.RoundTrip(out)
	if err != nil {
		if r.Context().Err() != nil {
			// The request was sent: the provider may be generating (and
			// billing) it. It keeps its whole reservation.
			x.status, x.errCode = 499, "client_closed"
			return
		}
		// The error names the URL, never the key (it is in a header).
		p.logf("modelproxy: %s upstream: %v", rt.provider, err)
		x.charged = 0
		x.status, x.errCode = http.StatusBadGateway, "bad_gateway"
		writeError(w, rt.provider, http.StatusBadGateway, "bad_gateway", "upstream request failed")
		return
	}
	defer resp.Body.Close()

	x.status = resp.StatusCode
	h := w.Header()
	relayHeaders(h, resp.Header)
	if cl := resp.ContentLength; cl >= 0 && cl <= p.cfg.MaxResponseBytes && !pl.strip {
		h.Set("Content-Length", strconv.FormatInt(cl, 10))
	}
	w.WriteHeader(resp.StatusCode)

	var usage usageSink
	var sse *sseUsage
	if ct := mediaType(resp.Header.Get("Content-Type")); ct == "text/event-stream" {
		sse = &sseUsage{}
		usage = sse
	} else if ct == "application/json" && resp.StatusCode < 300 {
		usage = newJSONUsage()
	}
	var strip *usageStripper
	if pl.strip && sse != nil {
		strip = &usageStripper{}
	}

	bp := relayBufs.Get().(*[]byte)
	defer relayBufs.Put(bp)
	buf := *bp
	limit := p.cfg.MaxResponseBytes
	overran := false
	write := func(b []byte) bool {
		if len(b) == 0 {
			return true
		}
		_ = rc.SetWriteDeadline(time.Now().Add(p.cfg.WriteTimeout))
		wn, werr := w.Write(b)
		x.respBytes += int64(wn)
		if werr != nil {
			return false // client gone or not reading
		}
		if err := rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return false
		}
		return true
	}
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
			if sse != nil && pl.outBound > 0 && sse.out > pl.outBound {
				// The upstream went past the output bound it was given.
				overran = true
				break
			}
			rel := chunk
			if strip != nil {
				rel = strip.filter(chunk)
			}
			if !write(rel) || x.truncated {
				break
			}
		}
		if rerr != nil {
			if rerr != io.EOF {
				p.logf("modelproxy: %s upstream body: %v", rt.provider, rerr)
			}
			if strip != nil {
				write(strip.rest())
			}
			break
		}
	}
	_ = rc.SetWriteDeadline(time.Time{})
	final := false
	if usage != nil {
		x.inTok, x.outTok = usage.Usage()
		final = usage.Final()
	}
	x.usageFinal = final
	reported := x.inTok + x.outTok
	switch {
	case final && !overran && !x.truncated:
		x.charged = reported
	case resp.StatusCode >= 300:
		// Refused upstream: charged what it reported, usually nothing.
		x.charged = reported
	default:
		// Succeeded without final usage (cut, the client left, no usage
		// reported): the whole reservation, or more if more was reported.
		x.charged = max(res.amount, reported)
	}
	if overran {
		x.truncated = true
		p.logf("modelproxy: %s stream passed its output bound of %d tokens; cut", rt.provider, pl.outBound)
	}
	if x.truncated {
		if !overran {
			p.logf("modelproxy: %s response cut at %d bytes", rt.provider, limit)
		}
		// The deferred settle and record run while panicking. Abort the
		// connection so the client sees a broken response, not a short
		// one that looks complete.
		panic(http.ErrAbortHandler)
	}
}

// readBody reads a POST body within the size and time bounds; a non-zero
// status is a refusal. A body that declares its length is read into one
// buffer of exactly that size (plus the byte that tells it lied).
func (p *Proxy) readBody(r *http.Request, rc *http.ResponseController) (body []byte, status int, reason, msg string) {
	max := p.cfg.MaxRequestBytes
	tooBig := "request body over " + strconv.FormatInt(max, 10) + " bytes"
	if r.ContentLength > max {
		return nil, http.StatusRequestEntityTooLarge, "too_large", tooBig
	}
	size := int64(4 << 10)
	if r.ContentLength > 0 {
		size = r.ContentLength + 1
	}
	body = make([]byte, 0, size)
	var err error
	for int64(len(body)) <= max {
		if len(body) == cap(body) {
			body = append(body, 0)[:len(body)] // grow (amortised)
		}
		var n int
		n, err = r.Body.Read(body[len(body):min(int64(cap(body)), max+1)])
		body = body[:len(body)+n]
		if err != nil {
			break
		}
	}
	switch {
	case int64(len(body)) > max:
		return body, http.StatusRequestEntityTooLarge, "too_large", tooBig
	case err != nil && !errors.Is(err, io.EOF):
		return body, http.StatusBadRequest, "body_read", "cannot read the request body: " + err.Error()
	}
	return body, 0, "", ""
}

// mediaType returns the media type of a Content-Type value, lower-cased,
// without its parameters (what mime.ParseMediaType returns as its first
// value for the types the proxy looks for, without building the
// parameter map).
func mediaType(v string) string {
	t, _, _ := strings.Cut(v, ";")
	t = strings.TrimSpace(t)
	for i := 0; i < len(t); i++ {
		if c := t[i]; c >= 'A' && c <= 'Z' {
			return strings.ToLower(t)
		}
	}
	return t
}

// modelOf reads the "model" member ("" when absent or not a string).
func modelOf(jb *jsonBody) (string, error) {
	v, ok, err := jb.lookup("model")
	if err != nil || !ok {
		return "", err
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return "", nil
	}
	return s, nil
}

// plan is what the proxy does to one request's body for its budgets.
type plan struct {
	body     *jsonBody
	inEst    int64  // input estimate
	maxField string // the provider's output-bound member; "" for no output (embeddings)
	hasMax   bool
	clientMx int64 // the client's bound (per choice)
	n        int64 // choices
	outBound int64 // output bound of the whole request (0: none known)
	given    int64 // bound the proxy sets, or 0
	stream   bool
	strip    bool   // the proxy asked for stream usage the client did not want
	edits    []edit // to stream_options
}

// read reads the members the budgets need.
func (pl *plan) read(rt route, jb *jsonBody) error {
	v, ok, err := jb.lookup("stream")
	if err != nil {
		return err
	}
	pl.stream = ok && string(v) == "true"
	var fields []string
	switch rt.sub {
	case "/chat/completions":
		pl.maxField = "max_completion_tokens"
		fields = []string{"max_completion_tokens", "max_tokens"}
		n, ok, err := jb.readCount("n")
		if err != nil {
			return err
		}
		if ok && n > 1 {
			pl.n = n
		}
	case "/responses":
		pl.maxField, fields = "max_output_tokens", []string{"max_output_tokens"}
	case "/messages":
		pl.maxField, fields = "max_tokens", []string{"max_tokens"}
	}
	for _, f := range fields {
		m, ok, err := jb.readCount(f)
		if err != nil {
			return err
		}
		if ok {
			pl.hasMax, pl.clientMx = true, max(pl.clientMx, m)
		}
	}
	if pl.hasMax {
		pl.outBound = min(pl.clientMx*pl.n, maxCount)
	}
	if rt.sub == "/chat/completions" && pl.stream {
		return pl.askStreamUsage(jb)
	}
	return nil
}

// askStreamUsage makes a chat stream report its usage
// (stream_options.include_usage), noting whether the client asked.
func (pl *plan) askStreamUsage(jb *jsonBody) error {
	v, ok, err := jb.lookup("stream_options")
	if err != nil {
		return err
	}
	const want = `{"include_usage":true}`
	if !ok {
		pl.strip = true
		return nil // inserted with the output bound, in rewrite
	}
	start, end, _ := jb.span("stream_options")
	if string(v) == "null" {
		pl.strip = true
		pl.edits = append(pl.edits, edit{start, end, want})
		return nil
	}
	if len(v) == 0 || v[0] != '{' {
		return &bodyError{"invalid_field", "stream_options must be an object"}
	}
	so, err := parseBody(v)
	if err != nil {
		return err
	}
	iu, ok, err := so.lookup("include_usage")
	if err != nil {
		return err
	}
	if ok && string(iu) == "true" {
		return nil
	}
	pl.strip = true
	if ok {
		s, e, _ := so.span("include_usage")
		pl.edits = append(pl.edits, edit{start + s, start + e, "true"})
	} else {
		ed := insertMembers(v, so.open, `"include_usage":true`)
		ed.start += start
		ed.end += start
		pl.edits = append(pl.edits, ed)
	}
	return nil
}

// reserve returns the reservation plan for Proxy.reserve: the input
// estimate plus the output bound; a request without a bound gets one of
// what the budgets have left (at most def) when a budget applies.
func (pl *plan) reserve(def int64) func(left int64, limited bool) (int64, *refusal) {
	return func(left int64, limited bool) (int64, *refusal) {
		pl.given = 0
		if limited && !pl.hasMax && pl.maxField != "" {
			room := (left - pl.inEst) / pl.n
			if room < 1 {
				return 0, &refusal{msg: "not enough for this request's input estimate of " + strconv.FormatInt(pl.inEst, 10) + " and any output"}
			}
			pl.given = min(room, def)
			pl.outBound = pl.given * pl.n
		}
		return pl.inEst + pl.outBound, nil
	}
}

// rewrite returns the body to send upstream.
func (pl *plan) rewrite() []byte {
	jb := pl.body
	var add []string
	if pl.given > 0 {
		add = append(add, strconv.Quote(pl.maxField)+":"+strconv.FormatInt(pl.given, 10))
	}
	if pl.strip {
		if _, _, ok := jb.span("stream_options"); !ok {
			add = append(add, `"stream_options":{"include_usage":true}`)
		}
	}
	edits := pl.edits
	if len(add) > 0 {
		edits = append(edits, insertMembers(jb.raw, jb.open, add...))
	}
	return apply(jb.raw, edits)
}

// record writes how x ended to the audit log, asynchronously (the
// response is complete before the fsync): the end of its intent record
// when it went upstream, or a refusal, aggregated with others of the same
// sandbox and reason (audit.Log.AppendRepeated), so that a loop of refused
// requests costs a bounded number of records.
func (p *Proxy) record(ctx context.Context, x *exchange) {
	if x == nil || p.cfg.Log == nil {
		return
	}
	data := map[string]any{
		"provider":        string(x.provider),
		"principal":       x.principal,
		"model":           x.model,
		"path":            x.path,
		"status":          x.status,
		"input_tokens":    x.inTok,
		"output_tokens":   x.outTok,
		"usage_reported":  x.usageFinal,
		"reserved_tokens": x.reserved,
		"settled_tokens":  x.charged,
		"latency_ms":      time.Since(x.start).Milliseconds(),
		"request_bytes":   x.reqBytes,
		"response_bytes":  x.respBytes,
		"upstream":        x.upstream,
	}
	if x.truncated {
		data["truncated"] = true
	}
	if x.errCode != "" {
		data["error"] = x.errCode
	}
	if x.refused != "" {
		data["refused"] = x.refused
	}
	e := audit.Entry{Session: x.session, Actor: Actor, Kind: audit.KindModelRequest, Data: data}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	p.auditWG.Add(1)
	go func() {
		defer p.auditWG.Done()
		defer cancel()
		var err error
		switch {
		case x.intent != nil:
			_, err = x.intent.End(actx, data)
		case x.refused != "":
			_, err = p.cfg.Log.AppendRepeated(actx, "refused:"+x.refused, e)
		default:
			_, err = p.cfg.Log.Append(actx, e)
		}
		if err != nil {
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
