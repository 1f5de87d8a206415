// Package store owns IronClaw's single SQLite database file and hands out
// the connections every other package uses.
//
// Contract:
//
//   - Open creates the file if it is missing (mode 0600; a missing parent
//     directory is created 0700), puts it in WAL mode, turns on foreign keys
//     and a busy timeout on every connection, and brings the schema up to the
//     newest version by running the ordered migrations in migrations.go. A
//     file whose schema is newer than this binary knows is refused rather
//     than used, so an old binary never writes into a schema it does not
//     understand.
//   - Writes go through DB(), a pool of exactly one connection whose
//     transactions begin IMMEDIATE. Every write in the process therefore
//     queues inside database/sql for that one connection instead of racing
//     other connections for SQLite's single write lock, so a write never
//     fails with SQLITE_BUSY because of another goroutine. BEGIN IMMEDIATE
//     takes the write lock up front, so a transaction that reads before it
//     writes cannot hit the deadlock-shaped SQLITE_BUSY of a lock upgrade
//     when another process (a CLI, say) writes the same file; such contention
//     waits out the busy timeout instead.
//   - Reads that need not see uncommitted writes of the caller's own
//     transaction should use ReadDB(): a pool of read-only (query_only)
//     connections that WAL lets run concurrently with the writer, so a slow
//     export or verify never stalls a write.
//   - Because DB() has a single connection, code holding a transaction on
//     it must do all its database work through that *sql.Tx and must not
//     wait for anything that itself needs DB() (for example audit.Log.Append,
//     whose committer writes through DB()); doing so deadlocks.
//   - Commits are durable: synchronous=FULL, so a transaction that returned
//     from Commit survives a process kill and a power loss (see Open).
//   - Close closes both pools; callers close their users (e.g. an audit.Log)
//     first.
//   - OpenReadOnly, without a Store, is for tools that inspect a database
//     file without a daemon (audit verify --data-dir): SQLite opens the file
//     read-only, and nothing is created, migrated or recovered in it.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ironclaw/ironclaw/internal/errdefs"

	// The pure-Go SQLite driver, registered as "sqlite"; pure Go because the
	// daemon is built with CGO_ENABLED=0 (see the README).
	_ "modernc.org/sqlite"
)

// BusyTimeout is how long a connection waits for another process's lock
// before giving up with SQLITE_BUSY. Within one process writes never contend
// (see the package doc); this covers other processes on the same file.
const BusyTimeout = 10 * time.Second

// maxReaders bounds the read pool. Readers in WAL mode do not block each
// other or the writer; the bound only keeps file descriptors and page
// caches in check.
const maxReaders = 8

// Store is an open IronClaw database. It is safe for concurrent use.
type Store struct {
	path  string
	write *sql.DB
	read  *sql.DB
}

// Open opens (creating if needed) the database at path and migrates it to
// the newest schema.
//
// Durability: every connection runs with journal_mode=WAL and
// synchronous=FULL. In WAL mode synchronous=NORMAL is already safe against a
// process crash (a committed transaction is in the WAL file, in the OS page
// cache, before COMMIT returns), but it only fsyncs the WAL at checkpoints, so
// a power loss or kernel panic can roll back the last transactions that were
// reported committed. FULL fsyncs the WAL at every commit. The audit log
// acknowledges a record only after its transaction commits and batches many
// records per transaction (group commit), so the fsync is paid once per batch,
// not once per record, and an acknowledged audit record then survives power
// loss as well as kill -9.
func Open(ctx context.Context, path string) (*Store, error) {
	return OpenWith(ctx, path, Options{})
}

// Options tune OpenWith.
type Options struct {
	// MustExist refuses a missing or empty file instead of starting a new
	// database in it: the daemon sets it for a data directory that has run
	// before, where a missing or 0-byte database means lost state and a lost
	// audit trail, not a first start.
	MustExist bool
	// PresizeWAL grows the WAL at open, when it is smaller (SQLite deletes
	// it at a clean close, so after every restart), to the size it reaches
	// between checkpoints, so that commits overwrite written blocks instead
	// of growing the file (walsize.go). It costs one write and fsync of
	// about 4 MiB at open (3.2 ms on the 2-core guest,
	// BenchmarkOpenPresizedWAL): the daemon sets it, a short-lived command
	// does not.
	PresizeWAL bool
}

// ErrDamaged is a database file that is not a whole, consistent SQLite
// database (or, with Options.MustExist, is missing or empty). Nothing was
// changed in it.
var ErrDamaged = errdefs.New(errdefs.ErrUnavailable, "database damaged")

// OpenWith is Open with options. An existing file is checked before use:
// its header must be SQLite's and PRAGMA quick_check must pass, so a
// truncated or corrupt file is refused instead of being taken as new.
func OpenWith(ctx context.Context, path string, opts Options) (*Store, error) {
	if path == "" {
		return nil, errors.New("store: empty database path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("store: resolve %q: %w", path, err)
	}
	existed, err := checkHeader(abs, opts.MustExist)
	if err != nil {
		return nil, err
	}
	if err := prepareFile(abs); err != nil {
		return nil, err
	}

	// The writer is opened, configured and migrated before any reader exists,
	// so switching a new file to WAL (which needs the only connection) and
	// creating the schema cannot race a reader.
	write, err := sql.Open("sqlite", dsn(abs, connWrite))
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", abs, err)
	}
	write.SetMaxOpenConns(1)
	write.SetMaxIdleConns(1)
	// A closed and reopened writer would redo its pragmas, which is harmless,
	// but there is no reason to churn it.
	write.SetConnMaxLifetime(0)
	write.SetConnMaxIdleTime(0)

	s := &Store{path: abs, write: write}
	if err := s.firstConnect(ctx); err != nil {
		write.Close()
		if corruption(err) {
			return nil, fmt.Errorf("%w: %s: %v; restore it from a backup", ErrDamaged, abs, err)
		}
		return nil, err
	}
	if existed {
		if err := quickCheck(ctx, write, abs); err != nil {
			write.Close()
			return nil, err
		}
	}
	if err := migrate(ctx, write, migrations()); err != nil {
		write.Close()
		if corruption(err) {
			return nil, fmt.Errorf("%w: %s: %v; restore it from a backup", ErrDamaged, abs, err)
		}
		return nil, err
	}

	if opts.PresizeWAL {
		// Best effort: without it the WAL grows as SQLite writes it.
		_ = s.presizeWAL(ctx)
	}

	read, err := sql.Open("sqlite", dsn(abs, connRead))
	if err != nil {
		write.Close()
		return nil, fmt.Errorf("store: open %s for reading: %w", abs, err)
	}
	read.SetMaxOpenConns(maxReaders)
	read.SetMaxIdleConns(2)
	if err := read.PingContext(ctx); err != nil {
		read.Close()
		write.Close()
		return nil, fmt.Errorf("store: open %s for reading: %w", abs, err)
	}
	s.read = read
	return s, nil
}

// OpenReadOnly opens the existing database file at path for reading and
// nothing else, for a tool that inspects a data directory without a daemon
// (audit verify --data-dir): it creates, checks and migrates nothing, and
// SQLite opens the file read-only, so not even a recovery writes to it. It
// works while a daemon has the file open, since WAL lets readers in. The
// pool holds up to as many connections as ReadDB's; the caller closes it.
func OpenReadOnly(path string) (*sql.DB, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("store: resolve %q: %w", path, err)
	}
	if _, err := os.Stat(abs); err != nil {
		return nil, fmt.Errorf("store: open %s read-only: %w", abs, err)
	}
	db, err := sql.Open("sqlite", dsn(abs, connOffline))
	if err != nil {
		return nil, fmt.Errorf("store: open %s read-only: %w", abs, err)
	}
	db.SetMaxOpenConns(maxReaders)
	return db, nil
}

// sqliteHeader starts every SQLite 3 database file.
const sqliteHeader = "SQLite format 3\x00"

// checkHeader reports whether a database file exists with content, and
// refuses one that is not SQLite's (or, with mustExist, one that is
// missing or empty).
func checkHeader(abs string, mustExist bool) (existed bool, err error) {
	f, err := os.Open(abs)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if mustExist {
			return false, fmt.Errorf("%w: %s is missing although this data directory has been used before; restore it from a backup, or move the data directory aside to start afresh", ErrDamaged, abs)
		}
		return false, nil
	case err != nil:
		return false, fmt.Errorf("store: open %s: %w", abs, err)
	}
	defer f.Close()
	head := make([]byte, len(sqliteHeader))
	n, err := io.ReadFull(f, head)
	switch {
	case n == 0 && mustExist:
		return false, fmt.Errorf("%w: %s is empty although this data directory has been used before; restore it from a backup, or move the data directory aside to start afresh", ErrDamaged, abs)
	case n == 0:
		return false, nil
	case err != nil || string(head) != sqliteHeader:
		return false, fmt.Errorf("%w: %s is not an SQLite database (its first bytes are not SQLite's header)", ErrDamaged, abs)
	}
	return true, nil
}

// sqliteCode returns the primary result code of the SQLite error in err's
// chain (extended codes keep it in the low byte), or -1 if there is none.
func sqliteCode(err error) int {
	var c interface{ Code() int }
	if !errors.As(err, &c) {
		return -1
	}
	return c.Code() & 0xff
}

// corruption reports SQLite's SQLITE_CORRUPT (11) and SQLITE_NOTADB (26).
func corruption(err error) bool {
	code := sqliteCode(err)
	return code == 11 || code == 26
}

// quickCheck runs SQLite's own consistency check of the file's pages.
func quickCheck(ctx context.Context, db *sql.DB, abs string) error {
	rows, err := db.QueryContext(ctx, `PRAGMA quick_check(5)`)
	if err != nil {
		return fmt.Errorf("%w: %s: quick_check: %v", ErrDamaged, abs, err)
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return fmt.Errorf("%w: %s: quick_check: %v", ErrDamaged, abs, err)
		}
		if line != "ok" {
			problems = append(problems, line)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("%w: %s: quick_check: %v", ErrDamaged, abs, err)
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s fails SQLite's consistency check (%s); restore it from a backup", ErrDamaged, abs, strings.Join(problems, "; "))
	}
	return nil
}

// prepareFile creates the parent directory (0700) and the database file
// (0600) when they are missing. SQLite would create the file itself, but with
// the process umask applied to 0644; the database holds the audit log and
// session state, so it must never be readable by other users. SQLite creates
// the -wal and -shm files with the database file's permissions, so they
// inherit 0600. An existing file's mode is left as the operator set it.
func prepareFile(abs string) error {
	dir := filepath.Dir(abs)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("store: create directory %s: %w", dir, err)
		}
	} else if err != nil {
		return fmt.Errorf("store: stat directory %s: %w", dir, err)
	}
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	switch {
	case errors.Is(err, os.ErrExist):
		return nil
	case err != nil:
		return fmt.Errorf("store: create %s: %w", abs, err)
	}
	// The umask may have cleared bits of 0600 (it cannot add any); make the
	// mode exact so the owner can always read and write it.
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("store: chmod %s: %w", abs, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("store: create %s: %w", abs, err)
	}
	return nil
}

// conn says what a pool's connections are for.
type conn int

const (
	connWrite   conn = iota // DB(): the one writer
	connRead                // ReadDB(): readers beside the writer
	connOffline             // OpenReadOnly: readers of a file nothing here writes
)

// dsn builds the driver's connection string. The file: URI form is used so
// that a path containing '?' or '%' is escaped instead of being cut at the
// first '?' by the driver. Pragmas in the DSN are applied by the driver to
// every new connection, so a connection the pool opens later is configured
// the same way as the first.
func dsn(abs string, c conn) string {
	q := url.Values{}
	q.Set("_busy_timeout", fmt.Sprint(BusyTimeout.Milliseconds()))
	q.Set("_synchronous", "FULL")
	q.Set("_foreign_keys", "1")
	if c == connOffline {
		// SQLite opens the file O_RDONLY: nothing, not even the recovery
		// of a crashed writer's WAL, can change it.
		q.Set("mode", "ro")
	}
	if c != connWrite {
		// query_only rejects writes on these connections, so a write sent
		// to the read pool by mistake fails loudly instead of racing the
		// writer for the lock. WAL is a property of the file, set by the
		// writer before any reader opens, so readers do not ask for it
		// (asking takes a lock, which can fail while another process opens
		// the file).
		q.Set("_query_only", "1")
	} else {
		q.Set("_journal_mode", "WAL")
		q.Set("_txlock", "immediate")
	}
	u := url.URL{Scheme: "file", Path: abs, RawQuery: q.Encode()}
	return u.String()
}

// firstConnect runs checkWriter, retrying while the file is busy. The first
// connection to a new file switches it to WAL, which needs an exclusive
// lock; when several processes open the same new file at once, SQLite can
// answer SQLITE_BUSY at once instead of calling the busy handler (it does so
// where waiting could deadlock), so the wait is done here, up to
// BusyTimeout. The driver discards a connection whose setup failed, so each
// try starts afresh.
func (s *Store) firstConnect(ctx context.Context) error {
	deadline := time.Now().Add(BusyTimeout)
	backoff := time.Millisecond
	for {
		err := s.checkWriter(ctx)
		if err == nil || !isBusy(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("store: open %s: %w", s.path, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 50*time.Millisecond)
	}
}

// isBusy reports whether err is SQLite's SQLITE_BUSY (5) or SQLITE_LOCKED
// (6).
func isBusy(err error) bool {
	code := sqliteCode(err)
	return code == 5 || code == 6
}

// checkWriter opens the writer connection and confirms the pragmas took:
// SQLite silently keeps the old journal mode when it cannot switch (for
// example on a file system without shared memory), and the durability
// argument in Open depends on WAL.
func (s *Store) checkWriter(ctx context.Context) error {
	var mode string
	if err := s.write.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("store: open %s: %w", s.path, err)
	}
	if mode != "wal" {
		return fmt.Errorf("store: %s: journal_mode is %q, want wal", s.path, mode)
	}
	var fk int
	if err := s.write.QueryRowContext(ctx, "PRAGMA foreign_keys").Scan(&fk); err != nil {
		return fmt.Errorf("store: open %s: %w", s.path, err)
	}
	if fk != 1 {
		return fmt.Errorf("store: %s: foreign keys are off", s.path)
	}
	return nil
}

// DB returns the write pool: one connection, BEGIN IMMEDIATE transactions.
// Use it for every write and for reads inside a write transaction. See the
// package doc for the one rule it imposes.
func (s *Store) DB() *sql.DB { return s.write }

// ReadDB returns the read-only pool. Its connections see every committed
// transaction and never block the writer.
func (s *Store) ReadDB() *sql.DB { return s.read }

// Path returns the absolute path of the database file.
func (s *Store) Path() string { return s.path }

// SchemaVersion returns the newest migration applied to the file.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	v, err := currentVersion(ctx, s.read)
	if err != nil {
		return 0, fmt.Errorf("store: schema version: %w", err)
	}
	return v, nil
}

// Close closes both pools. The writer is closed last so that, when the
// last connection to the file goes away, SQLite checkpoints the WAL into the
// main file and removes the -wal and -shm files.
func (s *Store) Close() error {
	var errs []error
	if s.read != nil {
		if err := s.read.Close(); err != nil {
			errs = append(errs, fmt.Errorf("store: close readers: %w", err))
		}
	}
	if err := s.write.Close(); err != nil {
		errs = append(errs, fmt.Errorf("store: close writer: %w", err))
	}
	return errors.Join(errs...)
}
