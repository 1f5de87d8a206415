// Package audittest gives tests a real audit log: a SQLite store in a
// temporary directory with an audit.Log on it, closed when the test ends,
// and a way to wait for the records that asynchronous writers (the egress
// broker, the model proxy) append. Only tests import it; package audit's
// own tests cannot (they are inside the package it imports).
package audittest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/store"
)

// Open opens a new store in t.TempDir() and an audit log with the default
// options on it. Both are closed when the test ends.
func Open(t testing.TB) (*store.Store, *audit.Log) {
	t.Helper()
	return OpenAt(t, filepath.Join(t.TempDir(), "state.db"))
}

// OpenAt is Open on the database file at path, new or not: a test that
// reopens a store after closing it sees what the earlier one wrote. Both
// are closed when the test ends; closing them earlier as well is allowed.
func OpenAt(t testing.TB, path string) (*store.Store, *audit.Log) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	l, err := audit.New(ctx, st, audit.Options{})
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(); st.Close() })
	return st, l
}

// Wait polls l until it holds at least n records that keep accepts (all
// records when keep is nil) and returns those it found, oldest first. It
// fails the test when they are not there within five seconds.
func Wait(t testing.TB, l *audit.Log, n int, keep func(audit.Record) bool) []audit.Record {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		all, err := l.Tail(context.Background(), 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		var recs []audit.Record
		for _, r := range all {
			if keep == nil || keep(r) {
				recs = append(recs, r)
			}
		}
		if len(recs) >= n {
			return recs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d audit records, want %d", len(recs), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
