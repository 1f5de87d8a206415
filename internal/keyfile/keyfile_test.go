package keyfile

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Ensure creates a key once, 0600 in a 0700 directory, and then loads the
// same one; a second Ensure does not replace it.
func TestEnsureCreatesOnceAndLoads(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sub", "k.key")
	a, created, err := Ensure("test key", p, 32)
	if err != nil || !created || len(a) != 32 {
		t.Fatalf("Ensure = %d bytes, %v, %v", len(a), created, err)
	}
	st, err := os.Stat(p)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, %v", st.Mode(), err)
	}
	if st, err := os.Stat(filepath.Dir(p)); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode %v, %v", st.Mode(), err)
	}
	b, created, err := Ensure("test key", p, 32)
	if err != nil || created || string(a) != string(b) {
		t.Fatalf("second Ensure: created %v, same %v, %v", created, string(a) == string(b), err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(p)); len(ents) != 1 {
		t.Fatalf("left behind: %v", ents)
	}
}

// Load refuses what is not a private regular file holding a key, as
// ErrUnsafe, and a missing one as not existing.
func TestLoadRefusesUnsafeFiles(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	if _, _, err := Ensure("k", good, 32); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(dir, "open")
	b, _ := os.ReadFile(good)
	if err := os.WriteFile(open, b, 0o640); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("abcd\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{open, short, link, fifo, dir} {
		if _, err := Load("k", p, 32); !errors.Is(err, ErrUnsafe) {
			t.Errorf("Load(%s) = %v, want ErrUnsafe", filepath.Base(p), err)
		}
	}
	if _, err := Load("k", filepath.Join(dir, "none"), 32); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
	if _, err := Load("k", good, 32); err != nil {
		t.Errorf("good: %v", err)
	}
}
