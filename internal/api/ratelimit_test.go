package api

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/session"
)

// fakeClock drives a limiter's time.
func fakeClock(l *limiter) *time.Time {
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	return &now
}

func TestLimiterRefills(t *testing.T) {
	l := newLimiter(rateShape{10, 2}, rateShape{1e6, 1e6}, 16)
	now := fakeClock(l)
	for i := 0; i < 2; i++ {
		if ok, _, _ := l.allow("k", ""); !ok {
			t.Fatal("burst refused")
		}
	}
	ok, wait, which := l.allow("k", "")
	if ok || wait <= 0 || wait > 100*time.Millisecond || which != limitPrincipal {
		t.Fatalf("empty bucket: %v %v %q", ok, wait, which)
	}
	*now = now.Add(100 * time.Millisecond)
	if ok, _, _ := l.allow("k", ""); !ok {
		t.Fatal("no refill after 100ms at 10/s")
	}
	*now = now.Add(time.Hour)
	for i := 0; i < 2; i++ {
		if ok, _, _ := l.allow("k", ""); !ok {
			t.Fatal("refill above the burst is capped, but the burst itself must pass")
		}
	}
	if ok, _, _ := l.allow("k", ""); ok {
		t.Fatal("bucket overfilled past the burst")
	}
}

// One busy sandbox does not starve another sandbox of the same principal,
// one principal does not starve another, and a refusal takes nothing.
func TestLimiterSeparates(t *testing.T) {
	l := newLimiter(rateShape{1, 10}, rateShape{1, 3}, 16)
	fakeClock(l)
	for i := 0; i < 3; i++ {
		if ok, _, _ := l.allow("p", "busy"); !ok {
			t.Fatalf("request %d to the busy sandbox refused", i)
		}
	}
	ok, wait, which := l.allow("p", "busy")
	if ok || which != limitSandbox || wait <= 0 || wait > time.Second {
		t.Fatalf("4th request to the busy sandbox: %v %v %q", ok, wait, which)
	}
	// The refusal took nothing from p: 10-3 = 7 left, 3 for "calm" and 4
	// for p's other routes.
	for i := 0; i < 3; i++ {
		if ok, _, which := l.allow("p", "calm"); !ok {
			t.Fatalf("request %d to the other sandbox refused by the %s bucket", i, which)
		}
	}
	for i := 0; i < 4; i++ {
		if ok, _, _ := l.allow("p", ""); !ok {
			t.Fatalf("principal request %d refused", i)
		}
	}
	if ok, _, which := l.allow("p", ""); ok || which != limitPrincipal {
		t.Fatalf("principal past its burst: %v %q", ok, which)
	}
	// p is empty; q is not.
	for i := 0; i < 10; i++ {
		if ok, _, _ := l.allow("q", ""); !ok {
			t.Fatalf("another principal's request %d refused", i)
		}
	}
	// Both empty: the wait is the longer.
	if ok, wait, which := l.allow("p", "busy"); ok || which != limitPrincipal || wait <= 0 {
		t.Fatalf("both empty: %v %v %q", ok, wait, which)
	}
}

func TestLimiterBounded(t *testing.T) {
	l := newLimiter(rateShape{1e6, 1e6}, rateShape{10, 20}, 64)
	now := fakeClock(l)
	for i := 0; i < 100_000; i++ {
		l.allow("p", fmt.Sprintf("s-%d", i))
	}
	if p, s := l.size(); p != 1 || s != 64 {
		t.Fatalf("after 100000 keys: %d principal, %d sandbox buckets; want 1, 64", p, s)
	}
	// Idle buckets (refilled: 20 at 10/s is 2s) go on the next request.
	*now = now.Add(3 * time.Second)
	l.allow("p", "fresh")
	if _, s := l.size(); s != 1 {
		t.Fatalf("idle buckets kept: %d", s)
	}
}

func TestRateLimit(t *testing.T) {
	e := newEnv(t, envOpts{cfg: Config{RatePerSecond: 0.5, RateBurst: 3}})
	for i := 0; i < 3; i++ {
		e.must(200, "GET", "/v1/sandboxes", agentTok, nil, nil)
	}
	resp, _ := e.req("GET", "/v1/sandboxes", agentTok, nil)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("4th request: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if n, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || n < 1 || n > 2 {
		t.Fatalf("Retry-After %q", resp.Header.Get("Retry-After"))
	}
	e.wantError(429, "rate_limited", "GET", "/v1/sandboxes", agentTok, nil)
	e.must(200, "GET", "/v1/audit", operTok, nil, nil) // the other token has its own bucket
	e.must(200, "GET", "/healthz", "", nil, nil)       // no token, no limit
}

// Over HTTP: a sandbox's routes take from its own bucket; another sandbox
// of the same principal, and the principal's other routes, are not held
// up; unknown, foreign and ended ids make no bucket.
func TestSandboxRateLimit(t *testing.T) {
	const otherTok = "other-agent-token-0123456789"
	e := newEnv(t, envOpts{cfg: Config{
		SandboxRatePerSecond: 0.01, SandboxRateBurst: 4,
		Agents: []Agent{{Name: "b", Token: otherTok}},
	}})
	busy, calm := e.create(nil), e.create(nil)
	var foreign sbx
	e.must(http.StatusCreated, "POST", "/v1/sandboxes", otherTok, nil, &foreign)
	// Creating takes from no sandbox's bucket.
	for i := 0; i < 4; i++ {
		e.must(200, "GET", "/v1/sandboxes/"+busy.ID, agentTok, nil, nil)
	}
	resp, out := e.req("GET", "/v1/sandboxes/"+busy.ID+"/files?path=/workspace/a", agentTok, nil)
	if resp.StatusCode != 429 {
		t.Fatalf("5th request to the busy sandbox: %d %s", resp.StatusCode, out)
	}
	if n, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || n < 1 {
		t.Fatalf("Retry-After %q", resp.Header.Get("Retry-After"))
	}
	msg := e.wantError(429, "rate_limited", "POST", "/v1/sandboxes/"+busy.ID+"/exec?wait=1", agentTok, `{"argv":["true"]}`)
	if want := "sandbox " + busy.ID; !strings.Contains(msg, want) {
		t.Fatalf("message %q does not name %q", msg, want)
	}
	// The same principal: its other sandbox and its listing still pass.
	for i := 0; i < 3; i++ {
		e.must(200, "GET", "/v1/sandboxes/"+calm.ID, agentTok, nil, nil)
	}
	e.must(200, "GET", "/v1/sandboxes", agentTok, nil, nil)
	// A flood of unknown ids and of another principal's id: 404s, and no
	// bucket for any of them.
	for i := 0; i < 500; i++ {
		e.wantError(404, "not_found", "GET", fmt.Sprintf("/v1/sandboxes/nosuch%d/files?path=/workspace/x", i), agentTok, nil)
	}
	for i := 0; i < 10; i++ {
		e.wantError(404, "not_found", "GET", "/v1/sandboxes/"+foreign.ID, agentTok, nil)
	}
	if _, n := e.srv.limiter.size(); n != 2 {
		t.Fatalf("%d sandbox buckets; want 2 (busy, calm)", n)
	}
	// An ended sandbox's routes are the principal's alone (the DELETE is
	// calm's 4th request).
	e.must(200, "DELETE", "/v1/sandboxes/"+calm.ID, agentTok, nil, nil)
	for i := 0; i < 10; i++ {
		e.must(200, "GET", "/v1/sandboxes/"+calm.ID, agentTok, nil, nil)
	}
	// The other principal's own sandbox has its own bucket.
	e.must(200, "GET", "/v1/sandboxes/"+foreign.ID, otherTok, nil, nil)
}

// Every 429 carries Retry-After: the rate limits (above), the quotas
// (errdefs.ErrLimitExceeded, every class statusOf renders as 429) and the
// model proxy's own refusals.
func TestRetryAfterOnEvery429(t *testing.T) {
	e := newEnv(t, envOpts{sess: session.Options{Quotas: session.Quotas{SandboxesPerPrincipal: 1}}})
	e.create(nil)
	resp, out := e.req("POST", "/v1/sandboxes", agentTok, nil)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("over the quota: %d, Retry-After %q: %s", resp.StatusCode, resp.Header.Get("Retry-After"), out)
	}
	n := 0
	for _, c := range statusOf {
		if c.status != http.StatusTooManyRequests {
			continue
		}
		n++
		w := httptest.NewRecorder()
		writeError(w, classify(fmt.Errorf("%w: x", c.class)))
		if w.Code != 429 || w.Header().Get("Retry-After") != "1" {
			t.Fatalf("%v: %d, Retry-After %q", c.class, w.Code, w.Header().Get("Retry-After"))
		}
	}
	if n == 0 {
		t.Fatal("no class renders as 429")
	}
	for _, set := range []string{"", "7"} {
		h := retryAfter429(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if set != "" {
				w.Header().Set("Retry-After", set)
			}
			w.WriteHeader(429)
		}))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", "/v1/model/openai/v1/chat/completions", nil))
		want := set
		if want == "" {
			want = "1"
		}
		if got := w.Header().Get("Retry-After"); got != want {
			t.Fatalf("model proxy 429 (set %q): Retry-After %q", set, got)
		}
	}
	for _, c := range []struct {
		wait time.Duration
		want string
	}{{0, "1"}, {time.Millisecond, "1"}, {time.Second, "1"}, {1001 * time.Millisecond, "2"}, {90 * time.Second, "90"}} {
		w := httptest.NewRecorder()
		setRetryAfter(w, c.wait)
		if got := w.Header().Get("Retry-After"); got != c.want {
			t.Fatalf("wait %v: Retry-After %q, want %q", c.wait, got, c.want)
		}
	}
}
