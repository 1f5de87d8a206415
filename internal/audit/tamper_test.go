package audit

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// dropGuards removes the append-only triggers, as an attacker with write
// access to the file would before tampering.
func dropGuards(t *testing.T, db *sql.DB) {
	t.Helper()
	for _, trg := range []string{"audit_log_no_update", "audit_log_no_delete"} {
		if _, err := db.Exec(`DROP TRIGGER IF EXISTS ` + trg); err != nil {
			t.Fatalf("drop %s: %v", trg, err)
		}
	}
}

func tamper(t *testing.T, l *Log, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if _, err := l.write.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

func storedRecord(t *testing.T, l *Log, seq int64) Record {
	t.Helper()
	recs, err := l.Tail(context.Background(), seq-1, 1)
	if err != nil || len(recs) != 1 || recs[0].Seq != seq {
		t.Fatalf("read record %d: %v %v", seq, recs, err)
	}
	return recs[0]
}

// swapSeqs exchanges the seq of rows a and b, through a seq no row has
// (seq is the primary key).
func swapSeqs(t *testing.T, l *Log, a, b int64) {
	t.Helper()
	tamper(t, l, fmt.Sprintf(`UPDATE audit_log SET seq = 1000000 WHERE seq = %d`, a),
		fmt.Sprintf(`UPDATE audit_log SET seq = %d WHERE seq = %d`, a, b),
		fmt.Sprintf(`UPDATE audit_log SET seq = %d WHERE seq = 1000000`, b))
}

// makeRoomAt shifts rows seq.. up by one, so that a forged row can be
// inserted at seq, and returns the row before it. (The detour through
// large seqs is because seq is the primary key.)
func makeRoomAt(t *testing.T, l *Log, seq int64) Record {
	t.Helper()
	prev := storedRecord(t, l, seq-1)
	tamper(t, l, fmt.Sprintf(`UPDATE audit_log SET seq = seq + 1000001 WHERE seq >= %d`, seq),
		`UPDATE audit_log SET seq = seq - 1000000 WHERE seq > 1000000`)
	return prev
}

// rebuildUnconstrained recreates audit_log with the same rows but without
// column types or constraints, so that it takes values the schema refuses.
func rebuildUnconstrained(t *testing.T, l *Log) {
	t.Helper()
	tamper(t, l, `ALTER TABLE audit_log RENAME TO audit_old`,
		`CREATE TABLE audit_log (seq INTEGER PRIMARY KEY, time, session, actor, kind, data, prev_hash, hash, mac)`,
		`INSERT INTO audit_log SELECT * FROM audit_old`,
		`DROP TABLE audit_old`)
}

// insertRecord inserts r as is.
func insertRecord(t *testing.T, l *Log, r Record) {
	t.Helper()
	tamper(t, l, fmt.Sprintf(`INSERT INTO audit_log VALUES (%d, '%s', '%s', '%s', '%s', '%s', '%s', '%s', '%s')`,
		r.Seq, FormatTime(r.Time), r.Session, r.Actor, r.Kind, r.Data, r.PrevHash, r.Hash, r.MAC))
}

func TestTamperDetection(t *testing.T) {
	const n = 10
	cases := []struct {
		name    string
		tamper  func(t *testing.T, l *Log)
		badSeq  int64
		problem Problem
	}{
		{
			name:    "edit data",
			tamper:  func(t *testing.T, l *Log) { tamper(t, l, `UPDATE audit_log SET data = '{"i":999}' WHERE seq = 5`) },
			badSeq:  5,
			problem: ProblemEdited,
		},
		{
			name:    "edit actor",
			tamper:  func(t *testing.T, l *Log) { tamper(t, l, `UPDATE audit_log SET actor = 'someone-else' WHERE seq = 1`) },
			badSeq:  1,
			problem: ProblemEdited,
		},
		{
			name: "edit time by one nanosecond",
			tamper: func(t *testing.T, l *Log) {
				r := storedRecord(t, l, 7)
				tamper(t, l, fmt.Sprintf(`UPDATE audit_log SET time = '%s' WHERE seq = 7`, FormatTime(r.Time.Add(time.Nanosecond))))
			},
			badSeq:  7,
			problem: ProblemEdited,
		},
		{
			name:    "reformat data without changing its meaning",
			tamper:  func(t *testing.T, l *Log) { tamper(t, l, `UPDATE audit_log SET data = ' ' || data WHERE seq = 4`) },
			badSeq:  4,
			problem: ProblemEdited,
		},
		{
			// The attacker re-hashes the edited record; the next record's
			// link then breaks.
			name: "edit data and recompute its hash",
			tamper: func(t *testing.T, l *Log) {
				r := storedRecord(t, l, 5)
				r.Data = json.RawMessage(`{"i":999}`)
				h, err := r.ComputeHash()
				if err != nil {
					t.Fatal(err)
				}
				tamper(t, l, fmt.Sprintf(`UPDATE audit_log SET data = '%s', hash = '%s' WHERE seq = 5`, r.Data, h))
			},
			badSeq:  6,
			problem: ProblemBrokenChain,
		},
		{
			name:    "delete a middle row",
			tamper:  func(t *testing.T, l *Log) { tamper(t, l, `DELETE FROM audit_log WHERE seq = 5`) },
			badSeq:  5,
			problem: ProblemMissing,
		},
		{
			name:    "delete the first row",
			tamper:  func(t *testing.T, l *Log) { tamper(t, l, `DELETE FROM audit_log WHERE seq = 1`) },
			badSeq:  1,
			problem: ProblemMissing,
		},
		{
			name:    "delete a range",
			tamper:  func(t *testing.T, l *Log) { tamper(t, l, `DELETE FROM audit_log WHERE seq BETWEEN 3 AND 6`) },
			badSeq:  3,
			problem: ProblemMissing,
		},
		{
			// Delete row 5 and renumber the rest down, so seq has no gap. (The
			// detour through large seqs is because seq is the primary key.)
			name: "delete a row and close the gap",
			tamper: func(t *testing.T, l *Log) {
				tamper(t, l, `DELETE FROM audit_log WHERE seq = 5`,
					`UPDATE audit_log SET seq = seq + 1000000 WHERE seq > 5`,
					`UPDATE audit_log SET seq = seq - 1000001 WHERE seq > 1000000`)
			},
			badSeq:  5,
			problem: ProblemBrokenChain,
		},
		{
			name: "insert a forged row at the end",
			tamper: func(t *testing.T, l *Log) {
				last := storedRecord(t, l, n)
				insertRecord(t, l, Record{Seq: n + 1, Time: last.Time, Actor: "attacker", Kind: KindApprovalDecide,
					Data: json.RawMessage(`{"approved":true}`), PrevHash: last.Hash, Hash: strings.Repeat("ab", 32)})
			},
			badSeq:  n + 1,
			problem: ProblemEdited,
		},
		{
			// Shift rows 5.. up by one and put a forged row at 5 whose hash
			// is computed correctly over its own fields: the forged row
			// itself checks out, and the old row 5 (now 6) no longer does.
			name: "insert a well-formed forged row in the middle",
			tamper: func(t *testing.T, l *Log) {
				prev := makeRoomAt(t, l, 5)
				forged := Record{Seq: 5, Time: prev.Time, Actor: "attacker", Kind: KindApprovalDecide,
					Data: json.RawMessage(`{"approved":true}`), PrevHash: prev.Hash}
				h, err := forged.ComputeHash()
				if err != nil {
					t.Fatal(err)
				}
				forged.Hash = h
				insertRecord(t, l, forged)
			},
			badSeq:  6,
			problem: ProblemBrokenChain,
		},
		{
			name: "insert a sloppy forged row in the middle",
			tamper: func(t *testing.T, l *Log) {
				prev := makeRoomAt(t, l, 5)
				insertRecord(t, l, Record{Seq: 5, Time: prev.Time, Actor: "attacker", Kind: KindApprovalDecide,
					Data: json.RawMessage(`{}`), PrevHash: prev.Hash, Hash: prev.Hash})
			},
			badSeq:  5,
			problem: ProblemEdited,
		},
		{
			name:    "swap two rows' seq",
			tamper:  func(t *testing.T, l *Log) { swapSeqs(t, l, 4, 8) },
			badSeq:  4,
			problem: ProblemBrokenChain,
		},
		{
			name:    "swap two adjacent rows' seq",
			tamper:  func(t *testing.T, l *Log) { swapSeqs(t, l, 9, 10) },
			badSeq:  9,
			problem: ProblemBrokenChain,
		},
		{
			// Someone rebuilds the table without its constraints to store
			// values the original schema refuses.
			name: "null a field in a rebuilt table",
			tamper: func(t *testing.T, l *Log) {
				rebuildUnconstrained(t, l)
				tamper(t, l, `UPDATE audit_log SET session = NULL WHERE seq = 6`)
			},
			badSeq:  6,
			problem: ProblemEdited,
		},
		{
			name: "retype a field in a rebuilt table",
			tamper: func(t *testing.T, l *Log) {
				rebuildUnconstrained(t, l)
				tamper(t, l, `UPDATE audit_log SET actor = 12345 WHERE seq = 2`)
			},
			badSeq:  2,
			problem: ProblemEdited,
		},
		{
			name: "edit prev_hash",
			tamper: func(t *testing.T, l *Log) {
				tamper(t, l, `UPDATE audit_log SET prev_hash = '`+strings.Repeat("0", 64)+`' WHERE seq = 3`)
			},
			badSeq:  3,
			problem: ProblemBrokenChain,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := newLog(t, Options{})
			appendN(t, l, n)
			mustVerifyOK(t, l, n)
			dropGuards(t, l.write)
			c.tamper(t, l)
			// Verify splits the log into ranges checked in parallel; the
			// answer must not depend on where the ranges meet.
			var first Result
			for segs := 1; segs <= n+1; segs++ {
				l.verifySegments = segs
				res, err := l.Verify(context.Background())
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				if res.OK || res.BadSeq != c.badSeq || res.Problem != c.problem {
					t.Fatalf("Verify with %d segments = %+v\nwant first bad seq %d (%s)", segs, res, c.badSeq, c.problem)
				}
				if res.Checked != c.badSeq-1 {
					t.Errorf("Checked = %d, want %d (the records before the bad one)", res.Checked, c.badSeq-1)
				}
				if segs == 1 {
					first = res
					t.Log(res)
				} else if res != first {
					t.Errorf("with %d segments: %+v\nwith 1: %+v", segs, res, first)
				}
			}
		})
	}
}

// TestTamperFileBytes edits the database file itself, below SQLite: no
// trigger is involved at all.
func TestTamperFileBytes(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "db")
	st := openStore(t, path)
	l, err := New(ctx, st, Options{})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 10)
	l.Close()
	st.Close() // checkpoints the WAL into the main file

	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	old := []byte(`"argv":["echo","6"]`)
	if bytes.Count(b, old) != 1 {
		t.Fatalf("record 7 (i=6) data found %d times in the file", bytes.Count(b, old))
	}
	b = bytes.Replace(b, old, []byte(`"argv":["rm!!","6"]`), 1)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}

	_, l2 := openLog(t, path, Options{})
	res, err := l2.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.OK || res.BadSeq != 7 || res.Problem != ProblemEdited {
		t.Fatalf("Verify = %+v, want seq 7 edited", res)
	}
}

func TestTriggersRefuseUpdateAndDelete(t *testing.T) {
	l := newLog(t, Options{})
	appendN(t, l, 3)
	for _, s := range []string{
		`UPDATE audit_log SET data = '{}' WHERE seq = 2`,
		`UPDATE audit_log SET seq = seq + 100`,
		`DELETE FROM audit_log WHERE seq = 3`,
		`DELETE FROM audit_log`,
	} {
		_, err := l.write.Exec(s)
		if err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: err = %v, want append-only refusal", s, err)
		}
	}
	mustVerifyOK(t, l, 3)
}

func TestSplitPacked(t *testing.T) {
	good := "1,2,3,2,2,1,1,2:abbcccdd{}pHmm"
	f, ok := splitPacked(good)
	if !ok || f != [packedFields]string{"a", "bb", "ccc", "dd", "{}", "p", "H", "mm"} {
		t.Fatalf("splitPacked(%q) = %q, %v", good, f, ok)
	}
	if f, ok := splitPacked("1,2,3,2,2,1,1,0:abbcccdd{}pH"); !ok || f[7] != "" {
		t.Fatalf("an empty mac: %q, %v", f, ok)
	}
	for _, bad := range []string{
		"", ":", "1,2,3,2,2,1,1:abbcccdd{}pH", "1,2,3,2,2,1,1,0:abbcccdd{}pHX", "1,2,3,2,2,1,2,0:abbcccdd{}pH",
		"1,2,3,2,2,1,1,0;abbcccdd{}pH", "x,2,3,2,2,1,1,0:abbcccdd{}pH", "1,2,3,2,2,1,,1,0:abbcccdd{}pH", "999999999999999,0,0,0,0,0,0,0:",
	} {
		if f, ok := splitPacked(bad); ok {
			t.Errorf("splitPacked(%q) accepted: %q", bad, f)
		}
	}
}

// TestAppendIgnoresEditedHead: a Log chains onto the hash it committed,
// not onto what the table says now, so an edited newest record is not
// buried under records chained onto the edit: the next record's
// prev_hash is the true hash, and Verify names the edited one.
func TestAppendIgnoresEditedHead(t *testing.T) {
	l := newLog(t, Options{})
	recs := appendN(t, l, 3)
	dropGuards(t, l.write)
	tamper(t, l, `UPDATE audit_log SET hash = 'not-a-hash' WHERE seq = 3`)
	rec, err := l.Append(context.Background(), Entry{Actor: "a", Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Seq != 4 || rec.PrevHash != recs[2].Hash {
		t.Fatalf("appended seq %d onto %q, want 4 onto record 3's true hash %q", rec.Seq, rec.PrevHash, recs[2].Hash)
	}
	res, err := l.Verify(context.Background())
	if err != nil || res.OK || res.BadSeq != 3 || res.Problem != ProblemEdited {
		t.Fatalf("Verify = %+v, %v", res, err)
	}
}
