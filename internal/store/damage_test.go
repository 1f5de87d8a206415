package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// A damaged, truncated or emptied database is refused, never taken for a
// new one (which would start the daemon with no audit trail).
func TestHostileDamagedDatabaseRefused(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.db")
	s, err := Open(ctx, good)
	if err != nil {
		t.Fatal(err)
	}
	// Enough rows for the file to span many pages.
	for i := range 400 {
		if _, err := s.DB().ExecContext(ctx, `INSERT INTO tools (name, definition, approval, registered_at) VALUES (?, ?, '', '')`,
			fmt.Sprint("t", i), fmt.Sprintf("%0500d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.DB().ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) < 64<<10 {
		t.Fatalf("database only %d bytes", len(raw))
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	corrupt := append([]byte(nil), raw...)
	for i := 8192; i < 16384; i++ { // pages 3 and 4 of a 4 KiB-page file
		corrupt[i] ^= 0x5a
	}
	for _, c := range []struct {
		name string
		path string
		opts Options
	}{
		{"empty file of a used data dir", write("empty.db", nil), Options{MustExist: true}},
		{"missing file of a used data dir", filepath.Join(dir, "missing.db"), Options{MustExist: true}},
		{"not SQLite", write("junk.db", []byte("this is not a database, just text that is long enough")), Options{}},
		{"truncated", write("cut.db", raw[:len(raw)/2]), Options{}},
		{"pages overwritten", write("corrupt.db", corrupt), Options{}},
	} {
		st, err := OpenWith(ctx, c.path, c.opts)
		if err == nil {
			st.Close()
			t.Errorf("%s: opened", c.name)
			continue
		}
		if !errors.Is(err, ErrDamaged) {
			t.Errorf("%s: %v, want ErrDamaged", c.name, err)
		}
	}
	// A new data dir may start on an empty file, and the good one opens.
	for _, p := range []string{write("new.db", nil), good} {
		st, err := OpenWith(ctx, p, Options{})
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		st.Close()
	}
}
