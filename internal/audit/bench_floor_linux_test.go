package audit

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/store"
)

// floorRecord is about the size of one stored benchEntry row (its fields,
// hashes and MAC), so the floor writes what one append makes durable.
var floorRecord = []byte(strings.Repeat("x", 420) + "\n")

// BenchmarkFloorFdatasync is the floor BenchmarkAppend/appenders=1 is
// measured against, in the same temp directory's file system: one write
// of a record-sized buffer and one fdatasync per op. mode=append grows the
// file as a log does (each sync also commits the new size); mode=overwrite
// rewrites the same preallocated block, as SQLite's WAL does once it has
// been reset after a checkpoint. mode=overwrite-fsync is overwrite with
// fsync, the call SQLite commits with in this build (see store.Open).
func BenchmarkFloorFdatasync(b *testing.B) {
	for _, mode := range []string{"append", "overwrite", "overwrite-fsync"} {
		b.Run("mode="+mode, func(b *testing.B) {
			f, err := os.OpenFile(filepath.Join(b.TempDir(), "floor"), os.O_RDWR|os.O_CREATE, 0o600)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			overwrite := mode != "append"
			if overwrite {
				if _, err := f.Write(make([]byte, 4096)); err != nil {
					b.Fatal(err)
				}
				if err := f.Sync(); err != nil {
					b.Fatal(err)
				}
			}
			fd := int(f.Fd())
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if overwrite {
					_, err = f.WriteAt(floorRecord, 0)
				} else {
					_, err = f.Write(floorRecord)
				}
				if err != nil {
					b.Fatal(err)
				}
				if mode == "overwrite-fsync" {
					err = syscall.Fsync(fd)
				} else {
					err = syscall.Fdatasync(fd)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAppendAfterIdle is one acknowledged append as the daemon meets
// it: after the process has been idle for gap (a command running between
// its intent and the next request, a quiet agent), beside the floor of
// one record-sized write and fsync after the same gap; the two alternate
// in one loop, so both see the same machine. gap=0 is the back-to-back
// case of BenchmarkAppend/appenders=1. On a guest whose idle vCPUs halt,
// both grow with the gap: the fsync's completion and the committer's
// wake-up each wait for a vCPU to wake (docs/performance.md).
//
// The log's WAL is presized, as the daemon's is (store.Options.PresizeWAL);
// the same appends to a log whose WAL grows, as SQLite's own does for the
// first thousand commits after every start, are the peer growing-p50-us
// (that log is replaced, untimed, by one on a new database every
// growingRun appends, so its WAL never wraps).
func BenchmarkAppendAfterIdle(b *testing.B) {
	for _, gap := range []time.Duration{0, time.Millisecond, 2 * time.Millisecond, 10 * time.Millisecond} {
		b.Run("gap="+gap.String(), func(b *testing.B) {
			ctx := context.Background()
			dir := b.TempDir()
			_, l := openLog(b, filepath.Join(dir, "db"), benchOptions(b))
			growing := openGrowing(b)
			defer func() { growing.close() }()
			f, err := os.OpenFile(filepath.Join(dir, "floor"), os.O_RDWR|os.O_CREATE, 0o600)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			if _, err := f.Write(make([]byte, 4096)); err != nil {
				b.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
			var appends, floors, grown []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				time.Sleep(gap)
				start := time.Now()
				if _, err := f.WriteAt(floorRecord, 0); err != nil {
					b.Fatal(err)
				}
				if err := syscall.Fsync(int(f.Fd())); err != nil {
					b.Fatal(err)
				}
				floors = append(floors, time.Since(start))
				time.Sleep(gap)
				start = time.Now()
				if _, err := l.Append(ctx, benchEntry(0, i)); err != nil {
					b.Fatal(err)
				}
				appends = append(appends, time.Since(start))
				if i > 0 && i%growingRun == 0 {
					b.StopTimer()
					growing.close()
					growing = openGrowing(b)
					b.StartTimer()
				}
				time.Sleep(gap)
				start = time.Now()
				if _, err := growing.log.Append(ctx, benchEntry(0, i)); err != nil {
					b.Fatal(err)
				}
				grown = append(grown, time.Since(start))
			}
			b.StopTimer()
			a, fl := median(appends), median(floors)
			b.ReportMetric(float64(median(grown).Microseconds()), "growing-p50-us")
			b.ReportMetric(float64(a.Microseconds()), "append-p50-us")
			b.ReportMetric(float64(fl.Microseconds()), "floor-p50-us")
			b.ReportMetric(float64((a - fl).Microseconds()), "over-floor-p50-us")
		})
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// growingRun is how many appends a growing-WAL peer takes before it is
// replaced: fewer than fill a WAL to its checkpoint (about 1000 pages, a
// page or two an append), so it never writes over blocks it wrote before.
const growingRun = 400

// growingLog is a log on a store opened without PresizeWAL.
type growingLog struct {
	st  *store.Store
	log *Log
}

// openGrowing opens a growingLog on a new database.
func openGrowing(b *testing.B) growingLog {
	b.Helper()
	st, err := store.Open(context.Background(), filepath.Join(b.TempDir(), "db"))
	if err != nil {
		b.Fatal(err)
	}
	l, err := New(context.Background(), st, benchOptions(b))
	if err != nil {
		b.Fatal(err)
	}
	return growingLog{st, l}
}

func (g growingLog) close() {
	g.log.Close()
	g.st.Close()
}
