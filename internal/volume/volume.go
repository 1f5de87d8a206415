// Package volume keeps named persistent volumes: storage that outlives the
// sandboxes it is mounted in. Each volume is an ext4 filesystem in a file
// of the volume's size (sparse, so an empty volume costs almost nothing)
// under the data directory's volumes/, loop-mounted nosuid,nodev while the
// daemon runs. The filesystem's size is the quota: a sandbox that fills
// its volume gets ENOSPC, and no other volume, sandbox or the host's disk
// notices.
//
// A volume belongs to the principal that created it (another agent's
// volume does not exist for it, as with sandboxes) and is mounted in at
// most one running sandbox at a time, so it is never a channel between two
// sandboxes. Which sandbox holds a volume is kept in memory; a daemon
// restart frees them all.
package volume

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ironclaw/ironclaw/internal/errdefs"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/store"
)

// Errors, classified once.
var (
	ErrInvalid     = errdefs.New(errdefs.ErrInvalidArgument, "invalid volume request")
	ErrNotFound    = errdefs.New(errdefs.ErrNotFound, "volume not found")
	ErrExists      = errdefs.New(errdefs.ErrConflict, "volume exists")
	ErrInUse       = errdefs.New(errdefs.ErrConflict, "volume in use")
	ErrQuota       = errdefs.New(errdefs.ErrLimitExceeded, "volume quota reached")
	ErrUnsupported = errdefs.New(errdefs.ErrUnsupported, "volumes are not available on this daemon")
)

// Bounds a principal's volumes stay within (Options fills the zeros).
const (
	MinBytes            = 16 << 20 // below this ext4's own metadata dominates
	DefaultMaxBytes     = 10 << 30 // one volume
	DefaultPerPrincipal = 20       // volumes a principal may own
	DefaultTotalBytes   = 50 << 30 // all of a principal's volumes together
	MaxPerSandbox       = 8        // volumes one sandbox may mount
)

// Options bound what principals may make. Zero fields take the defaults
// above; the host's free space is checked on every create too.
type Options struct {
	MaxBytes     int64 // one volume's size at most
	PerPrincipal int   // volumes per principal
	TotalBytes   int64 // a principal's volumes' sizes together
}

// Volume is one volume as the API shows it.
type Volume struct {
	Name      string    `json:"name"`
	Principal string    `json:"principal"`
	SizeBytes int64     `json:"size_bytes"`
	CreatedAt time.Time `json:"created_at"`
	// Sandbox is the running sandbox it is mounted in, "" when free.
	Sandbox string `json:"sandbox,omitempty"`
}

// Mount asks for a volume at a path inside a sandbox.
type Mount struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// Manager keeps the volumes of one data directory. It is safe for
// concurrent use.
type Manager struct {
	dir  string
	st   *store.Store
	opts Options

	mu       sync.Mutex
	attached map[string]string // volume name -> sandbox id
	mounted  map[string]bool   // volume name -> its filesystem is mounted
	broken   []error           // volumes New could not mount
}

// namePattern compiles on first use, not at init: every process of the
// binary links this package, few name a volume.
var namePattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`) })

// New opens the volumes under dir (created 0700) and mounts the
// filesystem of each volume the store lists. Volumes need root (loop
// devices and mount); without it New returns ErrUnsupported and the
// daemon runs without volumes.
func New(ctx context.Context, st *store.Store, dir string, opts Options) (*Manager, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: volumes need the daemon to run as root (loop devices)", ErrUnsupported)
	}
	for _, tool := range []string{"mkfs.ext4", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%w: %s is not installed", ErrUnsupported, tool)
		}
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.PerPrincipal <= 0 {
		opts.PerPrincipal = DefaultPerPrincipal
	}
	if opts.TotalBytes <= 0 {
		opts.TotalBytes = DefaultTotalBytes
	}
	for _, sub := range []string{"images", "mounts"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return nil, fmt.Errorf("volumes: %w", err)
		}
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("volumes: %w", err)
	}
	m := &Manager{dir: dir, st: st, opts: opts, attached: map[string]string{}, mounted: map[string]bool{}}
	vols, err := m.list(ctx, "", true)
	if err != nil {
		return nil, err
	}
	// One volume that cannot be mounted (its file lost with a crash
	// mid-create, a damaged filesystem) does not keep the daemon, or the
	// other volumes, from starting: it is reported, and refused at attach
	// until it is deleted.
	listed := map[string]bool{}
	for _, v := range vols {
		listed[v.Name+".ext4"] = true
		if err := m.mount(ctx, v.Name); err != nil {
			m.broken = append(m.broken, fmt.Errorf("volume %s: %w", v.Name, err))
		}
	}
	// A file no row names is what a delete that crashed left: nothing
	// refers to it any more.
	if ents, err := os.ReadDir(filepath.Join(dir, "images")); err == nil {
		for _, e := range ents {
			if !listed[e.Name()] {
				os.Remove(filepath.Join(dir, "images", e.Name()))
			}
		}
	}
	return m, nil
}

// Broken lists the volumes New could not mount, and why.
func (m *Manager) Broken() []error { return m.broken }

// image is a volume's filesystem file; data is where it is mounted on the
// host, the source of its bind mount into a sandbox. They live in two
// directories, so that no name can make one's path the other's.
func (m *Manager) image(name string) string { return filepath.Join(m.dir, "images", name+".ext4") }
func (m *Manager) data(name string) string  { return filepath.Join(m.dir, "mounts", name) }

// Create makes a volume of size bytes for principal.
func (m *Manager) Create(ctx context.Context, principal, name string, size int64) (Volume, error) {
	if !namePattern().MatchString(name) {
		return Volume{}, fmt.Errorf("%w: name %q: 1-63 of a-z, 0-9, '_', '.', '-', starting with a letter or digit", ErrInvalid, name)
	}
	if size < MinBytes || size > m.opts.MaxBytes {
		return Volume{}, fmt.Errorf("%w: size %s: between %s and %s", ErrInvalid,
			sandbox.FormatBytes(size), sandbox.FormatBytes(MinBytes), sandbox.FormatBytes(m.opts.MaxBytes))
	}
	// One create at a time: the quota check, the file and the row
	// together, so two racing creates cannot both pass the quota.
	m.mu.Lock()
	defer m.mu.Unlock()
	owned, err := m.list(ctx, principal, false)
	if err != nil {
		return Volume{}, err
	}
	var total int64
	for _, v := range owned {
		total += v.SizeBytes
	}
	switch {
	case len(owned) >= m.opts.PerPrincipal:
		return Volume{}, fmt.Errorf("%w: %s owns %d volumes, the most allowed", ErrQuota, principal, len(owned))
	case total+size > m.opts.TotalBytes:
		return Volume{}, fmt.Errorf("%w: %s's volumes would hold %s, more than %s", ErrQuota, principal,
			sandbox.FormatBytes(total+size), sandbox.FormatBytes(m.opts.TotalBytes))
	}
	// Sparse files grow as sandboxes write: what every volume may still
	// take must fit on the disk with the new one, so that no volume can
	// fill the disk the daemon's state is on.
	everyone, err := m.list(ctx, "", true)
	if err != nil {
		return Volume{}, err
	}
	var promised int64
	for _, v := range everyone {
		promised += max(0, v.SizeBytes-allocatedBytes(m.image(v.Name)))
	}
	now := time.Now().UTC()
	if _, err := m.st.DB().ExecContext(ctx, `INSERT INTO volumes (name, principal, size_bytes, created_at) VALUES (?, ?, ?, ?)`,
		name, principal, size, now.Format(time.RFC3339Nano)); err != nil {
		if strings.Contains(err.Error(), "UNIQUE") {
			return Volume{}, fmt.Errorf("%w: %s", ErrExists, name)
		}
		return Volume{}, fmt.Errorf("volumes: create %s: %w", name, err)
	}
	if err := m.makeFilesystem(ctx, name, size, promised); err != nil {
		_, _ = m.st.DB().ExecContext(context.WithoutCancel(ctx), `DELETE FROM volumes WHERE name = ?`, name)
		os.Remove(m.image(name))
		return Volume{}, err
	}
	if err := m.mount(ctx, name); err != nil {
		_, _ = m.st.DB().ExecContext(context.WithoutCancel(ctx), `DELETE FROM volumes WHERE name = ?`, name)
		os.Remove(m.image(name))
		return Volume{}, err
	}
	// A fresh volume is empty to its user (later, lost+found is theirs).
	_ = os.Remove(filepath.Join(m.data(name), "lost+found"))
	return Volume{Name: name, Principal: principal, SizeBytes: size, CreatedAt: now}, nil
}

// makeFilesystem writes a sparse file of size bytes and an ext4 in it.
// The free space of the disk under the data directory must hold the whole
// size: a sparse file may grow to it, and a volume must never fill the
// host's disk.
func (m *Manager) makeFilesystem(ctx context.Context, name string, size int64, promised int64) error {
	if free, err := freeBytes(m.dir); err == nil && free < promised+size+(1<<30) {
		return fmt.Errorf("%w: %s free under %s, of which %s is promised to volumes that may still grow; %s asked (and 1 GiB kept for the daemon)",
			ErrQuota, sandbox.FormatBytes(free), m.dir, sandbox.FormatBytes(promised), sandbox.FormatBytes(size))
	}
	f, err := os.OpenFile(m.image(name), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("volumes: %w", err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("volumes: size %s: %w", name, err)
	}
	// No reserved blocks (the sandbox user gets all of it), a root directory
	// every sandbox user may write (sandboxes map their uid differently per
	// backend), no lazy init (the full size is checked now).
	out, err := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", "-E", "root_owner=0:0,lazy_itable_init=0",
		"-L", "ironclaw", m.image(name)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("volumes: mkfs %s: %v: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// mount mounts a volume's filesystem at its data directory (once).
func (m *Manager) mount(ctx context.Context, name string) error {
	if m.mounted[name] {
		return nil
	}
	dir := m.data(name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if !isMountPoint(dir) {
		out, err := exec.CommandContext(ctx, "mount", "-t", "ext4", "-o", "loop,nosuid,nodev", m.image(name), dir).CombinedOutput()
		if err != nil {
			return fmt.Errorf("volumes: mount %s: %v: %s", name, err, strings.TrimSpace(string(out)))
		}
	}
	// The root of the filesystem: writable by the sandbox user whatever
	// host uid a backend maps it to; the data directory's own 0700 parent
	// keeps host users out.
	if err := os.Chmod(dir, 0o777); err != nil {
		return err
	}
	m.mounted[name] = true
	return nil
}

func (m *Manager) unmount(ctx context.Context, name string) error {
	if !m.mounted[name] {
		return nil
	}
	out, err := exec.CommandContext(ctx, "umount", m.data(name)).CombinedOutput()
	if err != nil && isMountPoint(m.data(name)) {
		return fmt.Errorf("volumes: umount %s: %v: %s", name, err, strings.TrimSpace(string(out)))
	}
	delete(m.mounted, name)
	return os.Remove(m.data(name))
}

// List returns principal's volumes; all lists everyone's (operators).
func (m *Manager) List(ctx context.Context, principal string, all bool) ([]Volume, error) {
	vols, err := m.list(ctx, principal, all)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range vols {
		vols[i].Sandbox = m.attached[vols[i].Name]
	}
	return vols, nil
}

func (m *Manager) list(ctx context.Context, principal string, all bool) ([]Volume, error) {
	rows, err := m.st.DB().QueryContext(ctx, `SELECT name, principal, size_bytes, created_at FROM volumes
		WHERE ? OR principal = ? ORDER BY name`, all, principal)
	if err != nil {
		return nil, fmt.Errorf("volumes: list: %w", err)
	}
	defer rows.Close()
	var out []Volume
	for rows.Next() {
		var v Volume
		var created string
		if err := rows.Scan(&v.Name, &v.Principal, &v.SizeBytes, &created); err != nil {
			return nil, err
		}
		v.CreatedAt, _ = time.Parse(time.RFC3339Nano, created)
		out = append(out, v)
	}
	return out, rows.Err()
}

// Get returns one of principal's volumes (any, with all).
func (m *Manager) Get(ctx context.Context, principal, name string, all bool) (Volume, error) {
	var v Volume
	var created string
	err := m.st.DB().QueryRowContext(ctx, `SELECT name, principal, size_bytes, created_at FROM volumes WHERE name = ? AND (? OR principal = ?)`,
		name, all, principal).Scan(&v.Name, &v.Principal, &v.SizeBytes, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return Volume{}, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	if err != nil {
		return Volume{}, fmt.Errorf("volumes: get %s: %w", name, err)
	}
	v.CreatedAt, _ = time.Parse(time.RFC3339Nano, created)
	m.mu.Lock()
	v.Sandbox = m.attached[name]
	m.mu.Unlock()
	return v, nil
}

// Delete removes a volume and everything in it. A volume mounted in a
// running sandbox is refused (ErrInUse).
func (m *Manager) Delete(ctx context.Context, principal, name string, all bool) error {
	if _, err := m.Get(ctx, principal, name, all); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if sb := m.attached[name]; sb != "" {
		return fmt.Errorf("%w: %s is mounted in sandbox %s", ErrInUse, name, sb)
	}
	if err := m.unmount(ctx, name); err != nil {
		return err
	}
	if _, err := m.st.DB().ExecContext(ctx, `DELETE FROM volumes WHERE name = ?`, name); err != nil {
		return fmt.Errorf("volumes: delete %s: %w", name, err)
	}
	if err := os.Remove(m.image(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Attach reserves principal's volumes for holder and returns their bind
// mounts. Each volume goes to one sandbox at a time, at a path under
// /workspace or a new top-level directory (the Spec's mount rules), and no
// two at one path. On error nothing is reserved.
func (m *Manager) Attach(ctx context.Context, principal, holder string, reqs []Mount) ([]sandbox.Mount, error) {
	if len(reqs) > MaxPerSandbox {
		return nil, fmt.Errorf("%w: %d volumes asked, at most %d per sandbox", ErrInvalid, len(reqs), MaxPerSandbox)
	}
	var names, paths []string
	for _, r := range reqs {
		p := path.Clean(r.Path)
		switch {
		case !path.IsAbs(r.Path) || p != r.Path || p == "/" || p == sandbox.WorkspaceDir:
			return nil, fmt.Errorf("%w: volume %s: path %q must be a clean absolute path below / or /workspace, not / or /workspace itself", ErrInvalid, r.Name, r.Path)
		case slices.Contains(names, r.Name):
			return nil, fmt.Errorf("%w: volume %s asked twice", ErrInvalid, r.Name)
		case slices.Contains(paths, p):
			return nil, fmt.Errorf("%w: two volumes at %s", ErrInvalid, p)
		}
		if _, err := m.Get(ctx, principal, r.Name, false); err != nil {
			return nil, err
		}
		names, paths = append(names, r.Name), append(paths, p)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range names {
		if sb := m.attached[n]; sb != "" {
			return nil, fmt.Errorf("%w: %s is mounted in sandbox %s", ErrInUse, n, sb)
		}
		if !m.mounted[n] {
			return nil, fmt.Errorf("%w: %s's filesystem is not mounted", ErrUnsupported, n)
		}
	}
	mounts := make([]sandbox.Mount, len(names))
	for i, n := range names {
		m.attached[n] = holder
		mounts[i] = sandbox.Mount{Source: m.data(n), Target: paths[i]}
	}
	return mounts, nil
}

// Rehold moves what holder reserved to sandboxID: a create reserves its
// volumes before the runtime has named the sandbox.
func (m *Manager) Rehold(holder, sandboxID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for n, h := range m.attached {
		if h == holder {
			m.attached[n] = sandboxID
		}
	}
}

// Release frees every volume holder (a sandbox, or a create's
// reservation) holds.
func (m *Manager) Release(holder string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for n, h := range m.attached {
		if h == holder {
			delete(m.attached, n)
		}
	}
}

// Close unmounts every volume's filesystem (their files stay; New mounts
// them again).
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	for n := range m.mounted {
		if err := m.unmount(ctx, n); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
