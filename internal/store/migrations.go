package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// Migration is one step of the schema. Version numbers start at 1 and have
// no gaps; a migration's SQL may hold several statements and runs in one
// transaction together with the row that records it in schema_version, so a
// crash mid-migration leaves the file at the previous version.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// migrations returns the schema history in order. It is a function rather
// than a package variable so no caller can alter the list at run time.
//
// To add a migration: append an entry with the next Version, a short Name,
// and the SQL that moves the newest schema one step forward. Never edit or
// reorder an entry that has shipped: files in the field already recorded it
// as applied and will not run it again. Prefer additive changes (new tables,
// new columns with defaults); SQLite's ALTER TABLE is limited, so a column
// change is a create-copy-drop-rename inside the migration. Add a test in
// store_test.go that opens a file at the previous version and checks the new
// one. The audit_log table's triggers are part of its tamper evidence: a
// migration that must touch audit_log drops and recreates them in the same
// migration and never rewrites existing rows (that would break every hash).
func migrations() []Migration {
	return []Migration{
		{
			Version: 1,
			Name:    "audit log",
			SQL: `
-- The append-only, hash-chained audit log (package audit). seq is the rowid,
-- so appending and reading in seq order walk the table's own B-tree.
CREATE TABLE audit_log (
	seq       INTEGER PRIMARY KEY CHECK (seq > 0),
	time      TEXT NOT NULL,
	session   TEXT NOT NULL,
	actor     TEXT NOT NULL,
	kind      TEXT NOT NULL,
	data      TEXT NOT NULL,
	prev_hash TEXT NOT NULL,
	hash      TEXT NOT NULL
) STRICT;

-- Rows are never changed or removed. These triggers stop a bug or a
-- careless query; someone with the file can drop them, which is why
-- audit.Verify re-checks the hash chain instead of trusting them.
--
-- There is deliberately no trigger checking that an INSERT extends the
-- chain (next seq, previous hash): a batch chained onto a stale head
-- collides with another writer's seq on the primary key, and the committer
-- then writes it again onto the head read under the write lock, so it
-- cannot fork the chain even with several writers; Verify catches any other
-- insert, and such a trigger cost about a quarter of the committer's time
-- per row.
CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN
	SELECT RAISE(ABORT, 'audit_log is append-only: UPDATE refused');
END;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN
	SELECT RAISE(ABORT, 'audit_log is append-only: DELETE refused');
END;
`,
		},
		{
			Version: 2,
			Name:    "sandboxes",
			SQL: `
-- Every sandbox a daemon created (package session). owner names the daemon
-- run that holds its processes: after a restart, rows still 'running' under
-- another owner are sandboxes whose processes died with that run.
CREATE TABLE sandboxes (
	id              TEXT PRIMARY KEY,
	owner           TEXT NOT NULL,
	state           TEXT NOT NULL CHECK (state IN ('running', 'destroyed', 'reaped', 'lost')),
	spec            TEXT NOT NULL,
	labels          TEXT NOT NULL,
	created_at      TEXT NOT NULL,
	expires_at      TEXT NOT NULL,
	idle_timeout_ms INTEGER NOT NULL,
	last_used_at    TEXT NOT NULL,
	ended_at        TEXT NOT NULL,
	end_reason      TEXT NOT NULL
) STRICT;
CREATE INDEX sandboxes_by_state ON sandboxes (state, owner);
`,
		},
		{
			Version: 3,
			Name:    "approvals",
			SQL: `
-- Approval requests of the gateway (package gateway). A row is filed
-- 'pending' and moves once to 'approved', 'denied' or 'expired'. applied
-- records that an approved action was carried out, so a crash between the
-- decision and the action is finished at the next start; used marks a
-- single-use approval (exec.command) as spent. Times are fixed-width UTC
-- text, so they compare as strings.
CREATE TABLE approvals (
	id           TEXT PRIMARY KEY,
	kind         TEXT NOT NULL,
	state        TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'denied', 'expired')),
	session      TEXT NOT NULL,
	requested_by TEXT NOT NULL,
	summary      TEXT NOT NULL,
	data         TEXT NOT NULL,
	created_at   TEXT NOT NULL,
	expires_at   TEXT NOT NULL,
	decided_at   TEXT NOT NULL,
	decided_by   TEXT NOT NULL,
	scope        TEXT NOT NULL,
	reason       TEXT NOT NULL,
	result       TEXT NOT NULL,
	applied      INTEGER NOT NULL CHECK (applied IN (0, 1)),
	used         INTEGER NOT NULL CHECK (used IN (0, 1))
) STRICT;
CREATE INDEX approvals_by_state ON approvals (state, session);
CREATE INDEX approvals_by_created ON approvals (created_at);

-- Egress rules an operator approved for every sandbox (scope "global"):
-- they outlive the daemon run, unlike a sandbox's own additions.
CREATE TABLE egress_rules (
	rule     TEXT PRIMARY KEY,
	approval TEXT NOT NULL,
	added_at TEXT NOT NULL
) STRICT;

-- Tool definitions registered through an approved tool.register request.
CREATE TABLE tools (
	name          TEXT PRIMARY KEY,
	definition    TEXT NOT NULL,
	approval      TEXT NOT NULL,
	registered_at TEXT NOT NULL
) STRICT;
`,
		},
		{
			Version: 4,
			Name:    "sandbox principals and crashes",
			SQL: `
-- principal is who created the sandbox ("agent", "agent:NAME", an
-- operator's name): agent tokens see only their own sandboxes, and quotas
-- count per principal. 'crashed' is a sandbox whose pid 1 died under it;
-- 'paused' a frozen one. SQLite cannot change a CHECK, so the table is
-- rebuilt.
CREATE TABLE sandboxes_new (
	id              TEXT PRIMARY KEY,
	owner           TEXT NOT NULL,
	principal       TEXT NOT NULL DEFAULT '',
	state           TEXT NOT NULL CHECK (state IN ('running', 'paused', 'destroyed', 'reaped', 'lost', 'crashed')),
	spec            TEXT NOT NULL,
	labels          TEXT NOT NULL,
	created_at      TEXT NOT NULL,
	expires_at      TEXT NOT NULL,
	idle_timeout_ms INTEGER NOT NULL,
	last_used_at    TEXT NOT NULL,
	ended_at        TEXT NOT NULL,
	end_reason      TEXT NOT NULL
) STRICT;
INSERT INTO sandboxes_new (id, owner, principal, state, spec, labels, created_at, expires_at, idle_timeout_ms, last_used_at, ended_at, end_reason)
	SELECT id, owner, 'agent', state, spec, labels, created_at, expires_at, idle_timeout_ms, last_used_at, ended_at, end_reason FROM sandboxes;
DROP TABLE sandboxes;
ALTER TABLE sandboxes_new RENAME TO sandboxes;
CREATE INDEX sandboxes_by_state ON sandboxes (state, owner);
CREATE INDEX sandboxes_by_principal ON sandboxes (principal, state);
`,
		},
		{
			Version: 5,
			Name:    "model spend",
			SQL: `
-- Settled model-proxy tokens (input+output) per principal and budget
-- window (period: the window's start, Unix seconds; 0 when budgets have
-- no window), so per-principal budgets survive a restart. Only the
-- newest window of each principal is kept.
CREATE TABLE model_spend (
	principal  TEXT NOT NULL,
	period     INTEGER NOT NULL,
	tokens     INTEGER NOT NULL CHECK (tokens >= 0),
	updated_at TEXT NOT NULL,
	PRIMARY KEY (principal, period)
) STRICT;
`,
		},
		{
			Version: 6,
			Name:    "approval notes, quotas and webhook deliveries",
			SQL: `
-- note is what the requester wrote about its request, kept apart from the
-- summary (which the gateway derives from data); via names the daemon part
-- that filed a request on the requester's behalf (the egress broker).
ALTER TABLE approvals ADD COLUMN note TEXT NOT NULL DEFAULT '';
ALTER TABLE approvals ADD COLUMN via TEXT NOT NULL DEFAULT '';
-- Pending requests are counted per principal for its quota.
CREATE INDEX approvals_by_requester ON approvals (requested_by, state);

-- Webhook deliveries not yet made (package gateway): one row per event and
-- URL, deleted once delivered or given up (both audited). seq orders them;
-- principal (who filed the approval) decides whose delivery a full queue
-- drops first.
CREATE TABLE webhook_deliveries (
	seq        INTEGER PRIMARY KEY,
	id         TEXT NOT NULL UNIQUE,
	url        TEXT NOT NULL,
	event      TEXT NOT NULL,
	approval   TEXT NOT NULL,
	principal  TEXT NOT NULL,
	body       TEXT NOT NULL,
	created_at TEXT NOT NULL,
	attempts   INTEGER NOT NULL,
	next_at    TEXT NOT NULL,
	last_error TEXT NOT NULL
) STRICT;
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (url, next_at);
`,
		},
		{
			Version: 7,
			Name:    "audit log MAC",
			SQL: `
-- mac authenticates each record with a key kept outside the data directory
-- (package audit: HMAC-SHA256 over the record's seq and hash). Records
-- written before the log was keyed keep '' and verify as a legacy prefix.
-- hash and its chain are unchanged, so tools that check only the SHA-256
-- chain keep working. Adding a column rewrites no row and leaves the
-- append-only triggers in place.
ALTER TABLE audit_log ADD COLUMN mac TEXT NOT NULL DEFAULT '';
`,
		},
		{
			Version: 8,
			Name:    "volumes",
			SQL: `
-- Named persistent volumes (package volume): each is an ext4 filesystem in
-- a file of size_bytes under the data directory's volumes/, owned by the
-- principal that created it. Which sandbox holds one is the daemon's
-- memory, not the store's: a restart frees every volume.
CREATE TABLE volumes (
	name       TEXT PRIMARY KEY,
	principal  TEXT NOT NULL,
	size_bytes INTEGER NOT NULL CHECK (size_bytes > 0),
	created_at TEXT NOT NULL
) STRICT;
`,
		},
	}
}

// migrate brings db up to the last migration. Each step runs in its own
// transaction, which on the writer pool begins IMMEDIATE: the version is read
// under the write lock, so two processes opening a new file at once cannot
// both apply the same step.
func migrate(ctx context.Context, db *sql.DB, steps []Migration) error {
	for i, m := range steps {
		if m.Version != i+1 {
			return fmt.Errorf("store: migration %d (%q) out of order: want version %d", m.Version, m.Name, i+1)
		}
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_version (
	version    INTEGER PRIMARY KEY,
	name       TEXT NOT NULL,
	applied_at TEXT NOT NULL
) STRICT`); err != nil {
		return fmt.Errorf("store: create schema_version: %w", err)
	}
	cur, err := currentVersion(ctx, db)
	if err != nil {
		return fmt.Errorf("store: read schema version: %w", err)
	}
	if cur > len(steps) {
		return fmt.Errorf("store: database schema version %d is newer than this binary's %d; refusing to use it", cur, len(steps))
	}
	for _, m := range steps[cur:] {
		if err := applyMigration(ctx, db, m); err != nil {
			return err
		}
	}
	return nil
}

func applyMigration(ctx context.Context, db *sql.DB, m Migration) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: migration %d (%s): begin: %w", m.Version, m.Name, err)
	}
	defer tx.Rollback() // no-op after Commit

	var cur int
	if err := tx.QueryRowContext(ctx, `SELECT ifnull(max(version), 0) FROM schema_version`).Scan(&cur); err != nil {
		return fmt.Errorf("store: migration %d (%s): read version: %w", m.Version, m.Name, err)
	}
	if cur >= m.Version {
		// Another process applied it between our read and our lock.
		return nil
	}
	if cur != m.Version-1 {
		return fmt.Errorf("store: migration %d (%s): database is at version %d", m.Version, m.Name, cur)
	}
	if strings.TrimSpace(m.SQL) != "" {
		if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
			return fmt.Errorf("store: migration %d (%s): %w", m.Version, m.Name, err)
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_version (version, name, applied_at) VALUES (?, ?, ?)`,
		m.Version, m.Name, time.Now().UTC().Format(time.RFC3339Nano)); err != nil {
		return fmt.Errorf("store: migration %d (%s): record version: %w", m.Version, m.Name, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: migration %d (%s): commit: %w", m.Version, m.Name, err)
	}
	return nil
}

// querier is what currentVersion needs from *sql.DB or *sql.Tx.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func currentVersion(ctx context.Context, q querier) (int, error) {
	var v int
	if err := q.QueryRowContext(ctx, `SELECT ifnull(max(version), 0) FROM schema_version`).Scan(&v); err != nil {
		return 0, err
	}
	return v, nil
}
