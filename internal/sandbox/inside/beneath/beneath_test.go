package beneath

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestSplit(t *testing.T) {
	for p, want := range map[string][2]string{
		"/workspace": {"/workspace", "."}, "/tmp/a/b": {"/tmp", "a/b"}, "/workspace/x": {"/workspace", "x"},
	} {
		b, r, err := Split(p)
		if err != nil || b != want[0] || r != want[1] {
			t.Errorf("Split(%q) = %q %q %v", p, b, r, err)
		}
	}
	for _, p := range []string{"/etc/passwd", "/workspace/../etc", "relative", "/workspacex/a", "/tmp/", ""} {
		if _, _, err := Split(p); err == nil {
			t.Errorf("Split(%q) accepted", p)
		}
	}
}

// Both resolvers (openat2, and the user-space walk used where openat2 is
// missing) refuse to leave the base, whatever the symlinks inside say.
func TestNeverLeavesBase(t *testing.T) {
	base := t.TempDir()
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("host"), 0o644)
	os.Symlink(outside, filepath.Join(base, "out"))
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(base, "link"))
	os.Mkdir(filepath.Join(base, "d"), 0o755)
	os.WriteFile(filepath.Join(base, "d", "ok"), []byte("inside"), 0o644)
	dfd, err := unix.Open(base, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dfd)
	open := map[string]func(string) (int, error){
		"openat2": func(p string) (int, error) { return Openat2(dfd, p, unix.O_RDONLY, 0) },
		"walk":    func(p string) (int, error) { return walkBeneath(dfd, p, unix.O_RDONLY, 0) },
	}
	for name, fn := range open {
		for _, p := range []string{"out/secret", "link", "../" + filepath.Base(outside) + "/secret"} {
			if fd, err := fn(p); err == nil {
				unix.Close(fd)
				t.Errorf("%s: %s opened a file outside the base", name, p)
			}
		}
		fd, err := fn("d/ok")
		if err != nil {
			t.Errorf("%s: d/ok: %v", name, err)
			continue
		}
		unix.Close(fd)
	}
	// A symlink on the way is named an escape (ELOOP), which the file
	// operations report as permission denied, not as a missing directory.
	for _, p := range []string{"out/secret", "link"} {
		if _, err := walkBeneath(dfd, p, unix.O_RDONLY, 0); !errors.Is(err, unix.ELOOP) {
			t.Errorf("walk: %s: %v, want ELOOP", p, err)
		}
	}
	if _, err := Open(base, "out/new/file", unix.O_WRONLY|unix.O_CREAT, 0o644, true); err == nil {
		t.Fatal("Open created a file through a symlink out of the base")
	}
	if _, err := os.Stat(filepath.Join(outside, "new")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a directory was made outside the base: %v", err)
	}
	f, err := Open(base, "a/b/c", unix.O_WRONLY|unix.O_CREAT, 0o600, true)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
}
