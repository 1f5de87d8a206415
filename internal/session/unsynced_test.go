package session

import (
	"context"
	"database/sql"
	"errors"
	"testing"
)

// synchronous is the writer connection's synchronous setting (2 is FULL).
func synchronous(t *testing.T, f *fixture) int {
	t.Helper()
	var v int
	if err := f.db.DB().QueryRowContext(context.Background(), `PRAGMA synchronous`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestUnsyncedWritesLeaveTheWriterFull: a create and a destroy write their
// rows with writeUnsynced (their audit record's commit makes them durable),
// and the writer is back at synchronous=FULL after each, also after a
// write that failed or whose context ended, so no other commit ever goes
// out unsynced.
func TestUnsyncedWritesLeaveTheWriterFull(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, Options{})
	ctx := context.Background()
	if got := synchronous(t, f); got != 2 {
		t.Fatalf("synchronous = %d before any write, want 2 (FULL)", got)
	}
	info := create(t, m, "agent", CreateRequest{})
	if got := synchronous(t, f); got != 2 {
		t.Fatalf("synchronous = %d after a create, want 2 (FULL)", got)
	}
	var state string
	if err := f.db.ReadDB().QueryRowContext(ctx, `SELECT state FROM sandboxes WHERE id = ?`, info.ID).Scan(&state); err != nil || state != StateRunning {
		t.Fatalf("row of a created sandbox: %q, %v", state, err)
	}
	if err := m.Destroy(ctx, "agent", info.ID); err != nil {
		t.Fatal(err)
	}
	if got := synchronous(t, f); got != 2 {
		t.Fatalf("synchronous = %d after a destroy, want 2 (FULL)", got)
	}
	if err := f.db.ReadDB().QueryRowContext(ctx, `SELECT state FROM sandboxes WHERE id = ?`, info.ID).Scan(&state); err != nil || state != StateDestroyed {
		t.Fatalf("row of a destroyed sandbox: %q, %v", state, err)
	}
	if k := f.kinds(t, info.ID); len(k) != 2 {
		t.Fatalf("audit kinds %v, want the create and the destroy", k)
	}

	// A write that fails changes nothing and restores FULL.
	boom := errors.New("boom")
	err := m.writeUnsynced(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE sandboxes SET end_reason = 'changed' WHERE id = ?`, info.ID); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("writeUnsynced = %v, want the write's error", err)
	}
	var reason string
	if err := f.db.ReadDB().QueryRowContext(ctx, `SELECT end_reason FROM sandboxes WHERE id = ?`, info.ID).Scan(&reason); err != nil || reason == "changed" {
		t.Fatalf("a failed write was committed: %q, %v", reason, err)
	}
	if got := synchronous(t, f); got != 2 {
		t.Fatalf("synchronous = %d after a failed write, want 2 (FULL)", got)
	}

	// A context that ends during the write: FULL is restored regardless.
	cctx, cancel := context.WithCancel(ctx)
	err = m.writeUnsynced(cctx, func(tx *sql.Tx) error {
		cancel()
		_, err := tx.ExecContext(cctx, `UPDATE sandboxes SET end_reason = 'changed' WHERE id = ?`, info.ID)
		return err
	})
	if err == nil {
		t.Fatal("writeUnsynced with an ended context succeeded")
	}
	if got := synchronous(t, f); got != 2 {
		t.Fatalf("synchronous = %d after a cancelled write, want 2 (FULL)", got)
	}
}
