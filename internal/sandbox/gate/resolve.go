package gate

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/seal"
	"golang.org/x/sys/unix"
)

// Resolve finds, in the root v describes, every file the gate entries name
// and every path that reaches each (see the package documentation). A
// name is looked up in every directory of seal.DefaultPATH and v.PATH outside
// the writable areas; an absolute entry is resolved as the sandbox would.
// An entry that names nothing in this root gates nothing here. Errors wrap
// sandbox.ErrUnsupported (the root and the policy do not fit: a name that
// is a multi-call binary, too many paths, a search too large) or
// sandbox.ErrInvalidSpec.
//
// The real files are opened, read-only; the caller closes the Plan.
func Resolve(v View, entries []string) (_ *Plan, retErr error) {
	plan := &Plan{}
	if len(entries) == 0 {
		return plan, nil
	}
	defer func() {
		if retErr != nil {
			plan.Close()
		}
	}()
	if len(entries) > MaxPrograms {
		return nil, fmt.Errorf("%w: exec.gate lists %d programs, more than %d", sandbox.ErrInvalidSpec, len(entries), MaxPrograms)
	}
	w, err := newView(v)
	if err != nil {
		return nil, err
	}
	defer w.close()
	dirs := pathDirs(v.PATH)
	byID := map[[2]uint64]int{}
	add := func(key string, f found) {
		id := [2]uint64{f.st.Dev, f.st.Ino}
		if i, ok := byID[id]; ok {
			f.file.Close()
			g := &plan.Programs[i]
			if !slices.Contains(g.Keys, key) {
				g.Keys = append(g.Keys, key)
			}
			return
		}
		byID[id] = len(plan.Programs)
		plan.Programs = append(plan.Programs, Program{Keys: []string{key}, Dev: f.st.Dev, Ino: f.st.Ino, Size: f.st.Size, file: f.file})
	}
	hosts := map[int]string{} // program index -> canonical host path
	for _, e := range entries {
		if err := CheckEntry(e); err != nil {
			return nil, fmt.Errorf("%w: exec.gate: %v", sandbox.ErrInvalidSpec, err)
		}
		key := Key(e)
		var cands []string
		if strings.Contains(e, "/") {
			cands = []string{e}
		} else {
			for _, d := range dirs {
				cands = append(cands, path.Join(d, e))
			}
		}
		for _, c := range cands {
			f, err := w.walk(c, true)
			if v.HostView && errors.Is(err, unix.ENOENT) {
				// A host-view name that dangles inside. Debian's
				// /usr/bin/awk -> /etc/alternatives/awk -> /usr/bin/mawk
				// resolves through the view's own /etc/alternatives; this
				// is for one the view leaves out (its target lies outside
				// the view) or the host changed since the plan: what the
				// host's own /etc points to may still be reachable by its
				// own name.
				var st unix.Stat_t
				if unix.Lstat(c, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
					if h, herr := filepath.EvalSymlinks(c); herr == nil && h != c {
						f, err = w.walk(h, true)
					}
				}
			}
			switch {
			case err == nil:
			case strings.Contains(e, "/") && errors.Is(err, errIsDir):
				return nil, fmt.Errorf("%w: exec.gate: %s is a directory in this root, not a program", sandbox.ErrUnsupported, e)
			default:
				continue // not a program of this root: nothing to gate there
			}
			if base := path.Base(f.path); slices.Contains(multiCall, base) && !slices.Contains(multiCall, key) {
				f.file.Close()
				return nil, fmt.Errorf("%w: exec.gate: %s in this root is the multi-call program %s: gating it would gate every program it stands for "+
					"(list %s itself to mean that, or use a root with a separate %s)", sandbox.ErrUnsupported, e, f.path, f.path, key)
			}
			add(key, f)
			hosts[byID[[2]uint64{f.st.Dev, f.st.Ino}]] = f.host
		}
	}
	total := 0
	for i := range plan.Programs {
		g := &plan.Programs[i]
		names := []string{hosts[i]}
		var st unix.Stat_t
		if err := unix.Fstat(int(g.file.Fd()), &st); err != nil {
			return nil, err
		}
		if st.Nlink > 1 {
			links, err := hardLinks(w.bindRoots(), fileID{dev: st.Dev, ino: st.Ino, nlink: uint64(st.Nlink), ctime: st.Ctim})
			if err != nil {
				return nil, fmt.Errorf("%w: exec.gate: %v", sandbox.ErrUnsupported, err)
			}
			names = append(names, links...)
		}
		seen := map[string]bool{}
		for _, h := range names {
			ps := w.aliases(h, g.Dev, g.Ino)
			if len(ps) == 0 {
				// Every name searched lies under a bind of the view, so one
				// that shows nowhere is one this walk cannot vouch for.
				return nil, fmt.Errorf("%w: exec.gate: %s: the gated file's name %s cannot be resolved in the sandbox's root", sandbox.ErrUnsupported, g.Keys[0], h)
			}
			for _, p := range ps {
				if !seen[p] {
					seen[p] = true
					g.Paths = append(g.Paths, p)
				}
			}
		}
		if len(g.Paths) == 0 {
			return nil, fmt.Errorf("gate: %s: no path of the root reaches the file it resolved to", g.Keys[0])
		}
		sort.Strings(g.Paths)
		if total += len(g.Paths); total > MaxPaths {
			return nil, fmt.Errorf("%w: exec.gate: the gated programs have %d paths in this root, more than %d", sandbox.ErrUnsupported, total, MaxPaths)
		}
	}
	return plan, nil
}

// pathDirs is seal.DefaultPATH's directories and then extra's, each once,
// absolute and clean, outside the writable areas.
func pathDirs(extra []string) []string {
	var out []string
	for _, d := range append(strings.Split(seal.DefaultPATH, ":"), extra...) {
		if !path.IsAbs(d) {
			continue // relative PATH entries name the working directory: the agent's
		}
		d = path.Clean(d)
		writable := false
		for _, a := range writableAreas {
			if d == a || strings.HasPrefix(d, a+"/") {
				writable = true
			}
		}
		if !writable && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}
