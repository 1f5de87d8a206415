package session

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
)

// writeUnsynced runs write in one transaction on the store's writer and
// commits it without an fsync of its own (synchronous=NORMAL for this
// transaction only). It is for a row change that the caller follows at
// once with the audit record of the same action (Log.Append, which returns
// once a commit on the same writer, with synchronous=FULL, is durable): the
// store's WAL is one file written in commit order, so the fsync that makes
// that later commit durable makes this one durable too. The action then
// pays one fsync instead of two, and neither the row nor the record is
// acknowledged before both are durable.
//
// A caller whose audit record then fails must make the row durable some
// other way (a plain write; see finish) or undo it: until a synced commit
// follows, a crash may lose it.
//
// The writer pool has one connection, held here from the first pragma to
// the last, so no other transaction ever runs with synchronous=NORMAL. If
// synchronous=FULL cannot be restored, the connection is discarded (the
// pool opens a new one, configured from the DSN), never handed back.
func (m *Manager) writeUnsynced(ctx context.Context, write func(*sql.Tx) error) (err error) {
	conn, err := m.db.DB().Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `PRAGMA synchronous = NORMAL`); err != nil {
		discard(conn)
		return err
	}
	defer func() {
		// Restored whatever happened to the transaction, and whatever
		// became of ctx.
		if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), `PRAGMA synchronous = FULL`); rerr != nil {
			discard(conn)
			if err == nil {
				err = fmt.Errorf("session: restoring synchronous=FULL: %w", rerr)
			}
		}
	}()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := write(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		// database/sql considers the transaction over; SQLite may not
		// (as in audit's writeBatch): the connection must not go back to
		// the pool inside it. "no transaction is active" is the expected
		// answer when SQLite did roll back.
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`)
		return err
	}
	return nil
}

// discard closes conn's driver connection instead of returning it to the
// pool: a function given to Raw that returns driver.ErrBadConn does that.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
}
