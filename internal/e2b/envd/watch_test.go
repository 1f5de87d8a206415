package envd_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/client"

	"connectrpc.com/connect"

	fspb "github.com/ironclaw/ironclaw/internal/e2b/envdpb/filesystem"
	"github.com/ironclaw/ironclaw/internal/e2b/envdpb/filesystem/filesystemconnect"
)

type event struct {
	name string
	typ  fspb.EventType
}

// watch starts WatchDir and returns its events (after the start event)
// on a channel, until the test ends.
func watch(t *testing.T, fs filesystemconnect.FilesystemClient, p string, recursive bool) <-chan event {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := fs.WatchDir(ctx, connect.NewRequest(&fspb.WatchDirRequest{Path: p, Recursive: recursive}))
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() || stream.Msg().GetStart() == nil {
		t.Fatalf("no start event: %v %v", stream.Msg(), stream.Err())
	}
	ch := make(chan event, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(ch)
		for stream.Receive() {
			if f := stream.Msg().GetFilesystem(); f != nil {
				ch <- event{f.GetName(), f.GetType()}
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		stream.Close()
		<-done
	})
	return ch
}

// await waits for the event want on ch, failing after a few seconds (or
// when unwanted arrives first).
func await(t *testing.T, ch <-chan event, want event, unwanted ...event) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatalf("the stream ended before %v", want)
			}
			if e == want {
				return
			}
			for _, u := range unwanted {
				if e == u {
					t.Fatalf("got %v before %v", e, want)
				}
			}
		case <-deadline:
			t.Fatalf("no %v in 5s", want)
		}
	}
}

var (
	create = fspb.EventType_EVENT_TYPE_CREATE
	write  = fspb.EventType_EVENT_TYPE_WRITE
	remove = fspb.EventType_EVENT_TYPE_REMOVE
	chmod  = fspb.EventType_EVENT_TYPE_CHMOD
)

// WatchDir sees a file created, written, chmodded and removed, with names
// relative to the watched directory; recursively, changes in
// subdirectories too, and not otherwise.
func TestWatchDir(t *testing.T) {
	env, sb, fs := fsEnv(t)
	put(t, env, sb, "/workspace/w/sub/nested.txt", "one")
	flat := watch(t, fs, "w", false)
	deep := watch(t, fs, "/workspace/w", true)

	put(t, env, sb, "/workspace/w/f.txt", "hello")
	await(t, flat, event{"f.txt", create})
	await(t, deep, event{"f.txt", create})
	put(t, env, sb, "/workspace/w/f.txt", "hello again")
	await(t, flat, event{"f.txt", write})
	sh(t, env, sb, "chmod 0600 /workspace/w/f.txt")
	await(t, flat, event{"f.txt", chmod})
	put(t, env, sb, "/workspace/w/sub/nested.txt", "two!")
	await(t, deep, event{"sub/nested.txt", write})
	sh(t, env, sb, "rm /workspace/w/f.txt")
	// The flat watch never reports the nested write: it comes before the
	// removal if it were reported at all.
	await(t, flat, event{"f.txt", remove}, event{"sub/nested.txt", write})
	await(t, deep, event{"f.txt", remove})

	// A server stream reports its error on the first Receive.
	for p, code := range map[string]connect.Code{"/etc": connect.CodeInvalidArgument, "/workspace/none": connect.CodeNotFound} {
		stream, err := fs.WatchDir(context.Background(), connect.NewRequest(&fspb.WatchDirRequest{Path: p}))
		if err == nil {
			if stream.Receive() {
				t.Fatalf("watch of %s started", p)
			}
			err = stream.Err()
			stream.Close()
		}
		wantCode(t, "watch of "+p, err, code)
	}
}

// The polled watcher queues events for GetWatcherEvents; watchers are
// bounded per sandbox; a removed watcher is gone.
func TestPolledWatchers(t *testing.T) {
	env, sb, fs := fsEnv(t)
	ctx := context.Background()
	put(t, env, sb, "/workspace/p/keep", "k")
	cw, err := fs.CreateWatcher(ctx, connect.NewRequest(&fspb.CreateWatcherRequest{Path: "/workspace/p", Recursive: true}))
	if err != nil {
		t.Fatal(err)
	}
	wid := cw.Msg.GetWatcherId()
	put(t, env, sb, "/workspace/p/d/new.txt", "n")
	var got []event
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && len(got) < 3; time.Sleep(100 * time.Millisecond) {
		res, err := fs.GetWatcherEvents(ctx, connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: wid}))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range res.Msg.GetEvents() {
			got = append(got, event{e.GetName(), e.GetType()})
		}
	}
	want := []event{{"d", create}, {"d/new.txt", create}, {"d/new.txt", write}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events %v, want %v", got, want)
	}

	// Another sandbox's client does not see the watcher.
	other := env.CreateNative(t, "agent.token", client.CreateRequest{})
	_, err = env.Filesystem(other).GetWatcherEvents(ctx, connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: wid}))
	wantCode(t, "another sandbox's watcher", err, connect.CodeNotFound)

	// Eight in all per sandbox, streams included.
	ids := []string{wid}
	for range 6 {
		cw, err := fs.CreateWatcher(ctx, connect.NewRequest(&fspb.CreateWatcherRequest{Path: "/tmp"}))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, cw.Msg.GetWatcherId())
	}
	watch(t, fs, "/workspace", false)
	_, err = fs.CreateWatcher(ctx, connect.NewRequest(&fspb.CreateWatcherRequest{Path: "/tmp"}))
	wantCode(t, "a ninth watcher", err, connect.CodeResourceExhausted)
	if _, err := env.Filesystem(other).CreateWatcher(ctx, connect.NewRequest(&fspb.CreateWatcherRequest{Path: "/tmp"})); err != nil {
		t.Fatalf("another sandbox's first watcher: %v", err)
	}
	for _, id := range ids {
		if _, err := fs.RemoveWatcher(ctx, connect.NewRequest(&fspb.RemoveWatcherRequest{WatcherId: id})); err != nil {
			t.Fatal(err)
		}
	}
	_, err = fs.GetWatcherEvents(ctx, connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: wid}))
	wantCode(t, "a removed watcher", err, connect.CodeNotFound)
	if _, err := fs.CreateWatcher(ctx, connect.NewRequest(&fspb.CreateWatcherRequest{Path: "/tmp"})); err != nil {
		t.Fatalf("a watcher after removals: %v", err)
	}

	put(t, env, sb, "/workspace/p/file", "x")
	_, err = fs.CreateWatcher(ctx, connect.NewRequest(&fspb.CreateWatcherRequest{Path: "/workspace/p/file"}))
	wantCode(t, "watch of a file", err, connect.CodeInvalidArgument)
	_, err = fs.CreateWatcher(ctx, connect.NewRequest(&fspb.CreateWatcherRequest{Path: "/workspace/none"}))
	wantCode(t, "watch of nothing", err, connect.CodeNotFound)
	_, err = fs.CreateWatcher(ctx, connect.NewRequest(&fspb.CreateWatcherRequest{Path: "/etc"}))
	wantCode(t, "watch of /etc", err, connect.CodeInvalidArgument)
}

// A polled watcher fails rather than drop events: past 4096 queued,
// GetWatcherEvents answers ResourceExhausted. A tree over 20000 entries
// can be neither watched nor listed.
func TestWatchAndListBounds(t *testing.T) {
	env, sb, fs := fsEnv(t)
	ctx := context.Background()
	sh(t, env, sb, "mkdir /workspace/q")
	cw, err := fs.CreateWatcher(ctx, connect.NewRequest(&fspb.CreateWatcherRequest{Path: "/workspace/q"}))
	if err != nil {
		t.Fatal(err)
	}
	sh(t, env, sb, "cd /workspace/q && seq 5000 | xargs touch")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		res, err := fs.GetWatcherEvents(ctx, connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: cw.Msg.GetWatcherId()}))
		if err != nil {
			wantCode(t, "an overflowing watcher", err, connect.CodeResourceExhausted)
			break
		}
		if n := len(res.Msg.GetEvents()); n > 0 || time.Now().After(deadline) {
			t.Fatalf("%d events, then no failure", n)
		}
	}
	if _, err := fs.RemoveWatcher(ctx, connect.NewRequest(&fspb.RemoveWatcherRequest{WatcherId: cw.Msg.GetWatcherId()})); err != nil {
		t.Fatal(err)
	}

	sh(t, env, sb, "cd /workspace/q && seq 5001 20001 | xargs touch")
	_, err = fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: "/workspace/q"}))
	wantCode(t, "a listing over the bound", err, connect.CodeResourceExhausted)
	_, err = fs.CreateWatcher(ctx, connect.NewRequest(&fspb.CreateWatcherRequest{Path: "/workspace/q"}))
	wantCode(t, "a watch over the bound", err, connect.CodeResourceExhausted)
	sh(t, env, sb, "rm /workspace/q/20001")
	ls, err := fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: "/workspace/q"}))
	if err != nil || len(ls.Msg.GetEntries()) != 20000 {
		t.Fatalf("a listing at the bound: %d %v", len(ls.Msg.GetEntries()), err)
	}
}
