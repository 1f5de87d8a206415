package gate

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ironclaw/ironclaw/internal/rootfs"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/seal"
	"golang.org/x/sys/unix"
)

// opaqueAreas are made by each sandbox itself (or are the OCI helper's
// directory): nothing of the planned root shows there, so nothing there
// can be gated, and a walk that enters one stops (unless a bind of the
// plan lies beneath it).
var opaqueAreas = []string{"/proc", "/dev", "/sys", sandbox.TmpDir, sandbox.WorkspaceDir, "/.ironclaw"}

// writableAreas are skipped when a gated name is looked up in PATH: what
// lies there is the agent's own.
var writableAreas = []string{sandbox.TmpDir, sandbox.WorkspaceDir}

// multiCall are programs that are every applet at once: gating one under
// another name would gate them all.
var multiCall = []string{"busybox", "toybox"}

// View is a sandbox's root as planned on the host: the root's entries
// (internal/rootfs: the host-toolchain view, or a directory's entries) and
// the host paths bound on top of it.
type View struct {
	Root  []rootfs.Entry
	Binds []Bind
	// PATH lists more directories to look gated names up in, beyond
	// seal.DefaultPATH's (the Spec's own PATH).
	PATH []string
	// HostView says the root is the host-toolchain view, whose binds are
	// the host's own directories: a name that dangles inside may then be
	// followed through the host's /etc (see Resolve). Never for an image
	// or a directory, whose symlinks mean nothing on the host.
	HostView bool
}

// Bind is a host path bound into the sandbox.
type Bind struct {
	Inside, Host string
}

// ViewOf is the view of a validated spec whose seal is sl: the seal's
// root and bind mounts (the workspace directory and the extra mounts), as
// every backend builds them.
func ViewOf(sl *seal.Seal, spec sandbox.Spec) View {
	v := View{Root: sl.Root, HostView: spec.Root.Kind == sandbox.RootHostView}
	for _, m := range sl.Mounts {
		if m.Kind == seal.KindBind || m.Kind == seal.KindCopy {
			v.Binds = append(v.Binds, Bind{Inside: m.Target, Host: m.Source})
		}
	}
	for _, kv := range spec.Env {
		if p, ok := strings.CutPrefix(kv, "PATH="); ok {
			v.PATH = strings.Split(p, ":")
		}
	}
	return v
}

type nodeKind int

const (
	nDir      nodeKind = iota // a directory the plan makes (holds only nodes): /etc, /etc/alternatives
	nFile                     // a file the plan writes (the synthetic /etc)
	nSymlink                  // a symlink the plan makes (top-level, or an alternative)
	nBindDir                  // a host directory bound here
	nBindFile                 // a host file bound here
	nOpaque                   // made by the sandbox itself: unknown here
)

type node struct {
	kind   nodeKind
	target string // nSymlink
	host   string // nBind*: the canonical host path
}

// view is a View ready to walk. It keeps the directories walks entered
// open (memo), so the walks of one Resolve share them; close releases
// them.
type view struct {
	nodes map[string]node
	binds []string // inside paths of the nBind* nodes
	memo  map[string]loc
}

func (v *view) close() {
	for _, l := range v.memo {
		if l.fd >= 0 {
			unix.Close(l.fd)
		}
	}
	v.memo = nil
}

// remember keeps a directory a walk entered (taking its descriptor).
func (v *view) remember(l loc) {
	if v.memo == nil {
		v.memo = map[string]loc{}
	}
	if old, ok := v.memo[l.path]; ok && old.fd >= 0 {
		unix.Close(old.fd)
	}
	v.memo[l.path] = l
}

func newView(v View) (*view, error) {
	w := &view{nodes: map[string]node{}, memo: map[string]loc{}}
	for _, a := range opaqueAreas {
		w.nodes[a] = node{kind: nOpaque}
	}
	addBind := func(inside, host string, file bool) {
		k := nBindDir
		if file {
			k = nBindFile
		}
		canon, err := filepath.EvalSymlinks(host)
		if err != nil {
			canon = host // walks through it fail, as the mount would
		}
		w.nodes[inside] = node{kind: k, host: canon}
		w.binds = append(w.binds, inside)
	}
	// Only the shapes a plan may have (top-level entries, the synthetic
	// /etc and its alternatives links, each a node here).
	if err := rootfs.Check(v.Root); err != nil {
		return nil, fmt.Errorf("gate: %w", err)
	}
	for _, e := range v.Root {
		if !path.IsAbs(e.Path) || path.Clean(e.Path) != e.Path {
			return nil, fmt.Errorf("gate: bad root entry %q", e.Path)
		}
		switch e.Kind {
		case rootfs.KindBindDir:
			addBind(e.Path, e.Source, false)
		case rootfs.KindBindFile:
			addBind(e.Path, e.Source, true)
		case rootfs.KindSymlink:
			w.nodes[e.Path] = node{kind: nSymlink, target: e.Target}
		case rootfs.KindDir:
			w.nodes[e.Path] = node{kind: nDir}
		case rootfs.KindFile:
			w.nodes[e.Path] = node{kind: nFile}
		default:
			return nil, fmt.Errorf("gate: root entry %s: unknown kind %q", e.Path, e.Kind)
		}
	}
	for _, b := range v.Binds {
		if !path.IsAbs(b.Inside) || path.Clean(b.Inside) != b.Inside {
			return nil, fmt.Errorf("gate: bad bind target %q", b.Inside)
		}
		st, err := os.Stat(b.Host)
		if err != nil {
			return nil, fmt.Errorf("%w: mount source: %v", sandbox.ErrInvalidSpec, err)
		}
		addBind(b.Inside, b.Host, !st.IsDir())
	}
	// Longest first: alias arithmetic tries the deepest bind of a host
	// path first, as the mount table would show it.
	slices.SortFunc(w.binds, func(a, b string) int { return len(b) - len(a) })
	return w, nil
}

// Walk errors that say the path is not a file of the planned root.
var (
	errOpaque     = errors.New("lies where the sandbox makes its own files")
	errSynthetic  = errors.New("is a file the sandbox writes itself, not a program")
	errNotRegular = errors.New("is not a regular file")
	errIsDir      = errors.New("is a directory")
)

// found is the end of a walk.
type found struct {
	path string // in-sandbox and symlink-free
	host string // canonical host path
	st   unix.Stat_t
	file *os.File // with open: the file, read-only
}

// maxLinks is the kernel's limit on symlinks in one resolution.
const maxLinks = 40

// maxSteps bounds the components one walk handles.
const maxSteps = 4096

// loc is where a walk stands: a directory of the plan (nDir), an opaque
// area, or a directory inside a bind (fd open on it).
type loc struct {
	path string
	kind nodeKind
	fd   int
	host string
}

// walk resolves p (absolute) as the sandbox will: symlinks (the plan's and
// those inside bound host directories) are followed within the sandbox's
// root, never the host's, and each host directory is entered with
// O_NOFOLLOW from the one before. The last component is followed too; the
// result must be a regular file. With open the file is opened read-only.
func (v *view) walk(p string, open bool) (found, error) {
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	root := loc{path: "/", kind: nDir, fd: -1}
	cur := root
	comps := strings.Split(p, "/")
	links, steps := 0, 0
	for i := 0; i < len(comps); i++ {
		if steps++; steps > maxSteps {
			return found{}, unix.ELOOP
		}
		c := comps[i]
		last := i == len(comps)-1
		if c == "" || c == "." {
			if last && cur.path != "/" {
				return found{}, errIsDir
			}
			continue
		}
		if c == ".." {
			// cur.path is symlink-free, so its parent is the lexical one
			// (a mount root's ".." is the directory it is mounted on).
			parent, err := v.dir(path.Dir(cur.path), &fds)
			if err != nil {
				return found{}, err
			}
			cur = parent
			if last {
				return found{}, errIsDir
			}
			continue
		}
		next := path.Join(cur.path, c)
		if l, ok := v.memo[next]; ok {
			cur = l
			if last {
				return found{}, errIsDir
			}
			continue
		}
		splice := func(target string) error {
			if links++; links > maxLinks {
				return unix.ELOOP
			}
			if target == "" {
				return unix.ENOENT
			}
			if strings.HasPrefix(target, "/") {
				cur = root
			}
			comps = append(strings.Split(target, "/"), comps[i+1:]...)
			i = -1
			return nil
		}
		if n, ok := v.nodes[next]; ok {
			switch n.kind {
			case nDir, nOpaque:
				cur = loc{path: next, kind: n.kind, fd: -1}
				if last {
					return found{}, errIsDir
				}
			case nSymlink:
				if err := splice(n.target); err != nil {
					return found{}, err
				}
			case nFile:
				if !last {
					return found{}, unix.ENOTDIR
				}
				return found{path: next}, errSynthetic
			case nBindDir:
				fd, err := unix.Open(n.host, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
				if err != nil {
					return found{}, err
				}
				cur = loc{path: next, kind: nBindDir, fd: fd, host: n.host}
				v.remember(cur)
				if last {
					return found{}, errIsDir
				}
			case nBindFile:
				if !last {
					return found{}, unix.ENOTDIR
				}
				return finish(unix.AT_FDCWD, n.host, next, n.host, open)
			}
			continue
		}
		switch cur.kind {
		case nDir:
			return found{}, unix.ENOENT
		case nOpaque:
			return found{}, errOpaque
		}
		var st unix.Stat_t
		if err := unix.Fstatat(cur.fd, c, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return found{}, err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			target, err := readlinkat(cur.fd, c)
			if err != nil {
				return found{}, err
			}
			if err := splice(target); err != nil {
				return found{}, err
			}
		case unix.S_IFDIR:
			fd, err := unix.Openat(cur.fd, c, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return found{}, err
			}
			cur = loc{path: next, kind: nBindDir, fd: fd, host: cur.host + "/" + c}
			v.remember(cur)
			if last {
				return found{}, errIsDir
			}
		default:
			if !last {
				return found{}, unix.ENOTDIR
			}
			return finish(cur.fd, c, next, cur.host+"/"+c, open)
		}
	}
	return found{}, errIsDir
}

// finish checks (and with open, opens) the last component of a walk: a
// regular file, the same before and after the open.
func finish(dfd int, name, inside, host string, open bool) (found, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return found{}, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return found{}, errNotRegular
	}
	f := found{path: inside, host: host, st: st}
	if !open {
		return f, nil
	}
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return found{}, err
	}
	var after unix.Stat_t
	if err := unix.Fstat(fd, &after); err != nil || after.Dev != st.Dev || after.Ino != st.Ino {
		unix.Close(fd)
		return found{}, fmt.Errorf("%s changed while it was opened", inside)
	}
	f.file = os.NewFile(uintptr(fd), inside)
	return f, nil
}

// dir re-walks a symlink-free directory path (for ".."), adding the
// descriptors it opens to fds.
func (v *view) dir(p string, fds *[]int) (loc, error) {
	cur := loc{path: "/", kind: nDir, fd: -1}
	if p == "/" {
		return cur, nil
	}
	for _, c := range strings.Split(p[1:], "/") {
		next := path.Join(cur.path, c)
		if n, ok := v.nodes[next]; ok {
			switch n.kind {
			case nDir, nOpaque:
				cur = loc{path: next, kind: n.kind, fd: -1}
				continue
			case nBindDir:
				fd, err := unix.Open(n.host, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
				if err != nil {
					return loc{}, err
				}
				*fds = append(*fds, fd)
				cur = loc{path: next, kind: nBindDir, fd: fd, host: n.host}
				continue
			}
			return loc{}, unix.ENOTDIR
		}
		if cur.kind != nBindDir {
			return loc{}, unix.ENOENT
		}
		fd, err := unix.Openat(cur.fd, c, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return loc{}, err
		}
		*fds = append(*fds, fd)
		cur = loc{path: next, kind: nBindDir, fd: fd, host: cur.host + "/" + c}
	}
	return cur, nil
}

func readlinkat(dfd int, name string) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dfd, name, buf)
	if err != nil {
		return "", err
	}
	if n >= len(buf) {
		return "", unix.ENAMETOOLONG
	}
	return string(buf[:n]), nil
}

// aliases are the in-sandbox paths at which host path h shows through the
// view's binds (h canonical), verified by walking each.
func (v *view) aliases(h string, dev, ino uint64) []string {
	var out []string
	for _, inside := range v.binds {
		n := v.nodes[inside]
		var cand string
		switch {
		case n.kind == nBindFile && h == n.host:
			cand = inside
		case n.kind == nBindDir && strings.HasPrefix(h, n.host+"/"):
			cand = inside + h[len(n.host):]
		case n.kind == nBindDir && n.host == "/":
			cand = path.Join(inside, h)
		default:
			continue
		}
		f, err := v.walk(cand, false)
		if err == nil && f.path == cand && f.st.Dev == dev && f.st.Ino == ino {
			out = append(out, cand)
		}
	}
	return out
}

// bindRoots are the canonical host directories bound into the view.
func (v *view) bindRoots() []string {
	var out []string
	for _, inside := range v.binds {
		if n := v.nodes[inside]; n.kind == nBindDir && !slices.Contains(out, n.host) {
			out = append(out, n.host)
		}
	}
	return out
}
