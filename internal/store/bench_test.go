package store

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// BenchmarkOpenPresizedWAL is what PresizeWAL adds to a daemon's start:
// Open and Close of an existing database whose WAL SQLite deleted at its
// last close (a clean restart), with PresizeWAL, against the same without
// it in the same iteration (plain-p50-ms).
func BenchmarkOpenPresizedWAL(b *testing.B) {
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "ironclaw.db")
	s, err := Open(ctx, path)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	open := func(presize bool) time.Duration {
		start := time.Now()
		s, err := OpenWith(ctx, path, Options{PresizeWAL: presize})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		took := time.Since(start)
		if _, err := os.Stat(path + "-wal"); err == nil {
			b.Fatal("the WAL outlived the last close")
		}
		return took
	}
	var with, without []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		with = append(with, open(true))
		b.StopTimer()
		without = append(without, open(false))
		b.StartTimer()
	}
	b.StopTimer()
	p50 := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds()) / 1000
	}
	b.ReportMetric(p50(with), "p50-ms")
	b.ReportMetric(p50(without), "plain-p50-ms")
}
