package daemon

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/daemontest"
	"github.com/ironclaw/ironclaw/internal/store"
)

// TestHostileAuditDaemonCustody runs the daemon with its audit key and
// checkpoints outside the data directory, then attacks the data directory
// between runs: a cut tail is reported by GET /v1/audit/verify after the
// restart, and a rewritten chain stops the daemon from starting while the
// offline check names the record.
func TestHostileAuditDaemonCustody(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "data")
	keyFile := filepath.Join(root, "etc", "audit.key")
	cpFile := filepath.Join(root, "log", "checkpoints.jsonl")
	mod := func(c *Config) { c.AuditKeyFile, c.AuditCheckpointFile = keyFile, cpFile }
	ctx := context.Background()

	r := startDaemon(t, dir, mod)
	ag, op := r.client(t, false), r.client(t, true)
	sb := daemontest.CreateSandbox(t, ag)
	for i := 0; i < 3; i++ {
		if _, err := ag.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "true"}); err != nil {
			t.Fatal(err)
		}
	}
	v, err := op.AuditVerify(ctx)
	if err != nil || !v.OK || v.KeyID == "" || v.Authenticated != v.Checked || v.Checkpoints.File != cpFile {
		t.Fatalf("verify: %+v %v", v, err)
	}
	r.stop(t)
	if st, err := os.Stat(keyFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st, err)
	}

	// Cut the newest two records.
	var last int64
	tamperDB(t, dir, func(st *store.Store) {
		st.DB().QueryRow(`SELECT max(seq) FROM audit_log`).Scan(&last)
		if _, err := st.DB().Exec(`DELETE FROM audit_log WHERE seq > ?`, last-2); err != nil {
			t.Fatal(err)
		}
	})
	r = startDaemon(t, dir, mod)
	v, err = r.client(t, true).AuditVerify(ctx)
	if err != nil || v.OK || v.Problem != string(audit.ProblemTruncated) || v.CheckpointSeq != last || v.BadSeq != last-1 {
		t.Fatalf("verify after a cut: %+v %v (log had %d records)", v, err, last)
	}
	r.stop(t)

	// Rewrite record 2 and recompute the chain (no key: MACs kept).
	tamperDB(t, dir, func(st *store.Store) {
		rows, err := st.DB().Query(`SELECT seq, time, session, actor, kind, data, prev_hash, hash, mac FROM audit_log ORDER BY seq`)
		if err != nil {
			t.Fatal(err)
		}
		var recs []audit.Record
		for rows.Next() {
			var rec audit.Record
			var ts, data string
			rows.Scan(&rec.Seq, &ts, &rec.Session, &rec.Actor, &rec.Kind, &data, &rec.PrevHash, &rec.Hash, &rec.MAC)
			rec.Time, _ = time.Parse(time.RFC3339Nano, ts)
			rec.Data = json.RawMessage(data)
			recs = append(recs, rec)
		}
		rows.Close()
		prev := audit.GenesisHash
		for _, rec := range recs {
			if rec.Seq >= 2 {
				if rec.Seq == 2 {
					rec.Data = json.RawMessage(`{"argv":["true"]}`)
				}
				rec.PrevHash = prev
				rec.Hash, _ = rec.ComputeHash()
				st.DB().Exec(`UPDATE audit_log SET data = ?, prev_hash = ?, hash = ? WHERE seq = ?`, string(rec.Data), rec.PrevHash, rec.Hash, rec.Seq)
			}
			prev = rec.Hash
		}
	})
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = Run(rctx, Config{Listen: "127.0.0.1:0", DataDir: dir, PoolSize: -1, AuditKeyFile: keyFile, AuditCheckpointFile: cpFile})
	if err == nil || !strings.Contains(err.Error(), "does not authenticate") {
		t.Fatalf("Run on a rewritten log: %v", err)
	}
	key, err := audit.LoadKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	res, err := audit.VerifyDatabase(ctx, filepath.Join(dir, DatabaseFile), audit.VerifyOptions{Key: key, CheckpointFile: cpFile})
	if err != nil || res.OK || res.Problem != audit.ProblemBadMAC || res.BadSeq != 2 {
		t.Fatalf("offline verify of a rewritten log: %+v %v", res, err)
	}
}

func TestAuditCustodyOutsideDataDir(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "data")
	for _, c := range []Config{
		{AuditKeyFile: filepath.Join(dir, "audit.key")},
		{AuditCheckpointFile: filepath.Join(dir, "sub", "cp.jsonl"), AuditKeyFile: filepath.Join(root, "k")},
	} {
		c.Listen, c.DataDir, c.PoolSize = "127.0.0.1:0", dir, -1
		err := Run(context.Background(), c)
		if err == nil || !strings.Contains(err.Error(), "inside the data directory") {
			t.Errorf("Run(%+v) = %v", c, err)
		}
	}
	// A key file other users can read is refused.
	kf := filepath.Join(root, "loose.key")
	if _, _, err := audit.EnsureKey(kf); err != nil {
		t.Fatal(err)
	}
	os.Chmod(kf, 0o644)
	err := Run(context.Background(), Config{Listen: "127.0.0.1:0", DataDir: dir, PoolSize: -1, AuditKeyFile: kf,
		AuditCheckpointFile: filepath.Join(root, "cp.jsonl")})
	if err == nil || !strings.Contains(err.Error(), "other users") {
		t.Errorf("Run with a readable key: %v", err)
	}
}

// tamperDB opens the stopped daemon's database as an attacker with write
// access would: its own store, the append-only triggers dropped.
func tamperDB(t *testing.T, dir string, fn func(*store.Store)) {
	t.Helper()
	st, err := store.Open(context.Background(), filepath.Join(dir, DatabaseFile))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, trg := range []string{"audit_log_no_update", "audit_log_no_delete"} {
		if _, err := st.DB().Exec(`DROP TRIGGER IF EXISTS ` + trg); err != nil {
			t.Fatal(err)
		}
	}
	fn(st)
}
