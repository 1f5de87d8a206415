package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/session"
)

// pframe is one line of a process's output stream.
type pframe struct {
	Offset  int64   `json:"offset"`
	Stdout  *string `json:"stdout"`
	Stderr  *string `json:"stderr"`
	Dropped int64   `json:"dropped"`
	End     bool    `json:"end"`
	State   string  `json:"state"`
	Exit    *int    `json:"exit"`
	Error   string  `json:"error"`
}

// output reads GET .../output to its end frame (or until ctx ends, when
// the frames so far are returned). each, if set, sees every frame as it
// arrives.
func (e *env) output(ctx context.Context, tok, id string, pid int, query string, each func(pframe)) (frames []pframe, text string) {
	e.t.Helper()
	resp, err := e.send(ctx, "GET", fmt.Sprintf("/v1/sandboxes/%s/processes/%d/output?%s", id, pid, query), tok, nil)
	if err != nil {
		e.t.Fatalf("output: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		e.t.Fatalf("output: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	var b strings.Builder
	doc, _ := apiDoc()
	for sc.Scan() {
		v, err := decodeNumbers(sc.Bytes())
		if err == nil {
			err = doc.Validate(doc.Components.Schemas.Get("ProcessFrame"), v, true)
		}
		if err != nil {
			e.t.Errorf("frame %s disagrees with the document: %v", sc.Bytes(), err)
		}
		var f pframe
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			e.t.Fatalf("frame %q: %v", sc.Bytes(), err)
		}
		if len(frames) > 0 && frames[len(frames)-1].End {
			e.t.Fatalf("a frame after the end frame: %s", sc.Bytes())
		}
		if f.Stdout != nil {
			b.WriteString(*f.Stdout)
		}
		if f.Stderr != nil {
			b.WriteString(*f.Stderr)
		}
		frames = append(frames, f)
		if each != nil {
			each(f)
		}
	}
	if ctx.Err() == nil && (len(frames) == 0 || !frames[len(frames)-1].End) {
		e.t.Fatalf("the output stream does not end with an end frame: %v", sc.Err())
	}
	return frames, b.String()
}

func (e *env) spawn(tok, id string, body any) wire.Process {
	e.t.Helper()
	var p wire.Process
	e.must(http.StatusCreated, "POST", "/v1/sandboxes/"+id+"/processes", tok, body, &p)
	return p
}

func (e *env) waitProc(tok, id string, pid int) wire.Process {
	e.t.Helper()
	var p wire.Process
	e.must(200, "GET", fmt.Sprintf("/v1/sandboxes/%s/processes/%d/wait", id, pid), tok, nil, &p)
	return p
}

// eventually polls cond for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestProcesses(t *testing.T) {
	e := newEnv(t, envOpts{sess: session.Options{Processes: session.ProcessLimits{Running: 4, Ring: 4096}}})
	id := e.create(nil).ID
	base := "/v1/sandboxes/" + id + "/processes"

	p := e.spawn(agentTok, id, map[string]any{"cmd": "echo a; sleep 30", "tag": "srv"})
	if p.PID < 1 || p.OSPID <= 1 || p.State != "running" || p.Tag != "srv" || p.Exit != nil {
		t.Fatalf("spawned %+v", p)
	}
	pp := fmt.Sprintf("%s/%d", base, p.PID)

	t.Run("output from offset 0 without follow", func(t *testing.T) {
		var text string
		var frames []pframe
		eventually(t, "its output", func() bool {
			frames, text = e.output(context.Background(), agentTok, id, p.PID, "offset=0", nil)
			return text == "a\n"
		})
		if f := frames[0]; f.Offset != 0 || f.Stdout == nil || *f.Stdout != "a\n" {
			t.Errorf("first frame %+v", f)
		}
		if end := frames[len(frames)-1]; end.Offset != 2 || end.State != "running" || end.Exit != nil {
			t.Errorf("end frame %+v", end)
		}
		// From the end: nothing but the end frame; past it too.
		frames, _ = e.output(context.Background(), agentTok, id, p.PID, "offset=2", nil)
		if len(frames) != 1 || frames[0].Offset != 2 {
			t.Errorf("from its end: %+v", frames)
		}
	})

	t.Run("list and tag", func(t *testing.T) {
		var l wire.ProcessList
		e.must(200, "GET", base, agentTok, nil, &l)
		if len(l.Processes) != 1 || l.Processes[0].PID != p.PID || l.Processes[0].Offset != 2 {
			t.Errorf("list %+v", l)
		}
		e.must(200, "GET", base+"?tag=other", agentTok, nil, &l)
		if len(l.Processes) != 0 {
			t.Errorf("tag=other: %+v", l)
		}
		e.must(200, "GET", base+"?tag=srv", agentTok, nil, &l)
		if len(l.Processes) != 1 {
			t.Errorf("tag=srv: %+v", l)
		}
	})

	t.Run("follow, reattach, kill", func(t *testing.T) {
		// A first follower hangs up; the process does not notice.
		ctx, cancel := context.WithCancel(context.Background())
		e.output(ctx, agentTok, id, p.PID, "offset=0&follow=1", func(f pframe) { cancel() })
		cancel()
		var got wire.Process
		e.must(200, "GET", pp, agentTok, nil, &got)
		if got.State != "running" {
			t.Fatalf("after the first follower left: %+v", got)
		}
		// A second one follows until the kill. Its answer has begun (the
		// read is admitted) before the kill.
		resp, err := e.send(context.Background(), "GET", pp+"/output?offset=2&follow=1", agentTok, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("follow: %v %v", resp, err)
		}
		done := make(chan []pframe)
		go func() {
			defer resp.Body.Close()
			var frames []pframe
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				var f pframe
				json.Unmarshal(sc.Bytes(), &f)
				frames = append(frames, f)
			}
			done <- frames
		}()
		e.must(200, "DELETE", pp, agentTok, nil, &got)
		if got.State != "exited" || got.Exit == nil || *got.Exit != 137 {
			t.Errorf("killed: %+v", got)
		}
		select {
		case frames := <-done:
			if len(frames) == 0 {
				t.Fatal("the follower got no frame")
			}
			end := frames[len(frames)-1]
			if end.State != "exited" || end.Exit == nil || *end.Exit != 137 || end.Offset != 2 {
				t.Errorf("the follower's end: %+v", end)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("the follower did not end with the kill")
		}
		e.wantError(404, wire.CodeNotFound, "GET", pp, agentTok, nil)
	})

	t.Run("stdin round trip", func(t *testing.T) {
		c := e.spawn(agentTok, id, map[string]any{"argv": []string{"cat"}, "stdin": true})
		cp := fmt.Sprintf("%s/%d", base, c.PID)
		var w wire.StdinWritten
		e.must(200, "POST", cp+"/stdin", agentTok, "hello\n", &w)
		if w.Written != 6 || w.Closed {
			t.Errorf("written %+v", w)
		}
		eventually(t, "cat's echo", func() bool {
			_, text := e.output(context.Background(), agentTok, id, c.PID, "", nil)
			return text == "hello\n"
		})
		e.wantError(413, wire.CodeTooLarge, "POST", cp+"/stdin", agentTok, strings.Repeat("x", maxStdinRequest+1))
		e.must(200, "POST", cp+"/stdin?close=1", agentTok, "bye\n", &w)
		if got := e.waitProc(agentTok, id, c.PID); got.Exit == nil || *got.Exit != 0 || got.Stdin {
			t.Errorf("cat after close: %+v", got)
		}
		if _, text := e.output(context.Background(), agentTok, id, c.PID, "", nil); text != "hello\nbye\n" {
			t.Errorf("cat's output %q", text)
		}
		e.wantError(409, wire.CodeConflict, "POST", cp+"/stdin", agentTok, "more")
		// A process started without stdin has none.
		n := e.spawn(agentTok, id, map[string]any{"argv": []string{"cat"}})
		if got := e.waitProc(agentTok, id, n.PID); got.Exit == nil || *got.Exit != 0 {
			t.Errorf("cat without stdin: %+v", got)
		}
		e.wantError(409, wire.CodeConflict, "POST", fmt.Sprintf("%s/%d/stdin", base, n.PID), agentTok, "x")
	})

	t.Run("signal TERM gives 143", func(t *testing.T) {
		s := e.spawn(agentTok, id, map[string]any{"cmd": "echo up; sleep 30"})
		sp := fmt.Sprintf("%s/%d", base, s.PID)
		e.wantError(400, wire.CodeInvalidArgument, "POST", sp+"/signal", agentTok, map[string]any{"signal": "STOP; rm -rf /"})
		e.must(204, "POST", sp+"/signal", agentTok, map[string]any{"signal": "TERM"}, nil)
		got := e.waitProc(agentTok, id, s.PID)
		if got.Exit == nil || *got.Exit != 143 {
			t.Errorf("after TERM: %+v", got)
		}
		e.wantError(409, wire.CodeConflict, "POST", sp+"/signal", agentTok, map[string]any{"signal": "SIGINT"})
		var withWait wire.Process
		e.must(200, "GET", sp+"?wait=1", agentTok, nil, &withWait)
		if withWait.State != "exited" {
			t.Errorf("?wait=1: %+v", withWait)
		}
	})

	t.Run("ring overflow reports dropped bytes", func(t *testing.T) {
		o := e.spawn(agentTok, id, map[string]any{"cmd": "head -c 20000 /dev/zero | tr '\\0' x; echo; echo tail"})
		got := e.waitProc(agentTok, id, o.PID)
		if got.Offset != 20006 || got.Dropped <= 0 {
			t.Fatalf("after overflow: %+v", got)
		}
		frames, text := e.output(context.Background(), agentTok, id, o.PID, "offset=0", nil)
		if f := frames[0]; f.Dropped != got.Dropped || f.Offset != got.Dropped {
			t.Errorf("first frame %+v, want dropped %d", f, got.Dropped)
		}
		if !strings.HasSuffix(text, "x\ntail\n") || int64(len(text)) != 20006-got.Dropped || len(text) > 4096 {
			t.Errorf("kept %d bytes (dropped %d), ends %q", len(text), got.Dropped, text[max(0, len(text)-10):])
		}
		if end := frames[len(frames)-1]; end.Offset != 20006 || end.State != "exited" || *end.Exit != 0 {
			t.Errorf("end %+v", end)
		}
		// Resuming inside what is held gives exactly the rest.
		_, rest := e.output(context.Background(), agentTok, id, o.PID, "offset=20001", nil)
		if rest != "tail\n" {
			t.Errorf("from 20001: %q", rest)
		}
	})

	t.Run("bad requests", func(t *testing.T) {
		e.wantError(400, wire.CodeInvalidArgument, "POST", base, agentTok, map[string]any{})
		e.wantError(400, wire.CodeInvalidArgument, "POST", base, agentTok, map[string]any{"cmd": "true", "tag": "a b"})
		e.wantError(400, wire.CodeInvalidArgument, "POST", base, agentTok, map[string]any{"cmd": "true", "cwd": "rel"})
		e.wantError(400, wire.CodeInvalidArgument, "GET", base+"/x", agentTok, nil)
		e.wantError(400, wire.CodeInvalidArgument, "GET", base+"/1/output?offset=-1", agentTok, nil)
		e.wantError(404, wire.CodeNotFound, "GET", base+"/9999", agentTok, nil)
		e.wantError(404, wire.CodeNotFound, "GET", "/v1/sandboxes/sbx-nope/processes", agentTok, nil)
		// A command that cannot start is an exited process.
		nf := e.spawn(agentTok, id, map[string]any{"argv": []string{"/no/such/program"}})
		if got := e.waitProc(agentTok, id, nf.PID); got.Exit == nil || *got.Exit != 127 || got.Error == "" {
			t.Errorf("not found: %+v", got)
		}
	})

	t.Run("the running cap", func(t *testing.T) {
		var l wire.ProcessList
		e.must(200, "GET", base, agentTok, nil, &l)
		for _, q := range l.Processes {
			if q.State == "running" {
				t.Fatalf("still running: %+v", q)
			}
		}
		for range 4 {
			e.spawn(agentTok, id, map[string]any{"cmd": "sleep 30"})
		}
		msg := e.wantError(429, wire.CodeLimitExceeded, "POST", base, agentTok, map[string]any{"cmd": "sleep 30"})
		if !strings.Contains(msg, "runs 4 processes") {
			t.Errorf("cap message %q", msg)
		}
	})

	t.Run("processes end with the sandbox", func(t *testing.T) {
		e.must(200, "DELETE", "/v1/sandboxes/"+id, agentTok, nil, nil)
		e.wantError(409, wire.CodeConflict, "GET", base, agentTok, nil)
		e.wantError(409, wire.CodeConflict, "POST", base, agentTok, map[string]any{"cmd": "true"})
	})

	var kinds []string
	recs, err := e.log.Tail(context.Background(), 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if strings.HasPrefix(r.Kind, "sandbox.process.") {
			kinds = append(kinds, r.Kind)
		}
	}
	all := strings.Join(kinds, " ")
	for _, k := range []string{"sandbox.process.spawn.intent", "sandbox.process.spawn", "sandbox.process.kill.intent", "sandbox.process.signal.intent"} {
		if !strings.Contains(all, k) {
			t.Errorf("no %s record in %s", k, all)
		}
	}
}

func TestProcessesOfAnotherAgent(t *testing.T) {
	const aTok, bTok = "agent-a-token-0123456789abcdef", "agent-b-token-0123456789abcdef"
	e := newEnv(t, envOpts{cfg: Config{Agents: []Agent{{Name: "a", Token: aTok}, {Name: "b", Token: bTok}}}})
	var s sbx
	e.must(http.StatusCreated, "POST", "/v1/sandboxes", aTok, nil, &s)
	p := e.spawn(aTok, s.ID, map[string]any{"cmd": "sleep 30"})
	base := "/v1/sandboxes/" + s.ID + "/processes"
	pp := fmt.Sprintf("%s/%d", base, p.PID)
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"POST", base, map[string]any{"cmd": "true"}},
		{"GET", base, nil},
		{"GET", pp, nil},
		{"GET", pp + "/wait", nil},
		{"GET", pp + "/output", nil},
		{"POST", pp + "/stdin", "x"},
		{"POST", pp + "/signal", map[string]any{"signal": "KILL"}},
		{"DELETE", pp, nil},
	} {
		e.wantError(404, wire.CodeNotFound, c.method, c.path, bTok, c.body)
	}
	var got wire.Process
	e.must(200, "GET", pp, aTok, nil, &got)
	if got.State != "running" {
		t.Errorf("after b's attempts: %+v", got)
	}
	// The operator may.
	e.must(200, "DELETE", pp, operTok, nil, &got)
}

// markPolicy marks command lines containing "danger" (the advisory) and
// gates nothing.
type markPolicy struct{}

func (markPolicy) NeedsApproval(line string) (bool, string) {
	return strings.Contains(line, "danger"), "danger"
}
func (markPolicy) Gated(string) string { return "" }

func TestSpawnNeedsTheApprovalAnExecWould(t *testing.T) {
	e := newEnv(t, envOpts{gateway: true, cfg: Config{Policy: markPolicy{}}})
	id := e.create(nil).ID
	base := "/v1/sandboxes/" + id + "/processes"
	body := map[string]any{"cmd": "echo danger"}
	var held wire.ExecPending
	e.must(http.StatusAccepted, "POST", base, agentTok, body, &held)
	a := held.Approval
	if a.Kind != "exec.command" || !strings.Contains(string(a.Data), `"mode":"spawn"`) {
		t.Fatalf("filed %+v %s", a, a.Data)
	}
	var l wire.ProcessList
	e.must(200, "GET", base, agentTok, nil, &l)
	if len(l.Processes) != 0 {
		t.Fatalf("something ran before the approval: %+v", l)
	}
	e.must(200, "POST", "/v1/approvals/"+a.ID+"/approve", operTok, map[string]any{}, nil)
	// The approval is for a spawn: an exec cannot spend it.
	e.wantError(409, wire.CodeConflict, "POST", "/v1/sandboxes/"+id+"/exec", agentTok, map[string]any{"cmd": "echo danger", "approval": a.ID})
	p := e.spawn(agentTok, id, map[string]any{"cmd": "echo danger", "approval": a.ID})
	if got := e.waitProc(agentTok, id, p.PID); got.Exit == nil || *got.Exit != 0 {
		t.Errorf("approved spawn: %+v", got)
	}
	if _, text := e.output(context.Background(), agentTok, id, p.PID, "", nil); text != "danger\n" {
		t.Errorf("output %q", text)
	}
	// Spent: once only.
	e.wantError(409, wire.CodeConflict, "POST", base, agentTok, map[string]any{"cmd": "echo danger", "approval": a.ID})
}

func TestProcessWaitersAreBounded(t *testing.T) {
	e := newEnv(t, envOpts{sess: session.Options{Processes: session.ProcessLimits{Waiters: 2}}})
	id := e.create(nil).ID
	p := e.spawn(agentTok, id, map[string]any{"cmd": "sleep 30"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pp := fmt.Sprintf("/v1/sandboxes/%s/processes/%d", id, p.PID)
	for range 2 {
		resp, err := e.send(ctx, "GET", pp+"/output?follow=1", agentTok, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("follow: %v %v", resp, err)
		}
		defer resp.Body.Close()
	}
	msg := e.wantError(429, wire.CodeLimitExceeded, "GET", pp+"/wait", agentTok, nil)
	if !strings.Contains(msg, "in flight") {
		t.Errorf("message %q", msg)
	}
	e.wantError(429, wire.CodeLimitExceeded, "GET", pp+"/output", agentTok, nil)
	cancel()
	eventually(t, "the followers' release", func() bool {
		resp, b := e.req("GET", pp+"/output", agentTok, nil)
		return resp.StatusCode == 200 && strings.Contains(string(b), `"end":true`)
	})
}

// A spawn's timeout ends its process group; without one it runs on. A
// timeout over the bound is refused before anything runs.
func TestSpawnTimeout(t *testing.T) {
	e := newEnv(t, envOpts{})
	s := e.create(nil)
	start := time.Now()
	p := e.spawn(agentTok, s.ID, map[string]any{"cmd": "sleep 30", "timeout": "300ms"})
	done := e.waitProc(agentTok, s.ID, p.PID)
	if done.Exit == nil || *done.Exit != 137 || time.Since(start) > 20*time.Second {
		t.Fatalf("a 300ms spawn of sleep 30: %+v after %v", done, time.Since(start))
	}
	e.wantError(400, wire.CodeInvalidArgument, "POST", "/v1/sandboxes/"+s.ID+"/processes", agentTok,
		map[string]any{"cmd": "true", "timeout": "200h"})
	e.wantError(400, wire.CodeInvalidArgument, "POST", "/v1/sandboxes/"+s.ID+"/processes", agentTok,
		map[string]any{"cmd": "true", "timeout": "-1s"})
}
