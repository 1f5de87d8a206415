package session

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/errdefs"
	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// Snapshot bounds. A snapshot copies /workspace's directories and regular
// files (symlinks and other entries are counted as skipped); what it holds
// is on the daemon's disk until it is deleted or the daemon run ends.
const (
	SnapshotMaxEntries      = 10000   // files and directories in one snapshot
	SnapshotMaxDepth        = 64      // directory levels below /workspace
	SnapshotMaxBytes        = 1 << 30 // file bytes in one snapshot
	SnapshotsPerPrincipal   = 8       // held at once by one principal
	SnapshotsTotal          = 64      // held at once in the daemon
	SnapshotTotalBytes      = 4 << 30 // held at once in the daemon
	snapshotTimeout         = 5 * time.Minute
	snapshotMkdirBatch      = 100
	snapshotWorkspace       = "/workspace"
	KindSandboxSnapshot     = "sandbox.snapshot"
	KindSandboxSnapshotDrop = "sandbox.snapshot.delete"
)

// ErrSnapshotNotFound is an unknown (or another principal's) snapshot.
var ErrSnapshotNotFound = errdefs.New(errdefs.ErrNotFound, "snapshot not found")

// SnapshotInfo describes a snapshot of a sandbox's /workspace.
type SnapshotInfo struct {
	ID        string    `json:"id"`
	Sandbox   string    `json:"sandbox"`
	Principal string    `json:"principal"`
	CreatedAt time.Time `json:"created_at"`
	Bytes     int64     `json:"bytes"`
	Files     int       `json:"files"`
	Dirs      int       `json:"dirs"`
	// Skipped counts entries not copied: symlinks, devices, sockets, fifos.
	Skipped int `json:"skipped"`
}

type snapEntry struct {
	rel  string // beneath /workspace, "/"-separated, never empty
	dir  bool
	mode fs.FileMode
	blob int // file: its content is blob N of the snapshot's directory
}

type snapshot struct {
	info    SnapshotInfo
	dir     string
	entries []snapEntry
}

// snapshots is the Manager's snapshot store: an index in memory, the
// contents under one directory (blobs named by number, never by the
// sandbox's file names).
type snapshots struct {
	mu     sync.Mutex
	dir    string
	byID   map[string]*snapshot
	bytes  int64          // held, plus reserved by snapshots being taken
	taking map[string]int // snapshots being taken, per principal
}

// openSnapshots empties dir (what an earlier run left) and uses it.
func openSnapshots(dir string) (*snapshots, error) {
	if dir == "" {
		return nil, nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("session: snapshots: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("session: snapshots: %w", err)
	}
	return &snapshots{dir: dir, byID: map[string]*snapshot{}, taking: map[string]int{}}, nil
}

func (m *Manager) snapStore() (*snapshots, error) {
	if m.snaps == nil {
		return nil, fmt.Errorf("%w: this daemon keeps no snapshots", sandbox.ErrUnsupported)
	}
	return m.snaps, nil
}

// Snapshot copies a sandbox's /workspace (directories and regular files,
// with their permission bits) to the daemon's disk, through the sandbox's
// own confined file operations. It is not atomic: files that change while
// it runs may be caught half-way, so take it while the sandbox is quiet.
// A paused sandbox is resumed for it. Bounded by SnapshotMax* and the
// SnapshotsPerPrincipal, SnapshotsTotal and SnapshotTotalBytes quotas
// (ErrLimit). The caller decides whether actor may.
func (m *Manager) Snapshot(ctx context.Context, actor, id string) (SnapshotInfo, error) {
	st, err := m.snapStore()
	if err != nil {
		return SnapshotInfo{}, err
	}
	m.mu.Lock()
	e, err := m.liveLocked(id)
	var principal string
	if err == nil {
		principal = e.info.Principal
	}
	m.mu.Unlock()
	if err != nil {
		return SnapshotInfo{}, err
	}
	st.mu.Lock()
	held, taking := st.taking[principal], 0
	for _, s := range st.byID {
		if s.info.Principal == principal {
			held++
		}
	}
	for _, n := range st.taking {
		taking += n
	}
	switch {
	case held >= SnapshotsPerPrincipal:
		st.mu.Unlock()
		return SnapshotInfo{}, fmt.Errorf("%w: %s holds %d snapshots, its quota; delete one first", ErrLimit, principal, held)
	case len(st.byID)+taking >= SnapshotsTotal:
		st.mu.Unlock()
		return SnapshotInfo{}, fmt.Errorf("%w: the daemon holds %d snapshots, its total", ErrLimit, SnapshotsTotal)
	}
	budget := min(int64(SnapshotMaxBytes), SnapshotTotalBytes-st.bytes)
	if budget <= 0 {
		st.mu.Unlock()
		return SnapshotInfo{}, fmt.Errorf("%w: the daemon's snapshots hold %s, their total", ErrLimit, sandbox.FormatBytes(st.bytes))
	}
	st.taking[principal]++
	st.bytes += budget // reserved; the unused part is given back
	st.mu.Unlock()
	var used int64
	defer func() {
		st.mu.Lock()
		if st.taking[principal]--; st.taking[principal] <= 0 {
			delete(st.taking, principal)
		}
		st.bytes -= budget - used
		st.mu.Unlock()
	}()

	sb, done, err := m.use(id)
	if err != nil {
		return SnapshotInfo{}, err
	}
	defer done()
	var b [8]byte
	_, _ = rand.Read(b[:])
	snap := &snapshot{info: SnapshotInfo{ID: "snap-" + hex.EncodeToString(b[:]), Sandbox: id, Principal: principal, CreatedAt: m.opts.Now()},
		dir: filepath.Join(st.dir, "snap-"+hex.EncodeToString(b[:]))}
	intent, err := m.log.Begin(ctx, audit.Entry{Session: id, Actor: actor, Kind: KindSandboxSnapshot, Data: map[string]any{"snapshot": snap.info.ID}})
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("session: no snapshot was taken, as its audit record could not be written: %w", err)
	}
	sctx, cancel := context.WithTimeout(ctx, snapshotTimeout)
	defer cancel()
	serr := snap.take(sctx, sb, budget)
	used = snap.info.Bytes
	data := map[string]any{"snapshot": snap.info.ID, "bytes": snap.info.Bytes, "files": snap.info.Files, "dirs": snap.info.Dirs, "skipped": snap.info.Skipped}
	if serr != nil {
		data["error"] = serr.Error()
		_ = os.RemoveAll(snap.dir)
		used = 0
	}
	logEnd := func(err error) { m.opts.Logf("session: audit of the snapshot of %s: %v", id, err) }
	if err := intent.EndQueued(data, logEnd); err != nil {
		logEnd(err)
	}
	if serr != nil {
		return SnapshotInfo{}, serr
	}
	st.mu.Lock()
	st.byID[snap.info.ID] = snap
	st.mu.Unlock()
	return snap.info, nil
}

// take walks /workspace breadth first and copies it into s.dir.
func (s *snapshot) take(ctx context.Context, sb sandbox.Sandbox, budget int64) error {
	if err := os.Mkdir(s.dir, 0o700); err != nil {
		return fmt.Errorf("session: snapshot: %w", err)
	}
	type level struct {
		rel   string
		depth int
	}
	queue := []level{{"", 0}}
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		list, err := sb.ListDir(ctx, path.Join(snapshotWorkspace, d.rel))
		if err != nil {
			return fmt.Errorf("session: snapshot: list %s: %w", path.Join(snapshotWorkspace, d.rel), err)
		}
		for _, fi := range list {
			if fi.Name == "" || fi.Name == "." || fi.Name == ".." || strings.ContainsAny(fi.Name, "/\x00") {
				s.info.Skipped++
				continue
			}
			if len(s.entries) >= SnapshotMaxEntries {
				return fmt.Errorf("%w: /workspace has more than %d files and directories, a snapshot's most", ErrLimit, SnapshotMaxEntries)
			}
			rel := path.Join(d.rel, fi.Name)
			switch fi.Type {
			case "dir":
				if d.depth+1 > SnapshotMaxDepth {
					return fmt.Errorf("%w: /workspace is nested deeper than %d directories, a snapshot's most", ErrLimit, SnapshotMaxDepth)
				}
				s.entries = append(s.entries, snapEntry{rel: rel, dir: true, mode: fi.Mode.Perm()})
				s.info.Dirs++
				queue = append(queue, level{rel, d.depth + 1})
			case "file":
				n := len(s.entries)
				if err := s.copyIn(ctx, sb, rel, n, budget); err != nil {
					return err
				}
				s.entries = append(s.entries, snapEntry{rel: rel, mode: fi.Mode.Perm(), blob: n})
				s.info.Files++
			default:
				s.info.Skipped++
			}
		}
	}
	return nil
}

func (s *snapshot) copyIn(ctx context.Context, sb sandbox.Sandbox, rel string, n int, budget int64) error {
	f, err := os.OpenFile(filepath.Join(s.dir, strconv.Itoa(n)), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("session: snapshot: %w", err)
	}
	w := &budgetWriter{w: f, left: budget - s.info.Bytes}
	rerr := sb.ReadFile(ctx, path.Join(snapshotWorkspace, rel), w)
	cerr := f.Close()
	s.info.Bytes += w.n
	switch {
	case w.over:
		return fmt.Errorf("%w: /workspace holds more than a snapshot may (%s)", ErrLimit, sandbox.FormatBytes(budget))
	case rerr != nil:
		return fmt.Errorf("session: snapshot: read %s: %w", path.Join(snapshotWorkspace, rel), rerr)
	case cerr != nil:
		return fmt.Errorf("session: snapshot: %w", cerr)
	}
	return nil
}

// budgetWriter fails a write beyond left bytes.
type budgetWriter struct {
	w    io.Writer
	left int64
	n    int64
	over bool
}

func (b *budgetWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > b.left-b.n {
		b.over = true
		return 0, errors.New("snapshot budget exceeded")
	}
	n, err := b.w.Write(p)
	b.n += int64(n)
	return n, err
}

// restore writes s into a new sandbox's /workspace: directories first
// (mkdir -p as the sandbox user), then every file with its permission bits.
func (s *snapshot) restore(ctx context.Context, sb sandbox.Sandbox) error {
	var dirs []string
	for _, e := range s.entries {
		if e.dir {
			dirs = append(dirs, path.Join(snapshotWorkspace, e.rel))
		}
	}
	for chunk := range slices.Chunk(dirs, snapshotMkdirBatch) {
		if err := s.run(ctx, sb, append([]string{"mkdir", "-p", "--"}, chunk...)); err != nil {
			return err
		}
	}
	for _, e := range s.entries {
		if e.dir {
			continue
		}
		f, err := os.Open(filepath.Join(s.dir, strconv.Itoa(e.blob)))
		if err != nil {
			return fmt.Errorf("session: restoring snapshot %s: %w", s.info.ID, err)
		}
		err = sb.WriteFile(ctx, path.Join(snapshotWorkspace, e.rel), f, e.mode)
		f.Close()
		if err != nil {
			return fmt.Errorf("session: restoring snapshot %s: %s: %w", s.info.ID, e.rel, err)
		}
	}
	// Directory modes last, once their files are in (a read-only one
	// would refuse them), deepest first (a parent without search
	// permission would hide its children), runs of one mode together.
	var batch []string
	var batchMode fs.FileMode
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := s.run(ctx, sb, append([]string{"chmod", fmt.Sprintf("%04o", batchMode), "--"}, batch...))
		batch = batch[:0]
		return err
	}
	for i := len(s.entries) - 1; i >= 0; i-- {
		e := s.entries[i]
		if !e.dir || e.mode == 0o755 {
			continue
		}
		if e.mode != batchMode || len(batch) >= snapshotMkdirBatch {
			if err := flush(); err != nil {
				return err
			}
			batchMode = e.mode
		}
		batch = append(batch, path.Join(snapshotWorkspace, e.rel))
	}
	return flush()
}

// run runs a helper command of a restore inside the sandbox.
func (s *snapshot) run(ctx context.Context, sb sandbox.Sandbox, argv []string) error {
	var out strings.Builder
	res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: argv, Stderr: &limited{b: &out, left: 4096}})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("%s exited %d: %s", argv[0], res.ExitCode, strings.TrimSpace(out.String()))
	}
	if err != nil {
		return fmt.Errorf("session: restoring snapshot %s: %w", s.info.ID, err)
	}
	return nil
}

type limited struct {
	b    *strings.Builder
	left int
}

func (l *limited) Write(p []byte) (int, error) {
	if l.left > 0 {
		k := min(len(p), l.left)
		l.b.Write(p[:k])
		l.left -= k
	}
	return len(p), nil
}

// GetSnapshot describes a snapshot.
func (m *Manager) GetSnapshot(id string) (SnapshotInfo, error) {
	st, err := m.snapStore()
	if err != nil {
		return SnapshotInfo{}, err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	s := st.byID[id]
	if s == nil {
		return SnapshotInfo{}, fmt.Errorf("%w: %s", ErrSnapshotNotFound, id)
	}
	return s.info, nil
}

// ListSnapshots lists the snapshots of principal ("" for all), oldest
// first.
func (m *Manager) ListSnapshots(principal string) ([]SnapshotInfo, error) {
	st, err := m.snapStore()
	if err != nil {
		return nil, err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	var out []SnapshotInfo
	for _, s := range st.byID {
		if principal == "" || s.info.Principal == principal {
			out = append(out, s.info)
		}
	}
	slices.SortFunc(out, func(a, b SnapshotInfo) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// DeleteSnapshot removes a snapshot from the index and the disk.
func (m *Manager) DeleteSnapshot(ctx context.Context, actor, id string) error {
	st, err := m.snapStore()
	if err != nil {
		return err
	}
	st.mu.Lock()
	s := st.byID[id]
	if s != nil {
		delete(st.byID, id)
		st.bytes -= s.info.Bytes
	}
	st.mu.Unlock()
	if s == nil {
		return fmt.Errorf("%w: %s", ErrSnapshotNotFound, id)
	}
	rerr := os.RemoveAll(s.dir)
	if _, err := m.log.Append(ctx, audit.Entry{Session: s.info.Sandbox, Actor: actor, Kind: KindSandboxSnapshotDrop, Data: map[string]any{"snapshot": id}}); err != nil {
		return fmt.Errorf("session: audit: %w", err)
	}
	return rerr
}

// snapshotFor returns the snapshot a create restores.
func (m *Manager) snapshotFor(id string) (*snapshot, error) {
	st, err := m.snapStore()
	if err != nil {
		return nil, err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	s := st.byID[id]
	if s == nil {
		return nil, fmt.Errorf("%w: %s", ErrSnapshotNotFound, id)
	}
	return s, nil
}

// closeSnapshots removes every snapshot (they last one daemon run).
func (m *Manager) closeSnapshots() {
	if m.snaps == nil {
		return
	}
	m.snaps.mu.Lock()
	m.snaps.byID = map[string]*snapshot{}
	m.snaps.bytes = 0
	m.snaps.mu.Unlock()
	_ = os.RemoveAll(m.snaps.dir)
}
