package audit

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// benchEntry is a typical sandbox.exec record: a command line, an exit
// code, byte counts and a duration.
func benchEntry(w, i int) Entry {
	return Entry{
		Session: fmt.Sprintf("sess-%04d", w),
		Actor:   "api:token-1",
		Kind:    KindSandboxExec,
		Data: map[string]any{
			"sandbox":   fmt.Sprintf("sb-%04d", w),
			"argv":      []string{"sh", "-c", "go test ./... 2>&1 | tail -n 20"},
			"exit_code": 0,
			"stdout":    4096 + i,
			"stderr":    0,
			"wall_ms":   1234,
		},
	}
}

// BenchmarkAppend measures acknowledged appends per second with 1, 8, 64
// and 256 goroutines appending at once, configured as the daemon runs the
// log: keyed (a MAC per record) and checkpointed to a file. Every append
// waits for its commit (synchronous=FULL: one fsync of the WAL per batch),
// so the single-appender figure is the fsync latency of the disk (compare
// BenchmarkFloorFdatasync, run beside it) and the concurrent ones show
// group commit.
func BenchmarkAppend(b *testing.B) {
	for _, conc := range []int{1, 8, 64, 256} {
		b.Run(fmt.Sprintf("appenders=%d", conc), func(b *testing.B) {
			benchAppend(b, conc, false, true)
		})
	}
}

// BenchmarkAppendUnkeyed is BenchmarkAppend without a key or checkpoints
// (the library's zero Options).
func BenchmarkAppendUnkeyed(b *testing.B) {
	for _, conc := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("appenders=%d", conc), func(b *testing.B) {
			benchAppend(b, conc, false, false)
		})
	}
}

// BenchmarkAppendSyncNormal is BenchmarkAppend with the writer switched to
// synchronous=NORMAL, which the store does not use; it is here to show what
// the durability choice costs (see store.Open).
func BenchmarkAppendSyncNormal(b *testing.B) {
	for _, conc := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("appenders=%d", conc), func(b *testing.B) {
			benchAppend(b, conc, true, true)
		})
	}
}

// benchOptions are the daemon's: a key and a checkpoint file.
func benchOptions(b *testing.B) Options {
	k, _, err := EnsureKey(filepath.Join(b.TempDir(), "audit.key"))
	if err != nil {
		b.Fatal(err)
	}
	return Options{Key: k, CheckpointFile: filepath.Join(b.TempDir(), "checkpoints.jsonl")}
}

func benchAppend(b *testing.B, conc int, syncNormal, keyed bool) {
	ctx := context.Background()
	var opts Options
	if keyed {
		opts = benchOptions(b)
	}
	_, l := openLog(b, filepath.Join(b.TempDir(), "db"), opts)
	if syncNormal {
		// The writer pool has exactly one connection, kept open, so this
		// pragma sticks for the whole benchmark.
		if _, err := l.write.Exec(`PRAGMA synchronous=NORMAL`); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu0 := time.Now(), processCPU()
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				if _, err := l.Append(ctx, benchEntry(w, int(i))); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed, cpu := time.Since(start), processCPU()-cpu0
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "appends/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// bulkLoad writes n chained records straight into the table in large
// transactions: the fast path for building a big log to verify, bypassing
// Append's per-record redaction and acknowledgement.
func bulkLoad(b *testing.B, l *Log, n int) {
	b.Helper()
	ctx := context.Background()
	data := `{"argv":["sh","-c","go test ./... 2>&1 | tail -n 20"],"exit_code":0,"sandbox":"sb-0001","stderr":0,"stdout":4096,"wall_ms":1234}`
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var h hasher
	h.init()
	prev := GenesisHash
	const chunk = 50000
	for start := 1; start <= n; start += chunk {
		tx, err := l.write.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		stmt, err := tx.PrepareContext(ctx, insertSQL)
		if err != nil {
			b.Fatal(err)
		}
		for seq := start; seq < start+chunk && seq <= n; seq++ {
			ts := FormatTime(base.Add(time.Duration(seq) * time.Microsecond))
			session := fmt.Sprintf("sess-%04d", seq%100)
			sum, err := h.sum(prev, int64(seq), ts, session, "api:token-1", KindSandboxExec, data)
			if err != nil {
				b.Fatal(err)
			}
			hs := hex.EncodeToString(sum[:])
			mac := ""
			if l.mac != nil {
				mac = l.mac.sumHex(int64(seq), &sum)
			}
			if _, err := stmt.ExecContext(ctx, seq, ts, session, "api:token-1", KindSandboxExec, data, prev, hs, mac); err != nil {
				b.Fatal(err)
			}
			prev = hs
		}
		stmt.Close()
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerify1M measures Verify over a log of one million records,
// keyed as the daemon writes it: with every MAC checked, as the daemon
// does, and with the MACs left unchecked (the SHA-256 chain only), on the
// same file in the same run. Two floors run beside them on the same file:
// floor=scan reads the rows exactly as Verify does (the same query, split
// into the same ranges on as many goroutines) and does nothing with them;
// floor=sha256 hashes a row's bytes once per record on as many goroutines,
// which is the least the chain check itself costs.
func BenchmarkVerify1M(b *testing.B) {
	const n = 1_000_000
	ctx := context.Background()
	opts := benchOptions(b)
	_, l := openLog(b, filepath.Join(b.TempDir(), "db"), opts)
	t0 := time.Now()
	bulkLoad(b, l, n)
	b.Logf("built %d records in %v", n, time.Since(t0).Round(time.Millisecond))
	verifyRun := func(b *testing.B, run func(b *testing.B)) {
		b.ReportAllocs()
		b.ResetTimer()
		start, cpu0 := time.Now(), processCPU()
		for i := 0; i < b.N; i++ {
			run(b)
		}
		elapsed, cpu := time.Since(start), processCPU()-cpu0
		b.StopTimer()
		b.ReportMetric(float64(n)*float64(b.N)/elapsed.Seconds(), "records/s")
		b.ReportMetric(elapsed.Seconds()/float64(b.N), "s/verify")
		b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/verify")
	}
	for _, mode := range []string{"checked", "unchecked"} {
		b.Run("macs="+mode, func(b *testing.B) {
			l.opts.Key = opts.Key
			if mode == "unchecked" {
				l.opts.Key = nil
			}
			defer func() { l.opts.Key = opts.Key }()
			verifyRun(b, func(b *testing.B) {
				res, err := l.Verify(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if !res.OK || res.Checked != n {
					b.Fatalf("Verify = %v", res)
				}
			})
		})
	}
	workers := int64(runtime.GOMAXPROCS(0))
	workers = min(workers, max(1, n/minSegment))
	var sample string
	if err := l.read.QueryRowContext(ctx, verifySQL, 0, 1).Scan(&sample); err != nil {
		b.Fatal(err)
	}
	b.Run("floor=scan", func(b *testing.B) {
		verifyRun(b, func(b *testing.B) {
			var rows atomic.Int64
			parallelRanges(b, n, workers, func(lo, hi int64) error {
				rs, err := l.read.QueryContext(ctx, verifySQL, lo, hi)
				if err != nil {
					return err
				}
				defer rs.Close()
				var packed string
				for rs.Next() {
					if err := rs.Scan(&packed); err != nil {
						return err
					}
					rows.Add(1)
				}
				return rs.Err()
			})
			if rows.Load() != n {
				b.Fatalf("scanned %d rows", rows.Load())
			}
		})
	})
	b.Run("floor=sha256", func(b *testing.B) {
		row := []byte(sample)
		verifyRun(b, func(b *testing.B) {
			parallelRanges(b, n, workers, func(lo, hi int64) error {
				for i := lo; i < hi; i++ {
					sha256.Sum256(row)
				}
				return nil
			})
		})
	})
}

// parallelRanges splits (0, n] into workers contiguous ranges, as Verify
// does, and runs f on each in its own goroutine.
func parallelRanges(b *testing.B, n, workers int64, f func(lo, hi int64) error) {
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(n*i/workers, n*(i+1)/workers)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCanonicalize measures the per-record CPU work Append does before
// queueing: redaction (exact secrets, the pattern prefilter), the bounds
// and canonical encoding of a typical sandbox.exec record.
func BenchmarkCanonicalize(b *testing.B) {
	r := NewRedactor("hunter2-the-daemon-token-xyz", "sk-the-provider-key-0123456789abcdef")
	e := benchEntry(3, 7)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := r.Canonicalize(e.Data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendWith: a row and its record, as a create writes them,
// committed together (AppendWith) against the pattern it replaced, timed
// in the same iterations: the caller's own transaction with the row
// (unsynced, synchronous=NORMAL for it alone, since the record's fsync
// covers it), then Append. Reported: each one's p50 and the ratio.
func BenchmarkAppendWith(b *testing.B) {
	ctx := context.Background()
	st, l := openLog(b, filepath.Join(b.TempDir(), "db"), benchOptions(b))
	if _, err := st.DB().Exec(`CREATE TABLE rows (id TEXT PRIMARY KEY, owner TEXT, state TEXT, spec TEXT, created_at TEXT)`); err != nil {
		b.Fatal(err)
	}
	const insert = `INSERT INTO rows (id, owner, state, spec, created_at) VALUES (?, ?, 'running', ?, ?)`
	ins, err := st.DB().PrepareContext(ctx, insert)
	if err != nil {
		b.Fatal(err)
	}
	defer ins.Close()
	spec := fmt.Sprintf(`{"limits":{"memory_bytes":536870912,"pids":256},"pad":%q}`, make([]byte, 400))
	row := func(id string) Change {
		return func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.StmtContext(ctx, ins).ExecContext(ctx, id, "owner-1", spec, time.Now().UTC().Format(TimeLayout))
			return err
		}
	}
	// ownRow is the row's transaction of the replaced pattern; it gives
	// the writer (the store's one connection) back before the Append.
	ownRow := func(id string) error {
		conn, err := st.DB().Conn(ctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, `PRAGMA synchronous = NORMAL`); err != nil {
			return err
		}
		tx, err := conn.BeginTx(ctx, nil)
		if err == nil {
			if _, err = tx.ExecContext(ctx, insert, id, "owner-1", spec, time.Now().UTC().Format(TimeLayout)); err != nil {
				tx.Rollback()
			} else {
				err = tx.Commit()
			}
		}
		if _, rerr := conn.ExecContext(ctx, `PRAGMA synchronous = FULL`); err == nil {
			err = rerr
		}
		return err
	}
	ownTx := func(id string) error {
		if err := ownRow(id); err != nil {
			return err
		}
		_, err := l.Append(ctx, benchEntry(0, 0))
		return err
	}
	var withRate, ownRate float64
	if conc := 8; b.N > 1 {
		// Concurrently: conc goroutines writing pairs, each pattern in
		// turn, twice; pairs per second of each.
		rate := func(pair func(id string) error, tag string) float64 {
			var next atomic.Int64
			var wg sync.WaitGroup
			start := time.Now()
			for w := 0; w < conc; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
						if err := pair(fmt.Sprint(tag, "-", i)); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			return float64(b.N) / time.Since(start).Seconds()
		}
		for round := 0; round < 2; round++ {
			withRate += rate(func(id string) error {
				_, err := l.AppendWith(ctx, benchEntry(0, 0), row(id))
				return err
			}, fmt.Sprint("cw", round)) / 2
			ownRate += rate(ownTx, fmt.Sprint("co", round)) / 2
		}
		// Reported last: ResetTimer drops the metrics reported before it.
		defer b.ReportMetric(withRate, "with-8-pairs/s")
		defer b.ReportMetric(ownRate, "own-tx-then-append-8-pairs/s")
	}
	var with, before []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := l.AppendWith(ctx, benchEntry(0, i), row(fmt.Sprint("with-", i))); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := ownTx(fmt.Sprint("own-", i)); err != nil {
			b.Fatal(err)
		}
		with, before = append(with, t1.Sub(t0)), append(before, time.Since(t1))
	}
	b.StopTimer()
	p50 := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds()) / 1000
	}
	w, o := p50(with), p50(before)
	b.ReportMetric(w, "with-p50-ms")
	b.ReportMetric(o, "own-tx-then-append-p50-ms")
	b.ReportMetric(w/o, "ratio")
}
