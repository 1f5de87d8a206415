package cgroups

// Simulated cgroup trees for the code paths the development machine (cgroup
// v1 hybrid) cannot exercise: everything cgroup v2, plus v1 layouts other
// than the local one. The simulation lives in a temporary directory and
// mimics the kernel rules this package relies on (control files appearing
// on mkdir, cgroup.controllers following the parent's subtree_control, the
// no-internal-processes rule returning EBUSY, rmdir of populated cgroups
// returning EBUSY, cgroup.kill emptying a subtree). It checks path
// computation and the files written; real v2 ENFORCEMENT by the kernel is
// NOT tested on that machine.

import (
	"context"
	"errors"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Fake pids lie above the largest possible pid_max (2^22), so no real
// process can ever be signalled by mistake.
const (
	fakePid      = 5000001
	otherFakePid = 5000002
)

type write struct{ path, data string }

// simV2 is a simulated cgroup2 file system mounted at dir.
type simV2 struct {
	t          *testing.T
	dir        string // the mount point, inside a temp dir
	exemptRoot bool   // whether dir is the real root (exempt from no-internal-processes)
	noKill     bool   // pretend the kernel predates cgroup.kill
	noSwap     bool   // pretend swap is not accounted (no memory.swap.max)
	// wedged is how many freezes (cgroup.freeze 1) stay unfrozen, as one
	// with a vfork parent waiting on a frozen child does; -1: every one.
	wedged int
	mu     sync.Mutex
	writes []write
}

func (s *simV2) ops() fsOps {
	return fsOps{mkdir: s.mkdir, rmdir: s.rmdir, write: s.write}
}

func (s *simV2) put(p, data string) {
	s.t.Helper()
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		s.t.Fatal(err)
	}
}

func (s *simV2) get(p string) string {
	s.t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		s.t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// populate creates the control files of dir for the controllers in ctls,
// keeping any that exist.
func (s *simV2) populate(dir string, ctls map[string]bool) {
	files := map[string]string{
		"cgroup.procs": "", "cgroup.subtree_control": "", "cgroup.freeze": "0",
		"cgroup.events": "populated 0\nfrozen 0\n", "cpu.stat": "usage_usec 0\nuser_usec 0\nsystem_usec 0\n",
	}
	if !s.noKill {
		files["cgroup.kill"] = ""
	}
	if ctls["memory"] {
		files["memory.current"], files["memory.peak"], files["memory.max"] = "0", "0", "max"
		files["memory.events"] = "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n"
		files["memory.oom.group"] = "0"
		if !s.noSwap {
			files["memory.swap.max"] = "max"
		}
	}
	if ctls["pids"] {
		files["pids.max"], files["pids.current"] = "max", "0"
	}
	if ctls["cpu"] {
		files["cpu.max"] = "max 100000"
	}
	for f, v := range files {
		if p := filepath.Join(dir, f); !exists(p) {
			s.put(p, v)
		}
	}
}

func (s *simV2) mkdir(p string) error {
	if err := os.Mkdir(p, 0o755); err != nil {
		return err
	}
	on, _ := readSet(filepath.Join(filepath.Dir(p), "cgroup.subtree_control"))
	s.put(filepath.Join(p, "cgroup.controllers"), strings.Join(sortedKeys(on), " "))
	s.populate(p, on)
	return nil
}

func (s *simV2) rmdir(p string) error {
	if _, err := os.Stat(p); err != nil {
		return &fs.PathError{Op: "rmdir", Path: p, Err: unix.ENOENT}
	}
	entries, _ := os.ReadDir(p)
	for _, e := range entries {
		if e.IsDir() {
			return &fs.PathError{Op: "rmdir", Path: p, Err: unix.EBUSY}
		}
	}
	if s.get(filepath.Join(p, "cgroup.procs")) != "" {
		return &fs.PathError{Op: "rmdir", Path: p, Err: unix.EBUSY}
	}
	return os.RemoveAll(p)
}

func (s *simV2) isRoot(dir string) bool { return s.exemptRoot && dir == s.dir }

func (s *simV2) write(p, data string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := os.Stat(p); err != nil {
		return err // control files are never created by writing
	}
	s.writes = append(s.writes, write{p, data})
	dir := filepath.Dir(p)
	busy := &fs.PathError{Op: "write", Path: p, Err: unix.EBUSY}
	switch filepath.Base(p) {
	case "cgroup.subtree_control":
		if !s.isRoot(dir) && s.get(filepath.Join(dir, "cgroup.procs")) != "" {
			return busy // no internal processes
		}
		avail, _ := readSet(filepath.Join(dir, "cgroup.controllers"))
		on, _ := readSet(p)
		for _, tok := range strings.Fields(data) {
			c := tok[1:]
			if !avail[c] {
				return &fs.PathError{Op: "write", Path: p, Err: unix.ENOENT}
			}
			on[c] = tok[0] == '+'
			if !on[c] {
				delete(on, c)
			}
		}
		s.put(p, strings.Join(sortedKeys(on), " "))
		// Children see the new set in cgroup.controllers and get the files.
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if e.IsDir() {
				s.put(filepath.Join(dir, e.Name(), "cgroup.controllers"), strings.Join(sortedKeys(on), " "))
				s.populate(filepath.Join(dir, e.Name()), on)
			}
		}
	case "cgroup.procs":
		if !s.isRoot(dir) && s.get(filepath.Join(dir, "cgroup.subtree_control")) != "" {
			return busy // no internal processes
		}
		pid := strings.TrimSpace(data)
		s.removePidLocked(pid)
		s.put(p, strings.TrimSpace(s.get(p)+"\n"+pid))
	case "cgroup.kill":
		_ = filepath.WalkDir(dir, func(q string, d fs.DirEntry, err error) error {
			if err == nil && d.Name() == "cgroup.procs" {
				s.put(q, "")
			}
			return nil
		})
	case "cgroup.freeze":
		s.put(p, data)
		frozen := data
		if data == "1" && s.wedged != 0 {
			frozen = "0"
			if s.wedged > 0 {
				s.wedged--
			}
		}
		s.put(filepath.Join(dir, "cgroup.events"), "populated 1\nfrozen "+frozen+"\n")
	default:
		s.put(p, data)
	}
	return nil
}

// removePid takes pid out of every cgroup.procs, as the kernel does when a
// process exits.
func (s *simV2) removePid(pid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removePidLocked(pid)
}

func (s *simV2) removePidLocked(pid string) {
	_ = filepath.WalkDir(s.dir, func(q string, d fs.DirEntry, err error) error {
		if err != nil || d.Name() != "cgroup.procs" {
			return nil
		}
		var keep []string
		for _, f := range strings.Fields(s.get(q)) {
			if f != pid {
				keep = append(keep, f)
			}
		}
		s.put(q, strings.Join(keep, "\n"))
		return nil
	})
}

func (s *simV2) wrote(p string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, w := range s.writes {
		if w.path == p {
			out = append(out, w.data)
		}
	}
	return out
}

func sortedKeys(m map[string]bool) []string {
	var k []string
	for c, on := range m {
		if on {
			k = append(k, c)
		}
	}
	sort.Strings(k)
	return k
}

// newSimV2 builds a cgroup2 tree at <tmp>/sys/fs/cgroup offering
// rootCtls, with every ancestor of own delegating all of them, and puts
// procs (one fake pid per string) into own.
func newSimV2(t *testing.T, own, rootCtls string, exemptRoot bool, procs ...string) *simV2 {
	t.Helper()
	s := &simV2{t: t, dir: filepath.Join(t.TempDir(), "sys/fs/cgroup"), exemptRoot: exemptRoot}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s.put(filepath.Join(s.dir, "cgroup.controllers"), rootCtls)
	s.populate(s.dir, map[string]bool{})
	cur := s.dir
	for _, part := range strings.Split(strings.Trim(own, "/"), "/") {
		if part == "" {
			continue
		}
		if err := s.write(filepath.Join(cur, "cgroup.subtree_control"), "+"+strings.Join(strings.Fields(rootCtls), " +")); err != nil && rootCtls != "" {
			t.Fatal(err)
		}
		cur = filepath.Join(cur, part)
		if err := s.mkdir(cur); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range procs {
		if err := s.write(filepath.Join(cur, "cgroup.procs"), p); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

const v2Mountinfo = `22 27 0:21 / /proc rw,relatime - proc proc rw
31 23 0:28 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
`

func envFor(s *simV2, mountinfo, cgroup string) sysEnv {
	return sysEnv{mountinfo: []byte(mountinfo), cgroup: []byte(cgroup), root: filepath.Dir(filepath.Dir(filepath.Dir(s.dir))), pid: fakePid, ops: s.ops()}
}

func TestDetectV2Simulated(t *testing.T) {
	const all = "cpuset cpu io memory hugetlb pids rdma misc"
	tests := []struct {
		name       string
		own        string // where the fake process sits
		procs      []string
		ctls       string
		exemptRoot bool
		mountinfo  string
		cgroup     string
		// expectations
		wantErr     error
		wantErrText string
		wantRel     string // relative ironclaw folder
		wantDir     string // its path under the mount point
		wantCtls    []string
		wantMovedTo string // leaf holding the fake pid afterwards, "" = unmoved
	}{
		{
			name: "systemd delegated service", own: "/system.slice/ironclaw.service", procs: []string{strconv.Itoa(fakePid)}, ctls: all,
			mountinfo: v2Mountinfo, cgroup: "0::/system.slice/ironclaw.service\n",
			wantRel: "/system.slice/ironclaw.service/ironclaw", wantDir: "system.slice/ironclaw.service/ironclaw",
			wantCtls: []string{"memory", "pids", "cpu"}, wantMovedTo: "system.slice/ironclaw.service/ironclaw-daemon",
		},
		{
			name: "user session delegate", own: "/user.slice/user-1000.slice/user@1000.service/app.slice/run-u7.scope", procs: []string{strconv.Itoa(fakePid)}, ctls: "cpu memory pids",
			mountinfo: v2Mountinfo, cgroup: "0::/user.slice/user-1000.slice/user@1000.service/app.slice/run-u7.scope\n",
			wantRel:  "/user.slice/user-1000.slice/user@1000.service/app.slice/run-u7.scope/ironclaw",
			wantDir:  "user.slice/user-1000.slice/user@1000.service/app.slice/run-u7.scope/ironclaw",
			wantCtls: []string{"memory", "pids", "cpu"}, wantMovedTo: "user.slice/user-1000.slice/user@1000.service/app.slice/run-u7.scope/ironclaw-daemon",
		},
		{
			name: "true root needs no move", own: "/", procs: []string{strconv.Itoa(fakePid)}, ctls: all, exemptRoot: true,
			mountinfo: v2Mountinfo, cgroup: "0::/\n",
			wantRel: "/ironclaw", wantDir: "ironclaw", wantCtls: []string{"memory", "pids", "cpu"}, wantMovedTo: "",
		},
		{
			name: "restarted inside ironclaw-daemon does not nest", own: "/system.slice/x.service/ironclaw-daemon", procs: []string{strconv.Itoa(fakePid)}, ctls: all,
			mountinfo: v2Mountinfo, cgroup: "0::/system.slice/x.service/ironclaw-daemon\n",
			wantRel: "/system.slice/x.service/ironclaw", wantDir: "system.slice/x.service/ironclaw",
			wantCtls: []string{"memory", "pids", "cpu"}, wantMovedTo: "system.slice/x.service/ironclaw-daemon",
		},
		{
			// Container without a cgroup namespace: the mount shows only
			// its own subtree, which is not the real root.
			name: "mount root is a subtree", own: "/", procs: []string{strconv.Itoa(fakePid)}, ctls: "cpu memory pids",
			mountinfo: "31 23 0:28 /docker/abc /sys/fs/cgroup ro,nosuid - cgroup2 cgroup rw\n", cgroup: "0::/docker/abc\n",
			wantRel: "/docker/abc/ironclaw", wantDir: "ironclaw", wantCtls: []string{"memory", "pids", "cpu"}, wantMovedTo: "ironclaw-daemon",
		},
		{
			name: "no cpu controller", own: "/a.service", procs: []string{strconv.Itoa(fakePid)}, ctls: "memory pids",
			mountinfo: v2Mountinfo, cgroup: "0::/a.service\n",
			wantRel: "/a.service/ironclaw", wantDir: "a.service/ironclaw", wantCtls: []string{"memory", "pids"}, wantMovedTo: "a.service/ironclaw-daemon",
		},
		{
			name: "another process blocks enabling", own: "/a.service", procs: []string{strconv.Itoa(fakePid), strconv.Itoa(otherFakePid)}, ctls: all,
			mountinfo: v2Mountinfo, cgroup: "0::/a.service\n",
			wantErr: unix.EBUSY, wantErrText: "other processes",
		},
		{
			name: "hybrid unified without controllers and no v1", own: "/", ctls: "hugetlb", exemptRoot: true,
			mountinfo: "41 31 0:38 / /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw\n", cgroup: "0::/\n",
			wantErr: ErrUnavailable, wantErrText: "lacks the memory, pids controller",
		},
		{
			name: "cgroup2 not mounted", own: "/", ctls: all, exemptRoot: true,
			mountinfo: "22 27 0:21 / /proc rw,relatime - proc proc rw\n", cgroup: "0::/\n",
			wantErr: ErrUnavailable, wantErrText: "no cgroup2 mount",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSimV2(t, tc.own, tc.ctls, tc.exemptRoot, tc.procs...)
			h, err := detect(envFor(s, tc.mountinfo, tc.cgroup))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), tc.wantErrText) {
					t.Fatalf("detect err = %v, want %v mentioning %q", err, tc.wantErr, tc.wantErrText)
				}
				return
			}
			if err != nil {
				t.Fatalf("detect: %v", err)
			}
			if h.Version() != 2 || len(h.dirs) != 1 {
				t.Fatalf("got v%d with %d dirs, want v2 with one", h.Version(), len(h.dirs))
			}
			d := h.dirs[0]
			if d.rel != tc.wantRel || d.base != filepath.Join(s.dir, tc.wantDir) || !slices.Equal(d.controllers, tc.wantCtls) {
				t.Fatalf("dir = %+v, want rel %s base %s controllers %v", d, tc.wantRel, filepath.Join(s.dir, tc.wantDir), tc.wantCtls)
			}
			if !strings.Contains(h.Describe(), tc.wantRel) || !strings.HasPrefix(h.Describe(), "cgroup v2 (") {
				t.Errorf("Describe() = %q", h.Describe())
			}
			// The folder and its parent delegate (at least) the controllers.
			for _, p := range []string{d.base, filepath.Dir(d.base)} {
				on, err := readSet(filepath.Join(p, "cgroup.subtree_control"))
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range tc.wantCtls {
					if !on[c] {
						t.Errorf("%s/cgroup.subtree_control = %v, lacks %s", p, sortedKeys(on), c)
					}
				}
			}
			leaf := filepath.Join(filepath.Dir(d.base), daemonLeaf)
			if tc.wantMovedTo == "" {
				if exists(leaf) {
					t.Errorf("%s created although no move was needed", leaf)
				}
			} else if got := s.get(filepath.Join(s.dir, tc.wantMovedTo, "cgroup.procs")); got != strconv.Itoa(fakePid) {
				t.Errorf("%s/cgroup.procs = %q, want our pid", tc.wantMovedTo, got)
			}
			if exists(filepath.Join(leaf, daemonLeaf)) || exists(filepath.Join(d.base, folderName)) {
				t.Error("layout nested")
			}
			// Detect again (a restart of the same process) changes nothing.
			h2, err := detect(envFor(s, tc.mountinfo, tc.cgroup))
			if err != nil || h2.dirs[0].base != d.base {
				t.Errorf("second detect = %+v, %v", h2, err)
			}
		})
	}
}

func TestDetectV2PermissionHint(t *testing.T) {
	s := newSimV2(t, "/user.slice/user-1000.slice/session-2.scope", "cpu memory pids", false, strconv.Itoa(fakePid))
	e := envFor(s, v2Mountinfo, "0::/user.slice/user-1000.slice/session-2.scope\n")
	e.ops.mkdir = func(p string) error { return &fs.PathError{Op: "mkdir", Path: p, Err: unix.EACCES} }
	_, err := detect(e)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, fs.ErrPermission) ||
		!strings.Contains(err.Error(), "systemd-run --user -p Delegate=yes") || !strings.Contains(err.Error(), "session-2.scope/ironclaw") {
		t.Fatalf("err = %v, want ErrUnavailable with the delegation hint and the path", err)
	}
}

// detectSimV2 returns a hierarchy over a simulated systemd service.
func detectSimV2(t *testing.T, configure func(*simV2)) (*Hierarchy, *simV2) {
	t.Helper()
	s := newSimV2(t, "/system.slice/ironclaw.service", "cpuset cpu io memory pids", false, strconv.Itoa(fakePid))
	if configure != nil {
		configure(s)
	}
	h, err := detect(envFor(s, v2Mountinfo, "0::/system.slice/ironclaw.service\n"))
	if err != nil {
		t.Fatal(err)
	}
	return h, s
}

func TestCgroupV2Simulated(t *testing.T) {
	tests := []struct {
		name   string
		noSwap bool
		l      Limits
		want   map[string]string // file -> content afterwards
	}{
		{"all limits", false, Limits{MemoryBytes: 64 << 20, Pids: 100, CPUs: 1.5},
			map[string]string{"memory.max": "67108864", "memory.swap.max": "0", "pids.max": "100", "cpu.max": "150000 100000"}},
		{"fractional cpu", false, Limits{CPUs: 0.2},
			map[string]string{"memory.max": "max", "memory.swap.max": "max", "pids.max": "max", "cpu.max": "20000 100000"}},
		{"no swap accounting", true, Limits{MemoryBytes: 1 << 30},
			map[string]string{"memory.max": "1073741824", "pids.max": "max"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, s := detectSimV2(t, func(s *simV2) { s.noSwap = tc.noSwap })
			c, err := h.Create("sbx-1", tc.l)
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(s.dir, "system.slice/ironclaw.service/ironclaw/sbx-1")
			if c.dirs()[0] != dir {
				t.Fatalf("cgroup dir = %s, want %s", c.dirs()[0], dir)
			}
			for f, v := range tc.want {
				if got := s.get(filepath.Join(dir, f)); got != v {
					t.Errorf("%s = %q, want %q", f, got, v)
				}
			}
			if tc.noSwap && exists(filepath.Join(dir, "memory.swap.max")) {
				t.Error("memory.swap.max created")
			}
			// Deliberately never set: only the offending process is OOM-killed.
			if w := s.wrote(filepath.Join(dir, "memory.oom.group")); len(w) != 0 {
				t.Errorf("memory.oom.group written: %v", w)
			}
			if _, err := h.Create("sbx-1", tc.l); !errors.Is(err, ErrExist) {
				t.Errorf("second Create err = %v, want ErrExist", err)
			}
		})
	}

	t.Run("lifecycle", func(t *testing.T) {
		h, s := detectSimV2(t, nil)
		c, err := h.Create("sbx", Limits{Pids: 3})
		if err != nil {
			t.Fatal(err)
		}
		dir := c.dirs()[0]
		if err := c.Add(fakePid); err != nil {
			t.Fatal(err)
		}
		if got := s.get(filepath.Join(dir, "cgroup.procs")); got != strconv.Itoa(fakePid) {
			t.Errorf("cgroup.procs = %q", got)
		}
		if got, _ := c.Pids(); !slices.Equal(got, []int{fakePid}) {
			t.Errorf("Pids() = %v", got)
		}
		fd, err := c.OpenFD()
		if err != nil {
			t.Fatal(err)
		}
		var fst, dst unix.Stat_t
		if err := unix.Fstat(fd, &fst); err != nil {
			t.Fatal(err)
		}
		flags, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		unix.Close(fd)
		if err := unix.Stat(dir, &dst); err != nil {
			t.Fatal(err)
		}
		if fst.Ino != dst.Ino || fst.Mode&unix.S_IFMT != unix.S_IFDIR || flags&unix.FD_CLOEXEC == 0 {
			t.Errorf("OpenFD: ino %d vs %d, mode %o, flags %x", fst.Ino, dst.Ino, fst.Mode, flags)
		}
		s.put(filepath.Join(dir, "memory.current"), "1048576")
		s.put(filepath.Join(dir, "memory.peak"), "2097152")
		s.put(filepath.Join(dir, "memory.events"), "low 0\nhigh 0\nmax 7\noom 3\noom_kill 2\noom_group_kill 0\n")
		s.put(filepath.Join(dir, "cpu.stat"), "usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n")
		s.put(filepath.Join(dir, "pids.current"), "1")
		st, err := c.Stats()
		if err != nil {
			t.Fatal(err)
		}
		want := Stats{MemoryBytes: 1 << 20, MemoryPeakBytes: 2 << 20, OOMKills: 2, CPUUsage: 1500 * time.Millisecond, Pids: 1}
		if st != want {
			t.Errorf("Stats() = %+v, want %+v", st, want)
		}
		counter, err := c.OpenOOMCounter()
		if err != nil {
			t.Fatal(err)
		}
		if n, err := counter.Read(); err != nil || n != 2 {
			t.Errorf("OOMCounter.Read() = %d, %v; want 2", n, err)
		}
		s.put(filepath.Join(dir, "memory.events"), "low 0\nhigh 0\nmax 9\noom 5\noom_kill 4\noom_group_kill 0\n")
		if n, err := counter.Read(); err != nil || n != 4 {
			t.Errorf("OOMCounter.Read() after the file changed = %d, %v; want 4 (each read starts at offset 0)", n, err)
		}
		s.put(filepath.Join(dir, "memory.events"), "oom_kill 1"+strings.Repeat(" ", 600)+"\n")
		if _, err := counter.Read(); err == nil {
			t.Error("OOMCounter.Read() of a file longer than its buffer succeeded; want an error, not a truncated parse")
		}
		counter.Close()
		if err := os.Remove(filepath.Join(dir, "memory.peak")); err != nil { // kernel < 5.19
			t.Fatal(err)
		}
		if st, err := c.Stats(); err != nil || st.MemoryPeakBytes != 0 {
			t.Errorf("Stats() without memory.peak = %+v, %v", st, err)
		}
		if err := c.Destroy(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		if w := s.wrote(filepath.Join(dir, "cgroup.kill")); !slices.Equal(w, []string{"1"}) {
			t.Errorf("cgroup.kill writes = %v, want [1]", w)
		}
		if exists(dir) {
			t.Error("cgroup dir still exists")
		}
		if err := c.Destroy(testCtx(t)); err != nil {
			t.Errorf("second Destroy: %v", err)
		}
	})

	t.Run("folder removed after detect", func(t *testing.T) {
		h, s := detectSimV2(t, nil)
		base := h.dirs[0].base
		if err := s.rmdir(base); err != nil {
			t.Fatal(err)
		}
		c, err := h.Create("again", Limits{Pids: 7})
		if err != nil {
			t.Fatal(err)
		}
		if got := s.get(filepath.Join(base, "cgroup.subtree_control")); got != "cpu memory pids" {
			t.Errorf("recreated folder's subtree_control = %q", got)
		}
		if got := s.get(filepath.Join(c.dirs()[0], "pids.max")); got != "7" {
			t.Errorf("pids.max = %q", got)
		}
	})

	t.Run("refuses to kill the caller", func(t *testing.T) {
		h, s := detectSimV2(t, nil)
		c, err := h.Create("self", Limits{})
		if err != nil {
			t.Fatal(err)
		}
		// Only the simulation believes we are in it; nothing real moves.
		if err := c.Add(os.Getpid()); err != nil {
			t.Fatal(err)
		}
		if err := c.Kill(); err == nil || !strings.Contains(err.Error(), "refusing") {
			t.Fatalf("Kill with the caller inside: err = %v, want a refusal", err)
		}
		if w := s.wrote(filepath.Join(c.dirs()[0], "cgroup.kill")); len(w) != 0 {
			t.Fatalf("cgroup.kill written: %v", w)
		}
		s.removePid(strconv.Itoa(os.Getpid()))
		if err := c.Destroy(testCtx(t)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("cpu limit without cpu controller", func(t *testing.T) {
		s := newSimV2(t, "/a.service", "memory pids", false, strconv.Itoa(fakePid))
		h, err := detect(envFor(s, v2Mountinfo, "0::/a.service\n"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.Create("x", Limits{CPUs: 1}); !errors.Is(err, ErrNotSupported) {
			t.Errorf("err = %v, want ErrNotSupported", err)
		}
		if exists(filepath.Join(h.dirs[0].base, "x")) {
			t.Error("left behind a directory")
		}
	})

	t.Run("collect", func(t *testing.T) {
		h, s := detectSimV2(t, nil)
		for _, n := range []string{"a", "b", "c"} {
			c, err := h.Create(n, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if n == "b" {
				if err := c.Add(fakePid); err != nil {
					t.Fatal(err)
				}
			}
		}
		// A nested cgroup inside a sandbox is removed too.
		if err := s.mkdir(filepath.Join(h.dirs[0].base, "c", "inner")); err != nil {
			t.Fatal(err)
		}
		removed, err := h.Collect(func(n string) bool { return n == "a" })
		if err != nil || !slices.Equal(removed, []string{"b", "c"}) {
			t.Fatalf("Collect = %v, %v; want [b c]", removed, err)
		}
		entries, _ := os.ReadDir(h.dirs[0].base)
		var dirs []string
		for _, e := range entries {
			if e.IsDir() {
				dirs = append(dirs, e.Name())
			}
		}
		if !slices.Equal(dirs, []string{"a"}) {
			t.Errorf("left %v, want [a]", dirs)
		}
	})

	// A freeze that does not take (a vfork parent waiting on its frozen
	// child) is thawed and tried again; one that never takes fails thawed,
	// and so does one whose context ends.
	t.Run("wedged freezes", func(t *testing.T) {
		h, s := detectSimV2(t, func(s *simV2) { s.wedged = 2 })
		c, err := h.Create("wedge", Limits{})
		if err != nil {
			t.Fatal(err)
		}
		freezeFile := filepath.Join(c.dirs()[0], "cgroup.freeze")
		if err := c.Freeze(context.Background()); err != nil {
			t.Fatalf("Freeze after two wedged attempts: %v", err)
		}
		if w := s.wrote(freezeFile); !slices.Equal(w, []string{"1", "0", "1", "0", "1"}) {
			t.Errorf("cgroup.freeze writes = %v, want two thawed attempts, then the freeze", w)
		}

		s.mu.Lock()
		s.wedged, s.writes = -1, nil
		s.mu.Unlock()
		err = c.Freeze(context.Background())
		if err == nil || !strings.Contains(err.Error(), "not frozen after 5 attempts") {
			t.Fatalf("Freeze that never takes: %v", err)
		}
		if w := s.wrote(freezeFile); len(w) != 2*freezeAttempts || w[len(w)-1] != "0" {
			t.Errorf("cgroup.freeze writes = %v, want %d attempts, each thawed", w, freezeAttempts)
		}

		s.mu.Lock()
		s.writes = nil
		s.mu.Unlock()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := c.Freeze(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Freeze with an ended context: %v", err)
		}
		if w := s.wrote(freezeFile); !slices.Equal(w, []string{"1", "0"}) {
			t.Errorf("cgroup.freeze writes = %v, want one attempt, thawed", w)
		}
	})

	t.Run("kill by freezing without cgroup.kill", func(t *testing.T) {
		h, s := detectSimV2(t, func(s *simV2) { s.noKill = true })
		c, err := h.Create("frz", Limits{})
		if err != nil {
			t.Fatal(err)
		}
		// Real processes whose pids the simulation lists; when one exits
		// the simulation drops it, as the kernel would.
		var cmds []*exec.Cmd
		var wg sync.WaitGroup
		for i := 0; i < 3; i++ {
			cmd := exec.Command("sleep", "300")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			cmds = append(cmds, cmd)
			t.Cleanup(func() { _ = cmd.Process.Kill() })
			if err := c.Add(cmd.Process.Pid); err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = cmd.Wait()
				s.removePid(strconv.Itoa(cmd.Process.Pid))
			}()
		}
		if err := c.Kill(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		for _, cmd := range cmds {
			if !killedBySIGKILL(cmd.ProcessState) {
				t.Errorf("pid %d ended with %v", cmd.Process.Pid, cmd.ProcessState)
			}
		}
		if w := s.wrote(filepath.Join(c.dirs()[0], "cgroup.freeze")); !slices.Equal(w, []string{"1", "0"}) {
			t.Errorf("cgroup.freeze writes = %v, want [1 0]", w)
		}
	})
}

// simV1 builds v1 hierarchies under a temp dir. Plain directories suffice:
// mkdir creates the control files of every v1 controller.
type simV1 struct {
	root   string
	noSw   bool
	writes map[string]string
}

func (s *simV1) ops() fsOps {
	return fsOps{
		mkdir: func(p string) error {
			if err := os.Mkdir(p, 0o755); err != nil {
				return err
			}
			files := []string{"cgroup.procs", "tasks", "memory.limit_in_bytes", "memory.usage_in_bytes", "memory.max_usage_in_bytes",
				"memory.oom_control", "pids.max", "pids.current", "cpu.cfs_quota_us", "cpu.cfs_period_us", "cpuacct.usage", "freezer.state"}
			if !s.noSw {
				files = append(files, "memory.memsw.limit_in_bytes")
			}
			for _, f := range files {
				if err := os.WriteFile(filepath.Join(p, f), nil, 0o644); err != nil {
					return err
				}
			}
			return nil
		},
		rmdir: func(p string) error {
			if _, err := os.Stat(p); err != nil {
				return err
			}
			return os.RemoveAll(p)
		},
		write: func(p, data string) error {
			s.writes[p] = data
			return writeControlFile(p, data)
		},
	}
}

func TestDetectV1Simulated(t *testing.T) {
	const mountinfo = `31 23 0:28 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
32 31 0:29 / /sys/fs/cgroup/unified rw,nosuid shared:10 - cgroup2 cgroup2 rw
33 31 0:30 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:11 - cgroup cgroup rw,cpu,cpuacct
34 31 0:31 / /sys/fs/cgroup/memory rw,nosuid shared:12 - cgroup cgroup rw,memory
35 31 0:32 / /sys/fs/cgroup/pids rw,nosuid shared:13 - cgroup cgroup rw,pids
36 31 0:33 / /sys/fs/cgroup/freezer rw,nosuid shared:14 - cgroup cgroup rw,freezer
37 31 0:34 / /sys/fs/cgroup/systemd rw,nosuid shared:15 - cgroup cgroup rw,xattr,name=systemd
`
	const cgroup = `12:freezer:/
11:pids:/user.slice
10:memory:/process_api/x
4:cpu,cpuacct:/
1:name=systemd:/init.scope
0::/
`
	tests := []struct {
		name      string
		mountinfo string
		noMemsw   bool
		wantErr   string
		wantDesc  string
		wantBases map[string]string // controller -> base under root
	}{
		{
			name: "hybrid co-mounted", mountinfo: mountinfo,
			wantDesc: "cgroup v1 (memory, pids, cpu, cpuacct, freezer) under memory:/process_api/x/ironclaw pids:/user.slice/ironclaw cpu,cpuacct,freezer:/ironclaw",
			wantBases: map[string]string{
				"memory": "sys/fs/cgroup/memory/process_api/x/ironclaw", "pids": "sys/fs/cgroup/pids/user.slice/ironclaw",
				"cpu": "sys/fs/cgroup/cpu,cpuacct/ironclaw", "cpuacct": "sys/fs/cgroup/cpu,cpuacct/ironclaw", "freezer": "sys/fs/cgroup/freezer/ironclaw",
			},
		},
		{
			name: "no freezer, no memsw", noMemsw: true,
			mountinfo: strings.ReplaceAll(mountinfo, "36 31 0:33 / /sys/fs/cgroup/freezer rw,nosuid shared:14 - cgroup cgroup rw,freezer\n", ""),
			wantDesc:  "cgroup v1 (memory, pids, cpu, cpuacct) under memory:/process_api/x/ironclaw pids:/user.slice/ironclaw cpu,cpuacct:/ironclaw",
			wantBases: map[string]string{"memory": "sys/fs/cgroup/memory/process_api/x/ironclaw", "freezer": ""},
		},
		{
			name:      "pids not mounted",
			mountinfo: strings.ReplaceAll(mountinfo, "35 31 0:32 / /sys/fs/cgroup/pids rw,nosuid shared:13 - cgroup cgroup rw,pids\n", ""),
			wantErr:   "pids controller not mounted",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &simV1{root: t.TempDir(), noSw: tc.noMemsw, writes: map[string]string{}}
			for _, d := range []string{"unified", "cpu,cpuacct", "memory/process_api/x", "pids/user.slice", "freezer"} {
				if err := os.MkdirAll(filepath.Join(s.root, "sys/fs/cgroup", d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			// The unified hierarchy offers nothing useful, as in a hybrid setup.
			if err := os.WriteFile(filepath.Join(s.root, "sys/fs/cgroup/unified/cgroup.controllers"), []byte("hugetlb\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			h, err := detect(sysEnv{mountinfo: []byte(tc.mountinfo), cgroup: []byte(cgroup), root: s.root, pid: fakePid, ops: s.ops()})
			if tc.wantErr != "" {
				if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "lacks the memory") {
					t.Fatalf("err = %v, want ErrUnavailable mentioning %q and the v2 reason", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Version() != 1 || h.Describe() != tc.wantDesc {
				t.Fatalf("v%d %q, want v1 %q", h.Version(), h.Describe(), tc.wantDesc)
			}
			for ctl, b := range tc.wantBases {
				want := ""
				if b != "" {
					want = filepath.Join(s.root, b)
				}
				if got := h.baseFor(ctl); got != want {
					t.Errorf("base of %s = %q, want %q", ctl, got, want)
				}
			}
			c, err := h.Create("sbx", Limits{MemoryBytes: 32 << 20, Pids: 10, CPUs: 0.25})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{
				filepath.Join(c.dirFor("memory"), "memory.limit_in_bytes"): "33554432",
				filepath.Join(c.dirFor("pids"), "pids.max"):                "10",
				filepath.Join(c.dirFor("cpu"), "cpu.cfs_period_us"):        "100000",
				filepath.Join(c.dirFor("cpu"), "cpu.cfs_quota_us"):         "25000",
			}
			if !tc.noMemsw {
				want[filepath.Join(c.dirFor("memory"), "memory.memsw.limit_in_bytes")] = "33554432"
			}
			for p, v := range want {
				if s.writes[p] != v {
					t.Errorf("%s = %q, want %q", p, s.writes[p], v)
				}
			}
			if len(s.writes) != len(want) {
				t.Errorf("wrote %v, want exactly %v", s.writes, want)
			}
			if len(c.dirs()) != len(h.dirs) || (tc.wantBases["freezer"] != "") != (len(c.dirs()) == 4) {
				t.Errorf("cgroup dirs %v", c.dirs())
			}
		})
	}
}

func TestParseMountinfo(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []mount
		err  bool
	}{
		{
			name: "optional fields and escapes",
			in:   `40 31 0:37 /a\040b /sys/fs/cgroup/my\040mem rw,relatime shared:7 master:1 - cgroup cgroup rw,memory` + "\n",
			want: []mount{{root: "/a b", mountPoint: "/sys/fs/cgroup/my mem", fsType: "cgroup", superOpts: map[string]bool{"rw": true, "memory": true}}},
		},
		{
			name: "non-cgroup skipped, cgroup2 kept",
			in:   "27 1 254:0 / / rw - ext4 /dev/vda rw\n41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw,nsdelegate\n",
			want: []mount{{root: "/", mountPoint: "/sys/fs/cgroup/unified", fsType: "cgroup2", superOpts: map[string]bool{"rw": true, "nsdelegate": true}}},
		},
		{name: "malformed", in: "41 31 0:38 / /x rw cgroup2\n", err: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseMountinfo([]byte(tc.in))
			if (err != nil) != tc.err {
				t.Fatalf("err = %v", err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			for i := range got {
				g, w := got[i], tc.want[i]
				if g.root != w.root || g.mountPoint != w.mountPoint || g.fsType != w.fsType || len(g.superOpts) != len(w.superOpts) {
					t.Errorf("got %+v, want %+v", g, w)
				}
				for o := range w.superOpts {
					if !g.superOpts[o] {
						t.Errorf("missing super option %s", o)
					}
				}
			}
		})
	}
}

func TestParseProcCgroup(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		v1     map[string]string
		v2     string
		hasV2  bool
		errors bool
	}{
		{"pure v2", "0::/user.slice/a.scope\n", map[string]string{}, "/user.slice/a.scope", true, false},
		{"hybrid", "4:cpu,cpuacct:/x\n2:memory:/p:q\n1:name=systemd:/\n0::/\n",
			map[string]string{"cpu": "/x", "cpuacct": "/x", "memory": "/p:q", "name=systemd": "/"}, "/", true, false},
		{"v1 only", "3:pids:/\n", map[string]string{"pids": "/"}, "", false, false},
		{"malformed", "garbage\n", nil, "", false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pc, err := parseProcCgroup([]byte(tc.in))
			if (err != nil) != tc.errors {
				t.Fatalf("err = %v", err)
			}
			if tc.errors {
				return
			}
			if pc.v2 != tc.v2 || pc.hasV2 != tc.hasV2 || len(pc.v1) != len(tc.v1) {
				t.Fatalf("got %+v", pc)
			}
			for k, v := range tc.v1 {
				if pc.v1[k] != v {
					t.Errorf("v1[%s] = %q, want %q", k, pc.v1[k], v)
				}
			}
		})
	}
}

func TestValidName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"a", true}, {"sbx-1_2.3", true}, {strings.Repeat("Z", 128), true}, {"..x", true},
		{"", false}, {".", false}, {"..", false}, {strings.Repeat("a", 129), false},
		{"a/b", false}, {"a b", false}, {"a\n", false}, {"ü", false}, {"a:b", false},
	}
	for _, tc := range tests {
		if got := validName(tc.name); got != tc.ok {
			t.Errorf("validName(%q) = %v, want %v", tc.name, got, tc.ok)
		}
	}
}

func TestLimitsValidate(t *testing.T) {
	nan := 0.0
	nan = nan / nan
	tests := []struct {
		l  Limits
		ok bool
	}{
		{Limits{}, true}, {Limits{MemoryBytes: 1, Pids: 1, CPUs: 0.01}, true}, {Limits{CPUs: 64}, true},
		{Limits{MemoryBytes: -1}, false}, {Limits{Pids: -1}, false}, {Limits{CPUs: -0.5}, false},
		{Limits{CPUs: 0.009}, false}, {Limits{CPUs: nan}, false}, {Limits{CPUs: 1e300}, false},
	}
	for _, tc := range tests {
		err := tc.l.validate()
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalidLimits)) {
			t.Errorf("%+v.validate() = %v, want ok=%v", tc.l, err, tc.ok)
		}
	}
}

// Update writes only the limits that change: a take from the warm pool or
// of a spare cgroup with the default limits writes nothing, and a changed
// pids limit leaves the memory and CPU files alone.
func TestUpdateWritesOnlyChangesSimulated(t *testing.T) {
	h, s := detectSimV2(t, nil)
	c, err := h.Create("sbx-upd", Limits{MemoryBytes: 64 << 20, Pids: 100, CPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(s.dir, "system.slice/ironclaw.service/ironclaw/sbx-upd")
	count := func() map[string]int {
		n := map[string]int{}
		for _, f := range []string{"memory.max", "memory.swap.max", "pids.max", "cpu.max"} {
			n[f] = len(s.wrote(filepath.Join(dir, f)))
		}
		return n
	}
	before := count()
	if err := c.Update(Limits{MemoryBytes: 64 << 20, Pids: 100, CPUs: 1}); err != nil {
		t.Fatal(err)
	}
	if got := count(); !maps.Equal(got, before) {
		t.Fatalf("Update to the same limits wrote: before %v, after %v", before, got)
	}
	if err := c.Update(Limits{MemoryBytes: 64 << 20, Pids: 7, CPUs: 1}); err != nil {
		t.Fatal(err)
	}
	after := count()
	for f, n := range after {
		want := before[f]
		if f == "pids.max" {
			want++
		}
		if n != want {
			t.Errorf("after a pids change, %s written %d times, want %d", f, n, want)
		}
	}
	if got := s.get(filepath.Join(dir, "pids.max")); got != "7" {
		t.Errorf("pids.max = %q, want 7", got)
	}
	// Back to the first value: written again, since it changed.
	if err := c.Update(Limits{Pids: 100}); err != nil {
		t.Fatal(err)
	}
	if got := s.get(filepath.Join(dir, "pids.max")); got != "100" {
		t.Errorf("pids.max = %q, want 100", got)
	}
}
