package store

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

const presizedWAL = walFileHeader + walFrames*(4096+walFrameHeader) // SQLite's default page size

func openPresized(t *testing.T, path string) *Store {
	t.Helper()
	s, err := OpenWith(context.Background(), path, Options{PresizeWAL: true})
	if err != nil {
		t.Fatalf("OpenWith: %v", err)
	}
	return s
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func count(t *testing.T, s *Store) int {
	t.Helper()
	var n int
	if err := s.ReadDB().QueryRowContext(context.Background(), `SELECT count(*) FROM t`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A new database's WAL is presized, keeps its size through commits, and
// what was written survives a close (which
// deletes the WAL) and an open that presizes it again.
func TestPresizedWALKeepsItsSizeAndTheData(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "ironclaw.db")
	s := openPresized(t, path)
	if got := fileSize(t, path+"-wal"); got != presizedWAL {
		t.Fatalf("WAL after open: %d bytes, want %d", got, presizedWAL)
	}
	if _, err := s.DB().ExecContext(ctx, `CREATE TABLE t (x TEXT)`); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		if _, err := s.DB().ExecContext(ctx, `INSERT INTO t VALUES (?)`, strings.Repeat("x", 100+i)); err != nil {
			t.Fatal(err)
		}
	}
	if got := fileSize(t, path+"-wal"); got != presizedWAL {
		t.Errorf("WAL after 200 commits: %d bytes, want it kept at %d", got, presizedWAL)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openPresized(t, path)
	defer s.Close()
	if got := count(t, s); got != 200 {
		t.Errorf("rows after reopening: %d, want 200", got)
	}
	if got := fileSize(t, path+"-wal"); got != presizedWAL {
		t.Errorf("WAL after reopening: %d bytes, want %d", got, presizedWAL)
	}
}

// A WAL that exists may hold commits the database does not have yet (a
// crashed writer's): an open with PresizeWAL keeps every byte of it, adds
// zeros after them, and reads its commits.
func TestPresizeKeepsAnExistingWAL(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ironclaw.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, `CREATE TABLE t (x INTEGER)`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, `INSERT INTO t VALUES (1), (2), (3)`); err != nil {
		t.Fatal(err)
	}
	// A copy taken while the writer is open is what a crash leaves: the
	// commits in the WAL, not yet checkpointed into the database.
	copied := filepath.Join(t.TempDir(), "ironclaw.db")
	for _, suffix := range []string{"", "-wal"} {
		b, err := os.ReadFile(path + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(copied+suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	before, err := os.ReadFile(copied + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	c := openPresized(t, copied)
	defer c.Close()
	if got := count(t, c); got != 3 {
		t.Errorf("rows from the crashed writer's WAL: %d, want 3", got)
	}
	after, err := os.ReadFile(copied + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != presizedWAL || !bytes.Equal(after[:len(before)], before) {
		t.Fatalf("WAL of %d bytes is now %d bytes, want %d beginning with the old ones", len(before), len(after), presizedWAL)
	}
	if !bytes.Equal(after[len(before):], make([]byte, len(after)-len(before))) {
		t.Error("the bytes added to the WAL are not zeros")
	}
}

// A WAL already larger (one that grew past a checkpoint held up by a
// reader) is left as it is.
func TestPresizeLeavesALargerWAL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ironclaw.db")
	s := openPresized(t, path)
	f, err := os.OpenFile(path+"-wal", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0}, presizedWAL+4095); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := s.presizeWAL(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := fileSize(t, path+"-wal"); got != presizedWAL+4096 {
		t.Errorf("WAL of %d bytes is now %d", presizedWAL+4096, got)
	}
	s.Close()
}

// The last free space is left to the records: on a file system with less
// than presizeFreeFactor times the growth free, the WAL is not grown; with
// room, on the same kind of file system, it is.
func TestPresizeLeavesTheLastFreeSpace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	for _, c := range []struct {
		size     string
		presized bool
	}{{"24m", false}, {"128m", true}} {
		dir := filepath.Join(t.TempDir(), "data")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "size="+c.size+",mode=0700"); err != nil {
			t.Fatalf("mount a tmpfs: %v", err)
		}
		t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
		path := filepath.Join(dir, "ironclaw.db")
		s := openPresized(t, path)
		got := fileSize(t, path+"-wal")
		s.Close()
		if (got == presizedWAL) != c.presized {
			t.Errorf("a %s file system: WAL of %d bytes after open; presized (%d bytes) should be %v", c.size, got, presizedWAL, c.presized)
		}
	}
}
