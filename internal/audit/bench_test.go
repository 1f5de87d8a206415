package audit

import (
	"context"
	"encoding/hex"
	"fmt"
	"path/filepath"
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

// BenchmarkAppend measures acknowledged appends per second with 1, 8 and
// 64 goroutines appending at once, configured as the daemon runs the log:
// keyed (a MAC per record) and checkpointed to a file. Every append waits
// for its commit (synchronous=FULL: one fsync per batch), so the
// single-appender figure is the fsync latency of the disk and the
// concurrent ones show group commit.
func BenchmarkAppend(b *testing.B) {
	for _, conc := range []int{1, 8, 64} {
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
	start := time.Now()
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
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "appends/s")
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
// same file in the same run.
func BenchmarkVerify1M(b *testing.B) {
	const n = 1_000_000
	ctx := context.Background()
	opts := benchOptions(b)
	_, l := openLog(b, filepath.Join(b.TempDir(), "db"), opts)
	t0 := time.Now()
	bulkLoad(b, l, n)
	b.Logf("built %d records in %v", n, time.Since(t0).Round(time.Millisecond))
	for _, mode := range []string{"checked", "unchecked"} {
		b.Run("macs="+mode, func(b *testing.B) {
			l.opts.Key = opts.Key
			if mode == "unchecked" {
				l.opts.Key = nil
			}
			defer func() { l.opts.Key = opts.Key }()
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				res, err := l.Verify(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if !res.OK || res.Checked != n {
					b.Fatalf("Verify = %v", res)
				}
			}
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(n)*float64(b.N)/elapsed.Seconds(), "records/s")
			b.ReportMetric(elapsed.Seconds()/float64(b.N), "s/verify")
		})
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
