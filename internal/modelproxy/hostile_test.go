package modelproxy

import (
	"github.com/ironclaw/ironclaw/internal/audit"

	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/audittest"
	"github.com/ironclaw/ironclaw/internal/errdefs"
	"github.com/ironclaw/ironclaw/internal/modelproxy/mock"
)

// post sends body to url with tok and returns the status and body.
func post(t testing.TB, url, tok, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

// errorOf decodes a proxy error in either provider's shape.
func errorOf(t testing.TB, prov, body string) (code, typ string) {
	t.Helper()
	var v struct {
		Type  string `json:"type"`
		Error struct {
			Code, Type, Message string
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil || v.Error.Message == "" {
		t.Fatalf("not a proxy error: %s", body)
	}
	if prov == "anthropic" && v.Type != "error" {
		t.Fatalf("not Anthropic's error shape: %s", body)
	}
	return v.Error.Code, v.Error.Type
}

// A body the proxy and the provider could read differently is refused
// before it goes anywhere: duplicate names, names equal ignoring case (also
// by Unicode folding, or spelled with escapes), at any depth; case
// variants of the members the proxy reads; anything that is not one
// strict JSON object.
func TestHostileModelDuplicateKeys(t *testing.T) {
	e := setup(t, func(c *Config) { c.Models = []string{"allowed"} })
	tok := mint(t, e.p, "agent")
	for _, c := range []struct{ name, body, reason string }{
		{"case variant", `{"model":"allowed","MODEL":"forbidden","messages":[]}`, "duplicate_key"},
		{"case variant first", `{"MODEL":"forbidden","model":"allowed","messages":[]}`, "duplicate_key"},
		{"exact duplicate", `{"model":"allowed","model":"forbidden"}`, "duplicate_key"},
		{"escaped duplicate", `{"model":"allowed","mod\u0065l":"forbidden"}`, "duplicate_key"},
		{"kelvin sign", `{"model":"allowed","messages":[{"role":"user","content":"x","tas\u212a":1,"TASK":2}]}`, "duplicate_key"},
		{"long s", `{"model":"allowed","stream":false,"\u017ftream":true}`, "duplicate_key"},
		{"nested", `{"model":"allowed","messages":[{"role":"user","Role":"system","content":"x"}]}`, "duplicate_key"},
		{"deep", `{"model":"allowed","tools":[{"function":{"parameters":{"properties":{"a":{"type":"string","TYPE":"object"}}}}}]}`, "duplicate_key"},
		{"many members", `{"model":"allowed",` + manyMembers(40) + `,"k7":0}`, "duplicate_key"},
		{"only a case variant", `{"MODEL":"allowed","messages":[]}`, "case_variant_key"},
		{"case-variant bound", `{"model":"allowed","Max_Tokens":5,"messages":[]}`, "case_variant_key"},
		{"lone surrogate", `{"model":"allowed","x":"\ud800"}`, "invalid_json"},
		{"invalid utf-8", "{\"model\":\"allowed\",\"x\":\"\xff\"}", "invalid_json"},
		{"trailing data", `{"model":"allowed"}{"model":"forbidden"}`, "invalid_json"},
		{"trailing comma", `{"model":"allowed",}`, "invalid_json"},
		{"comment", `{"model":"allowed" /* x */}`, "invalid_json"},
		{"not an object", `["model","allowed"]`, "invalid_json"},
		{"too deep", `{"model":"allowed","x":` + strings.Repeat("[", maxJSONDepth+1) + strings.Repeat("]", maxJSONDepth+1) + `}`, "invalid_json"},
	} {
		for _, prov := range []string{"openai", "anthropic"} {
			path := map[string]string{"openai": "/openai/v1/chat/completions", "anthropic": "/anthropic/v1/messages"}[prov]
			status, body := post(t, e.srv.URL+path, tok, c.body)
			if status != 400 {
				t.Fatalf("%s (%s): %d %s, want 400", c.name, prov, status, body)
			}
			code, typ := errorOf(t, prov, body)
			if code != "invalid_argument" || typ != "invalid_request_error" {
				t.Fatalf("%s (%s): %s", c.name, prov, body)
			}
		}
	}
	if n := e.oa.count() + e.an.count(); n != 0 {
		t.Fatalf("%d refused bodies reached the provider", n)
	}
	// The same name in different objects, and names differing by more
	// than case, are fine; the body goes upstream byte for byte.
	ok := `{"model":"allowed","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}],"metadata":{"model":"x","mode1":"y"}}`
	if status, body := post(t, e.srv.URL+"/openai/v1/chat/completions", tok, ok); status != 200 {
		t.Fatalf("legitimate body: %d %s", status, body)
	}
	if _, _, got := e.oa.last(); got != ok {
		t.Fatalf("upstream got %s", got)
	}
}

func manyMembers(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"k%d":%d`, i, i)
	}
	return b.String()
}

// The audit record of a refused body says why.
func TestModelRefusalAudited(t *testing.T) {
	_, l := audittest.Open(t)
	e := setup(t, func(c *Config) { c.Log = l })
	tok := mint(t, e.p, "agent")
	post(t, e.srv.URL+"/openai/v1/chat/completions", tok, `{"model":"a","MODEL":"b"}`)
	recs := waitRecords(t, l, 1)
	var d map[string]any
	json.Unmarshal(recs[0].Data, &d)
	if d["refused"] != "duplicate_key" || d["status"] != float64(400) || d["principal"] != "agent" {
		t.Fatalf("record %v", d)
	}
}

// A loop of refused requests cannot grow the audit log one record per
// request: refusals of one sandbox and reason are aggregated.
func TestHostileModelRefusalLoopAggregated(t *testing.T) {
	st, l := audittest.Open(t)
	e := setup(t, func(c *Config) { c.Log = l; c.Models = []string{"allowed"} })
	tok := mint(t, e.p, "agent")
	const n = 500
	for range n {
		post(t, e.srv.URL+"/openai/v1/chat/completions", tok, `{"model":"forbidden"}`)
	}
	recs := waitRecords(t, l, 1)
	if len(recs) > 3 {
		t.Fatalf("%d refused requests made %d audit records", n, len(recs))
	}
	var d map[string]any
	if err := json.Unmarshal(recs[0].Data, &d); err != nil || d["refused"] != "model_not_allowed" {
		t.Fatalf("first record %s", recs[0].Data)
	}
	// The rest are counted in a summary when the window closes (or the log
	// does).
	e.p.Close()
	l.Close()
	l2, err := audit.New(context.Background(), st, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	all, _ := l2.Tail(context.Background(), 0, 1000)
	var counted int64 = 1
	for _, r := range all[1:] {
		var s struct {
			Repeated int64 `json:"repeated"`
		}
		_ = json.Unmarshal(r.Data, &s)
		counted += s.Repeated
	}
	if counted != n {
		t.Fatalf("the records account for %d of %d refusals: %d records", counted, n, len(all))
	}
}

// Only listed headers cross the proxy, either way: nothing of the
// client's credentials, cookies, forwarding or hop-by-hop headers reaches
// the provider, and nothing of the provider's account reaches the client.
func TestHostileModelHeaders(t *testing.T) {
	e := setup(t, nil)
	up := func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("X-Request-Id", "req-1")
		h.Set("Request-Id", "req-2")
		h.Set("Retry-After", "3")
		h.Set("Set-Cookie", "session=provider")
		h.Set("Openai-Organization", "org-operator")
		h.Set("Openai-Project", "proj-operator")
		h.Set("X-Ratelimit-Remaining-Tokens", "12345")
		h.Set("Anthropic-Organization-Id", "org-operator")
		h.Set("Www-Authenticate", "Bearer")
		h.Set("X-Evil", "1")
		io.WriteString(w, `{"usage":{"input_tokens":1,"output_tokens":1}}`)
	}
	e.oa.handle, e.an.handle = up, up
	tok := mint(t, e.p, "agent")
	sent := map[string]string{
		"Authorization":       "Bearer " + tok,
		"X-Api-Key":           tok,
		"Proxy-Authorization": "Basic " + tok,
		"Cookie":              "a=" + tok,
		"Forwarded":           "for=10.0.0.1",
		"X-Forwarded-For":     "10.0.0.1",
		"X-Forwarded-Host":    "evil",
		"X-Real-Ip":           "10.0.0.1",
		"Openai-Organization": "org-evil",
		"Openai-Project":      "proj-evil",
		"Connection":          "X-Hop",
		"X-Hop":               "1",
		"Te":                  "trailers",
		"Upgrade":             "h2c",
		"X-Custom":            "1",
		"Openai-Beta":         "assistants=v2",
		"Anthropic-Version":   "2023-06-01",
		"Anthropic-Beta":      "b1",
		"User-Agent":          "sdk/1",
		"Accept":              "application/json",
		"Content-Type":        "application/json",
	}
	want := map[string]map[string]string{
		"openai": {"Authorization": "Bearer " + openaiKey, "Openai-Beta": "assistants=v2", "User-Agent": "sdk/1",
			"Accept": "application/json", "Content-Type": "application/json", "Accept-Encoding": "identity"},
		"anthropic": {"X-Api-Key": anthropicKey, "Anthropic-Version": "2023-06-01", "Anthropic-Beta": "b1", "User-Agent": "sdk/1",
			"Accept": "application/json", "Content-Type": "application/json", "Accept-Encoding": "identity"},
	}
	for _, prov := range []string{"openai", "anthropic"} {
		path := map[string]string{"openai": "/openai/v1/chat/completions", "anthropic": "/anthropic/v1/messages"}[prov]
		resp, _ := e.do(t, "POST", path, sent, `{"model":"m"}`)
		if resp.StatusCode != 200 {
			t.Fatal(resp.Status)
		}
		rec := map[string]*recorder{"openai": e.oa, "anthropic": e.an}[prov]
		got, _, _ := rec.last()
		for k := range got {
			if k == "Content-Length" {
				continue // set by the transport for the body
			}
			if _, ok := want[prov][k]; !ok {
				t.Errorf("%s: %s reached the provider: %q", prov, k, got.Get(k))
			}
		}
		for k, v := range want[prov] {
			if got.Get(k) != v {
				t.Errorf("%s: upstream %s = %q, want %q", prov, k, got.Get(k), v)
			}
		}
		for k := range resp.Header {
			switch k {
			case "Content-Type", "Content-Length", "X-Request-Id", "Request-Id", "Retry-After", "X-Content-Type-Options", "Date":
			default:
				t.Errorf("%s: response header %s reached the client: %q", prov, k, resp.Header.Get(k))
			}
		}
		if resp.Header.Get("X-Request-Id") != "req-1" || resp.Header.Get("Retry-After") != "3" {
			t.Errorf("%s: listed response headers lost: %v", prov, resp.Header)
		}
	}
}

// A token works only where it was minted for: a sandbox's on that
// sandbox's handler, a host token on the host handler. Every other
// token is 401, with the same answer as garbage.
func TestHostileModelTokenWrongListener(t *testing.T) {
	e := setup(t, nil)
	tokA, err := e.p.MintSandbox("sb-a", "agent")
	if err != nil {
		t.Fatal(err)
	}
	tokB, err := e.p.MintSandbox("sb-b", "agent")
	if err != nil {
		t.Fatal(err)
	}
	host := mint(t, e.p, "agent")
	srvA := httptest.NewServer(e.p.SandboxHandler("sb-a"))
	defer srvA.Close()
	const chat = "/openai/v1/chat/completions"
	const body = `{"model":"m","messages":[]}`
	_, garbage := post(t, srvA.URL+chat, "icp_"+strings.Repeat("x", 43), body)
	for _, c := range []struct {
		name, url, tok string
		want           int
	}{
		{"own sandbox token", srvA.URL, tokA, 200},
		{"another sandbox's token", srvA.URL, tokB, 401},
		{"a host token in a sandbox", srvA.URL, host, 401},
		{"a sandbox token on the host route", e.srv.URL, tokA, 401},
		{"host token on the host route", e.srv.URL, host, 200},
		{"the provider key", srvA.URL, openaiKey, 401},
	} {
		status, got := post(t, c.url+chat, c.tok, body)
		if status != c.want {
			t.Fatalf("%s: %d %s, want %d", c.name, status, got, c.want)
		}
		if c.want == 401 && got != garbage {
			t.Fatalf("%s: answer %q differs from an unknown token's %q", c.name, got, garbage)
		}
	}
	// The sandbox's token dies with the sandbox.
	e.p.Revoke("sb-a")
	if status, _ := post(t, srvA.URL+chat, tokA, body); status != 401 {
		t.Fatalf("revoked sandbox token: %d", status)
	}
	if e.oa.count() != 2 {
		t.Fatalf("upstream reached %d times, want 2", e.oa.count())
	}
}

// Minting fresh host tokens does not renew a budget: every token of a
// principal spends the one principal budget (with the principal's
// sandboxes); live tokens are capped and expire.
func TestHostileModelBudgetFreshTokens(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	var clock sync.Mutex
	e := setup(t, func(c *Config) {
		c.PrincipalBudget = 60
		c.MaxHostTokens = 3
		c.HostTokenTTL = time.Hour
		c.Now = func() time.Time { clock.Lock(); defer clock.Unlock(); return now }
	})
	const chat = "/openai/v1/chat/completions"
	// 27 bytes: 14 tokens of input estimate; the recorder reports 7.
	const body = `{"model":"m","messages":[]}`
	sbTok, _ := e.p.MintSandbox("sb-1", "agent:mallory")
	sbSrv := httptest.NewServer(e.p.SandboxHandler("sb-1"))
	defer sbSrv.Close()
	spend := 0
	for i := 0; ; i++ {
		tok := mint(t, e.p, "agent:mallory")
		status, got := post(t, e.srv.URL+chat, tok, body)
		if status == 429 {
			if code, _ := errorOf(t, "openai", got); code != "limit_exceeded" {
				t.Fatal(got)
			}
			break
		}
		if status != 200 || i > 10 {
			t.Fatalf("request %d with a fresh token: %d %s", i, status, got)
		}
		spend += 7
		e.p.RevokeHost("agent:mallory", e.p.hostGrant(tok).session)
	}
	// The sandbox of the same principal shares the budget too.
	if status, _ := post(t, sbSrv.URL+chat, sbTok, body); status != 429 {
		t.Fatalf("the principal's sandbox after its budget is spent: %d", status)
	}
	if spent, _, _ := e.p.Spent(context.Background(), "agent:mallory"); spent != int64(spend) || spent > 60 {
		t.Fatalf("spent %d, want %d (within 60)", spent, spend)
	}
	// Another principal has its own budget.
	if status, _ := post(t, e.srv.URL+chat, mint(t, e.p, "agent:other"), body); status != 200 {
		t.Fatalf("another principal: %d", status)
	}

	// At most three live tokens; expired ones free their place.
	var live []string
	for i := 0; i < 3; i++ {
		live = append(live, mint(t, e.p, "agent:cap"))
	}
	if _, err := e.p.MintHost("agent:cap"); !errors.Is(err, ErrTooManyTokens) || !errors.Is(err, errdefs.ErrLimitExceeded) {
		t.Fatalf("fourth live token: %v", err)
	}
	clock.Lock()
	now = now.Add(time.Hour)
	clock.Unlock()
	if status, _ := post(t, e.srv.URL+chat, live[0], body); status != 401 {
		t.Fatalf("expired token: %d", status)
	}
	if _, err := e.p.MintHost("agent:cap"); err != nil {
		t.Fatalf("mint after expiry: %v", err)
	}
	// Revoking is for the owner only.
	ht, _ := e.p.MintHost("agent:cap")
	if err := e.p.RevokeHost("agent:other", ht.Session); !errors.Is(err, ErrUnknownToken) {
		t.Fatalf("another principal revoked a token: %v", err)
	}
	if err := e.p.RevokeHost("agent:cap", ht.Session); err != nil {
		t.Fatal(err)
	}
	if status, _ := post(t, e.srv.URL+chat, ht.Token, body); status != 401 {
		t.Fatalf("revoked token: %d", status)
	}
}

// heldStream is a provider stand-in that streams one event and then holds
// the stream open until release is closed, ending it without any usage:
// an upstream that ignores stream_options.include_usage, or a stream the
// client or a fault cut short.
type heldStream struct {
	mu      sync.Mutex
	n       int
	release chan struct{}
}

func (h *heldStream) handle(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.n++
	h.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n")
	w.(http.Flusher).Flush()
	<-h.release
	io.WriteString(w, "data: [DONE]\n\n")
}

func (h *heldStream) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// A stream that reports no usage is charged its whole reservation, so
// streaming is no way around the budget.
func TestHostileModelBudgetStreamWithoutUsage(t *testing.T) {
	e := setup(t, func(c *Config) { c.SandboxBudget = 500 })
	h := &heldStream{release: make(chan struct{})}
	close(h.release)
	e.oa.handle = h.handle
	tok, _ := e.p.MintSandbox("sb", "agent")
	srv := httptest.NewServer(e.p.SandboxHandler("sb"))
	defer srv.Close()
	// The reservation: the input estimate plus the bound of 100.
	body := `{"model":"m","stream":true,"max_tokens":100,"messages":[{"role":"user"}],"x":1}`
	reservation := int64((len(body)+1)/2 + 100)
	n := 0
	for ; n < 10; n++ {
		status, got := post(t, srv.URL+"/openai/v1/chat/completions", tok, body)
		if status == 429 {
			break
		}
		if status != 200 || !strings.Contains(got, "[DONE]") {
			t.Fatalf("stream %d: %d %s", n, status, got)
		}
	}
	want := int(500 / reservation)
	if n != want {
		t.Fatalf("%d usage-less streams passed a budget of 500, want %d (each charged its reservation of %d)", n, want, reservation)
	}
	if spent := sandboxSpent(t, e.p, "sb"); spent != int64(n)*reservation || spent > 500 {
		t.Fatalf("spent %d, want %d", spent, int64(n)*reservation)
	}
	// The proxy asked the upstream for usage.
	var sent struct {
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	_, _, first := e.oa.last()
	json.Unmarshal([]byte(first), &sent)
	if !sent.StreamOptions.IncludeUsage {
		t.Fatalf("upstream body %s: stream usage not asked for", first)
	}
}

// Many streams in flight at once, none of which reports usage: each holds
// its reservation while it runs, so only as many as the budget holds get
// through, however the requests interleave.
func TestHostileModelBudgetConcurrentStreams(t *testing.T) {
	for _, prov := range []string{"openai", "anthropic"} {
		t.Run(prov, func(t *testing.T) {
			e := setup(t, func(c *Config) { c.SandboxBudget = 2000; c.PrincipalBudget = 1500; c.DefaultMaxOutput = 200 })
			h := &heldStream{release: make(chan struct{})}
			e.oa.handle, e.an.handle = h.handle, h.handle
			tok, _ := e.p.MintSandbox("sb", "agent")
			srv := httptest.NewServer(e.p.SandboxHandler("sb"))
			defer srv.Close()
			path, body := "/openai/v1/chat/completions", `{"model":"m","stream":true,"max_tokens":200,"messages":[]}`
			if prov == "anthropic" {
				// No bound: the proxy gives one (DefaultMaxOutput).
				path, body = "/anthropic/v1/messages", `{"model":"m","stream":true,"messages":[],"xxxxxxxxxxxx":0}`
			}
			// Who gets through, the principal budget being the tighter: a
			// request with its own bound while the bound fits; one
			// without while any output fits, bounded by what is left.
			in := int64((len(body) + 1) / 2)
			want, wantSpent, left := 0, int64(0), int64(1500)
			for {
				out := int64(200)
				if prov == "anthropic" {
					out = min(out, left-in)
				}
				if out < 1 || in+out > left {
					break
				}
				want++
				wantSpent += in + out
				left -= in + out
			}
			const tries = 12
			statuses := make(chan int, tries)
			for i := 0; i < tries; i++ {
				go func() {
					status, _ := post(t, srv.URL+path, tok, body)
					statuses <- status
				}()
			}
			refused := 0
			for refused < tries-want {
				if s := <-statuses; s != 429 {
					t.Fatalf("a request ended (%d) while streams were held", s)
				}
				refused++
			}
			deadline := time.Now().Add(10 * time.Second)
			for h.count() < want && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if h.count() != want {
				t.Fatalf("%d streams reached the provider, want %d", h.count(), want)
			}
			close(h.release)
			for i := 0; i < want; i++ {
				if s := <-statuses; s != 200 {
					t.Fatalf("held stream: %d", s)
				}
			}
			waitTokens(t, e.p, "agent", wantSpent)
			if spent, _, _ := e.p.Spent(context.Background(), "agent"); spent > 1500 {
				t.Fatalf("spent %d of a budget of 1500", spent)
			}
			if prov == "anthropic" {
				if _, _, sent := e.an.last(); !strings.HasPrefix(sent, `{"max_tokens":`) {
					t.Fatalf("upstream body %s: no output bound given", sent)
				}
			}
		})
	}
}

// A request without an output bound gets one, in the provider's field, of
// what the budget has left (divided among n choices); a request whose own
// bound the budget cannot hold is refused; one that fits goes unchanged.
func TestModelBudgetOutputBound(t *testing.T) {
	e := setup(t, func(c *Config) { c.PrincipalBudget = 1000 })
	tok := mint(t, e.p, "agent")
	for _, c := range []struct {
		path, body string
		want       int
		upstream   string
	}{
		{"/openai/v1/chat/completions", `{"model":"m"}`, 200, `{"max_completion_tokens":993,"model":"m"}`},
		{"/openai/v1/chat/completions", `{"model":"m","n":3}`, 200, `{"max_completion_tokens":330,"model":"m","n":3}`},
		{"/openai/v1/responses", `{"model":"m"}`, 200, `{"max_output_tokens":993,"model":"m"}`},
		{"/anthropic/v1/messages", `{"model":"m" }`, 200, `{"max_tokens":993,"model":"m" }`},
		{"/anthropic/v1/messages", `{"model":"m","max_tokens":500}`, 200, `{"model":"m","max_tokens":500}`},
		{"/openai/v1/chat/completions", `{"model":"m","max_tokens":994}`, 429, ""},
		{"/openai/v1/chat/completions", `{"model":"m","max_tokens":400,"n":3}`, 429, ""},
		{"/openai/v1/chat/completions", `{"model":"m","max_tokens":-1}`, 400, ""},
		{"/openai/v1/chat/completions", `{"model":"m","max_tokens":1.5}`, 400, ""},
		{"/openai/v1/chat/completions", `{"model":"m","max_tokens":99999999999999999999999}`, 429, ""},
		{"/openai/v1/embeddings", `{"model":"m","input":"x"}`, 200, `{"model":"m","input":"x"}`},
	} {
		before := e.oa.count() + e.an.count()
		status, got := post(t, e.srv.URL+c.path, tok, c.body)
		if status != c.want {
			t.Fatalf("%s %s: %d %s, want %d", c.path, c.body, status, got, c.want)
		}
		if c.upstream == "" {
			if e.oa.count()+e.an.count() != before {
				t.Fatalf("%s: refused request reached the provider", c.body)
			}
			continue
		}
		rec := e.oa
		if strings.HasPrefix(c.path, "/anthropic") {
			rec = e.an
		}
		if _, _, sent := rec.last(); sent != c.upstream {
			t.Fatalf("%s: upstream got %s, want %s", c.body, sent, c.upstream)
		}
		// Settled at the recorder's 7: the next request sees 1000 again
		// less what was spent; reset by a fresh principal each time.
		tok = mint(t, e.p, fmt.Sprintf("agent-%d", before))
	}
}

// An upstream that streams past the output bound it was given is cut there
// and charged what it reported.
func TestModelStreamPastBoundCut(t *testing.T) {
	e := setup(t, func(c *Config) { c.SandboxBudget = 10000 })
	e.an.handle = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n")
		for i := 1; i <= 100; i++ {
			fmt.Fprintf(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":%d}}\n\n", i*10)
			w.(http.Flusher).Flush()
		}
	}
	tok, _ := e.p.MintSandbox("sb", "agent")
	srv := httptest.NewServer(e.p.SandboxHandler("sb"))
	defer srv.Close()
	req, _ := http.NewRequest("POST", srv.URL+"/anthropic/v1/messages", strings.NewReader(`{"model":"m","max_tokens":50,"stream":true}`))
	req.Header.Set("x-api-key", tok)
	// The cut comes before or after the first relayed bytes, depending on
	// how the stand-in's writes arrive; either way the client sees a broken
	// response, never the rest of the stream.
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		b, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		if rerr == nil || strings.Contains(string(b), `"output_tokens":1000`) {
			t.Fatalf("stream past its bound relayed whole (err %v)", rerr)
		}
	}
	if spent := sandboxSpent(t, e.p, "sb"); spent < 5+60 {
		t.Fatalf("charged %d, less than reported", spent)
	}
}

// sandboxSpent waits until nothing of sandbox session's budget is
// reserved (its requests settled) and returns its spend.
func sandboxSpent(t testing.TB, p *Proxy, session string) int64 {
	t.Helper()
	p.mu.Lock()
	g := p.sessions[session]
	p.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for {
		g.sandbox.mu.Lock()
		spent, reserved := g.sandbox.spent, g.sandbox.reserved
		g.sandbox.mu.Unlock()
		if reserved == 0 && spent > 0 {
			return spent
		}
		if time.Now().After(deadline) {
			t.Fatalf("not settled: spent %d, reserved %d", spent, reserved)
		}
		time.Sleep(time.Millisecond)
	}
}

// With the mock as the upstream, every wire format and streaming mode is
// settled at the usage the mock reports, as real providers do; the stream
// usage the proxy asked for on a client's behalf does not reach it.
func TestModelMockUsageEveryFormat(t *testing.T) {
	_, l := audittest.Open(t)
	m := mock.New(nil)
	e := setup(t, func(c *Config) {
		c.OpenAI, c.Anthropic = nil, nil
		c.Mock = map[Provider]http.Handler{OpenAI: m.OpenAI(), Anthropic: m.Anthropic()}
		c.SandboxBudget = 100000
		c.Log = l
	})
	tok, _ := e.p.MintSandbox("sb", "agent")
	srv := httptest.NewServer(e.p.SandboxHandler("sb"))
	defer srv.Close()
	msgs := `"messages":[{"role":"user","content":"one two three four"}]`
	cases := []struct {
		path, body string
		sawUsage   bool // the client sees a usage chunk
	}{
		{"/openai/v1/chat/completions", `{"model":"mock-gpt",` + msgs + `}`, true},
		{"/openai/v1/chat/completions", `{"model":"mock-gpt","stream":true,` + msgs + `}`, false},
		{"/openai/v1/chat/completions", `{"model":"mock-gpt","stream":true,"stream_options":{"include_usage":false},` + msgs + `}`, false},
		{"/openai/v1/chat/completions", `{"model":"mock-gpt","stream":true,"stream_options":null,` + msgs + `}`, false},
		{"/openai/v1/chat/completions", `{"model":"mock-gpt","stream":true,"stream_options":{},` + msgs + `}`, false},
		{"/openai/v1/chat/completions", `{"model":"mock-gpt","stream":true,"stream_options":{"include_usage":true},` + msgs + `}`, true},
		{"/openai/v1/responses", `{"model":"mock-gpt","input":"one two three four"}`, true},
		{"/openai/v1/responses", `{"model":"mock-gpt","stream":true,"input":"one two three four"}`, true},
		{"/openai/v1/embeddings", `{"model":"mock-embedding","input":"one two three four"}`, true},
		{"/anthropic/v1/messages", `{"model":"mock-claude","max_tokens":100,` + msgs + `}`, true},
		{"/anthropic/v1/messages", `{"model":"mock-claude","max_tokens":100,"stream":true,` + msgs + `}`, true},
	}
	for _, c := range cases {
		status, got := post(t, srv.URL+c.path, tok, c.body)
		if status != 200 {
			t.Fatalf("%s %s: %d %s", c.path, c.body, status, got)
		}
		if strings.Contains(c.body, `"stream":true`) && strings.HasPrefix(c.path, "/openai/v1/chat") {
			sawUsage := false
			sc := bufio.NewScanner(strings.NewReader(got))
			for sc.Scan() {
				if isUsageChunk([]byte(sc.Text())) {
					sawUsage = true
				}
			}
			if sawUsage != c.sawUsage || !strings.HasSuffix(got, "data: [DONE]\n\n") {
				t.Fatalf("%s: usage chunk seen %v, want %v:\n%s", c.body, sawUsage, c.sawUsage, got)
			}
		}
	}
	recs := waitRecords(t, l, len(cases))
	if len(recs) != len(cases) {
		t.Fatalf("%d records", len(recs))
	}
	var total int64
	for _, r := range recs {
		var d struct {
			In       int64 `json:"input_tokens"`
			Out      int64 `json:"output_tokens"`
			Reported bool  `json:"usage_reported"`
			Reserved int64 `json:"reserved_tokens"`
			Settled  int64 `json:"settled_tokens"`
			Path     string
		}
		json.Unmarshal(r.Data, &d)
		if !d.Reported || d.In == 0 || d.Settled != d.In+d.Out || d.Reserved < d.Settled {
			t.Fatalf("record %s: want settled at the mock's reported usage", r.Data)
		}
		total += d.Settled
	}
	if spent := sandboxSpent(t, e.p, "sb"); spent != total {
		t.Fatalf("sandbox spent %d, records say %d", spent, total)
	}
}

// The JSON checker on its own: what it accepts and refuses, and that the
// folding matches strings.EqualFold, the rule encoding/json uses.
func TestStrictJSON(t *testing.T) {
	for _, ok := range []string{
		`{}`, ` {"a":1} `, `{"a":[1,-2.5e+3,true,false,null,"x\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00"],"b":{"a":{}}}`,
		`{"é":1,"e":2}`, `{"a":0,"b":-0,"c":0.0}`,
	} {
		if _, err := parseBody([]byte(ok)); err != nil {
			t.Errorf("parseBody(%s): %v", ok, err)
		}
	}
	for _, bad := range []string{
		``, `x`, `{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":-}`, `{"a":1e}`, `{"a":tru}`, `{"a":"\x"}`, `{"a":"\u12"}`,
		"{\"a\":\"\x01\"}", `{"a" 1}`, `{a:1}`, `{"a":1`, `{"a":"`, `{"a":1}}`, `{"\udc00":1}`, `{"a":"\ud800\u0041"}`,
		`{"É":1,"é":2}`, "\xef\xbb\xbf{}",
	} {
		if _, err := parseBody([]byte(bad)); err == nil {
			t.Errorf("parseBody(%q) accepted", bad)
		}
	}
	for _, pair := range [][2]string{{"model", "MODEL"}, {"k", "\u212a"}, {"s", "\u017f"}, {"ǅ", "ǆ"}, {"Σ", "ς"}} {
		if foldKey(pair[0]) != foldKey(pair[1]) || !strings.EqualFold(pair[0], pair[1]) {
			t.Errorf("foldKey(%q) != foldKey(%q)", pair[0], pair[1])
		}
	}
	if foldKey("model") == foldKey("mode1") {
		t.Error("distinct names folded together")
	}
}

// The usage chunk filter passes whole lines, holds only a partial one,
// and drops only a usage-only chunk with the blank line ending it.
func TestUsageStripper(t *testing.T) {
	in := "data: {\"choices\":[{\"delta\":{}}],\"usage\":null}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\n\n" +
		"data: [DONE]\n\n"
	want := "data: {\"choices\":[{\"delta\":{}}],\"usage\":null}\n\ndata: [DONE]\n\n"
	for step := 1; step <= len(in); step++ {
		u := &usageStripper{}
		var out []byte
		for i := 0; i < len(in); i += step {
			out = append(out, u.filter([]byte(in[i:min(i+step, len(in))]))...)
		}
		out = append(out, u.rest()...)
		if string(out) != want {
			t.Fatalf("step %d: %q", step, out)
		}
	}
}

// A successful response that reports no usage (null, as a Responses
// request run in the background answers, or none at all) is charged its
// whole reservation.
func TestHostileModelBudgetJSONWithoutUsage(t *testing.T) {
	for _, answer := range []string{`{"id":"r","status":"queued","usage":null}`, `{"id":"r"}`, `not json`} {
		e := setup(t, func(c *Config) { c.SandboxBudget = 1000 })
		e.oa.handle = func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, answer)
		}
		tok, _ := e.p.MintSandbox("sb", "agent")
		srv := httptest.NewServer(e.p.SandboxHandler("sb"))
		body := `{"model":"m","background":true,"max_output_tokens":100,"input":"x"}`
		if status, got := post(t, srv.URL+"/openai/v1/responses", tok, body); status != 200 {
			t.Fatalf("%d %s", status, got)
		}
		if spent, want := sandboxSpent(t, e.p, "sb"), int64((len(body)+1)/2+100); spent != want {
			t.Fatalf("answer %s: charged %d, want the reservation %d", answer, spent, want)
		}
		srv.Close()
	}
}
