package rootfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHostView(t *testing.T) {
	host := t.TempDir()
	for _, d := range []string{"usr/bin", "usr/lib", "lib64", "etc", "home/alice", "var/run"} {
		if err := os.MkdirAll(filepath.Join(host, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("usr/bin", filepath.Join(host, "bin")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(host, "etc", "shadow"), []byte("root:secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	entries, err := HostView(host, "box")
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(entries); err != nil {
		t.Fatal(err)
	}
	got := map[string]Entry{}
	for _, e := range entries {
		got[e.Path] = e
		if strings.Contains(e.Content, "secret") || strings.HasPrefix(e.Source, filepath.Join(host, "etc")) {
			t.Fatalf("host /etc leaked into the plan: %+v", e)
		}
	}
	if e := got["/usr"]; e.Kind != KindBindDir || e.Source != filepath.Join(host, "usr") {
		t.Errorf("/usr = %+v", e)
	}
	if e := got["/bin"]; e.Kind != KindSymlink || e.Target != "usr/bin" {
		t.Errorf("/bin = %+v, want the host's symlink", e)
	}
	if _, ok := got["/lib64"]; !ok {
		t.Error("/lib64 missing")
	}
	for _, p := range []string{"/home", "/var", "/sbin", "/etc/shadow"} {
		if _, ok := got[p]; ok {
			t.Errorf("%s is in the host view", p)
		}
	}
	if e := got["/etc/passwd"]; e.Kind != KindFile || !strings.Contains(e.Content, "sandbox:x:65532:65532") {
		t.Errorf("/etc/passwd = %+v", e)
	}
	if !strings.Contains(got["/etc/hosts"].Content, "box") {
		t.Errorf("hostname not in /etc/hosts: %q", got["/etc/hosts"].Content)
	}
}

func TestHostViewNeedsUsr(t *testing.T) {
	if _, err := HostView(t.TempDir(), "box"); err == nil {
		t.Fatal("a host without /usr gave a plan")
	}
}

func TestDirectory(t *testing.T) {
	img := t.TempDir()
	for _, d := range []string{"bin", "etc", "proc", "tmp", "workspace"} {
		if err := os.Mkdir(filepath.Join(img, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(img, "marker"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/bin", filepath.Join(img, "sbin")); err != nil {
		t.Fatal(err)
	}
	entries, err := Directory(img)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, e := range entries {
		paths = append(paths, e.Path+":"+string(e.Kind))
	}
	want := "/bin:bind-dir /etc:bind-dir /marker:bind-file /sbin:symlink"
	if strings.Join(paths, " ") != want {
		t.Fatalf("Directory = %q, want %q (proc, tmp, workspace are the sandbox's own)", strings.Join(paths, " "), want)
	}
	if _, err := Directory(filepath.Join(img, "marker")); err == nil {
		t.Fatal("a file was accepted as an image directory")
	}
	if _, err := Directory(filepath.Join(img, "nope")); err == nil {
		t.Fatal("a missing directory was accepted")
	}
}

func TestCheck(t *testing.T) {
	bad := [][]Entry{
		{{Path: "relative", Kind: KindDir}},
		{{Path: "/", Kind: KindDir}},
		{{Path: "/a/../b", Kind: KindDir}},
		{{Path: "/x", Kind: KindBindDir, Source: "rel"}},
		{{Path: "/x", Kind: "weird"}},
	}
	for _, es := range bad {
		if err := Check(es); err == nil {
			t.Errorf("Check(%+v) accepted", es)
		}
	}
}
