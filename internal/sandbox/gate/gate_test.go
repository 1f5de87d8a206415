package gate

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/ironclaw/ironclaw/internal/rootfs"
	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// The stub, run by any name, says what it stands for and exits 126; the
// ELF loader run as a program on it does not run anything else.
func TestStubRuns(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "curl")
	if err := os.WriteFile(p, Stub("curl"), 0o555); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(p, "--version")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != StubExit || len(out) != 0 || stderr.String() != Message("curl") {
		t.Fatalf("stub: %v, stdout %q, stderr %q", err, out, stderr.String())
	}
	if runtime.GOARCH == "amd64" && len(Stub("curl")) > 512 {
		t.Errorf("the stub is %d bytes", len(Stub("curl")))
	}
	for _, ld := range []string{"/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1"} {
		if _, err := os.Stat(ld); err != nil {
			continue
		}
		out, err := exec.Command(ld, p, "--version").CombinedOutput()
		if err == nil || bytes.Contains(out, []byte("curl 7")) {
			t.Errorf("%s %s: %v %q", ld, p, err, out)
		}
	}
}

// image builds a directory root:
//
//	usr/bin/prog          the gated program ("REAL")
//	usr/bin/prog-hl       a hard link of it
//	usr/bin/alias         -> /usr/bin/prog (absolute, within the root)
//	usr/bin/evil          -> <host dir>/secret (absolute: the host's path)
//	usr/bin/evil2         -> ../../../../../../<host dir>/secret
//	usr/bin/busybox, usr/bin/wget -> busybox
//	bin                   -> usr/bin
//	opt                   -> <host dir> (a top-level symlink to the host)
func image(t *testing.T) (root, outside string) {
	t.Helper()
	base := t.TempDir()
	root, outside = filepath.Join(base, "img"), filepath.Join(base, "outside")
	for _, d := range []string{filepath.Join(root, "usr/bin"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, p string) {
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(root, "usr/bin")
	write(filepath.Join(bin, "prog"), "REAL")
	if err := os.Link(filepath.Join(bin, "prog"), filepath.Join(bin, "prog-hl")); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(outside, "secret"), "HOST")
	write(filepath.Join(outside, "prog"), "HOST")
	link("/usr/bin/prog", filepath.Join(bin, "alias"))
	link(filepath.Join(outside, "secret"), filepath.Join(bin, "evil"))
	link("../../../../../../../../.."+filepath.Join(outside, "secret"), filepath.Join(bin, "evil2"))
	write(filepath.Join(bin, "busybox"), "BUSYBOX")
	link("busybox", filepath.Join(bin, "wget"))
	link("usr/bin", filepath.Join(root, "bin"))
	link(outside, filepath.Join(root, "opt"))
	return root, outside
}

func dirView(t *testing.T, root string) View {
	t.Helper()
	entries, err := rootfs.Directory(root)
	if err != nil {
		t.Fatal(err)
	}
	return View{Root: entries}
}

// Every path of the root that reaches the gated file is found (PATH, a
// symlink, a hard link, another bind of the same directory); nothing
// outside the root is ever resolved, however an image's symlinks point.
func TestHostileExecGateImageSymlinks(t *testing.T) {
	root, outside := image(t)
	v := dirView(t, root)
	v.Binds = []Bind{{Inside: "/tools", Host: filepath.Join(root, "usr/bin")}}
	v.PATH = []string{"/opt", "/workspace/bin"}
	plan, err := Resolve(v, []string{"prog", "/usr/bin/alias", "evil", "evil2", "/opt/secret", "nothere"})
	if err != nil {
		t.Fatal(err)
	}
	defer plan.Close()
	if len(plan.Programs) != 1 {
		t.Fatalf("programs %+v", plan.Programs)
	}
	g := plan.Programs[0]
	want := []string{"/tools/prog", "/tools/prog-hl", "/usr/bin/prog", "/usr/bin/prog-hl"}
	if !slices.Equal(g.Paths, want) || !slices.Equal(g.Keys, []string{"prog", "alias"}) {
		t.Fatalf("paths %v keys %v, want %v [prog alias]", g.Paths, g.Keys, want)
	}
	b := make([]byte, 8)
	n, _ := g.File().ReadAt(b, 0)
	if string(b[:n]) != "REAL" {
		t.Fatalf("the real file reads %q", b[:n])
	}
	var hst syscall.Stat_t
	if err := syscall.Stat(filepath.Join(outside, "secret"), &hst); err != nil {
		t.Fatal(err)
	}
	for _, p := range plan.Programs {
		if p.Ino == hst.Ino {
			t.Fatalf("a host file outside the root was resolved: %+v", p)
		}
	}
}

// A name that is a multi-call program under another name is refused, not
// silently gated (which would gate every applet) or left open.
func TestHostileExecGateMultiCall(t *testing.T) {
	root, _ := image(t)
	_, err := Resolve(dirView(t, root), []string{"wget"})
	if !errors.Is(err, sandbox.ErrUnsupported) || !strings.Contains(err.Error(), "busybox") {
		t.Fatalf("wget -> busybox: %v", err)
	}
	plan, err := Resolve(dirView(t, root), []string{"busybox"})
	if err != nil || len(plan.Programs) != 1 {
		t.Fatalf("busybox itself: %v", err)
	}
	plan.Close()
}

// On the host-toolchain view, every path found is the host's own (the view
// binds /usr as it is) and the same file.
func TestResolveHostView(t *testing.T) {
	entries, err := rootfs.HostView("/", "sandbox")
	if err != nil {
		t.Skip(err)
	}
	plan, err := Resolve(View{Root: entries, HostView: true}, []string{"sh", "perl", "/usr/bin/env", "/etc/passwd", "awk"})
	if err != nil {
		t.Fatal(err)
	}
	defer plan.Close()
	if len(plan.Programs) < 2 {
		t.Fatalf("programs %+v", plan.Programs)
	}
	for _, g := range plan.Programs {
		for _, p := range g.Paths {
			var st syscall.Stat_t
			if err := syscall.Lstat(p, &st); err != nil || st.Ino != g.Ino || uint64(st.Dev) != g.Dev {
				t.Errorf("%v: %s is not the file (%v)", g.Keys, p, err)
			}
		}
		if slices.Contains(g.Keys, "passwd") {
			t.Errorf("the synthetic /etc/passwd was gated")
		}
	}
	// Debian's awk is /usr/bin/awk -> /etc/alternatives/awk -> mawk: it
	// resolves through the view's /etc/alternatives, to mawk.
	if target, err := os.Readlink("/usr/bin/awk"); err == nil && strings.HasPrefix(target, "/etc/alternatives/") {
		real, err := filepath.EvalSymlinks("/usr/bin/awk")
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(plan.Programs, func(g Program) bool { return slices.Contains(g.Keys, "awk") })
		if i < 0 || !slices.Contains(plan.Programs[i].Paths, real) {
			t.Errorf("awk (%s on the host) was not gated: %+v", real, plan.Programs)
		}
	}
}

func TestCheckEntry(t *testing.T) {
	for _, e := range []string{"curl", "/usr/bin/ssh", "python3.11"} {
		if err := CheckEntry(e); err != nil {
			t.Errorf("CheckEntry(%q) = %v", e, err)
		}
	}
	for _, e := range []string{"", "..", "bin/curl", "/usr/../bin/curl", "/workspace/x", "/tmp/curl", "/proc/self/exe", "/", "a\x00b"} {
		if err := CheckEntry(e); err == nil {
			t.Errorf("CheckEntry(%q) = nil", e)
		}
	}
}

// A host view's alternatives resolve through its own /etc/alternatives:
// /usr/bin/awk -> /etc/alternatives/awk -> /usr/bin/mawk gates mawk, with
// no help from the host's /etc. A plan with anything else below the top
// level is refused.
func TestResolveAlternatives(t *testing.T) {
	host := t.TempDir()
	for _, d := range []string{"usr/bin", "etc/alternatives"} {
		if err := os.MkdirAll(filepath.Join(host, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(host, "usr/bin/mawk"), []byte("MAWK"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, l := range [][2]string{
		{"/etc/alternatives/awk", "usr/bin/awk"}, {"/usr/bin/mawk", "etc/alternatives/awk"},
		{"/etc/alternatives/nc", "usr/bin/nc"}, {"/opt/nc", "etc/alternatives/nc"}, // left out
	} {
		if err := os.Symlink(l[0], filepath.Join(host, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := rootfs.HostView(host, "sandbox")
	if err != nil {
		t.Fatal(err)
	}
	plan, err := Resolve(View{Root: entries}, []string{"awk", "nc"})
	if err != nil {
		t.Fatal(err)
	}
	defer plan.Close()
	if len(plan.Programs) != 1 || !slices.Equal(plan.Programs[0].Keys, []string{"awk"}) || !slices.Equal(plan.Programs[0].Paths, []string{"/usr/bin/mawk"}) {
		t.Fatalf("programs %+v, want awk at /usr/bin/mawk", plan.Programs)
	}
	for _, bad := range []rootfs.Entry{
		{Path: "/usr/bin/awk", Kind: rootfs.KindSymlink, Target: "/usr/bin/mawk"},
		{Path: "/etc/alternatives/awk", Kind: rootfs.KindSymlink, Target: "/etc/passwd"},
		{Path: "/etc/alternatives/x/y", Kind: rootfs.KindSymlink, Target: "/usr/bin/mawk"},
	} {
		if _, err := Resolve(View{Root: append(slices.Clone(entries), bad)}, []string{"awk"}); err == nil {
			t.Errorf("a plan with %+v was accepted", bad)
		}
	}
}
