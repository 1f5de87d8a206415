package setup

import (
	"errors"
	"strings"
	"testing"

	"github.com/ironclaw/ironclaw/internal/rootfs"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/seal"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
	"golang.org/x/sys/unix"
)

func defaultConfig(t testing.TB) *wire.Config {
	t.Helper()
	s, err := seal.New(sandbox.Spec{}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	return &wire.Config{Seal: *s, Cgroup: wire.CgroupView{Version: 2}, CPUs: []int{0, 1}, Listen: []uint16{8080}}
}

// index is the position of the first step with op (and path, if given).
func index(steps []Step, op Op, path string) int {
	for i, s := range steps {
		if s.Op == op && (path == "" || s.Path == path) {
			return i
		}
	}
	return -1
}

func TestRootOrder(t *testing.T) {
	cfg := defaultConfig(t)
	steps, err := Root(cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	private, root, pivot := index(steps, OpPrivate, ""), index(steps, OpRoot, ""), index(steps, OpPivot, "")
	if private != 0 || root < 0 || pivot < root {
		t.Fatalf("private at %d, root at %d, pivot at %d", private, root, pivot)
	}
	for i, s := range steps {
		if s.Op == OpOpen && i > root {
			t.Errorf("source %s opened at step %d, after the root tmpfs (%d) hides what it covers", s.Path, i, root)
		}
		if s.Op == OpBind && (s.Slot < 0 || int(s.Slot) >= len(steps)) {
			t.Errorf("bind %s names source %d", s.Path, s.Slot)
		}
	}
	ro := -1
	for i, s := range steps {
		if s.Op == OpMount && s.Path == "/" && s.Flags != 0 {
			ro = i
		}
	}
	if ro < 0 || ro != pivot-1 {
		t.Errorf("the read-only remount of the root is at %d, want just before the pivot (%d)", ro, pivot)
	}
	for _, q := range cfg.Seal.MaskedPaths {
		if i := index(steps, OpMask, q); i < 0 || i > pivot {
			t.Errorf("masked path %s at step %d", q, i)
		}
	}
	for _, op := range []Op{OpHostname, OpLoopback, OpCPUs, OpListen} {
		if i := index(steps, op, ""); i < pivot {
			t.Errorf("op %d at step %d, before the pivot (%d)", op, i, pivot)
		}
	}
	if i := index(steps, OpCPUs, ""); i < 0 || steps[i].Data != "0,1" {
		t.Errorf("CPUs step: %+v", steps[i])
	}
	if index(steps, OpGate, "") >= 0 || index(steps, OpUnshareCgroup, "") >= 0 {
		t.Error("a gate or a cgroup unshare nobody asked for")
	}
}

// The mount trees the daemon sends are the first slots: their sources are
// not opened again.
func TestRootUsesTrees(t *testing.T) {
	cfg := defaultConfig(t)
	all, err := Root(cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	var first string
	for _, s := range all {
		if s.Op == OpOpen {
			first = s.Path
			break
		}
	}
	if first == "" {
		t.Fatal("the default root opens no host source")
	}
	cfg.Sources = []string{first}
	steps, err := Root(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	if index(steps, OpOpen, first) >= 0 {
		t.Errorf("%s came as a tree and is opened again", first)
	}
	if got, want := len(steps), len(all)-1; got != want {
		t.Errorf("%d steps with one tree, want %d", got, want)
	}
}

func TestRootRefusesABadRoot(t *testing.T) {
	cfg := defaultConfig(t)
	cfg.Seal.Root = append(cfg.Seal.Root, cfg.Seal.Root[0])
	cfg.Seal.Root[len(cfg.Seal.Root)-1].Path = "relative"
	if _, err := Root(cfg, 0); err == nil {
		t.Fatal("a relative root path was compiled")
	}
}

func TestCompileSeal(t *testing.T) {
	c, err := NewCompiler(0)
	if err != nil {
		t.Fatal(err)
	}
	cfg := defaultConfig(t)
	p, err := c.Compile(cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	s := p.Seal
	if len(s) == 0 || s[len(s)-1].Op != OpSeccomp || len(s[len(s)-1].Data) == 0 || len(s[len(s)-1].Data)%8 != 0 {
		t.Fatalf("the seal does not end with a seccomp program: %+v", s)
	}
	id := index(s, OpIdentity, "")
	if id < 0 || s[id].Flags != uint64(cfg.Seal.UID) || s[id].Attr != uint64(cfg.Seal.GID) {
		t.Fatalf("identity step %d: %+v", id, s)
	}
	for i, st := range s[:id] {
		if st.Op != OpRlimit {
			t.Errorf("step %d (%d) before the identity: rlimits come first, while pid 1 may still raise them", i, st.Op)
		}
	}
	if n := id; n != len(cfg.Seal.Rlimits) {
		t.Errorf("%d rlimit steps for %d rlimits", n, len(cfg.Seal.Rlimits))
	}
	if index(s, OpLandlock, "") >= 0 {
		t.Error("a landlock ruleset for a kernel without landlock")
	}
	if _, err := Encode(p, FlagWorkloadTasks); err != nil {
		t.Fatal(err)
	}

	cfg.RequireLandlock = true
	if _, err := c.Compile(cfg, 0); err == nil {
		t.Error("landlock required on a kernel without it: compiled")
	}

	c4, err := NewCompiler(4)
	if err != nil {
		t.Fatal(err)
	}
	if p, err = c4.Compile(cfg, 0); err != nil {
		t.Fatal(err)
	}
	ll, exec, sc := index(p.Seal, OpLandlock, ""), index(p.Seal, OpLandlockExec, ""), index(p.Seal, OpSeccomp, "")
	if ll <= index(p.Seal, OpIdentity, "") || exec <= ll || sc != len(p.Seal)-1 {
		t.Fatalf("landlock at %d, its exec rule at %d, seccomp at %d of %d", ll, exec, sc, len(p.Seal))
	}
	if index(p.Seal, OpLandlockPath, "/workspace") < 0 {
		t.Error("no landlock rule for /workspace")
	}
}

func TestCompileRefusesWhatOnlyTheGoInitMakes(t *testing.T) {
	c, err := NewCompiler(0)
	if err != nil {
		t.Fatal(err)
	}
	cfg := defaultConfig(t)
	cfg.Gate = []wire.GateProgram{{Keys: []string{"git"}, Paths: []string{"/usr/bin/git"}}}
	if err := Supports(cfg); !errors.Is(err, ErrNeedsGoInit) {
		t.Fatalf("Supports(gated) = %v", err)
	}
	if _, err := c.Compile(cfg, 0); !errors.Is(err, ErrNeedsGoInit) {
		t.Fatalf("Compile(gated) = %v", err)
	}
	cfg = defaultConfig(t)
	cfg.Seal.Capabilities = []string{"CAP_NET_RAW"}
	if _, err := c.Compile(cfg, 0); err == nil {
		t.Fatal("a capability compiled")
	}
	cfg = defaultConfig(t)
	cfg.Seal.Rlimits = append(cfg.Seal.Rlimits, seal.Rlimit{Name: "NOSUCH", Value: 1})
	if _, err := c.Compile(cfg, 0); err == nil {
		t.Fatal("an unknown rlimit compiled")
	}
	if _, err := NewCompiler(-1); err == nil {
		t.Fatal("a compiler for an unknown landlock ABI")
	}
}

// TestRootSuperblocks: a sandbox makes a superblock only where it needs
// one (the root, proc, devpts, and a tmpfs per size-limited writable
// area), since each costs every memory cgroup on the host a slot; /dev,
// /sys and the masks live in the root's.
func TestRootSuperblocks(t *testing.T) {
	cfg := defaultConfig(t)
	cfg.Cgroup = wire.CgroupView{Version: 1, V1: []wire.CgroupMount{{Name: "memory"}, {Name: "pids"}}}
	steps, err := Root(cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	var made []string
	for _, s := range steps {
		if s.Op == OpMount && s.Flags&unix.MS_REMOUNT == 0 && s.FSType != "cgroup" && s.FSType != "cgroup2" {
			made = append(made, s.FSType+" "+s.Path)
		}
	}
	want := "devpts /dev/pts, proc /proc, tmpfs /tmp, tmpfs /workspace"
	if got := strings.Join(made, ", "); got != want {
		t.Errorf("new superblocks besides the root's: %s, want %s", got, want)
	}
	first, last, rmdir := -1, -1, index(steps, OpRmdir, maskDir)
	for i, s := range steps {
		if s.Op == OpMask {
			if s.Source != maskDir {
				t.Errorf("mask %s from %q, want the empty %s", s.Path, s.Source, maskDir)
			}
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if mk := index(steps, OpMkdir, maskDir); mk < 0 || mk > first || rmdir < last || rmdir > index(steps, OpPivot, "") {
		t.Errorf("%s made at %d, masks at %d-%d, removed at %d, pivot at %d", maskDir, mk, first, last, rmdir, index(steps, OpPivot, ""))
	}
}

// withAlternatives is cfg with a view's alternatives links (the host's
// when the default root has them, else one of its own).
func withAlternatives(t *testing.T, cfg *wire.Config) (links []string) {
	t.Helper()
	for _, e := range cfg.Seal.Root {
		if _, ok := rootfs.Alternative(e); ok {
			links = append(links, e.Path)
		}
	}
	if len(links) > 0 {
		return links
	}
	root := cfg.Seal.Root
	last := -1
	for i, e := range root {
		if strings.HasPrefix(e.Path, "/etc/") {
			last = i
		}
	}
	if last < 0 {
		t.Fatal("the default root has no synthetic /etc")
	}
	add := []rootfs.Entry{
		{Path: rootfs.AlternativesDir, Kind: rootfs.KindDir, Mode: 0o755},
		{Path: rootfs.AlternativesDir + "/awk", Kind: rootfs.KindSymlink, Target: "/usr/bin/mawk"},
	}
	cfg.Seal.Root = append(root[:last+1:last+1], append(add, root[last+1:]...)...)
	return []string{add[1].Path}
}

// The daemon's shared mount of the alternatives links, sent as a tree,
// is bound read-only where the links would be made, and none is made; a
// Config without that tree makes them, and the name is never opened as a
// host path.
func TestRootBindsSharedAlternatives(t *testing.T) {
	cfg := defaultConfig(t)
	links := withAlternatives(t, cfg)
	own, err := Root(cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	if index(own, OpMkdir, rootfs.AlternativesDir) < 0 || index(own, OpBind, rootfs.AlternativesDir) >= 0 {
		t.Fatal("without the shared tree: no directory of links made, or a bind")
	}
	for _, l := range links {
		if index(own, OpSymlink, l) < 0 {
			t.Fatalf("without the shared tree: link %s not made", l)
		}
	}

	cfg.Sources = []string{"/usr", wire.AlternativesSource}
	shared, err := Root(cfg, 2)
	if err != nil {
		t.Fatal(err)
	}
	i := index(shared, OpBind, rootfs.AlternativesDir)
	if i < 0 {
		t.Fatal("the shared tree is not bound")
	}
	const want = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOEXEC | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	if b := shared[i]; b.Slot != 1 || b.Attr&want != want {
		t.Fatalf("bind %+v: want slot 1, read-only, noexec, nosuid, nodev", b)
	}
	if index(shared, OpMkdir, rootfs.AlternativesDir) >= 0 {
		t.Error("the directory is made as well as bound")
	}
	for _, s := range shared {
		if s.Op == OpSymlink && strings.HasPrefix(s.Path, rootfs.AlternativesDir+"/") {
			t.Errorf("link %s made beside the shared mount", s.Path)
		}
		if s.Op == OpOpen && s.Path == wire.AlternativesSource {
			t.Error("the shared tree's name is opened as a host path")
		}
	}

	// Named, but not among the trees sent: the links are made.
	notSent, err := Root(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	if index(notSent, OpBind, rootfs.AlternativesDir) >= 0 || index(notSent, OpSymlink, links[0]) < 0 {
		t.Error("a shared tree that was not sent is bound, or the links are not made")
	}
	for _, s := range notSent {
		if s.Op == OpOpen && s.Path == wire.AlternativesSource {
			t.Error("the shared tree's name is opened as a host path")
		}
	}
}
