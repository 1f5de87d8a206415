package audit

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
)

// VerifyDatabase verifies the audit log in the database file at path
// without a daemon and without changing the file: it opens it read-only
// (no migration, no recovery writes) and runs what Log.Verify runs, with
// opts' key and checkpoint file. It works while a daemon has the file open
// (WAL lets readers in) and when it does not, which is when it is needed:
// a daemon refuses to start on a log its key does not authenticate.
func VerifyDatabase(ctx context.Context, path string, opts VerifyOptions) (Result, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return Result{}, err
	}
	if _, err := os.Stat(abs); err != nil {
		return Result{}, fmt.Errorf("audit: verify database: %w", err)
	}
	q := url.Values{}
	q.Set("mode", "ro")
	q.Add("_pragma", "query_only(1)")
	q.Add("_pragma", "busy_timeout(10000)")
	u := url.URL{Scheme: "file", Path: abs, RawQuery: q.Encode()}
	db, err := sql.Open("sqlite", u.String())
	if err != nil {
		return Result{}, fmt.Errorf("audit: verify database: %w", err)
	}
	defer db.Close()
	db.SetMaxOpenConns(8)
	l := &Log{read: db, dbPath: abs, opts: Options{Key: opts.Key, CheckpointFile: opts.CheckpointFile}}
	return l.Verify(ctx)
}
