package store

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func openTemp(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "ironclaw.db"))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestOpenCreatesPrivateFileAndDir(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "state", "nested")
	path := filepath.Join(dir, "ironclaw.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()

	for _, d := range []string{dir, filepath.Dir(dir)} {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != 0o700 {
			t.Errorf("dir %s mode %o, want 700", d, got)
		}
	}
	// Write something so the WAL file exists, then check every file.
	if _, err := s.DB().ExecContext(ctx, `CREATE TABLE t (x INTEGER)`); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatalf("stat %s: %v", f, err)
		}
		if got := fi.Mode().Perm(); got != 0o600 {
			t.Errorf("%s mode %o, want 600", f, got)
		}
	}
	if s.Path() != path {
		t.Errorf("Path() = %q, want %q", s.Path(), path)
	}
}

func TestPragmas(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	for _, db := range []*sql.DB{s.DB(), s.ReadDB()} {
		for pragma, want := range map[string]string{
			"journal_mode": "wal",
			"foreign_keys": "1",
			"synchronous":  "2", // FULL
			"busy_timeout": fmt.Sprint(BusyTimeout.Milliseconds()),
		} {
			var got string
			if err := db.QueryRowContext(ctx, "PRAGMA "+pragma).Scan(&got); err != nil {
				t.Fatalf("PRAGMA %s: %v", pragma, err)
			}
			if got != want {
				t.Errorf("PRAGMA %s = %q, want %q", pragma, got, want)
			}
		}
	}
}

func TestSchemaVersionAndReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "db")
	for i := 0; i < 2; i++ {
		s, err := Open(ctx, path)
		if err != nil {
			t.Fatalf("Open #%d: %v", i, err)
		}
		v, err := s.SchemaVersion(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if v != len(migrations()) {
			t.Errorf("open #%d: version %d, want %d", i, v, len(migrations()))
		}
		var n int
		if err := s.ReadDB().QueryRowContext(ctx, `SELECT count(*) FROM schema_version`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != len(migrations()) {
			t.Errorf("open #%d: %d schema_version rows, want %d (migrations re-applied?)", i, n, len(migrations()))
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestMigrationAddsStep(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	next := append(migrations(), Migration{
		Version: len(migrations()) + 1,
		Name:    "test table",
		SQL:     `CREATE TABLE widgets (id INTEGER PRIMARY KEY, name TEXT NOT NULL); INSERT INTO widgets (name) VALUES ('a'), ('b');`,
	})
	if err := migrate(ctx, s.DB(), next); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	// Running it again is a no-op.
	if err := migrate(ctx, s.DB(), next); err != nil {
		t.Fatalf("migrate again: %v", err)
	}
	var n int
	if err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM widgets`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("widgets rows = %d, want 2 (multi-statement migration ran once)", n)
	}
	v, err := s.SchemaVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v != len(next) {
		t.Errorf("version %d, want %d", v, len(next))
	}
}

func TestMigrationFailureRollsBack(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	bad := append(migrations(), Migration{
		Version: len(migrations()) + 1,
		Name:    "broken",
		SQL:     `CREATE TABLE half (x INTEGER); THIS IS NOT SQL;`,
	})
	if err := migrate(ctx, s.DB(), bad); err == nil {
		t.Fatal("broken migration succeeded")
	}
	var n int
	if err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE name = 'half'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Error("failed migration left its table behind")
	}
	if v, _ := s.SchemaVersion(ctx); v != len(migrations()) {
		t.Errorf("version %d after failed migration, want %d", v, len(migrations()))
	}
}

func TestMigrationsOutOfOrderRejected(t *testing.T) {
	s := openTemp(t)
	steps := append(migrations(), Migration{Version: len(migrations()) + 2, Name: "gap"})
	err := migrate(context.Background(), s.DB(), steps)
	if err == nil || !strings.Contains(err.Error(), "out of order") {
		t.Fatalf("migrate with a gap: %v, want out of order", err)
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, `INSERT INTO schema_version VALUES (999, 'future', 'x')`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err := Open(ctx, path); err == nil {
		s.Close()
		t.Fatal("Open accepted a schema newer than the binary")
	} else if !strings.Contains(err.Error(), "newer") {
		t.Errorf("error %v does not say the schema is newer", err)
	}
}

func TestReadDBIsReadOnly(t *testing.T) {
	s := openTemp(t)
	if _, err := s.ReadDB().ExecContext(context.Background(), `CREATE TABLE nope (x INTEGER)`); err == nil {
		t.Fatal("write through ReadDB succeeded")
	}
}

func TestForeignKeysEnforced(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	db := s.DB()
	if _, err := db.ExecContext(ctx, `CREATE TABLE parent (id INTEGER PRIMARY KEY);
		CREATE TABLE child (id INTEGER PRIMARY KEY, parent INTEGER NOT NULL REFERENCES parent(id))`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO child (parent) VALUES (42)`); err == nil {
		t.Fatal("insert violating a foreign key succeeded")
	}
}

// TestConcurrentWritesDoNotBusy hammers the writer pool from many goroutines
// with read-then-write transactions, the pattern that yields SQLITE_BUSY when
// several connections each hold a read lock and try to upgrade.
func TestConcurrentWritesDoNotBusy(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	if _, err := s.DB().ExecContext(ctx, `CREATE TABLE counter (id INTEGER PRIMARY KEY, n INTEGER NOT NULL); INSERT INTO counter VALUES (1, 0)`); err != nil {
		t.Fatal(err)
	}
	const workers, each = 32, 20
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				err := func() error {
					tx, err := s.DB().BeginTx(ctx, nil)
					if err != nil {
						return err
					}
					defer tx.Rollback()
					var n int
					if err := tx.QueryRowContext(ctx, `SELECT n FROM counter WHERE id = 1`).Scan(&n); err != nil {
						return err
					}
					if _, err := tx.ExecContext(ctx, `UPDATE counter SET n = ? WHERE id = 1`, n+1); err != nil {
						return err
					}
					return tx.Commit()
				}()
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	// Readers run at the same time and must not disturb the writers.
	stop := make(chan struct{})
	var rwg sync.WaitGroup
	for r := 0; r < 4; r++ {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				var n int
				if err := s.ReadDB().QueryRowContext(ctx, `SELECT n FROM counter WHERE id = 1`).Scan(&n); err != nil {
					errs <- fmt.Errorf("reader: %w", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	rwg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var n int
	if err := s.ReadDB().QueryRowContext(ctx, `SELECT n FROM counter WHERE id = 1`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != workers*each {
		t.Errorf("counter = %d, want %d (lost updates)", n, workers*each)
	}
}

func TestTwoStoresOneFile(t *testing.T) {
	// Two Opens of one new file at once (two processes, in real life) must
	// both succeed and apply each migration once.
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "db")
	var wg sync.WaitGroup
	stores := make([]*Store, 4)
	errs := make([]error, len(stores))
	for i := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stores[i], errs[i] = Open(ctx, path)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Open #%d: %v", i, err)
		}
		defer stores[i].Close()
	}
	var n int
	if err := stores[0].ReadDB().QueryRowContext(ctx, `SELECT count(*) FROM schema_version`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != len(migrations()) {
		t.Errorf("%d schema_version rows, want %d", n, len(migrations()))
	}
}

func TestPathWithQuestionMark(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "odd?name%20#x.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	s.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("file not created at the literal path: %v", err)
	}
}

func TestOpenEmptyPath(t *testing.T) {
	if _, err := Open(context.Background(), ""); err == nil {
		t.Fatal("Open(\"\") succeeded")
	}
}

// OpenReadOnly reads a database and changes nothing: writes are refused,
// the file's bytes stay as they were, and a missing file is not created.
func TestOpenReadOnlyChangesNothing(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "odd?name.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, `INSERT INTO tools (name, definition, approval, registered_at) VALUES ('t', '{}', '', '')`); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	db, err := OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM tools`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("read: %d rows, %v", n, err)
	}
	if _, err := db.ExecContext(ctx, `DELETE FROM tools`); err == nil {
		t.Fatal("a read-only connection deleted rows")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(path)
	if err != nil || string(after) != string(before) {
		t.Fatalf("the file changed (%d bytes, was %d): %v", len(after), len(before), err)
	}

	missing := filepath.Join(t.TempDir(), "none.db")
	if db, err := OpenReadOnly(missing); err == nil {
		db.Close()
		t.Fatal("OpenReadOnly opened a missing file")
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatalf("OpenReadOnly created %s: %v", missing, err)
	}
}
