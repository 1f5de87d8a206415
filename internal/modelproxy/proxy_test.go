package modelproxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/audittest"
)

const (
	openaiKey    = "sk-proj-REALOPENAIKEY0123456789abcdef"
	anthropicKey = "sk-ant-api03-REALANTHROPICKEY0123456789"
)

// recorder is a stand-in provider that records what reached it.
type recorder struct {
	mu      sync.Mutex
	headers []http.Header
	paths   []string
	bodies  []string
	handle  func(w http.ResponseWriter, r *http.Request)
}

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	rc.headers = append(rc.headers, r.Header.Clone())
	rc.paths = append(rc.paths, r.URL.RequestURI())
	rc.bodies = append(rc.bodies, string(b))
	rc.mu.Unlock()
	if rc.handle != nil {
		rc.handle(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"id":"x","object":"chat.completion","usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`)
}

func (rc *recorder) count() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.paths)
}

func (rc *recorder) last() (http.Header, string, string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	n := len(rc.paths) - 1
	return rc.headers[n], rc.paths[n], rc.bodies[n]
}

type env struct {
	p        *Proxy
	srv      *httptest.Server
	oa, an   *recorder
	oaS, anS *httptest.Server
}

func setup(t testing.TB, mod func(*Config)) *env {
	t.Helper()
	e := &env{oa: &recorder{}, an: &recorder{}}
	e.oaS = httptest.NewServer(e.oa)
	e.anS = httptest.NewServer(e.an)
	t.Cleanup(e.oaS.Close)
	t.Cleanup(e.anS.Close)
	cfg := Config{
		OpenAI:    &Upstream{BaseURL: e.oaS.URL + "/v1", APIKey: openaiKey},
		Anthropic: &Upstream{BaseURL: e.anS.URL + "/v1/", APIKey: anthropicKey},
		Logf:      t.Logf,
	}
	if mod != nil {
		mod(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.p = p
	e.srv = httptest.NewServer(p.Handler())
	t.Cleanup(e.srv.Close)
	return e
}

func (e *env) do(t testing.TB, method, path string, hdr map[string]string, body string) (*http.Response, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// mint returns a host token of principal (the setup's server is the host
// route).
func mint(t testing.TB, p *Proxy, principal string) string {
	t.Helper()
	ht, err := p.MintHost(principal)
	if err != nil {
		t.Fatal(err)
	}
	return ht.Token
}

func bearer(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }

func TestMintFormat(t *testing.T) {
	e := setup(t, nil)
	a, b := mint(t, e.p, "s1"), mint(t, e.p, "s1")
	if a == b || !strings.HasPrefix(a, "icp_") || len(a) != 4+43 {
		t.Fatalf("tokens %q %q", a, b)
	}
	if _, err := e.p.MintHost(""); err == nil {
		t.Fatal("empty principal minted")
	}
	if _, err := e.p.MintSandbox("", "agent"); err == nil {
		t.Fatal("empty session minted")
	}
	if _, err := e.p.MintSandbox("sb", "agent"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.MintSandbox("sb", "agent"); err == nil {
		t.Fatal("second token for one sandbox")
	}
}

func TestForwardOpenAI(t *testing.T) {
	e := setup(t, nil)
	tok := mint(t, e.p, "s1")
	hdr := map[string]string{
		"Authorization":       "Bearer " + tok,
		"X-Api-Key":           tok,
		"Cookie":              "a=" + tok,
		"OpenAI-Organization": "org-evil",
		"Connection":          "X-Secret-Hop",
		"X-Secret-Hop":        "1",
		"X-Custom":            "kept",
	}
	resp, body := e.do(t, "POST", "/openai/v1/chat/completions?x=1", hdr, `{"model":"gpt-4o","messages":[]}`)
	if resp.StatusCode != 200 || !strings.Contains(body, `"completion_tokens":4`) {
		t.Fatalf("status %d body %s", resp.StatusCode, body)
	}
	h, path, got := e.oa.last()
	if path != "/v1/chat/completions?x=1" {
		t.Fatalf("upstream path %q", path)
	}
	if got != `{"model":"gpt-4o","messages":[]}` {
		t.Fatalf("body %q", got)
	}
	if h.Get("Authorization") != "Bearer "+openaiKey {
		t.Fatalf("authorization %q", h.Get("Authorization"))
	}
	for k, vs := range h {
		for _, v := range vs {
			if strings.Contains(v, tok) {
				t.Fatalf("proxy token leaked upstream in %s", k)
			}
		}
	}
	for _, k := range []string{"X-Api-Key", "Cookie", "Openai-Organization", "X-Secret-Hop", "X-Custom"} {
		if h.Get(k) != "" {
			t.Fatalf("%s forwarded: %q", k, h.Get(k))
		}
	}
	waitTokens(t, e.p, "s1", 7)

	// GET models and embeddings are forwarded too.
	if resp, _ := e.do(t, "GET", "/openai/v1/models", bearer(tok), ""); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	if _, p, _ := e.oa.last(); p != "/v1/models" {
		t.Fatal(p)
	}
	if resp, _ := e.do(t, "POST", "/openai/v1/embeddings", bearer(tok), `{"model":"e"}`); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	if resp, _ := e.do(t, "POST", "/openai/v1/responses", bearer(tok), `{"model":"e"}`); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	if _, p, _ := e.oa.last(); p != "/v1/responses" {
		t.Fatal(p)
	}
}

func TestForwardAnthropic(t *testing.T) {
	e := setup(t, nil)
	e.an.handle = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"type":"message","usage":{"input_tokens":10,"cache_read_input_tokens":5,"output_tokens":2}}`)
	}
	tok := mint(t, e.p, "s1")
	// Anthropic client sending the token as a bearer: accepted, and stripped.
	resp, _ := e.do(t, "POST", "/anthropic/v1/messages", map[string]string{
		"Authorization": "Bearer " + tok, "anthropic-version": "2023-01-01", "anthropic-beta": "b1",
	}, `{"model":"claude"}`)
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	h, path, _ := e.an.last()
	if path != "/v1/messages" || h.Get("X-Api-Key") != anthropicKey || h.Get("Authorization") != "" ||
		h.Get("Anthropic-Version") != "2023-01-01" || h.Get("Anthropic-Beta") != "b1" {
		t.Fatalf("path %q headers %v", path, h)
	}
	waitTokens(t, e.p, "s1", 17)
	// x-api-key client, default version.
	resp, _ = e.do(t, "GET", "/anthropic/v1/models", map[string]string{"x-api-key": tok}, "")
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	h, path, _ = e.an.last()
	if path != "/v1/models" || h.Get("X-Api-Key") != anthropicKey || h.Get("Anthropic-Version") != DefaultAnthropicVersion {
		t.Fatalf("path %q headers %v", path, h)
	}
}

func TestStatusAndErrorPassThrough(t *testing.T) {
	e := setup(t, nil)
	const errBody = `{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}}`
	e.oa.handle = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "7")
		w.Header().Set("Set-Cookie", "__cf=1")
		w.WriteHeader(429)
		io.WriteString(w, errBody)
	}
	tok := mint(t, e.p, "s")
	resp, body := e.do(t, "POST", "/openai/v1/chat/completions", bearer(tok), `{"model":"m"}`)
	if resp.StatusCode != 429 || body != errBody || resp.Header.Get("Retry-After") != "7" || resp.Header.Get("Set-Cookie") != "" {
		t.Fatalf("%d %q %v", resp.StatusCode, body, resp.Header)
	}
}

func TestAuth(t *testing.T) {
	e := setup(t, nil)
	tok := mint(t, e.p, "s1")
	other := mint(t, e.p, "s2")
	cases := []struct {
		name, path string
		hdr        map[string]string
	}{
		{"none", "/openai/v1/chat/completions", nil},
		{"unknown", "/openai/v1/chat/completions", bearer("icp_" + strings.Repeat("A", 43))},
		{"real key", "/openai/v1/chat/completions", bearer(openaiKey)},
		{"anthropic unknown", "/anthropic/v1/messages", map[string]string{"x-api-key": "icp_nope"}},
	}
	for _, c := range cases {
		resp, body := e.do(t, "POST", c.path, c.hdr, `{"model":"m"}`)
		if resp.StatusCode != 401 {
			t.Fatalf("%s: %d", c.name, resp.StatusCode)
		}
		var v struct {
			Type  string
			Error struct{ Code, Message, Type string }
		}
		if err := json.Unmarshal([]byte(body), &v); err != nil || v.Error.Code != "unauthorized" || v.Error.Message == "" {
			t.Fatalf("%s: body %s", c.name, body)
		}
		if strings.HasPrefix(c.path, "/anthropic") && (v.Type != "error" || v.Error.Type != "authentication_error") {
			t.Fatalf("anthropic shape: %s", body)
		}
	}
	e.p.Revoke(e.p.hostGrant(tok).session)
	if resp, _ := e.do(t, "POST", "/openai/v1/chat/completions", bearer(tok), `{"model":"m"}`); resp.StatusCode != 401 {
		t.Fatalf("revoked: %d", resp.StatusCode)
	}
	if resp, _ := e.do(t, "POST", "/openai/v1/chat/completions", bearer(other), `{"model":"m"}`); resp.StatusCode != 200 {
		t.Fatalf("other session: %d", resp.StatusCode)
	}
	if e.oa.count() != 1 {
		t.Fatalf("upstream hit %d times", e.oa.count())
	}
}

func TestPaths(t *testing.T) {
	e := setup(t, nil)
	tok := mint(t, e.p, "s")
	for _, path := range []string{
		"/openai/v1/files", "/openai/chat/completions", "/openai/v1/chat/completions/",
		"/openai/v1/chat%2Fcompletions", "/anthropic/v1/complete", "/v1/chat/completions",
		"/openai/v1/models/gpt-4o", "/", "/anthropic/v1/../v1/messages",
	} {
		resp, body := e.do(t, "POST", path, bearer(tok), `{"model":"m"}`)
		if resp.StatusCode != 404 || !strings.Contains(body, "not_found") {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
		}
	}
	// Raw request with dot segments (the Go client would keep them, but be explicit).
	conn, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /openai/../x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n", tok)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != 404 {
		t.Fatalf("dot segments: %v %v", err, resp)
	}
	if resp, _ := e.do(t, "GET", "/openai/v1/chat/completions", bearer(tok), ""); resp.StatusCode != 405 {
		t.Fatalf("GET chat: %d", resp.StatusCode)
	}
	if e.oa.count()+e.an.count() != 0 {
		t.Fatal("upstream reached")
	}
}

func TestRequestsPerMinute(t *testing.T) {
	e := setup(t, func(c *Config) { c.RequestsPerMinute = 2 })
	tok := mint(t, e.p, "s")
	for i := 0; i < 2; i++ {
		if resp, _ := e.do(t, "POST", "/openai/v1/chat/completions", bearer(tok), `{"model":"m"}`); resp.StatusCode != 200 {
			t.Fatal(resp.Status)
		}
	}
	resp, body := e.do(t, "POST", "/openai/v1/chat/completions", bearer(tok), `{"model":"m"}`)
	if resp.StatusCode != 429 || !strings.Contains(body, "requests-per-minute") || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	// Another token has its own budget.
	if resp, _ := e.do(t, "POST", "/openai/v1/chat/completions", bearer(mint(t, e.p, "s")), `{"model":"m"}`); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	// Sliding window.
	g := &grant{}
	now := time.Unix(1000, 0)
	ok1, _ := g.allow(now, 1)
	ok2, wait := g.allow(now.Add(30*time.Second), 1)
	ok3, _ := g.allow(now.Add(61*time.Second), 1)
	if !ok1 || ok2 || wait != 30*time.Second || !ok3 {
		t.Fatal(ok1, ok2, wait, ok3)
	}
}

// The principal budget: each request reserves its input estimate (13
// bytes: 7 tokens) and an output bound of what is left; each settles at
// the reported 7.
func TestTokenBudget(t *testing.T) {
	e := setup(t, func(c *Config) { c.PrincipalBudget = 20 })
	tok := mint(t, e.p, "s")
	if resp, _ := e.do(t, "POST", "/openai/v1/chat/completions", bearer(tok), `{"model":"m"}`); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	if _, _, body := e.oa.last(); body != `{"max_completion_tokens":13,"model":"m"}` {
		t.Fatalf("upstream body %s: want the output bound of what is left (20-7)", body)
	}
	waitTokens(t, e.p, "s", 7)
	if resp, _ := e.do(t, "POST", "/openai/v1/chat/completions", bearer(tok), `{"model":"m"}`); resp.StatusCode != 200 {
		t.Fatal(resp.Status) // 7 + 7 + 6 <= 20
	}
	waitTokens(t, e.p, "s", 14)
	resp, body := e.do(t, "POST", "/openai/v1/chat/completions", bearer(tok), `{"model":"m"}`)
	if resp.StatusCode != 429 || !strings.Contains(body, "token budget") || !strings.Contains(body, "limit_exceeded") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if e.oa.count() != 2 {
		t.Fatal(e.oa.count())
	}
}

func TestAllowlist(t *testing.T) {
	e := setup(t, func(c *Config) { c.Models = []string{"gpt-ok", "claude-ok"} })
	tok := mint(t, e.p, "s")
	for _, c := range []struct {
		path, body string
		want       int
	}{
		{"/openai/v1/chat/completions", `{"model":"gpt-ok"}`, 200},
		{"/openai/v1/chat/completions", `{"model":"gpt-bad"}`, 400},
		{"/openai/v1/chat/completions", `{"messages":[]}`, 400},
		{"/openai/v1/chat/completions", `not json`, 400},
		{"/openai/v1/chat/completions", `{"model":["gpt-ok"]}`, 400},
		{"/anthropic/v1/messages", `{"model":"claude-ok"}`, 200},
		{"/anthropic/v1/messages", `{"model":"claude-bad"}`, 400},
	} {
		resp, body := e.do(t, "POST", c.path, bearer(tok), c.body)
		if resp.StatusCode != c.want {
			t.Fatalf("%s %s: %d %s", c.path, c.body, resp.StatusCode, body)
		}
		if c.want == 400 && !strings.Contains(body, "invalid_argument") {
			t.Fatal(body)
		}
	}
	if e.oa.count() != 1 || e.an.count() != 1 {
		t.Fatal("refused request reached upstream")
	}
}

func TestRequestTooLarge(t *testing.T) {
	e := setup(t, func(c *Config) { c.MaxRequestBytes = 100 })
	tok := mint(t, e.p, "s")
	big := `{"model":"m","x":"` + strings.Repeat("a", 200) + `"}`
	if resp, _ := e.do(t, "POST", "/openai/v1/chat/completions", bearer(tok), big); resp.StatusCode != 413 {
		t.Fatal(resp.Status)
	}
	// Chunked, no Content-Length.
	req, _ := http.NewRequest("POST", e.srv.URL+"/anthropic/v1/messages", io.MultiReader(strings.NewReader(big)))
	req.ContentLength = -1
	req.Header.Set("x-api-key", tok)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 413 || !strings.Contains(string(b), "too_large") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if e.oa.count()+e.an.count() != 0 {
		t.Fatal("upstream reached")
	}
	if resp, _ := e.do(t, "POST", "/openai/v1/chat/completions", bearer(tok), `{"model":"m"}`); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
}

func TestResponseCut(t *testing.T) {
	e := setup(t, func(c *Config) { c.MaxResponseBytes = 1000 })
	e.oa.handle = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		for i := 0; i < 10; i++ {
			w.Write(bytes.Repeat([]byte("x"), 500))
			w.(http.Flusher).Flush()
		}
	}
	tok := mint(t, e.p, "s")
	req, _ := http.NewRequest("POST", e.srv.URL+"/openai/v1/chat/completions", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil || len(b) > 1000 {
		t.Fatalf("read %d bytes, err %v: want a cut stream", len(b), err)
	}
}

// TestSSEStreamsUnbuffered proves the relay holds no event back: the
// stand-in provider writes one event, flushes, and writes the next only
// after the client has received that event through the proxy (a channel
// handshake, so a buffering proxy deadlocks the exchange and fails the
// test; the timeouts only turn that deadlock into a failure). It covers
// every way a stream crosses the proxy: OpenAI chat with the client's own
// usage chunk and with the one the proxy asks for and strips, the
// Responses API, Anthropic, the in-process mock transport, and a
// sandbox's handler.
func TestSSEStreamsUnbuffered(t *testing.T) {
	chat := []string{
		`data: {"choices":[{"delta":{"content":"he"}}],"usage":null}`,
		`data: {"choices":[{"delta":{"content":"llo"}}],"usage":null}`,
		`data: {"choices":[],"usage":{"prompt_tokens":11,"completion_tokens":5}}`,
		`data: [DONE]`,
	}
	for _, c := range []struct {
		name, path, body string
		events           []string
		dropped          int // index of the event the proxy strips, or -1
		tokens           int64
		mock, sandbox    bool
	}{
		{"openai", "/openai/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`, chat, -1, 16, false, false},
		{"openai-stripped-usage", "/openai/v1/chat/completions", `{"model":"m","stream":true}`, chat, 2, 16, false, false},
		{"responses", "/openai/v1/responses", `{"model":"m","stream":true}`, []string{
			"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"usage\":null}}",
			"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"hi\"}",
			"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":4,\"output_tokens\":3}}}",
		}, -1, 7, false, false},
		{"anthropic", "/anthropic/v1/messages", `{"model":"m","stream":true,"max_tokens":50}`, []string{
			"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":20,\"output_tokens\":1}}}",
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"hi\"}}",
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":9}}",
			"event: message_stop\ndata: {\"type\":\"message_stop\"}",
		}, -1, 29, false, false},
		{"mock-transport", "/openai/v1/chat/completions", `{"model":"m","stream":true}`, chat, 2, 16, true, false},
		{"sandbox", "/openai/v1/chat/completions", `{"model":"m","stream":true}`, chat, 2, 16, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ack := make(chan struct{})
			stand := func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				w.WriteHeader(200)
				for _, ev := range c.events {
					io.WriteString(w, ev+"\n\n")
					w.(http.Flusher).Flush()
					select {
					case <-ack:
					case <-time.After(5 * time.Second):
						return // the proxy buffered: the test fails below
					}
				}
			}
			e := setup(t, func(cfg *Config) {
				if c.mock {
					cfg.OpenAI = nil
					cfg.Mock = map[Provider]http.Handler{OpenAI: http.HandlerFunc(stand)}
				}
			})
			e.oa.handle, e.an.handle = stand, stand
			url, tok := e.srv.URL, ""
			if c.sandbox {
				var err error
				if tok, err = e.p.MintSandbox("sb", "s"); err != nil {
					t.Fatal(err)
				}
				sb := httptest.NewServer(e.p.SandboxHandler("sb"))
				defer sb.Close()
				url = sb.URL
			} else {
				tok = mint(t, e.p, "s")
			}
			req, _ := http.NewRequest("POST", url+c.path, strings.NewReader(c.body))
			req.Header.Set("Authorization", "Bearer "+tok)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatal(resp.Status)
			}
			br := bufio.NewReader(resp.Body)
			for i, ev := range c.events {
				// A stripped event never reaches the client; the next
				// one may only be written once the stand-in is released.
				if i != c.dropped {
					if got := readEvent(t, br); got != ev {
						t.Fatalf("event %d: %q, want %q", i, got, ev)
					}
				}
				select {
				case ack <- struct{}{}:
				case <-time.After(5 * time.Second):
					t.Fatal("stand-in not waiting")
				}
			}
			if rest, _ := io.ReadAll(br); len(rest) != 0 {
				t.Fatalf("after the last event: %q", rest)
			}
			waitTokens(t, e.p, "s", c.tokens)
		})
	}
}

func readEvent(t *testing.T, br *bufio.Reader) string {
	t.Helper()
	done := make(chan string, 1)
	go func() {
		var lines []string
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				done <- "ERR: " + err.Error()
				return
			}
			l = strings.TrimSuffix(l, "\n")
			if l == "" {
				done <- strings.Join(lines, "\n")
				return
			}
			lines = append(lines, l)
		}
	}()
	select {
	case s := <-done:
		return s
	case <-time.After(3 * time.Second):
		t.Fatal("event not relayed before the next one was written: proxy buffers")
		return ""
	}
}

func TestMockUpstream(t *testing.T) {
	var seen http.Header
	var seenPath string
	mockOA := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen, seenPath = r.Header.Clone(), r.URL.Path
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[]}\n\n")
		w.(http.Flusher).Flush()
		io.WriteString(w, "data: {\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n")
	})
	mockAN := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(418)
		io.WriteString(w, `{"path":"`+r.URL.Path+`"}`)
	})
	st, l := audittest.Open(t)
	_ = st
	e := setup(t, func(c *Config) {
		c.OpenAI, c.Anthropic = nil, nil
		c.Mock = map[Provider]http.Handler{OpenAI: mockOA, Anthropic: mockAN}
		c.Models = []string{"mock-model"}
		c.Log = l
	})
	tok := mint(t, e.p, "sess-mock")
	resp, body := e.do(t, "POST", "/openai/v1/chat/completions", bearer(tok), `{"model":"mock-model","stream":true}`)
	if resp.StatusCode != 200 || !strings.Contains(body, "[DONE]") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if seenPath != "/v1/chat/completions" || seen.Get("Authorization") != "" {
		t.Fatalf("mock saw %q %v", seenPath, seen)
	}
	waitTokens(t, e.p, "sess-mock", 3)
	resp, body = e.do(t, "POST", "/anthropic/v1/messages", map[string]string{"x-api-key": tok}, `{"model":"mock-model"}`)
	if resp.StatusCode != 418 || body != `{"path":"/v1/messages"}` {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	// Same auth and allowlist path.
	if resp, _ := e.do(t, "POST", "/openai/v1/chat/completions", nil, `{"model":"mock-model"}`); resp.StatusCode != 401 {
		t.Fatal(resp.Status)
	}
	if resp, _ := e.do(t, "POST", "/openai/v1/chat/completions", bearer(tok), `{"model":"other"}`); resp.StatusCode != 400 {
		t.Fatal(resp.Status)
	}
	recs := waitRecords(t, l, 3)
	if len(recs) != 3 || !strings.Contains(string(recs[0].Data), `"upstream":"mock"`) {
		t.Fatalf("records %v", recs)
	}

	// Neither upstream nor mock: 503.
	e2 := setup(t, func(c *Config) { c.OpenAI = nil })
	if resp, _ := e2.do(t, "POST", "/openai/v1/chat/completions", bearer(mint(t, e2.p, "s")), `{"model":"m"}`); resp.StatusCode != 503 {
		t.Fatal(resp.Status)
	}
}

func TestAudit(t *testing.T) {
	_, l := audittest.Open(t)
	e := setup(t, func(c *Config) { c.Log = l; c.Models = []string{"gpt-4o"} })
	tok := mint(t, e.p, "agent:one")
	sess := e.p.hostGrant(tok).session
	e.do(t, "POST", "/openai/v1/chat/completions", map[string]string{"Authorization": "Bearer " + tok}, `{"model":"gpt-4o","messages":[{"content":"SECRET PROMPT"}]}`)
	e.do(t, "POST", "/openai/v1/chat/completions", bearer(tok), `{"model":"nope"}`)
	e.do(t, "POST", "/openai/v1/chat/completions", bearer("icp_unknown"), `{"model":"gpt-4o"}`)
	waitRecords(t, l, 2)
	e.p.Close()
	var buf bytes.Buffer
	if err := l.Export(context.Background(), &buf, 0); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, s := range []string{openaiKey, anthropicKey, tok, "SECRET PROMPT"} {
		if strings.Contains(out, s) {
			t.Fatalf("audit contains %q", s)
		}
	}
	recs := waitRecords(t, l, 2)
	if len(recs) != 2 {
		t.Fatalf("%d records: %s", len(recs), out)
	}
	// Appends are concurrent; find each by status.
	var ok, refused map[string]any
	for _, r := range recs {
		if r.Session != sess || r.Actor != "model-proxy" || r.Kind != audit.KindModelRequest {
			t.Fatalf("record %+v", r)
		}
		var d map[string]any
		json.Unmarshal(r.Data, &d)
		if d["status"] == float64(200) {
			ok = d
		} else {
			refused = d
		}
	}
	want := map[string]any{"provider": "openai", "model": "gpt-4o", "path": "/openai/v1/chat/completions",
		"input_tokens": float64(3), "output_tokens": float64(4), "upstream": "provider", "principal": "agent:one",
		"settled_tokens": float64(7), "usage_reported": true}
	for k, v := range want {
		if ok[k] != v {
			t.Fatalf("%s = %v, want %v (%v)", k, ok[k], v, ok)
		}
	}
	for _, k := range []string{"latency_ms", "request_bytes", "response_bytes"} {
		if _, has := ok[k]; !has {
			t.Fatalf("missing %s", k)
		}
	}
	if refused["status"] != float64(400) || refused["model"] != "nope" || refused["refused"] != "model_not_allowed" || refused["settled_tokens"] != float64(0) {
		t.Fatalf("refused %v", refused)
	}
}

func TestLargeJSONUsage(t *testing.T) {
	e := setup(t, nil)
	e.oa.handle = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		io.WriteString(w, `{"object":"list","data":[`)
		for i := 0; i < 20000; i++ {
			if i > 0 {
				io.WriteString(w, ",")
			}
			io.WriteString(w, `{"embedding":[0.1,0.2,0.3,{"x":[1,2]}],"s":"}]{"}`)
		}
		io.WriteString(w, `],"usage":{"prompt_tokens":42,"total_tokens":42}}`)
	}
	tok := mint(t, e.p, "s")
	resp, body := e.do(t, "POST", "/openai/v1/embeddings", bearer(tok), `{"model":"e"}`)
	if resp.StatusCode != 200 || !json.Valid([]byte(body)) {
		t.Fatal(resp.Status)
	}
	waitTokens(t, e.p, "s", 42)
}

// The JSON usage scanner finds the first top-level "usage" member however
// the response is cut into reads, and nothing nested or quoted fools it.
func TestJSONUsageScanner(t *testing.T) {
	for _, c := range []struct {
		body    string
		in, out int64
		final   bool
	}{
		{`{"id":"x","usage":{"prompt_tokens":3,"completion_tokens":4}}`, 3, 4, true},
		{` {"usage" : {"input_tokens":5,"output_tokens":6,"cache_read_input_tokens":1} , "id":"y"}`, 6, 6, true},
		{`{"data":[{"usage":{"prompt_tokens":99}}],"s":"\"usage\":{\"prompt_tokens\":98}","usage":{"prompt_tokens":2}}`, 2, 0, true},
		{`{"\u0075sage":{"prompt_tokens":8}}`, 8, 0, true},
		{`{"usage":{"prompt_tokens":1},"usage":{"prompt_tokens":50}}`, 1, 0, true},
		{`{"usage":null,"x":1}`, 0, 0, false},
		{`{"usage":"lots"}`, 0, 0, false},
		{`{"id":"no usage","n":[1,{"a":"}"}]}`, 0, 0, false},
		{`[{"usage":{"prompt_tokens":1}}]`, 0, 0, false},
		{`{"usage":{"prompt_tokens":7}`, 7, 0, true}, // cut after the value: it is whole
		{`{"usage":{"prompt_tokens":7`, 0, 0, false}, // cut inside it
		{`{"usage":{"pad":"` + strings.Repeat("x", maxUsageValue) + `","prompt_tokens":7}}`, 0, 0, false},
	} {
		for _, step := range []int{1, 3, len(c.body)} {
			j := newJSONUsage()
			for i := 0; i < len(c.body); i += step {
				j.Write([]byte(c.body[i:min(i+step, len(c.body))]))
			}
			in, out := j.Usage()
			if in != c.in || out != c.out || j.Final() != c.final {
				t.Errorf("%.60s in reads of %d: usage %d/%d final %v, want %d/%d %v", c.body, step, in, out, j.Final(), c.in, c.out, c.final)
			}
		}
	}
}

func TestMayHoldUsage(t *testing.T) {
	for in, want := range map[string]bool{
		`{"choices":[{"delta":{"content":"a"}}],"usage":null}`:  false,
		`{"choices":[],"usage" : null ,"x":{"usage":null}}`:     false,
		`{"choices":[{"delta":{"content":"\"usage\":{}"}}]}`:    false,
		`{"choices":[],"usage":{"prompt_tokens":1}}`:            true,
		`{"usage":null,"message":{"usage":{"input_tokens":2}}}`: true,
		`{"type":"usage"}`: true,
		`{"choices":[{"delta":{"content":"a"}}],"usage":nul`: true,
	} {
		if got := mayHoldUsage([]byte(in)); got != want {
			t.Errorf("mayHoldUsage(%s) = %v", in, got)
		}
	}
}

func TestSSEUsageParser(t *testing.T) {
	s := &sseUsage{}
	in := "event: response.completed\r\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":7,\"output_tokens\":8}}}\r\n\r\n" +
		"data: " + strings.Repeat("x", maxSSELine+10) + "\n"
	for i := 0; i < len(in); i += 5 {
		s.Write([]byte(in[i:min(i+5, len(in))]))
	}
	if a, b := s.Usage(); a != 7 || b != 8 {
		t.Fatal(a, b)
	}
}

func TestNewValidation(t *testing.T) {
	for _, up := range []*Upstream{
		{BaseURL: "ftp://x/v1", APIKey: "k"},
		{BaseURL: "https://u:p@x/v1", APIKey: "k"},
		{BaseURL: "https://x/v1", APIKey: ""},
		{BaseURL: "https://x/v1", APIKey: "k\r\nX: y"},
		{BaseURL: "/v1", APIKey: "k"},
	} {
		_, err := New(Config{OpenAI: up})
		if err == nil {
			t.Fatalf("accepted %+v", up)
		}
		if strings.Contains(err.Error(), "k\r\n") {
			t.Fatal("key in error")
		}
	}
}

// waitTokens waits for a principal's settled spend to reach want: usage
// is settled when the handler has relayed the last byte, which the client
// may read first.
func waitTokens(t testing.TB, p *Proxy, principal string, want int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		spent, reserved, err := p.Spent(context.Background(), principal)
		if err != nil {
			t.Fatal(err)
		}
		if spent == want && reserved == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("tokens spent %d (%d reserved), want %d", spent, reserved, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitRecords waits for n audit records: the proxy appends after the
// response, so the client can see the response first.
// waitRecords waits for n model.request records (a request's result or a
// refusal) and returns them; the intent records written before requests
// went upstream are left out.
func waitRecords(t *testing.T, l *audit.Log, n int) []audit.Record {
	t.Helper()
	return audittest.Wait(t, l, n, func(r audit.Record) bool { return r.Kind == audit.KindModelRequest })
}
