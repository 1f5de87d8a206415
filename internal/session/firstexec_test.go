package session

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/native"
)

// records waits until the log holds at least n records of sandbox id
// and returns them in order.
func (f *fixture) records(t *testing.T, id string, n int) []audit.Record {
	t.Helper()
	var out []audit.Record
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		recs, err := f.log.Tail(context.Background(), 0, 10000)
		if err != nil {
			t.Fatal(err)
		}
		out = out[:0]
		for _, r := range recs {
			if r.Session == id {
				out = append(out, r)
			}
		}
		if len(out) >= n || time.Now().After(deadline) {
			return out
		}
	}
}

func kindsOf(recs []audit.Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.Kind)
	}
	return out
}

// A first command's intent is in the log the moment the create's record
// is (one transaction): the build below looks while the sandbox is still
// being made, before anybody could have asked for an exec on its own.
// The command then runs, and its result names its intent.
func TestCreateThenExecCommitsTheIntentWithTheCreate(t *testing.T) {
	f := newFixture(t)
	var seen []string
	rt := &namedTestRuntime{Runtime: f.rt, build: func(ctx context.Context, real *native.Runtime, spec sandbox.Spec, named func(string)) (sandbox.Sandbox, error) {
		return real.CreateNamed(ctx, spec, func(id string) {
			named(id)
			for deadline := time.Now().Add(10 * time.Second); !f.hasRecord(t, id, audit.KindSandboxCreate); time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Errorf("no sandbox.create record for %s while it was built", id)
					return
				}
			}
			seen = f.kinds(t, id)
		})
	}}
	m := f.namedManager(t, rt)
	ctx := context.Background()
	var out bytes.Buffer
	in, first, err := m.CreateThenExec(ctx, "agent", CreateRequest{}, sandbox.ExecRequest{Argv: []string{"sh", "-c", "echo hi"}, Cwd: "/tmp", Env: []string{"K=secret-value"}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{audit.KindSandboxCreate, audit.KindSandboxExec + audit.IntentSuffix}; strings.Join(seen, " ") != strings.Join(want, " ") {
		t.Fatalf("records while the sandbox was built %v, want %v", seen, want)
	}
	started := false
	res, err := first.Run(ctx, func() { started = true })
	if err != nil || res.ExitCode != 0 || out.String() != "hi\n" || !started {
		t.Fatalf("the first command: %+v %v, stdout %q, starting called %v", res, err, out.String(), started)
	}
	if _, err := first.Run(ctx, nil); !errors.Is(err, ErrFirstExecUsed) {
		t.Fatalf("a second Run: %v, want ErrFirstExecUsed", err)
	}
	first.Drop(errors.New("late")) // nothing after Run
	recs := f.records(t, in.ID, 3)
	if got := kindsOf(recs); len(got) != 3 || got[2] != audit.KindSandboxExec {
		t.Fatalf("records %v, want create, intent, exec", got)
	}
	intent, end := recs[1], recs[2]
	if intent.Seq != recs[0].Seq+1 || !strings.Contains(string(intent.Data), `"argv":["sh","-c","echo hi"]`) ||
		!strings.Contains(string(intent.Data), `"cwd":"/tmp"`) || !strings.Contains(string(intent.Data), `"env":["K"]`) ||
		strings.Contains(string(intent.Data), "secret-value") {
		t.Fatalf("the intent: seq %d after %d, %s", intent.Seq, recs[0].Seq, intent.Data)
	}
	var ended struct {
		Exit      int   `json:"exit"`
		IntentSeq int64 `json:"intent_seq"`
	}
	if err := json.Unmarshal(end.Data, &ended); err != nil || ended.Exit != 0 || ended.IntentSeq != intent.Seq {
		t.Fatalf("the result record: %s (%v)", end.Data, err)
	}
	if _, err := m.Exec(ctx, "agent", in.ID, sandbox.ExecRequest{Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	f.verify(t)
}

// A create that fails after its record (and so its first command's
// intent) committed ends the intent as not run before it ends the
// sandbox: the log never shows a command whose end is unknown.
func TestFirstExecOfAFailedCreateIsEnded(t *testing.T) {
	f := newFixture(t)
	const ghost = "sbx-00000000000000ab"
	rt := failsAfterNaming(f, ghost)
	m := f.namedManager(t, rt)
	if _, fx, err := m.CreateThenExec(context.Background(), "agent", CreateRequest{}, sandbox.ExecRequest{Argv: []string{"true"}}); err == nil || fx != nil {
		t.Fatalf("CreateThenExec = %v, %v; want the build's error", fx, err)
	}
	recs := f.records(t, ghost, 4)
	want := []string{audit.KindSandboxCreate, audit.KindSandboxExec + audit.IntentSuffix, audit.KindSandboxExec, audit.KindSandboxDestroy}
	if got := kindsOf(recs); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("records %v, want %v", got, want)
	}
	if d := string(recs[2].Data); !strings.Contains(d, `"not_run":true`) || !strings.Contains(d, "the build failed (test)") || !strings.Contains(d, `"exit":-1`) {
		t.Fatalf("the end of the intent: %s", d)
	}
	f.verify(t)
}

// A first command whose sandbox is gone before it runs does not run, and
// one dropped does not either; both results say so.
func TestFirstExecNotRun(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, Options{})
	ctx := context.Background()
	gone, first, err := m.CreateThenExec(ctx, "agent", CreateRequest{}, sandbox.ExecRequest{Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Destroy(ctx, "agent", gone.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Run(ctx, func() { t.Error("starting called for a command that cannot run") }); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Run in a destroyed sandbox: %v, want ErrNotFound", err)
	}
	dropped, first, err := m.CreateThenExec(ctx, "agent", CreateRequest{}, sandbox.ExecRequest{Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	first.Drop(errors.New("the client went away (test)"))
	if _, err := first.Run(ctx, nil); !errors.Is(err, ErrFirstExecUsed) {
		t.Fatalf("Run after Drop: %v, want ErrFirstExecUsed", err)
	}
	for id, why := range map[string]string{gone.ID: "not found", dropped.ID: "the client went away (test)"} {
		var end *audit.Record
		for _, r := range f.records(t, id, 3) {
			if r.Kind == audit.KindSandboxExec {
				end = &r
			}
		}
		if end == nil || !strings.Contains(string(end.Data), `"not_run":true`) || !strings.Contains(string(end.Data), why) {
			t.Fatalf("the result of %s's first command: %+v", id, end)
		}
	}
	f.verify(t)
}
