package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// mount is one cgroup or cgroup2 line of /proc/self/mountinfo.
type mount struct {
	root       string          // path of the hierarchy shown at mountPoint
	mountPoint string          // where it is mounted
	fsType     string          // "cgroup" (v1) or "cgroup2"
	superOpts  map[string]bool // v1: includes the controllers bound to it
}

// parseMountinfo returns the cgroup and cgroup2 mounts listed in data (see
// proc(5): "id parent maj:min root mountpoint opts [optional...] - fstype
// source superopts").
func parseMountinfo(data []byte) ([]mount, error) {
	var out []mount
	for n, line := range strings.Split(string(data), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Fields(line)
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if len(f) < 5 || sep < 0 || sep+1 >= len(f) {
			return nil, fmt.Errorf("mountinfo line %d: malformed: %q", n+1, line)
		}
		fsType := f[sep+1]
		if fsType != "cgroup" && fsType != "cgroup2" {
			continue
		}
		m := mount{root: unescapeOctal(f[3]), mountPoint: unescapeOctal(f[4]), fsType: fsType, superOpts: map[string]bool{}}
		if sep+3 < len(f) {
			for _, o := range strings.Split(f[sep+3], ",") {
				m.superOpts[o] = true
			}
		}
		out = append(out, m)
	}
	return out, nil
}

// unescapeOctal undoes the \NNN escaping the kernel applies to space, tab,
// newline and backslash in mountinfo paths.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// procCgroup is the parsed /proc/self/cgroup.
type procCgroup struct {
	v1    map[string]string // controller -> path in its hierarchy
	set   map[string]string // controller -> every controller of its hierarchy ("cpu,cpuacct")
	v2    string            // path in the unified hierarchy
	hasV2 bool
}

// parseProcCgroup parses "hierarchy-id:controller,list:path" lines (see
// cgroups(7)); the unified hierarchy is "0::path".
func parseProcCgroup(data []byte) (procCgroup, error) {
	pc := procCgroup{v1: map[string]string{}, set: map[string]string{}}
	for n, line := range strings.Split(string(data), "\n") {
		if line == "" {
			continue
		}
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || !strings.HasPrefix(parts[2], "/") {
			return pc, fmt.Errorf("/proc/self/cgroup line %d: malformed: %q", n+1, line)
		}
		if parts[0] == "0" && parts[1] == "" {
			pc.v2, pc.hasV2 = parts[2], true
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c != "" {
				pc.v1[c] = parts[2]
				pc.set[c] = parts[1]
			}
		}
	}
	return pc, nil
}

// isUnder reports whether cgroup path p is root or below it.
func isUnder(p, root string) bool {
	return root == "/" || p == root || strings.HasPrefix(p, root+"/")
}

// findMount returns the mount of fsType (and, for v1, carrying controller)
// whose visible part contains cgroup path p, preferring the deepest root,
// and the directory of p under it (prefixed with envRoot).
func findMount(mounts []mount, envRoot, fsType, controller, p string) (dir string, ok bool) {
	best := -1
	for i, m := range mounts {
		if m.fsType != fsType || (controller != "" && !m.superOpts[controller]) || !isUnder(p, m.root) {
			continue
		}
		if best < 0 || len(m.root) > len(mounts[best].root) {
			best = i
		}
	}
	if best < 0 {
		return "", false
	}
	m := mounts[best]
	inside := p
	if m.root != "/" {
		inside = strings.TrimPrefix(p, m.root)
	}
	return filepath.Join(envRoot, m.mountPoint, inside), true
}

// setupError wraps a failure to prepare a hierarchy, adding the delegation
// hint when the cause is missing permission.
func setupError(err error) error {
	if errors.Is(err, fs.ErrPermission) || errors.Is(err, unix.EROFS) {
		return fmt.Errorf("%w: %w; %s", ErrUnavailable, err, delegateHint)
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

func mkdirExistOK(ops fsOps, dir string) error {
	if err := ops.mkdir(dir); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

func detect(e sysEnv) (*Hierarchy, error) {
	mounts, err := parseMountinfo(e.mountinfo)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	pc, err := parseProcCgroup(e.cgroup)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	var why []string
	if pc.hasV2 {
		h, reason, err := detectV2(e, mounts, pc.v2)
		if err != nil {
			return nil, err
		}
		if h != nil {
			return h, nil
		}
		why = append(why, reason)
	}
	h, reason, err := detectV1(e, mounts, pc)
	if err != nil {
		return nil, err
	}
	if h != nil {
		return h, nil
	}
	why = append(why, reason)
	return nil, fmt.Errorf("%w: %s", ErrUnavailable, strings.Join(why, "; "))
}

// detectV2 returns a usable v2 hierarchy, or a reason v2 is not a candidate
// (h and err nil), or an error when v2 is a candidate but cannot be set up.
func detectV2(e sysEnv, mounts []mount, own string) (*Hierarchy, string, error) {
	// A process started inside the leaf an earlier instance moved itself
	// into owns the parent, so the layout does not nest further.
	if path.Base(own) == daemonLeaf {
		own = path.Dir(own)
	}
	ownDir, ok := findMount(mounts, e.root, "cgroup2", "", own)
	if !ok {
		return nil, fmt.Sprintf("cgroup v2: no cgroup2 mount shows %s", own), nil
	}
	avail, err := readSet(filepath.Join(ownDir, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Sprintf("cgroup v2: %v", err), nil
	}
	var ctls, missing []string
	// memory and pids are required; cpu is enabled when offered (without
	// it Create refuses CPU limits with ErrNotSupported).
	for _, c := range []string{"memory", "pids"} {
		if avail[c] {
			ctls = append(ctls, c)
		} else {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Sprintf("cgroup v2 at %s lacks the %s controller(s)", ownDir, strings.Join(missing, ", ")), nil
	}
	for _, c := range []string{"cpu"} {
		if avail[c] {
			ctls = append(ctls, c)
		}
	}
	base := filepath.Join(ownDir, e.folder())
	if err := mkdirExistOK(e.ops, base); err != nil {
		return nil, "", setupError(err)
	}
	if err := enableControllers(e.ops, ownDir, ctls); err != nil {
		if !errors.Is(err, unix.EBUSY) {
			return nil, "", setupError(err)
		}
		// No internal processes: our own cgroup holds us, so it cannot
		// distribute controllers to children until we move to a leaf.
		leaf := filepath.Join(ownDir, daemonLeaf)
		if err := mkdirExistOK(e.ops, leaf); err != nil {
			return nil, "", setupError(err)
		}
		if err := e.ops.write(filepath.Join(leaf, "cgroup.procs"), strconv.Itoa(e.pid)); err != nil {
			return nil, "", setupError(fmt.Errorf("moving this process to %s: %w", leaf, err))
		}
		if err := enableControllers(e.ops, ownDir, ctls); err != nil {
			return nil, "", setupError(fmt.Errorf("after moving this process to %s (other processes still in %s?): %w", leaf, ownDir, err))
		}
	}
	if err := enableControllers(e.ops, base, ctls); err != nil {
		return nil, "", setupError(err)
	}
	return &Hierarchy{
		version: 2,
		dirs:    []ctlDir{{controllers: ctls, base: base, rel: path.Join(own, e.folder())}},
		ops:     e.ops,
	}, "", nil
}

// enableControllers adds ctls to dir's cgroup.subtree_control, writing only
// those not yet enabled so that an already prepared cgroup (which may hold
// processes if it is the root) is left alone.
func enableControllers(ops fsOps, dir string, ctls []string) error {
	p := filepath.Join(dir, "cgroup.subtree_control")
	on, err := readSet(p)
	if err != nil {
		return err
	}
	var add []string
	for _, c := range ctls {
		if !on[c] {
			add = append(add, "+"+c)
		}
	}
	if len(add) == 0 {
		return nil
	}
	return ops.write(p, strings.Join(add, " "))
}

// detectV1 returns a usable v1 hierarchy, or a reason it is not (h and err
// nil), or an error when it is a candidate but cannot be set up. All mounts
// are resolved before anything is created, so an unusable v1 setup is left
// untouched.
func detectV1(e sysEnv, mounts []mount, pc procCgroup) (*Hierarchy, string, error) {
	type found struct {
		controller, own, rel string
		required             bool
	}
	var all []found
	// memory, pids, cpu and cpuacct must each be mounted; freezer is used
	// when mounted (it makes Kill race-free).
	for _, c := range []string{"memory", "pids", "cpu", "cpuacct", "freezer"} {
		required := c != "freezer"
		p, ok := pc.v1[c]
		if !ok {
			if required {
				return nil, fmt.Sprintf("cgroup v1: this process is in no %s hierarchy", c), nil
			}
			continue
		}
		own, ok := findMount(mounts, e.root, "cgroup", c, p)
		if !ok {
			if required {
				return nil, fmt.Sprintf("cgroup v1: %s controller not mounted", c), nil
			}
			continue
		}
		all = append(all, found{c, own, path.Join(p, e.folder()), required})
	}
	var dirs []ctlDir
	index := map[string]int{} // base -> index in dirs, for co-mounted controllers
	for _, f := range all {
		base := filepath.Join(f.own, e.folder())
		if i, ok := index[base]; ok {
			dirs[i].controllers = append(dirs[i].controllers, f.controller)
			continue
		}
		if err := mkdirExistOK(e.ops, base); err != nil {
			if f.required {
				return nil, "", setupError(err)
			}
			continue // no freezer then: Kill falls back to repeated sweeps
		}
		index[base] = len(dirs)
		dirs = append(dirs, ctlDir{controllers: []string{f.controller}, base: base, rel: f.rel, hierarchy: pc.set[f.controller],
			ownPath: pc.v1[f.controller], ownDir: f.own})
	}
	return &Hierarchy{version: 1, dirs: dirs, ops: e.ops}, "", nil
}
