package store

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite"
)

// A file at version 4 with an approval row gains the note and via columns
// (empty for the old row) and the webhook_deliveries table.
func TestMigrationApprovalNotesAndWebhooks(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "db")
	if err := prepareFile(path); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", dsn(path, connWrite))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	var v4 []Migration
	for _, m := range migrations() {
		if m.Version <= 4 {
			v4 = append(v4, m)
		}
	}
	if err := migrate(ctx, db, v4); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO approvals (id, kind, state, session, requested_by, summary, data,
	created_at, expires_at, decided_at, decided_by, scope, reason, result, applied, used)
	VALUES ('apr-old', 'tool.call', 'pending', '', 'agent', 'old text', '{"tool":"x"}', 't', 't', '', '', '', '', '', 0, 0)`); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var note, via string
	if err := s.DB().QueryRowContext(ctx, `SELECT note, via FROM approvals WHERE id = 'apr-old'`).Scan(&note, &via); err != nil || note != "" || via != "" {
		t.Fatalf("old row after migration: note %q via %q %v", note, via, err)
	}
	if _, err := s.DB().ExecContext(ctx, `INSERT INTO webhook_deliveries (id, url, event, approval, principal, body, created_at, attempts, next_at, last_error)
	VALUES ('whd-1', 'https://h.example/x', 'approval.request', 'apr-old', 'agent', '{}', 't', 0, 't', '')`); err != nil {
		t.Fatal(err)
	}
}
