package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/audittest"
	"github.com/ironclaw/ironclaw/internal/store"
)

type fixture struct {
	path string
	st   *store.Store
	log  *audit.Log
}

func openFixture(t *testing.T, path string) *fixture {
	t.Helper()
	st, log := audittest.OpenAt(t, path)
	return &fixture{path: path, st: st, log: log}
}

func (f *fixture) close() {
	f.log.Close()
	f.st.Close()
}

func newGateway(t *testing.T, f *fixture, opts Options) *Gateway {
	t.Helper()
	opts.Store, opts.Audit = f.st, f.log
	g, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

func auditKinds(t *testing.T, log *audit.Log) map[string]int {
	t.Helper()
	if res, err := log.Verify(context.Background()); err != nil || !res.OK {
		t.Fatalf("audit chain: %+v %v", res, err)
	}
	recs, err := log.Tail(context.Background(), 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, r := range recs {
		out[r.Kind]++
	}
	return out
}

func TestFileDecideAndIdempotence(t *testing.T) {
	f := openFixture(t, filepath.Join(t.TempDir(), "db"))
	var ran atomic.Int32
	g := newGateway(t, f, Options{Actions: map[string]Action{
		KindToolRegister: func(ctx context.Context, a Approval) (any, error) {
			ran.Add(1)
			return map[string]any{"tool": "lint"}, nil
		},
	}})
	ctx := context.Background()
	a, err := g.File(ctx, Request{Kind: KindToolRegister, By: "agent", Data: map[string]any{"name": "lint"}})
	if err != nil {
		t.Fatal(err)
	}
	if a.State != StatePending || a.Summary == "" || a.ExpiresAt.Sub(a.CreatedAt) != DefaultTimeout {
		t.Fatalf("filed: %+v", a)
	}
	if _, err := g.Decide(ctx, "apr-nope", Decision{Approve: true, By: "alice"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown id: %v", err)
	}
	if _, err := g.Decide(ctx, a.ID, Decision{Approve: true}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("no decider: %v", err)
	}
	if _, err := g.Decide(ctx, a.ID, Decision{Approve: true, By: "alice", Scope: ScopeGlobal}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("scope on a non-egress kind: %v", err)
	}
	got, err := g.Decide(ctx, a.ID, Decision{Approve: true, By: "alice", Reason: "ok"})
	if err != nil {
		t.Fatal(err)
	}
	if got.State != StateApproved || got.DecidedBy != "alice" || string(got.Result) != `{"tool":"lint"}` || got.DecidedAt == nil {
		t.Fatalf("decided: %+v result %s", got, got.Result)
	}
	again, err := g.Decide(ctx, a.ID, Decision{Approve: true, By: "bob"})
	if err != nil || again.DecidedBy != "alice" {
		t.Fatalf("approving again: %+v %v", again, err)
	}
	if _, err := g.Decide(ctx, a.ID, Decision{Approve: false, By: "bob"}); !errors.Is(err, ErrConflict) {
		t.Fatalf("denying an approved request: %v", err)
	}
	if ran.Load() != 1 {
		t.Fatalf("action ran %d times", ran.Load())
	}
	k := auditKinds(t, f.log)
	if k[audit.KindApprovalRequest] != 1 || k[audit.KindApprovalDecide] != 1 || k[KindApprovalApply] != 1 {
		t.Fatalf("audit kinds: %v", k)
	}
}

func TestFileValidation(t *testing.T) {
	f := openFixture(t, filepath.Join(t.TempDir(), "db"))
	g := newGateway(t, f, Options{})
	ctx := context.Background()
	for name, r := range map[string]Request{
		"unknown kind":    {Kind: "root.shell", By: "agent"},
		"no session":      {Kind: KindEgressHost, By: "agent", Data: map[string]any{"host": "x", "port": 1}},
		"no requester":    {Kind: KindToolCall},
		"data not object": {Kind: KindToolCall, By: "agent", Data: []int{1}},
		"data too big":    {Kind: KindToolCall, By: "agent", Data: map[string]string{"x": string(make([]byte, maxDataBytes))}},
	} {
		if _, err := g.File(ctx, r); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if list, _ := g.List(ctx, Filter{}); len(list.Approvals) != 0 {
		t.Fatalf("invalid requests were stored: %v", list)
	}
}

func TestPendingCapAndJoin(t *testing.T) {
	f := openFixture(t, filepath.Join(t.TempDir(), "db"))
	g := newGateway(t, f, Options{MaxPending: 3})
	ctx := context.Background()
	first, err := g.File(ctx, Request{Kind: KindEgressHost, Session: "sbx-1", By: "egress", Join: true, Data: map[string]any{"host": "a.test", "port": 443}})
	if err != nil {
		t.Fatal(err)
	}
	joined, err := g.File(ctx, Request{Kind: KindEgressHost, Session: "sbx-1", By: "egress", Join: true, Data: map[string]any{"host": "a.test", "port": 443}})
	if err != nil || joined.ID != first.ID {
		t.Fatalf("join: %v %v", joined.ID, err)
	}
	for i := range 2 {
		if _, err := g.File(ctx, Request{Kind: KindEgressHost, Session: "sbx-1", By: "egress", Data: map[string]any{"host": "b.test", "port": i + 1}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := g.File(ctx, Request{Kind: KindEgressHost, Session: "sbx-1", By: "egress", Data: map[string]any{"host": "c.test", "port": 1}}); !errors.Is(err, ErrTooMany) {
		t.Fatalf("fourth pending request of one session: %v", err)
	}
	// Another session has its own budget; a decision frees a slot.
	if _, err := g.File(ctx, Request{Kind: KindEgressHost, Session: "sbx-2", By: "egress", Data: map[string]any{"host": "c.test", "port": 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Decide(ctx, first.ID, Decision{Approve: false, By: "op"}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.File(ctx, Request{Kind: KindEgressHost, Session: "sbx-1", By: "egress", Data: map[string]any{"host": "c.test", "port": 1}}); err != nil {
		t.Fatalf("after a decision: %v", err)
	}
}

func TestExpiry(t *testing.T) {
	f := openFixture(t, filepath.Join(t.TempDir(), "db"))
	g := newGateway(t, f, Options{Timeout: 300 * time.Millisecond})
	ctx := context.Background()
	a, err := g.File(ctx, Request{Kind: KindToolCall, By: "agent", Data: map[string]any{"tool": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	got, err := g.Wait(ctx, a.ID, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != StateExpired || got.DecidedBy != "gateway" {
		t.Fatalf("after the timeout: %+v", got)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("expiry took %v", el)
	}
	if _, err := g.Decide(ctx, a.ID, Decision{Approve: true, By: "op"}); !errors.Is(err, ErrConflict) {
		t.Fatalf("approving an expired request: %v", err)
	}
}

// A restart keeps pending requests pending, expires the overdue, and a
// decision after it still applies; an approval whose action never ran (a
// crash in between) runs at the next start.
func TestRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	f := openFixture(t, path)
	now := time.Now()
	clock := func() time.Time { return now }
	g1, err := New(context.Background(), Options{Store: f.st, Audit: f.log, Timeout: time.Hour, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	keep, _ := g1.File(ctx, Request{Kind: KindToolRegister, By: "agent", Data: map[string]any{"name": "a"}})
	short, _ := g1.File(ctx, Request{Kind: KindToolRegister, By: "agent", Data: map[string]any{"name": "b"}})
	crashed, _ := g1.File(ctx, Request{Kind: KindToolRegister, By: "agent", Data: map[string]any{"name": "c"}})
	// Make "short" overdue and "crashed" approved-but-not-applied, as a
	// crash would leave them.
	if _, err := f.st.DB().Exec(`UPDATE approvals SET expires_at = '2000-01-01T00:00:00.000000000Z' WHERE id = ?`, short.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.DB().Exec(`UPDATE approvals SET state = 'approved', decided_by = 'alice', decided_at = expires_at WHERE id = ?`, crashed.ID); err != nil {
		t.Fatal(err)
	}
	g1.Close()
	f.close()

	f2 := openFixture(t, path)
	var applied sync.Map
	g2 := newGateway(t, f2, Options{Timeout: time.Hour, Actions: map[string]Action{
		KindToolRegister: func(ctx context.Context, a Approval) (any, error) {
			applied.Store(a.ID, true)
			return nil, nil
		},
	}})
	if a, _ := g2.Get(ctx, keep.ID); a.State != StatePending {
		t.Fatalf("kept request after restart: %+v", a)
	}
	if a, _ := g2.Get(ctx, short.ID); a.State != StateExpired {
		t.Fatalf("overdue request after restart: %+v", a)
	}
	if _, ok := applied.Load(crashed.ID); !ok {
		t.Fatal("the approved request's action did not run at start")
	}
	if a, err := g2.Decide(ctx, keep.ID, Decision{Approve: true, By: "bob"}); err != nil || a.State != StateApproved {
		t.Fatalf("deciding after restart: %+v %v", a, err)
	}
	if _, ok := applied.Load(keep.ID); !ok {
		t.Fatal("a decision after restart did not apply")
	}
	// Started again, nothing runs twice.
	g2.Close()
	applied = sync.Map{}
	g3 := newGateway(t, f2, Options{Actions: map[string]Action{
		KindToolRegister: func(ctx context.Context, a Approval) (any, error) {
			applied.Store(a.ID, true)
			return nil, nil
		},
	}})
	_ = g3
	applied.Range(func(k, v any) bool { t.Errorf("%v applied again", k); return true })
}

func TestWaitSubscribeAndUse(t *testing.T) {
	f := openFixture(t, filepath.Join(t.TempDir(), "db"))
	g := newGateway(t, f, Options{})
	ctx := context.Background()
	ch, cancel := g.Subscribe()
	defer cancel()
	a, _ := g.File(ctx, Request{Kind: KindExecCommand, Session: "sbx-1", By: "agent", Data: map[string]any{"command": "curl x"}})
	if got := <-ch; got.ID != a.ID || got.State != StatePending {
		t.Fatalf("subscriber got %+v", got)
	}
	check := func(data json.RawMessage) error { return nil }
	if err := g.Use(ctx, a.ID, "sbx-1", check); !errors.Is(err, ErrNotUsable) {
		t.Fatalf("using a pending approval: %v", err)
	}
	done := make(chan Approval)
	go func() {
		w, _ := g.Wait(ctx, a.ID, time.Minute)
		done <- w
	}()
	time.Sleep(50 * time.Millisecond)
	if _, err := g.Decide(ctx, a.ID, Decision{Approve: true, By: "op"}); err != nil {
		t.Fatal(err)
	}
	select {
	case w := <-done:
		if w.State != StateApproved {
			t.Fatalf("waiter got %+v", w)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter not woken by the decision")
	}
	if got := <-ch; got.State != StateApproved {
		t.Fatalf("subscriber got %+v", got)
	}
	if err := g.Use(ctx, a.ID, "sbx-2", check); !errors.Is(err, ErrNotUsable) {
		t.Fatalf("another session used it: %v", err)
	}
	if err := g.Use(ctx, a.ID, "sbx-1", func(json.RawMessage) error { return errors.New("other command") }); !errors.Is(err, ErrNotUsable) {
		t.Fatalf("a different command used it: %v", err)
	}
	if err := g.Use(ctx, a.ID, "sbx-1", check); err != nil {
		t.Fatal(err)
	}
	if err := g.Use(ctx, a.ID, "sbx-1", check); !errors.Is(err, ErrNotUsable) {
		t.Fatalf("used twice: %v", err)
	}
}

func TestWebhooksSignAndRetry(t *testing.T) {
	secret := []byte("0123456789abcdef0123")
	var mu sync.Mutex
	var calls int
	var bodies [][]byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		body, _ := io.ReadAll(r.Body)
		ts := r.Header.Get(HeaderTimestamp)
		if _, err := strconv.ParseInt(ts, 10, 64); err != nil {
			t.Errorf("timestamp %q", ts)
		}
		if got, want := r.Header.Get(HeaderSignature), Sign(secret, ts, body); got != want {
			t.Errorf("signature %q, want %q", got, want)
		}
		if r.Header.Get(HeaderEvent) != audit.KindApprovalRequest {
			t.Errorf("event header %q", r.Header.Get(HeaderEvent))
		}
		bodies = append(bodies, body)
	}))
	defer srv.Close()
	f := openFixture(t, filepath.Join(t.TempDir(), "db"))
	if _, err := NewWebhooks(WebhookOptions{URLs: []string{srv.URL}, Secret: []byte("short"), Store: f.st, Audit: f.log}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("short secret: %v", err)
	}
	if _, err := NewWebhooks(WebhookOptions{URLs: []string{"ftp://x"}, Secret: secret, Store: f.st, Audit: f.log}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad URL: %v", err)
	}
	hooks, err := NewWebhooks(WebhookOptions{URLs: []string{srv.URL}, Secret: secret, Backoff: 10 * time.Millisecond, Store: f.st, Audit: f.log})
	if err != nil {
		t.Fatal(err)
	}
	g := newGateway(t, f, Options{Notify: hooks.Notify})
	a, err := g.File(context.Background(), Request{Kind: KindToolCall, By: "agent", Data: map[string]any{"tool": "deploy"}})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(bodies)
		mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no delivery after retries")
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hooks.Close(ctx)
	var ev WebhookEvent
	if err := json.Unmarshal(bodies[0], &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Event != audit.KindApprovalRequest || ev.Approval.ID != a.ID || calls != 3 {
		t.Fatalf("delivery %+v after %d calls", ev, calls)
	}
}
