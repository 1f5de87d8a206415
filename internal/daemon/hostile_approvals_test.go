package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/daemontest"
)

// agentClient adds a named agent token before the daemon starts and
// returns a function making its client once it runs.
func agentClient(t *testing.T, dir, name string) func(r *running) *client.Client {
	t.Helper()
	p, err := AddAgent(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	return func(r *running) *client.Client {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return &client.Client{Addr: r.addr, Token: strings.TrimSpace(string(b))}
	}
}

// watchLines opens GET /v1/approvals?watch=1 with a token and sends each
// approval it streams.
func watchLines(t *testing.T, ctx context.Context, addr, tok string) <-chan client.Approval {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/approvals?watch=1", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("watch: %d", resp.StatusCode)
	}
	out := make(chan client.Approval, 1024)
	go func() {
		defer resp.Body.Close()
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			if len(strings.TrimSpace(sc.Text())) == 0 {
				continue
			}
			var a client.Approval
			if json.Unmarshal(sc.Bytes(), &a) == nil {
				out <- a
			}
		}
	}()
	return out
}

// agent:b cannot list, get, wait on or watch agent:a's approvals; the
// operator sees both.
func TestHostileApprovalOtherPrincipalInvisible(t *testing.T) {
	dir := t.TempDir()
	mkA, mkB := agentClient(t, dir, "a"), agentClient(t, dir, "b")
	r := startDaemon(t, dir, func(c *Config) { c.Model.Provider = "mock" })
	ctx := context.Background()
	a, b, op := mkA(r), mkB(r), r.client(t, true)
	sb := daemontest.CreateSandbox(t, a)
	mine, err := a.FileApproval(ctx, "tool.call", sb.ID, "", map[string]any{"tool": "deploy"})
	if err != nil {
		t.Fatal(err)
	}
	free, err := a.FileApproval(ctx, "tool.call", "", "", map[string]any{"tool": "sandbox-less"})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	bWatch := watchLines(t, wctx, r.addr, b.Token)

	for _, id := range []string{mine.ID, free.ID} {
		if _, err := b.GetApproval(ctx, id, 0); !client.IsCode(err, "not_found") {
			t.Fatalf("agent:b got %s: %v", id, err)
		}
		start := time.Now()
		if _, err := b.GetApproval(ctx, id, 30*time.Second); !client.IsCode(err, "not_found") || time.Since(start) > 10*time.Second {
			t.Fatalf("agent:b waited on %s: %v after %v", id, err, time.Since(start))
		}
	}
	// b lists with its own token (the list route is an agent route).
	var list struct {
		Approvals []client.Approval `json:"approvals"`
	}
	getJSON(t, r.addr, b.Token, "/v1/approvals", &list)
	if len(list.Approvals) != 0 {
		t.Fatalf("agent:b lists %d approvals", len(list.Approvals))
	}
	getJSON(t, r.addr, a.Token, "/v1/approvals", &list)
	if len(list.Approvals) != 2 {
		t.Fatalf("agent:a lists %d approvals", len(list.Approvals))
	}
	all, err := op.ListApprovals(ctx, client.ApprovalFilter{})
	if err != nil || len(all) != 2 {
		t.Fatalf("operator lists %d: %v", len(all), err)
	}
	// The next thing b's watch shows is b's own request, filed after a
	// third one of a's: nothing of a's came before it.
	if _, err := a.FileApproval(ctx, "tool.call", "", "", map[string]any{"tool": "later"}); err != nil {
		t.Fatal(err)
	}
	own, err := b.FileApproval(ctx, "tool.call", "", "", map[string]any{"tool": "bees"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-bWatch:
		if got.ID != own.ID {
			t.Fatalf("agent:b's watch showed %s (%s) first", got.ID, got.RequestedBy)
		}
	case <-wctx.Done():
		t.Fatal("agent:b's watch showed nothing")
	}
	// b cannot decide either (no operator token), nor see a's through it.
	if _, err := b.Approve(ctx, mine.ID, "", ""); !client.IsCode(err, "forbidden") {
		t.Fatalf("agent:b approving: %v", err)
	}
}

// Hundreds of junk requests from many sandboxes and sandbox-less kinds
// stop at the junk principal's quota (429 limit_exceeded, saying which);
// the real agent's requests are filed, and the operator's list and watch
// show every one of them.
func TestHostileApprovalFloodFromManySandboxes(t *testing.T) {
	dir := t.TempDir()
	mkJunk, mkReal := agentClient(t, dir, "junk"), agentClient(t, dir, "real")
	r := startDaemon(t, dir, func(c *Config) {
		c.Model.Provider = "mock"
		c.RatePerSecond, c.RateBurst = 10000, 10000
		c.PolicyFile = writePolicy(t, t.TempDir(), "approvals:\n  max_pending: 10\n  max_pending_per_principal: 40\n")
	})
	ctx := context.Background()
	junk, real, op := mkJunk(r), mkReal(r), r.client(t, true)
	var boxes []string
	for range 5 {
		sb := daemontest.CreateSandbox(t, junk)
		boxes = append(boxes, sb.ID)
	}
	refused, lastErr := 0, error(nil)
	for i := range 500 {
		var err error
		if i%3 == 0 {
			_, err = junk.FileApproval(ctx, "tool.call", "", "", map[string]any{"tool": fmt.Sprintf("junk-%d", i)})
		} else {
			_, err = junk.FileApproval(ctx, "egress.host", boxes[i%5], "", map[string]any{"host": fmt.Sprintf("junk%d.example", i), "port": 443})
		}
		if client.IsCode(err, "limit_exceeded") {
			refused++
			lastErr = err
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if refused != 460 || !strings.Contains(lastErr.Error(), "agent:junk") {
		t.Fatalf("%d of 500 refused; last: %v", refused, lastErr)
	}
	sb := daemontest.CreateSandbox(t, real)
	want := map[string]bool{}
	for i := range 8 {
		var a client.Approval
		var err error
		if i%2 == 0 {
			a, err = real.FileApproval(ctx, "egress.host", sb.ID, "", map[string]any{"host": "real.example", "port": 1000 + i})
		} else {
			a, err = real.FileApproval(ctx, "tool.call", "", "", map[string]any{"tool": fmt.Sprintf("real-%d", i)})
		}
		if err != nil {
			t.Fatalf("real request %d: %v", i, err)
		}
		want[a.ID] = true
	}
	// The list, page by page (the client follows next).
	listed, err := op.ListApprovals(ctx, client.ApprovalFilter{State: "pending", Limit: 9})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, a := range listed {
		seen[a.ID] = true
	}
	if len(listed) != 48 || len(seen) != 48 {
		t.Fatalf("operator lists %d (%d distinct) pending, want 48", len(listed), len(seen))
	}
	for id := range want {
		if !seen[id] {
			t.Fatalf("real request %s missing from the list", id)
		}
	}
	// The watch replays every pending request first.
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	replayed := map[string]bool{}
	for a := range watchLines(t, wctx, r.addr, op.Token) {
		replayed[a.ID] = true
		if len(replayed) == 48 {
			break
		}
	}
	for id := range want {
		if !replayed[id] {
			t.Fatalf("real request %s missing from the watch's replay (%d replayed)", id, len(replayed))
		}
	}
}

// When a sandbox ends, its pending requests are withdrawn: a long poll on
// one answers at once, the held egress connection is refused, and the
// withdrawal is audited.
func TestHostileApprovalWithdrawnWhenSandboxEnds(t *testing.T) {
	h := holdRequest(t, func(*http.Request) string { return "upstream" }, "5m")
	agent, op, sb, held, egressReq := h.agent, h.op, h.sb, h.curl, h.approval
	ctx := context.Background()
	call, err := agent.FileApproval(ctx, "tool.call", sb.ID, "", map[string]any{"tool": "t"})
	if err != nil {
		t.Fatal(err)
	}
	polled := make(chan client.Approval, 1)
	go func() {
		a, _ := agent.GetApproval(ctx, call.ID, 4*time.Minute)
		polled <- a
	}()
	time.Sleep(100 * time.Millisecond) // the long poll is waiting (if not yet, it answers expired at once)
	if _, err := agent.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-polled:
		if a.State != "expired" || !strings.Contains(a.Reason, "withdrawn: sandbox "+sb.ID+" ended (destroyed") {
			t.Fatalf("long poll answered %+v", a)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the long poll was not answered when the sandbox ended")
	}
	select {
	case r := <-held:
		out := r.String()
		if strings.Contains(out, "upstream") {
			t.Fatalf("the held connection went through: %q", out)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the held connection was not released")
	}
	for _, id := range []string{egressReq.ID, call.ID} {
		a, err := op.GetApproval(ctx, id, 0)
		if err != nil || a.State != "expired" || !strings.HasPrefix(a.Reason, "withdrawn") {
			t.Fatalf("%s after the sandbox ended: %+v %v", id, a, err)
		}
	}
	recs, err := op.AuditTail(ctx, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, rec := range recs {
		if rec.Kind == "approval.decide" && strings.Contains(string(rec.Data), `"withdrawn":true`) {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d withdrawals audited, want 2", n)
	}
}

// An approved sandbox.widen with ttl and idle gives the running sandbox
// its new lifetime.
func TestApprovalWidenLifetime(t *testing.T) {
	g := &gatewayRig{t: t, dir: t.TempDir()}
	g.start("")
	ctx := context.Background()
	agent, op := g.r.client(t, false), g.r.client(t, true)
	sb, err := agent.CreateSandbox(ctx, client.CreateRequest{TTL: time.Hour, Idle: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.WidenLimits(ctx, sb.ID, map[string]any{"ttl": "3h", "idle": "20m", "pids": 300})
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{}
	for _, f := range a.Fields {
		fields[f.Name] = f.Value
	}
	if !strings.HasPrefix(fields["ttl"], "3h0m0s") || !strings.HasPrefix(fields["idle"], "20m0s") || fields["pids"] != "300" {
		t.Fatalf("fields %v", fields)
	}
	got, err := op.Approve(ctx, a.ID, "", "")
	if err != nil || strings.Contains(string(got.Result), "error") {
		t.Fatalf("approve: %+v %v", got, err)
	}
	after, err := agent.GetSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d := after.ExpiresAt.Sub(sb.CreatedAt); d < 3*time.Hour-time.Second || d > 3*time.Hour+time.Second || after.IdleTimeout != "20m0s" {
		t.Fatalf("after widening: expires in %v, idle %q", d, after.IdleTimeout)
	}
}
