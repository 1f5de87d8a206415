package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/audit"
)

func fieldValue(a Approval, name string) string {
	for _, f := range a.Fields {
		if f.Name == name {
			return f.Value
		}
	}
	return ""
}

// The agent writes "read-only docs host"; the data says evil.example:443.
// The summary and the fields come from the data, the agent's words only
// as its note; a note that could repaint or reorder a line is refused.
func TestHostileApprovalSpoofedSummary(t *testing.T) {
	f := openFixture(t, filepath.Join(t.TempDir(), "db"))
	g := newGateway(t, f, Options{})
	ctx := context.Background()
	a, err := g.File(ctx, Request{Kind: KindEgressHost, Session: "sbx-1", By: "agent", Note: "read-only docs host",
		Data: map[string]any{"host": "evil.example", "port": 443}})
	if err != nil {
		t.Fatal(err)
	}
	for _, got := range []Approval{a, must(g.Get(ctx, a.ID))} {
		if !strings.Contains(got.Summary, "evil.example:443") || strings.Contains(got.Summary, "read-only") {
			t.Fatalf("summary %q", got.Summary)
		}
		if fieldValue(got, "host:port") != "evil.example:443" || !strings.Contains(fieldValue(got, "scope"), "sbx-1") {
			t.Fatalf("fields %+v", got.Fields)
		}
		if got.AgentNote != "read-only docs host" {
			t.Fatalf("note %q", got.AgentNote)
		}
	}
	for name, note := range map[string]string{
		"escape":   "docs\x1b[2K\rapproved",
		"bidi":     "docs \u202e443:elpmaxe.live",
		"newline":  "docs\nhost:port: docs.example:443",
		"too long": strings.Repeat("a", MaxNote+1),
	} {
		if _, err := g.File(ctx, Request{Kind: KindToolCall, By: "agent", Note: note, Data: map[string]any{"tool": "x"}}); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s note: %v", name, err)
		}
	}
	// A row written by an older version, whose summary column holds the
	// agent's words: the summary shown is still derived from the data.
	if _, err := f.st.DB().Exec(`UPDATE approvals SET summary = 'read-only docs host' WHERE id = ?`, a.ID); err != nil {
		t.Fatal(err)
	}
	if got := must(g.Get(ctx, a.ID)); !strings.Contains(got.Summary, "evil.example:443") {
		t.Fatalf("old row's summary %q", got.Summary)
	}
	// Stored data that no longer validates cannot be approved.
	if _, err := f.st.DB().Exec(`UPDATE approvals SET data = '{"host":"*.evil.example","port":443}' WHERE id = ?`, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Decide(ctx, a.ID, Decision{Approve: true, By: "op"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("approving unvalidated data: %v", err)
	}
}

func must(a Approval, err error) Approval {
	if err != nil {
		panic(err)
	}
	return a
}

// Junk from many sandboxes and sandbox-less kinds stops at the principal's
// quota with limit_exceeded; another principal's requests are still filed,
// and listing pages through every one of them.
func TestHostileApprovalFloodQuota(t *testing.T) {
	f := openFixture(t, filepath.Join(t.TempDir(), "db"))
	owner := func(ctx context.Context, sess string) (string, error) {
		if strings.HasPrefix(sess, "sbx-junk") {
			return "agent:junk", nil
		}
		return "agent:real", nil
	}
	g := newGateway(t, f, Options{MaxPending: 5, MaxPendingPerPrincipal: 40, MaxPendingTotal: 60, SessionPrincipal: owner})
	ctx := context.Background()
	refused := 0
	for i := range 500 {
		r := Request{Kind: KindToolCall, By: "agent:junk", Data: map[string]any{"tool": fmt.Sprintf("junk-%d", i)}}
		if i%2 == 0 { // egress.host from 25 sandboxes, filed by the broker
			r = Request{Kind: KindEgressHost, Session: fmt.Sprintf("sbx-junk-%d", i%50), Via: "egress",
				Data: map[string]any{"host": fmt.Sprintf("h%d.example", i), "port": 443}}
		}
		_, err := g.File(ctx, r)
		switch {
		case errors.Is(err, ErrTooMany):
			refused++
		case err != nil:
			t.Fatal(err)
		}
	}
	if refused != 460 {
		t.Fatalf("%d of 500 junk requests refused, want 460 (the principal's cap is 40)", refused)
	}
	_, err := g.File(ctx, Request{Kind: KindToolCall, By: "agent:junk", Data: map[string]any{"tool": "more"}})
	if !errors.Is(err, ErrTooMany) || !strings.Contains(err.Error(), "agent:junk") || !strings.Contains(err.Error(), "per principal") {
		t.Fatalf("over the principal's cap: %v", err)
	}
	var real []string
	for i := range 12 {
		r := Request{Kind: KindEgressHost, Session: fmt.Sprintf("sbx-real-%d", i%3), Via: "egress", Data: map[string]any{"host": "real.example", "port": 1000 + i}}
		a, err := g.File(ctx, r)
		if err != nil {
			t.Fatalf("real request %d: %v", i, err)
		}
		if a.RequestedBy != "agent:real" || a.Via != "egress" {
			t.Fatalf("attributed to %q via %q", a.RequestedBy, a.Via)
		}
		real = append(real, a.ID)
	}
	// The total cap holds whoever asks.
	for i := 0; ; i++ {
		_, err := g.File(ctx, Request{Kind: KindToolCall, By: fmt.Sprintf("agent:other-%d", i%4), Data: map[string]any{"tool": "t"}})
		if errors.Is(err, ErrTooMany) {
			if !strings.Contains(err.Error(), "in all") {
				t.Fatalf("total cap: %v", err)
			}
			break
		}
		if err != nil || i > 100 {
			t.Fatalf("filed %d over the total: %v", i, err)
		}
	}
	// The operator pages through every pending request, newest first, and
	// sees every real one; no page is longer than asked, none is cut.
	seen := map[string]bool{}
	cursor, pages := "", 0
	for {
		p, err := g.List(ctx, Filter{State: StatePending, Limit: 7, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Approvals) > 7 {
			t.Fatalf("page of %d", len(p.Approvals))
		}
		for _, a := range p.Approvals {
			if seen[a.ID] {
				t.Fatalf("%s listed twice", a.ID)
			}
			seen[a.ID] = true
		}
		pages++
		if p.Next == "" {
			break
		}
		cursor = p.Next
	}
	if len(seen) != 60 || pages != 9 {
		t.Fatalf("listed %d pending in %d pages, want 60 in 9", len(seen), pages)
	}
	for _, id := range real {
		if !seen[id] {
			t.Fatalf("real request %s not listed", id)
		}
	}
	// An agent's view holds only its own.
	mine, err := g.List(ctx, Filter{RequestedBy: "agent:real"})
	if err != nil || len(mine.Approvals) != 12 {
		t.Fatalf("agent:real sees %d, %v", len(mine.Approvals), err)
	}
	if _, err := g.List(ctx, Filter{Cursor: "not-a-cursor"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad cursor: %v", err)
	}
}

// More approvals than a page holds: every one comes back across pages,
// oldest first too.
func TestListPagesPastTheLimit(t *testing.T) {
	f := openFixture(t, filepath.Join(t.TempDir(), "db"))
	g := newGateway(t, f, Options{MaxPendingPerPrincipal: 1000, MaxPendingTotal: 1000})
	ctx := context.Background()
	for i := range MaxListLimit + 20 {
		if _, err := g.File(ctx, Request{Kind: KindToolCall, By: "agent", Data: map[string]any{"tool": fmt.Sprintf("t%d", i)}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, oldest := range []bool{false, true} {
		n, cursor := 0, ""
		var last time.Time
		for {
			p, err := g.List(ctx, Filter{Cursor: cursor, OldestFirst: oldest})
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range p.Approvals {
				if !last.IsZero() && (oldest && a.CreatedAt.Before(last) || !oldest && a.CreatedAt.After(last)) {
					t.Fatalf("out of order at %d", n)
				}
				last = a.CreatedAt
				n++
			}
			if p.Next == "" {
				break
			}
			cursor = p.Next
		}
		if n != MaxListLimit+20 {
			t.Fatalf("oldest=%v: listed %d", oldest, n)
		}
	}
}

// A sandbox's end withdraws its pending requests: they expire with a
// reason naming the end, audited; waiters wake; other sandboxes' requests
// stay; it works after Close (the sandboxes a shutdown destroys).
func TestHostileApprovalWithdrawnWhenSandboxEnds(t *testing.T) {
	f := openFixture(t, filepath.Join(t.TempDir(), "db"))
	var notified atomic.Int32
	g := newGateway(t, f, Options{Notify: func(ev string, a Approval) {
		if ev == audit.KindApprovalDecide && a.State == StateExpired {
			notified.Add(1)
		}
	}})
	ctx := context.Background()
	a, _ := g.File(ctx, Request{Kind: KindEgressHost, Session: "sbx-gone", By: "agent", Data: map[string]any{"host": "x.example", "port": 443}})
	b, _ := g.File(ctx, Request{Kind: KindToolCall, Session: "sbx-gone", By: "agent", Data: map[string]any{"tool": "t"}})
	keep, _ := g.File(ctx, Request{Kind: KindToolCall, Session: "sbx-stays", By: "agent", Data: map[string]any{"tool": "t"}})
	woken := make(chan Approval, 1)
	go func() {
		w, _ := g.Wait(ctx, a.ID, time.Minute)
		woken <- w
	}()
	time.Sleep(20 * time.Millisecond) // let the waiter register (it returns at once otherwise, which the test also accepts)
	g.SandboxEnded("sbx-gone", "destroyed", "destroy")
	select {
	case w := <-woken:
		if w.State != StateExpired || !strings.Contains(w.Reason, "withdrawn: sandbox sbx-gone ended (destroyed") {
			t.Fatalf("waiter got %+v", w)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken")
	}
	if got := must(g.Get(ctx, b.ID)); got.State != StateExpired {
		t.Fatalf("second request: %+v", got)
	}
	if got := must(g.Get(ctx, keep.ID)); got.State != StatePending {
		t.Fatalf("another sandbox's request: %+v", got)
	}
	if notified.Load() != 2 {
		t.Fatalf("%d withdrawals notified", notified.Load())
	}
	recs, err := f.log.Tail(ctx, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	withdrawn := 0
	for _, r := range recs {
		if r.Kind == audit.KindApprovalDecide && strings.Contains(string(r.Data), `"withdrawn":true`) {
			withdrawn++
		}
	}
	if withdrawn != 2 {
		t.Fatalf("%d withdrawals audited", withdrawn)
	}
	g.Close()
	if n, err := g.Withdraw(ctx, "sbx-stays", "withdrawn: test"); err != nil || n != 1 {
		t.Fatalf("withdraw after close: %d %v", n, err)
	}
}

type hookRig struct {
	mu     sync.Mutex
	bodies []WebhookEvent
	status int
}

func (h *hookRig) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.status != 0 && h.status != http.StatusOK {
		w.WriteHeader(h.status)
		return
	}
	var ev WebhookEvent
	_ = json.Unmarshal(body, &ev)
	h.bodies = append(h.bodies, ev)
}

func (h *hookRig) got() []WebhookEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]WebhookEvent(nil), h.bodies...)
}

func (h *hookRig) setStatus(s int) {
	h.mu.Lock()
	h.status = s
	h.mu.Unlock()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func countAudit(t *testing.T, log *audit.Log, kind string) int {
	t.Helper()
	recs, err := log.Tail(context.Background(), 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range recs {
		if r.Kind == kind {
			n++
		}
	}
	return n
}

var testSecret = []byte("0123456789abcdef0123")

// A receiver that redirects elsewhere is not followed: the other URL never
// sees the delivery, and the failure is audited.
func TestHostileApprovalWebhookRedirectNotFollowed(t *testing.T) {
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { elsewhere.Add(1) }))
	defer other.Close()
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/steal", http.StatusTemporaryRedirect)
	}))
	defer redirector.Close()
	f := openFixture(t, filepath.Join(t.TempDir(), "db"))
	hooks, err := NewWebhooks(WebhookOptions{URLs: []string{redirector.URL + "/hook?token=secret"}, Secret: testSecret, Store: f.st, Audit: f.log,
		Backoff: 10 * time.Millisecond, Client: &http.Client{}}) // a client that would follow: overridden
	if err != nil {
		t.Fatal(err)
	}
	defer hooks.Close(context.Background())
	g := newGateway(t, f, Options{Notify: hooks.Notify})
	if _, err := g.File(context.Background(), Request{Kind: KindToolCall, By: "agent", Data: map[string]any{"tool": "x"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the failure to be audited", func() bool { return countAudit(t, f.log, KindWebhookFail) == 1 })
	if elsewhere.Load() != 0 {
		t.Fatalf("the redirect was followed %d times", elsewhere.Load())
	}
	recs, _ := f.log.Tail(context.Background(), 0, 1000)
	for _, r := range recs {
		if r.Kind == KindWebhookFail && (!strings.Contains(string(r.Data), "redirect") || strings.Contains(string(r.Data), "secret")) {
			t.Fatalf("failure record %s", r.Data)
		}
	}
	var left int
	f.st.DB().QueryRow(`SELECT count(*) FROM webhook_deliveries`).Scan(&left)
	if left != 0 {
		t.Fatalf("%d deliveries left", left)
	}
}

// Deliveries wait in the store: a receiver down across a restart gets them
// from the next run, with the same delivery ids.
func TestHostileApprovalWebhookSurvivesRestart(t *testing.T) {
	rig := &hookRig{status: http.StatusServiceUnavailable}
	srv := httptest.NewServer(rig)
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "db")
	f := openFixture(t, path)
	opts := WebhookOptions{URLs: []string{srv.URL}, Secret: testSecret, Store: f.st, Audit: f.log, Backoff: 50 * time.Millisecond}
	hooks, err := NewWebhooks(opts)
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(context.Background(), Options{Store: f.st, Audit: f.log, Notify: hooks.Notify})
	if err != nil {
		t.Fatal(err)
	}
	a, err := g.File(context.Background(), Request{Kind: KindToolCall, By: "agent", Data: map[string]any{"tool": "deploy"}})
	if err != nil {
		t.Fatal(err)
	}
	var id string
	waitFor(t, "a failed attempt", func() bool {
		var n int
		f.st.DB().QueryRow(`SELECT attempts, id FROM webhook_deliveries`).Scan(&n, &id)
		return n >= 1
	})
	g.Close()
	hooks.Close(context.Background())
	f.close()

	rig.setStatus(http.StatusOK)
	f2 := openFixture(t, path)
	opts.Store, opts.Audit = f2.st, f2.log
	hooks2, err := NewWebhooks(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer hooks2.Close(context.Background())
	waitFor(t, "the delivery after the restart", func() bool { return len(rig.got()) == 1 })
	ev := rig.got()[0]
	if ev.Approval.ID != a.ID || ev.Delivery != id || ev.Event != audit.KindApprovalRequest {
		t.Fatalf("delivered %+v, want %s as %s", ev, a.ID, id)
	}
	var left int
	waitFor(t, "the row to go", func() bool {
		f2.st.DB().QueryRow(`SELECT count(*) FROM webhook_deliveries`).Scan(&left)
		return left == 0
	})
}

// A URL's queue is bounded: past the bound the deliveries of whoever has
// the most waiting are dropped first (oldest first), each drop audited,
// so a flood costs the flooder's notifications, not the others'.
func TestHostileApprovalWebhookQueueBounded(t *testing.T) {
	rig := &hookRig{status: http.StatusServiceUnavailable}
	srv := httptest.NewServer(rig)
	defer srv.Close()
	f := openFixture(t, filepath.Join(t.TempDir(), "db"))
	hooks, err := NewWebhooks(WebhookOptions{URLs: []string{srv.URL}, Secret: testSecret, Store: f.st, Audit: f.log,
		Backoff: time.Hour, MaxQueued: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer hooks.Close(context.Background())
	g := newGateway(t, f, Options{Notify: hooks.Notify})
	ctx := context.Background()
	real, err := g.File(ctx, Request{Kind: KindToolCall, By: "agent:real", Data: map[string]any{"tool": "deploy"}})
	if err != nil {
		t.Fatal(err)
	}
	var junk []string
	for i := range 10 {
		a, err := g.File(ctx, Request{Kind: KindToolCall, By: "agent:junk", Data: map[string]any{"tool": fmt.Sprintf("t%d", i)}})
		if err != nil {
			t.Fatal(err)
		}
		junk = append(junk, a.ID)
	}
	queued := map[string]bool{}
	rows, err := f.st.DB().Query(`SELECT approval FROM webhook_deliveries`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		rows.Scan(&id)
		queued[id] = true
	}
	rows.Close()
	if len(queued) != 4 || !queued[real.ID] || !queued[junk[9]] || queued[junk[0]] {
		t.Fatalf("queued %v", queued)
	}
	if n := countAudit(t, f.log, KindWebhookDrop); n != 7 {
		t.Fatalf("%d drops audited, want 7", n)
	}
}
