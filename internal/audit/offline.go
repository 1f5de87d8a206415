package audit

import (
	"context"
	"fmt"

	"github.com/ironclaw/ironclaw/internal/store"
)

// VerifyDatabase verifies the audit log in the database file at path
// without a daemon and without changing the file: it opens it read-only
// (no migration, no recovery writes) and runs what Log.Verify runs, with
// opts' key and checkpoint file. It works while a daemon has the file open
// (WAL lets readers in) and when it does not, which is when it is needed:
// a daemon refuses to start on a log its key does not authenticate.
func VerifyDatabase(ctx context.Context, path string, opts VerifyOptions) (Result, error) {
	db, err := store.OpenReadOnly(path)
	if err != nil {
		return Result{}, fmt.Errorf("audit: verify database: %w", err)
	}
	defer db.Close()
	l := &Log{read: db, opts: Options{Key: opts.Key, CheckpointFile: opts.CheckpointFile}}
	return l.Verify(ctx)
}
