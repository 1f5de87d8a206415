package native

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path"
	"sync"

	"github.com/ironclaw/ironclaw/internal/rootfs"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
	"golang.org/x/sys/unix"
)

// sharedAlternatives holds the host view's alternatives links
// (/etc/alternatives, see rootfs) once for every sandbox of the runtime:
// in a tmpfs the daemon makes detached (fsopen and fsmount: it is mounted
// nowhere on the host), fills and then turns read-only at the superblock,
// so that no mount of it, in any namespace, can write there again. Each
// root-mode create clones it (open_tree) and sends the clone as a mount
// tree named wire.AlternativesSource; the init binds that read-only where
// it would otherwise make every link in its own root (setup.Root).
//
// Measured (docs/performance.md): the 79 links of this host's view cost
// each sandbox about 80 KiB of kernel memory, charged to its cgroup (an
// inode and a dentry each), and 80 system calls in its init.
//
// A kernel that cannot clone a detached mount (before 6.x), or refuses
// any step, turns sharing off for the runtime's life, with one line to
// Logf: each sandbox makes its own links, as before.
type sharedAlternatives struct {
	mu     sync.Mutex
	off    bool
	closed bool              // the runtime closed: warm makes nothing more
	key    [sha256.Size]byte // of the links the mount holds
	fd     int               // the detached mount; -1: none yet
}

func newSharedAlternatives() *sharedAlternatives { return &sharedAlternatives{fd: -1} }

// alternativesBytes bounds the tmpfs: rootfs.MaxAlternatives links, each
// with a target of at most a page.
const alternativesBytes = "4m"

// clone returns a clone of the mount holding links (the plan's
// alternatives entries), making the mount first when the plan's links
// are not the ones it holds; nil when sharing is off.
func (s *sharedAlternatives) clone(links []rootfs.Entry, logf func(string, ...any)) *os.File {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.off || len(links) == 0 {
		return nil
	}
	key := alternativesKey(links)
	if s.fd < 0 || key != s.key {
		fd, err := makeAlternatives(links)
		if err != nil {
			s.off = true
			logf("alternatives: cannot share one read-only mount of them (%v); each sandbox makes its own links", err)
			return nil
		}
		// Sandboxes made from the old mount keep their clones; the host's
		// alternatives changed, and new sandboxes get the new ones.
		s.closeLocked()
		s.fd, s.key = fd, key
	}
	c, err := unix.OpenTree(s.fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		s.off = true
		s.closeLocked()
		logf("alternatives: cannot clone their shared mount (%v); each sandbox makes its own links", err)
		return nil
	}
	return os.NewFile(uintptr(c), wire.AlternativesSource)
}

// warm makes the mount of links ahead of the first create that needs
// it (New begins it once the host view is read): a one-shot `ironclaw
// run`'s only create would otherwise make its 79 links on its path,
// while the init it is for waits. Best effort: a failure is left for
// clone to meet and report.
func (s *sharedAlternatives) warm(links []rootfs.Entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.off || s.closed || len(links) == 0 {
		return
	}
	key := alternativesKey(links)
	if s.fd >= 0 && key == s.key {
		return
	}
	fd, err := makeAlternatives(links)
	if err != nil {
		return
	}
	s.closeLocked()
	s.fd, s.key = fd, key
}

func (s *sharedAlternatives) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.closeLocked()
}

func (s *sharedAlternatives) closeLocked() {
	if s.fd >= 0 {
		unix.Close(s.fd)
		s.fd = -1
	}
}

func alternativesKey(links []rootfs.Entry) [sha256.Size]byte {
	h := sha256.New()
	for _, e := range links {
		h.Write([]byte(e.Path))
		h.Write([]byte{0})
		h.Write([]byte(e.Target))
		h.Write([]byte{0})
	}
	var k [sha256.Size]byte
	h.Sum(k[:0])
	return k
}

// makeAlternatives makes the detached, read-only tmpfs holding links at
// its root and returns its mount descriptor.
func makeAlternatives(links []rootfs.Entry) (fd int, err error) {
	fs, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen: %w", err)
	}
	defer unix.Close(fs)
	for _, o := range [][2]string{{"size", alternativesBytes}, {"nr_inodes", fmt.Sprint(rootfs.MaxAlternatives + 16)}, {"mode", "0755"}} {
		if err := unix.FsconfigSetString(fs, o[0], o[1]); err != nil {
			return -1, fmt.Errorf("tmpfs %s: %w", o[0], err)
		}
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return -1, fmt.Errorf("tmpfs: %w", err)
	}
	m, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsmount: %w", err)
	}
	defer func() {
		if err != nil {
			unix.Close(m)
		}
	}()
	for _, e := range links {
		// rootfs.Check has made each a plain name in AlternativesDir.
		if err := unix.Symlinkat(e.Target, m, path.Base(e.Path)); err != nil {
			return -1, fmt.Errorf("link %s: %w", e.Path, err)
		}
	}
	pick, err := unix.Fspick(m, "", unix.FSPICK_EMPTY_PATH|unix.FSPICK_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fspick: %w", err)
	}
	defer unix.Close(pick)
	if err := unix.FsconfigSetFlag(pick, "ro"); err != nil {
		return -1, fmt.Errorf("read-only: %w", err)
	}
	if err := unix.FsconfigReconfigure(pick); err != nil {
		return -1, fmt.Errorf("read-only: %w", err)
	}
	return m, nil
}

// alternativesLinks are the alternatives links of a plan's root.
func alternativesLinks(root []rootfs.Entry) []rootfs.Entry {
	var out []rootfs.Entry
	for _, e := range root {
		if _, ok := rootfs.Alternative(e); ok {
			out = append(out, e)
		}
	}
	return out
}
