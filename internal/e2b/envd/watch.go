package envd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/client"
	fspb "github.com/ironclaw/ironclaw/internal/e2b/envdpb/filesystem"
	sbwire "github.com/ironclaw/ironclaw/internal/sandbox/wire"
)

// Watching. The daemon cannot inotify inside a sandbox, so a watcher
// polls: it lists the watched directory (and, when recursive, every
// directory beneath it, not following symbolic links) and compares the
// listing with the one before. A new name is CREATE (and WRITE too when it
// is a non-empty file, as a create then a write shows under inotify), a
// name gone is REMOVE, a change of permission bits is CHMOD, a change of a
// file's size or mtime is WRITE, a change of type REMOVE then CREATE. A
// rename therefore shows as REMOVE of the old name and CREATE of the new
// one, never RENAME; changes that come and go between two polls are not
// seen. Names are relative to the watched directory, as envd's.
//
// Bounds: fsWatchPerSandbox watchers (streams and polled ones together)
// per sandbox, fsWatchTotal in all; a snapshot of at most
// fsWatchMaxEntries entries in fsWatchMaxDirs directories (beyond, the
// watch ends with ResourceExhausted); a poll every fsWatchInterval, and no
// more often than fsWatchPerDir per directory listed, so one watcher costs
// the sandbox at most about 100 listings a second; a polled watcher queues
// at most fsWatchMaxQueued events (beyond, it fails: GetWatcherEvents
// answers ResourceExhausted from then on, rather than drop events
// silently) and is removed once nobody has asked for its events for
// fsWatchIdle.
const (
	fsWatchPerSandbox = 8
	fsWatchTotal      = 256
	fsWatchMaxEntries = 20000
	fsWatchMaxDirs    = 1000
	fsWatchInterval   = 300 * time.Millisecond
	fsWatchPerDir     = 10 * time.Millisecond
	fsWatchMaxQueued  = 4096
	fsWatchIdle       = 2 * time.Minute
	// fsKeepAliveDefault is envd's keepalive interval when the client
	// sends no Keepalive-Ping-Interval.
	fsKeepAliveDefault = 90 * time.Second
)

// fsSnapEntry is what a snapshot keeps of one entry.
type fsSnapEntry struct {
	typ   string
	size  int64
	mode  string
	mtime time.Time
	info  *fspb.EntryInfo
}

// fsSnapshot maps names relative to the watched directory to entries.
type fsSnapshot map[string]fsSnapEntry

// fsSnap lists root (recursively when asked) into a snapshot; it also
// returns how many directories it listed.
func fsSnap(ctx context.Context, api *client.Client, id, root string, recursive bool) (fsSnapshot, int, error) {
	snap := fsSnapshot{}
	dirs := 0
	var walk func(rel string) error
	walk = func(rel string) error {
		dirs++
		if dirs > fsWatchMaxDirs {
			return connect.NewError(connect.CodeResourceExhausted,
				fmt.Errorf("the watched tree %s has more than %d directories; watch a subdirectory, or not recursively", root, fsWatchMaxDirs))
		}
		dir := path.Join(root, rel)
		entries, err := api.ListFiles(ctx, id, dir)
		if err != nil {
			if rel != "" && client.IsCode(err, wire.CodeNotFound) {
				return nil // gone since its parent was listed
			}
			return rpcError(err)
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name, sbwire.UploadTempPrefix) {
				continue // an upload in flight: its target shows once it lands
			}
			if len(snap) >= fsWatchMaxEntries {
				return connect.NewError(connect.CodeResourceExhausted,
					fmt.Errorf("the watched tree %s has more than %d entries; watch a subdirectory", root, fsWatchMaxEntries))
			}
			name := path.Join(rel, e.Name)
			snap[name] = fsSnapEntry{typ: e.Type, size: e.Size, mode: e.Mode, mtime: e.MTime, info: fsEntry(dir, e)}
			if recursive && e.Type == "dir" {
				if err := walk(name); err != nil {
					return err
				}
			}
		}
		return nil
	}
	err := walk("")
	return snap, dirs, err
}

// fsDiff is the events that turn old into cur, in name order.
func fsDiff(old, cur fsSnapshot, withEntry bool) []*fspb.FilesystemEvent {
	names := make([]string, 0, len(cur))
	for n := range cur {
		names = append(names, n)
	}
	for n := range old {
		if _, ok := cur[n]; !ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var out []*fspb.FilesystemEvent
	add := func(name string, t fspb.EventType, e fsSnapEntry) {
		ev := &fspb.FilesystemEvent{Name: name, Type: t}
		if withEntry && t != fspb.EventType_EVENT_TYPE_REMOVE {
			ev.Entry = e.info
		}
		out = append(out, ev)
	}
	for _, n := range names {
		o, had := old[n]
		c, has := cur[n]
		switch {
		case !has:
			add(n, fspb.EventType_EVENT_TYPE_REMOVE, o)
		case !had || o.typ != c.typ:
			if had {
				add(n, fspb.EventType_EVENT_TYPE_REMOVE, o)
			}
			add(n, fspb.EventType_EVENT_TYPE_CREATE, c)
			if c.typ == "file" && c.size > 0 {
				add(n, fspb.EventType_EVENT_TYPE_WRITE, c)
			}
		default:
			if o.mode != c.mode {
				add(n, fspb.EventType_EVENT_TYPE_CHMOD, c)
			}
			if c.typ == "file" && (o.size != c.size || !o.mtime.Equal(c.mtime)) {
				add(n, fspb.EventType_EVENT_TYPE_WRITE, c)
			}
		}
	}
	return out
}

// fsPollWait is how long to wait after a snapshot that listed dirs
// directories.
func fsPollWait(dirs int) time.Duration {
	return max(fsWatchInterval, time.Duration(dirs)*fsWatchPerDir)
}

// fsWatchStart checks the watched path: a directory (a symbolic link to
// one too), in a writable area, and takes the first snapshot.
func fsWatchStart(ctx context.Context, api *client.Client, id, p string, recursive bool) (fsSnapshot, int, error) {
	snap, dirs, err := fsSnap(ctx, api, id, p, recursive)
	if err == nil {
		return snap, dirs, nil
	}
	if c := connect.CodeOf(err); c == connect.CodeNotFound || c == connect.CodeInvalidArgument {
		if e, serr := fsStat(ctx, api, id, p); serr == nil && e.Type == fspb.FileType_FILE_TYPE_FILE {
			return nil, 0, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path %s not a directory", p))
		}
		if c == connect.CodeNotFound {
			return nil, 0, connect.NewError(connect.CodeNotFound, fmt.Errorf("path %s not found", p))
		}
	}
	return nil, 0, err
}

// fsWatchers is the registry of every watcher: the polled ones by id, and
// a count of all (streams too) by sandbox.
type fsWatchers struct {
	mu        sync.Mutex
	bySandbox map[string]int
	total     int
	polled    map[string]*fsPolled
}

func newFsWatchers() *fsWatchers {
	return &fsWatchers{bySandbox: map[string]int{}, polled: map[string]*fsPolled{}}
}

// acquire takes a watcher slot of sandbox id; release gives it back.
func (w *fsWatchers) acquire(id string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sweepLocked()
	if w.bySandbox[id] >= fsWatchPerSandbox {
		return connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("the sandbox already has %d watchers, the limit; stop one first", fsWatchPerSandbox))
	}
	if w.total >= fsWatchTotal {
		return connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("the daemon already runs %d watchers, the limit; stop one first", fsWatchTotal))
	}
	w.bySandbox[id]++
	w.total++
	return nil
}

func (w *fsWatchers) release(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.releaseLocked(id)
}

func (w *fsWatchers) releaseLocked(id string) {
	w.total--
	if w.bySandbox[id]--; w.bySandbox[id] <= 0 {
		delete(w.bySandbox, id)
	}
}

// sweepLocked drops the polled watchers nobody has asked for events for
// fsWatchIdle (their pollers have ended or end at their next poll).
func (w *fsWatchers) sweepLocked() {
	for wid, pw := range w.polled {
		if pw.idle() {
			w.removeLocked(wid, pw)
		}
	}
}

func (w *fsWatchers) removeLocked(wid string, pw *fsPolled) {
	if w.polled[wid] != pw {
		return
	}
	delete(w.polled, wid)
	pw.cancel()
	w.releaseLocked(pw.sandbox)
}

// get is the polled watcher wid of sandbox id.
func (w *fsWatchers) get(id, wid string) (*fsPolled, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sweepLocked()
	pw := w.polled[wid]
	if pw == nil || pw.sandbox != id {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher with id %s not found", wid))
	}
	return pw, nil
}

// fsPolled is a watcher whose events wait for GetWatcherEvents.
type fsPolled struct {
	sandbox string
	cancel  context.CancelFunc

	mu       sync.Mutex
	events   []*fspb.FilesystemEvent
	err      error
	lastRead time.Time
}

func (pw *fsPolled) idle() bool {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	return time.Since(pw.lastRead) > fsWatchIdle
}

// push queues events; it reports false once the watcher has failed.
func (pw *fsPolled) push(evs []*fspb.FilesystemEvent) bool {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if pw.err != nil {
		return false
	}
	if len(pw.events)+len(evs) > fsWatchMaxQueued {
		pw.events = nil
		pw.err = connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("more than %d events queued: the watcher stopped; read its events more often, create a new one and list the directory again", fsWatchMaxQueued))
		return false
	}
	pw.events = append(pw.events, evs...)
	return true
}

func (pw *fsPolled) fail(err error) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if pw.err == nil {
		pw.err = err
	}
}

func fsWatchID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "w" + hex.EncodeToString(b[:])
}

func (s *fsService) WatchDir(ctx context.Context, req *connect.Request[fspb.WatchDirRequest], stream *connect.ServerStream[fspb.WatchDirResponse]) error {
	api, id, p, err := fsTarget(ctx, req.Msg.GetPath())
	if err != nil {
		return err
	}
	if err := s.watchers.acquire(id); err != nil {
		return err
	}
	defer s.watchers.release(id)
	snap, dirs, err := fsWatchStart(ctx, api, id, p, req.Msg.GetRecursive())
	if err != nil {
		return err
	}
	if err := stream.Send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Start{Start: &fspb.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	interval := fsKeepAliveDefault
	if n, err := strconv.Atoi(req.Header().Get("Keepalive-Ping-Interval")); err == nil {
		interval = min(max(time.Duration(n)*time.Second, time.Second), fsKeepAliveDefault)
	}
	keepalive := time.NewTicker(interval)
	defer keepalive.Stop()
	poll := time.NewTimer(fsPollWait(dirs))
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-keepalive.C:
			if err := stream.Send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Keepalive{Keepalive: &fspb.WatchDirResponse_KeepAlive{}}}); err != nil {
				return err
			}
		case <-poll.C:
			cur, n, err := fsSnap(ctx, api, id, p, req.Msg.GetRecursive())
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			evs := fsDiff(snap, cur, req.Msg.GetIncludeEntry())
			snap = cur
			for _, ev := range evs {
				if err := stream.Send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Filesystem{Filesystem: ev}}); err != nil {
					return err
				}
			}
			if len(evs) > 0 {
				keepalive.Reset(interval)
			}
			poll.Reset(fsPollWait(n))
		}
	}
}

func (s *fsService) CreateWatcher(ctx context.Context, req *connect.Request[fspb.CreateWatcherRequest]) (*connect.Response[fspb.CreateWatcherResponse], error) {
	api, id, p, err := fsTarget(ctx, req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	recursive, withEntry := req.Msg.GetRecursive(), req.Msg.GetIncludeEntry()
	if err := s.watchers.acquire(id); err != nil {
		return nil, err
	}
	snap, dirs, err := fsWatchStart(ctx, api, id, p, recursive)
	if err != nil {
		s.watchers.release(id)
		return nil, err
	}
	// The poller outlives the request: it ends when the watcher is
	// removed, idle or failed.
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	pw := &fsPolled{sandbox: id, cancel: cancel, lastRead: time.Now()}
	wid := fsWatchID()
	s.watchers.mu.Lock()
	s.watchers.polled[wid] = pw
	s.watchers.mu.Unlock()
	go func() {
		defer cancel()
		t := time.NewTimer(fsPollWait(dirs))
		defer t.Stop()
		for {
			select {
			case <-pctx.Done():
				return
			case <-t.C:
			}
			if pw.idle() {
				s.watchers.mu.Lock()
				s.watchers.removeLocked(wid, pw)
				s.watchers.mu.Unlock()
				return
			}
			cur, n, err := fsSnap(pctx, api, id, p, recursive)
			if err != nil {
				if pctx.Err() == nil {
					pw.fail(err)
				}
				return
			}
			evs := fsDiff(snap, cur, withEntry)
			snap = cur
			if !pw.push(evs) {
				return
			}
			t.Reset(fsPollWait(n))
		}
	}()
	return connect.NewResponse(&fspb.CreateWatcherResponse{WatcherId: wid}), nil
}

func (s *fsService) GetWatcherEvents(ctx context.Context, req *connect.Request[fspb.GetWatcherEventsRequest]) (*connect.Response[fspb.GetWatcherEventsResponse], error) {
	_, id, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	pw, err := s.watchers.get(id, req.Msg.GetWatcherId())
	if err != nil {
		return nil, err
	}
	pw.mu.Lock()
	defer pw.mu.Unlock()
	pw.lastRead = time.Now()
	if pw.err != nil {
		return nil, pw.err
	}
	evs := pw.events
	pw.events = nil
	return connect.NewResponse(&fspb.GetWatcherEventsResponse{Events: evs}), nil
}

func (s *fsService) RemoveWatcher(ctx context.Context, req *connect.Request[fspb.RemoveWatcherRequest]) (*connect.Response[fspb.RemoveWatcherResponse], error) {
	_, id, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	pw, err := s.watchers.get(id, req.Msg.GetWatcherId())
	if err != nil {
		return nil, err
	}
	s.watchers.mu.Lock()
	s.watchers.removeLocked(req.Msg.GetWatcherId(), pw)
	s.watchers.mu.Unlock()
	return connect.NewResponse(&fspb.RemoveWatcherResponse{}), nil
}
