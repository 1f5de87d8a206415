package session

import (
	"context"
	"errors"
	"testing"

	"github.com/ironclaw/ironclaw/internal/audit"
)

// The row of a sandbox and the audit record of the same step (create, end)
// commit in one transaction (audit.Log.AppendWith): these tests refuse one
// or the other with a trigger, as a broken or full store would, and check
// that nothing half-done is left.

func (f *fixture) exec(t *testing.T, sql string) {
	t.Helper()
	if _, err := f.db.DB().ExecContext(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func (f *fixture) rowState(t *testing.T, id string) string {
	t.Helper()
	var state string
	if err := f.db.ReadDB().QueryRowContext(context.Background(), `SELECT state FROM sandboxes WHERE id = ?`, id).Scan(&state); err != nil {
		t.Fatalf("row of %s: %v", id, err)
	}
	return state
}

// retryEnd drops the trigger that refused an end, lets the manager retry
// what it could not record, and checks that the row's end landed.
func (f *fixture) retryEnd(t *testing.T, m *Manager, trigger, id string) {
	t.Helper()
	f.exec(t, "DROP TRIGGER "+trigger)
	m.retry()
	if got := f.rowState(t, id); got != StateDestroyed {
		t.Fatalf("row %q after the retry", got)
	}
}

func (f *fixture) rowCount(t *testing.T) int {
	t.Helper()
	var n int
	if err := f.db.ReadDB().QueryRowContext(context.Background(), `SELECT count(*) FROM sandboxes`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCreateRowAndRecordTogether: a create and a destroy each leave their
// row and their record; the writer stays at synchronous=FULL throughout
// (no commit of the store goes out unsynced).
func TestCreateRowAndRecordTogether(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, Options{})
	info := create(t, m, "agent", CreateRequest{})
	if got := f.rowState(t, info.ID); got != StateRunning {
		t.Fatalf("row of a created sandbox: %q", got)
	}
	if err := m.Destroy(context.Background(), "agent", info.ID); err != nil {
		t.Fatal(err)
	}
	if got := f.rowState(t, info.ID); got != StateDestroyed {
		t.Fatalf("row of a destroyed sandbox: %q", got)
	}
	if k := f.kinds(t, info.ID); len(k) != 2 || k[0] != audit.KindSandboxCreate || k[1] != audit.KindSandboxDestroy {
		t.Fatalf("audit kinds %v, want the create and the destroy", k)
	}
	var sync int
	if err := f.db.DB().QueryRowContext(context.Background(), `PRAGMA synchronous`).Scan(&sync); err != nil || sync != 2 {
		t.Fatalf("synchronous = %d (%v), want 2 (FULL)", sync, err)
	}
}

// TestCreateWithoutItsRecordLeavesNoRow: a create whose record cannot be
// written fails, and leaves neither a row nor a sandbox.
func TestCreateWithoutItsRecordLeavesNoRow(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, Options{})
	f.exec(t, `CREATE TRIGGER refuse_create BEFORE INSERT ON audit_log WHEN NEW.kind = 'sandbox.create'
		BEGIN SELECT RAISE(ABORT, 'create records refused'); END`)
	_, err := m.Create(context.Background(), "agent", CreateRequest{})
	if !errors.Is(err, audit.ErrNotWritten) {
		t.Fatalf("create without its record: %v, want ErrNotWritten", err)
	}
	if n := f.rowCount(t); n != 0 {
		t.Fatalf("%d rows after a create that failed", n)
	}
	m.mu.Lock()
	live, starting := len(m.live), m.starting
	m.mu.Unlock()
	if live != 0 || starting != 0 {
		t.Fatalf("%d sandboxes live, %d starting, after a create that failed", live, starting)
	}
	f.exec(t, `DROP TRIGGER refuse_create`)
	create(t, m, "agent", CreateRequest{})
}

// TestEndRefusedByTheStore: when the store refuses a row's end, the end's
// record is still written and the row's end is retried until it lands.
func TestEndRefusedByTheStore(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, Options{})
	info := create(t, m, "agent", CreateRequest{})
	f.exec(t, `CREATE TRIGGER refuse_end BEFORE UPDATE OF state ON sandboxes
		BEGIN SELECT RAISE(ABORT, 'ends refused'); END`)
	if err := m.Destroy(context.Background(), "agent", info.ID); err != nil {
		t.Fatalf("destroy with its row's end refused: %v (the record was written)", err)
	}
	if k := f.kinds(t, info.ID); len(k) != 2 || k[1] != audit.KindSandboxDestroy {
		t.Fatalf("audit kinds %v, want the destroy recorded", k)
	}
	if got := f.rowState(t, info.ID); got != StateRunning {
		t.Fatalf("row %q while the store refuses ends", got)
	}
	f.retryEnd(t, m, "refuse_end", info.ID)
}

// TestEndWithoutItsRecord: when the end's record cannot be written,
// neither it nor the row's end lands; the call says so, and the row's end
// is retried.
func TestEndWithoutItsRecord(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, Options{})
	info := create(t, m, "agent", CreateRequest{})
	f.exec(t, `CREATE TRIGGER refuse_destroy BEFORE INSERT ON audit_log WHEN NEW.kind = 'sandbox.destroy'
		BEGIN SELECT RAISE(ABORT, 'destroy records refused'); END`)
	if err := m.Destroy(context.Background(), "agent", info.ID); !errors.Is(err, audit.ErrNotWritten) {
		t.Fatalf("destroy without its record: %v, want ErrNotWritten", err)
	}
	if got := f.rowState(t, info.ID); got != StateRunning {
		t.Fatalf("row %q: the end was committed without its record", got)
	}
	f.retryEnd(t, m, "refuse_destroy", info.ID)
}
