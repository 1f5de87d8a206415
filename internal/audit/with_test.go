package audit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/errdefs"
	"github.com/ironclaw/ironclaw/internal/store"
)

// withStore is a Log on a store that also holds a table "things" with a
// unique key, for the changes AppendWith commits beside its records.
func withStore(t *testing.T, opts Options) (*store.Store, *Log) {
	t.Helper()
	st, l := openLog(t, filepath.Join(t.TempDir(), "db"), opts)
	if _, err := st.DB().Exec(`CREATE TABLE things (k TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	return st, l
}

func insertThing(k string) Change {
	return func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO things (k) VALUES (?)`, k)
		return err
	}
}

func things(t *testing.T, st *store.Store) map[string]bool {
	t.Helper()
	rows, err := st.ReadDB().Query(`SELECT k FROM things`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		out[k] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAppendWithCommitsBoth: the change and its record land together;
// a change the store refuses leaves neither, with ErrChangeRefused and
// the store's error, and the chain goes on from where it was.
func TestAppendWithCommitsBoth(t *testing.T) {
	ctx := context.Background()
	st, l := withStore(t, Options{})
	rec, err := l.AppendWith(ctx, Entry{Session: "sb-a", Actor: "agent", Kind: KindSandboxCreate}, insertThing("a"))
	if err != nil {
		t.Fatal(err)
	}
	if rec.Seq != 1 || !things(t, st)["a"] {
		t.Fatalf("record %d, things %v", rec.Seq, things(t, st))
	}
	_, err = l.AppendWith(ctx, Entry{Session: "sb-a", Actor: "agent", Kind: KindSandboxCreate}, insertThing("a"))
	if !errors.Is(err, ErrChangeRefused) || errdefs.Class(err) != errdefs.ErrUnavailable {
		t.Fatalf("a duplicate key: %v, want ErrChangeRefused", err)
	}
	if seq, _ := l.Head(); seq != 1 {
		t.Fatalf("head %d after a refused change, want 1", seq)
	}
	if _, err := l.AppendWith(ctx, Entry{Actor: "agent", Kind: KindSandboxCreate}, nil); err == nil {
		t.Fatal("AppendWith without a change succeeded")
	}
	if _, err := l.AppendWith(ctx, Entry{Actor: "", Kind: KindSandboxCreate}, insertThing("b")); err == nil || things(t, st)["b"] {
		t.Fatalf("an invalid entry: %v, things %v", err, things(t, st))
	}
	rec, err = l.AppendWith(ctx, Entry{Session: "sb-b", Actor: "agent", Kind: KindSandboxCreate}, insertThing("b"))
	if err != nil || rec.Seq != 2 {
		t.Fatalf("after a refusal: record %d, %v", rec.Seq, err)
	}
	mustVerifyOK(t, l, 2)
}

// TestAppendWithRecordFailureUndoesTheChange: when the record cannot be
// written (here a trigger refuses it, as a full disk would), the change
// it carried is rolled back with it.
func TestAppendWithRecordFailureUndoesTheChange(t *testing.T) {
	ctx := context.Background()
	st, l := withStore(t, Options{})
	if _, err := st.DB().Exec(`CREATE TRIGGER refuse_boom BEFORE INSERT ON audit_log WHEN NEW.kind = 'boom'
		BEGIN SELECT RAISE(ABORT, 'boom refused'); END`); err != nil {
		t.Fatal(err)
	}
	_, err := l.AppendWith(ctx, Entry{Actor: "agent", Kind: "boom"}, insertThing("z"))
	if !errors.Is(err, ErrNotWritten) || errors.Is(err, ErrChangeRefused) {
		t.Fatalf("a refused record: %v, want ErrNotWritten", err)
	}
	if things(t, st)["z"] {
		t.Fatal("the change of a record that was not written was committed")
	}
	if seq, _ := l.Head(); seq != 0 {
		t.Fatalf("head %d", seq)
	}
	appendN(t, l, 2)
	mustVerifyOK(t, l, 2)
}

// TestAppendWithRefusalSparesTheBatch: one refused change in a batch of
// many ends only its own record. The committer is held inside a change
// while every other append queues, so they all form the next batch.
func TestAppendWithRefusalSparesTheBatch(t *testing.T) {
	ctx := context.Background()
	st, l := withStore(t, Options{})
	var wg sync.WaitGroup
	release := holdCommitter(t, l, &wg)
	const n = 20
	errs := make([]error, 3*n)
	for i := 0; i < n; i++ {
		wg.Add(3)
		go func() {
			defer wg.Done()
			_, errs[3*i] = l.AppendWith(ctx, Entry{Actor: "agent", Kind: KindSandboxCreate}, insertThing(fmt.Sprint("k", i)))
		}()
		go func() {
			defer wg.Done()
			_, errs[3*i+1] = l.Append(ctx, Entry{Actor: "agent", Kind: KindSandboxExec, Data: map[string]any{"i": i}})
		}()
		go func() {
			defer wg.Done()
			// Every third change of the batch is refused.
			k := "dup"
			if i%3 != 0 {
				k = fmt.Sprint("j", i)
			}
			_, errs[3*i+2] = l.AppendWith(ctx, Entry{Actor: "agent", Kind: KindSandboxCreate}, insertThing(k))
		}()
	}
	waitQueued(t, l, 3*n)
	release()
	wg.Wait()
	refused := 0
	for i, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, ErrChangeRefused) && i%3 == 2 && (i/3)%3 == 0:
			refused++
		default:
			t.Errorf("append %d: %v", i, err)
		}
	}
	wantRefused := (n + 2) / 3
	if refused != wantRefused {
		t.Fatalf("%d refused, want %d", refused, wantRefused)
	}
	have := things(t, st)
	for i := 0; i < n; i++ {
		if !have[fmt.Sprint("k", i)] || (i%3 != 0) != have[fmt.Sprint("j", i)] {
			t.Fatalf("things %v", have)
		}
	}
	want := int64(1 + 1 + 3*n - wantRefused)
	if seq, _ := l.Head(); seq != want {
		t.Fatalf("head %d, want %d", seq, want)
	}
	mustVerifyOK(t, l, want)
}

// holdCommitter appends a row "dup" (for changes to be refused on), then
// starts an AppendWith whose change holds the committer inside its batch
// until release is called, so that the appends made meanwhile queue and
// form the next batch together. wg covers the holding append.
func holdCommitter(t *testing.T, l *Log, wg *sync.WaitGroup) (release func()) {
	t.Helper()
	ctx := context.Background()
	if _, err := l.AppendWith(ctx, Entry{Actor: "agent", Kind: KindSandboxCreate}, insertThing("dup")); err != nil {
		t.Fatal(err)
	}
	entered, released := make(chan struct{}), make(chan struct{})
	hold := func(ctx context.Context, tx *sql.Tx) error {
		close(entered)
		<-released
		return insertThing("first")(ctx, tx)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := l.AppendWith(ctx, Entry{Actor: "agent", Kind: KindSandboxCreate}, hold); err != nil {
			t.Errorf("the holding append: %v", err)
		}
	}()
	<-entered
	return func() { close(released) }
}

// waitQueued waits until n appends wait in l's queue.
func waitQueued(t *testing.T, l *Log, n int) {
	t.Helper()
	for i := 0; len(l.reqs) < n; i++ {
		if i > 10000 {
			t.Fatalf("%d of %d appends queued", len(l.reqs), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestAppendWithIntentCommitsTogether: the record and the intent that
// follows it are neighbours in the chain even when many other appends
// race them, and a refused change takes the intent with it while the rest
// of the batch is written.
func TestAppendWithIntentCommitsTogether(t *testing.T) {
	ctx := context.Background()
	st, l := withStore(t, Options{})
	var wg sync.WaitGroup
	release := holdCommitter(t, l, &wg)
	const n = 30
	type pair struct {
		rec Record
		in  *Intent
		err error
	}
	pairs := make([]pair, n)
	plain := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			k := fmt.Sprint("k", i)
			if i%5 == 0 {
				k = "dup" // refused
			}
			p := &pairs[i]
			p.rec, p.in, p.err = l.AppendWithIntent(ctx, Entry{Session: k, Actor: "agent", Kind: KindSandboxCreate}, insertThing(k),
				Entry{Session: k, Actor: "agent", Kind: KindSandboxExec, Data: map[string]any{"argv": []string{"true"}}})
		}()
		go func() {
			defer wg.Done()
			_, plain[i] = l.Append(ctx, Entry{Actor: "agent", Kind: KindSandboxExec, Data: map[string]any{"i": i}})
		}()
	}
	waitQueued(t, l, 2*n)
	release()
	wg.Wait()
	written := int64(2) // "dup" and the holding append
	for i, p := range pairs {
		if plain[i] != nil {
			t.Errorf("plain append %d: %v", i, plain[i])
		}
		written++
		if i%5 == 0 {
			if !errors.Is(p.err, ErrChangeRefused) || p.in != nil {
				t.Errorf("pair %d with a refused change: %v, intent %v", i, p.err, p.in)
			}
			continue
		}
		if p.err != nil {
			t.Errorf("pair %d: %v", i, p.err)
			continue
		}
		written += 2
		if p.in.Seq() != p.rec.Seq+1 {
			t.Errorf("pair %d: record %d, intent %d: not neighbours", i, p.rec.Seq, p.in.Seq())
		}
		if _, err := p.in.End(ctx, map[string]any{"exit": 0}); err != nil {
			t.Errorf("end of intent %d: %v", i, err)
		}
		written++
	}
	if t.Failed() {
		return
	}
	recs, err := l.Tail(ctx, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	bySeq := map[int64]Record{}
	for _, r := range recs {
		bySeq[r.Seq] = r
	}
	for i, p := range pairs {
		if p.in == nil {
			continue
		}
		in := bySeq[p.in.Seq()]
		if in.Kind != KindSandboxExec+IntentSuffix || in.Session != fmt.Sprint("k", i) {
			t.Errorf("intent %d is %+v", i, in)
		}
	}
	for _, r := range recs {
		if r.Kind == KindSandboxExec+IntentSuffix && (r.Session == "dup" || !things(t, st)[r.Session]) {
			t.Errorf("intent %d names %q, which has no row", r.Seq, r.Session)
		}
	}
	mustVerifyOK(t, l, written)
}

// TestAppendWithIntentRefusesBadInput: a missing change or an invalid
// intent entry writes nothing.
func TestAppendWithIntentRefusesBadInput(t *testing.T) {
	ctx := context.Background()
	st, l := withStore(t, Options{})
	next := Entry{Session: "a", Actor: "agent", Kind: KindSandboxExec}
	if _, _, err := l.AppendWithIntent(ctx, Entry{Actor: "agent", Kind: KindSandboxCreate}, nil, next); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("no change: %v", err)
	}
	bad := next
	bad.Data = "not an object"
	if _, _, err := l.AppendWithIntent(ctx, Entry{Actor: "agent", Kind: KindSandboxCreate}, insertThing("a"), bad); err == nil {
		t.Fatal("an intent whose data is not an object was accepted")
	}
	if seq, _ := l.Head(); seq != 0 || len(things(t, st)) != 0 {
		t.Fatalf("head %d, things %v after refused input", seq, things(t, st))
	}
}
