package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/store"
)

func mustTime(t testing.TB, s string) time.Time {
	t.Helper()
	tm, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// fakeClock returns a clock that starts at a fixed instant and advances one
// millisecond and a few nanoseconds per reading, so times are distinct and
// exercise the nanosecond digits.
func fakeClock(t testing.TB) func() time.Time {
	var mu sync.Mutex
	now := mustTime(t, "2030-06-01T12:00:00.000000001+02:00")
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(time.Millisecond + 7)
		return now
	}
}

func openStore(t testing.TB, path string) *store.Store {
	t.Helper()
	// As the daemon opens it: commits go into a presized WAL.
	st, err := store.OpenWith(context.Background(), path, store.Options{PresizeWAL: true})
	if err != nil {
		t.Fatalf("store.OpenWith: %v", err)
	}
	return st
}

// openLog opens a store and a Log at path; both are closed at cleanup (and
// closing them earlier is fine).
func openLog(t testing.TB, path string, opts Options) (*store.Store, *Log) {
	t.Helper()
	st := openStore(t, path)
	l, err := New(context.Background(), st, opts)
	if err != nil {
		st.Close()
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		l.Close()
		st.Close()
	})
	return st, l
}

// newLog is openLog on a new database in t.TempDir().
func newLog(t testing.TB, opts Options) *Log {
	t.Helper()
	_, l := openLog(t, filepath.Join(t.TempDir(), "db"), opts)
	return l
}

func appendN(t testing.TB, l *Log, n int) []Record {
	t.Helper()
	var out []Record
	for i := 0; i < n; i++ {
		r, err := l.Append(context.Background(), Entry{
			Session: fmt.Sprintf("sess-%d", i%3),
			Actor:   "tester",
			Kind:    KindSandboxExec,
			Data:    map[string]any{"i": i, "argv": []string{"echo", fmt.Sprint(i)}},
		})
		if err != nil {
			t.Fatalf("Append #%d: %v", i, err)
		}
		out = append(out, r)
	}
	return out
}

func mustVerifyOK(t testing.TB, l *Log, want int64) Result {
	t.Helper()
	res, err := l.Verify(context.Background())
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if !res.OK || res.Checked != want || res.LastSeq != want {
		t.Fatalf("Verify = %+v, want OK with %d records", res, want)
	}
	// The same with the log split into several ranges.
	defer func(n int) { l.verifySegments = n }(l.verifySegments)
	for _, segs := range []int{2, 3, 7} {
		l.verifySegments = segs
		r2, err := l.Verify(context.Background())
		if err != nil {
			t.Fatalf("Verify: %v", err)
		}
		// A checkpoint may be written between two runs.
		a, b := r2, res
		a.Checkpoints, b.Checkpoints = CheckpointSummary{}, CheckpointSummary{}
		if a != b {
			t.Fatalf("Verify with %d segments = %+v, with 1: %+v", segs, r2, res)
		}
	}
	return res
}

func TestAppendTailExportRoundTrip(t *testing.T) {
	ctx := context.Background()
	l := newLog(t, Options{Clock: fakeClock(t)})

	first, err := l.Append(ctx, Entry{
		Session: "sess-1",
		Actor:   "user:alice",
		Kind:    KindSandboxCreate,
		Data:    map[string]any{"image": "alpine", "limits": map[string]any{"memory": "512M", "pids": 256}, "note": "<b>&</b>"},
	})
	if err != nil {
		t.Fatalf("Append: %v", err)
	}
	if first.Seq != 1 || first.PrevHash != GenesisHash {
		t.Errorf("first record seq %d prev %s, want 1 and genesis", first.Seq, first.PrevHash)
	}
	if first.Time.Location() != time.UTC || first.Time.Nanosecond()%1000 == 0 {
		t.Errorf("time %v: want UTC with nanoseconds", first.Time)
	}
	if want := `{"image":"alpine","limits":{"memory":"512M","pids":256},"note":"<b>&</b>"}`; string(first.Data) != want {
		t.Errorf("data %s, want %s", first.Data, want)
	}
	if h, _ := first.ComputeHash(); h != first.Hash {
		t.Errorf("returned record's hash %s does not recompute (%s)", first.Hash, h)
	}
	// An entry without a session, and with no data.
	second, err := l.Append(ctx, Entry{Actor: "daemon", Kind: KindSandboxReap})
	if err != nil {
		t.Fatal(err)
	}
	rest := appendN(t, l, 8)
	all := append([]Record{first, second}, rest...)
	for i := 1; i < len(all); i++ {
		if all[i].Seq != all[i-1].Seq+1 || all[i].PrevHash != all[i-1].Hash {
			t.Fatalf("record %d does not chain onto %d", all[i].Seq, all[i-1].Seq)
		}
		if !all[i].Time.After(all[i-1].Time) {
			t.Errorf("time of %d not after %d", all[i].Seq, all[i-1].Seq)
		}
	}

	got, err := l.Tail(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(all) {
		t.Fatalf("Tail returned %d records, want %d", len(got), len(all))
	}
	for i := range all {
		if !recordsEqual(got[i], all[i]) {
			t.Errorf("Tail[%d] = %+v\nwant %+v", i, got[i], all[i])
		}
	}
	page, err := l.Tail(ctx, 3, 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != 4 || page[0].Seq != 4 || page[3].Seq != 7 {
		t.Errorf("Tail(3, 4) gave seqs %v", seqs(page))
	}
	if l.LastSeq() != int64(len(all)) {
		t.Errorf("LastSeq = %d, want %d", l.LastSeq(), len(all))
	}

	var buf bytes.Buffer
	if err := l.Export(ctx, &buf, 0); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != len(all) {
		t.Fatalf("export has %d lines, want %d", len(lines), len(all))
	}
	if !strings.Contains(lines[0], `"note":"<b>&</b>"`) {
		t.Errorf("export did not keep data bytes as hashed: %s", lines[0])
	}
	for i, line := range lines {
		var r Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		if !recordsEqual(r, all[i]) {
			t.Errorf("export line %d = %+v\nwant %+v", i, r, all[i])
		}
	}
	res, err := VerifyJSONLines(ctx, bytes.NewReader(buf.Bytes()))
	if err != nil || !res.OK || res.Checked != int64(len(all)) {
		t.Errorf("VerifyJSONLines = %+v, %v", res, err)
	}
	// A partial export verifies from its first record.
	buf.Reset()
	if err := l.Export(ctx, &buf, 6); err != nil {
		t.Fatal(err)
	}
	res, err = VerifyJSONLines(ctx, &buf)
	if err != nil || !res.OK || res.FirstSeq != 7 || res.Checked != int64(len(all))-6 {
		t.Errorf("VerifyJSONLines(partial) = %+v, %v", res, err)
	}
	mustVerifyOK(t, l, int64(len(all)))
}

func TestVerifyJSONLinesCatchesEdit(t *testing.T) {
	ctx := context.Background()
	l := newLog(t, Options{})
	appendN(t, l, 5)
	var buf bytes.Buffer
	if err := l.Export(ctx, &buf, 0); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(buf.String(), "\n")
	// Reformatting data (order, spacing) is not tampering...
	lines[1] = strings.Replace(lines[1], `{"argv":["echo","1"],"i":1}`, `{ "i" : 1, "argv" : [ "echo", "1" ] }`, 1)
	res, err := VerifyJSONLines(ctx, strings.NewReader(strings.Join(lines, "\n")))
	if err != nil || !res.OK {
		t.Fatalf("reformatted export: %+v, %v", res, err)
	}
	// ...changing a value is.
	lines[2] = strings.Replace(lines[2], `"i":2`, `"i":22`, 1)
	res, err = VerifyJSONLines(ctx, strings.NewReader(strings.Join(lines, "\n")))
	if err != nil || res.OK || res.BadSeq != 3 || res.Problem != ProblemEdited {
		t.Fatalf("edited export: %+v, %v; want bad seq 3 edited", res, err)
	}
}

func recordsEqual(a, b Record) bool {
	return a.Seq == b.Seq && a.Time.Equal(b.Time) && a.Session == b.Session && a.Actor == b.Actor &&
		a.Kind == b.Kind && bytes.Equal(a.Data, b.Data) && a.PrevHash == b.PrevHash && a.Hash == b.Hash
}

func seqs(rs []Record) []int64 {
	var out []int64
	for _, r := range rs {
		out = append(out, r.Seq)
	}
	return out
}

func TestChainContinuesAcrossReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "db")
	var last Record
	for round := 0; round < 3; round++ {
		st := openStore(t, path)
		l, err := New(ctx, st, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got := l.LastSeq(); got != int64(round*5) {
			t.Errorf("round %d: LastSeq at start %d, want %d", round, got, round*5)
		}
		recs := appendN(t, l, 5)
		if round > 0 && (recs[0].Seq != last.Seq+1 || recs[0].PrevHash != last.Hash) {
			t.Errorf("round %d: first record seq %d prev %s does not continue %d/%s", round, recs[0].Seq, recs[0].PrevHash, last.Seq, last.Hash)
		}
		last = recs[len(recs)-1]
		mustVerifyOK(t, l, int64((round+1)*5))
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestConcurrentAppends(t *testing.T) {
	ctx := context.Background()
	l := newLog(t, Options{})
	const workers, each = 50, 40
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[int64]Record{}
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				r, err := l.Append(ctx, Entry{Session: fmt.Sprint("s", w), Actor: "worker", Kind: KindModelRequest,
					Data: map[string]any{"worker": w, "i": i}})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				if _, dup := seen[r.Seq]; dup {
					errs <- fmt.Errorf("seq %d returned twice", r.Seq)
				}
				seen[r.Seq] = r
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	const total = workers * each
	for s := int64(1); s <= total; s++ {
		if _, ok := seen[s]; !ok {
			t.Fatalf("seq %d never returned", s)
		}
	}
	mustVerifyOK(t, l, total)
	// What each appender was told is what is stored.
	stored, err := l.Tail(ctx, 0, total)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range stored {
		if !recordsEqual(r, seen[r.Seq]) {
			t.Fatalf("stored %+v differs from acknowledged %+v", r, seen[r.Seq])
		}
	}
}

func TestTwoLogsOneStore(t *testing.T) {
	// Two Logs on one file (in real life two processes) must not fork the
	// chain: a batch whose first seq the other took is written again onto
	// the head read under the write lock.
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "db")
	_, a := openLog(t, path, Options{})
	_, b := openLog(t, path, Options{})
	var wg sync.WaitGroup
	for _, l := range []*Log{a, b} {
		for w := 0; w < 5; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 20; i++ {
					if _, err := l.Append(ctx, Entry{Actor: "x", Kind: "k", Data: map[string]int{"i": i}}); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	mustVerifyOK(t, a, 200)
}

// TestTwoLogsTakeTurns: two Logs on one file appending by turns, so that
// every batch but the first finds its seq taken by the other (commit
// retries it onto the head read in the transaction); with AppendWith, the
// retried batch's change runs once in what is committed. Each Log's head
// follows the records it wrote.
func TestTwoLogsTakeTurns(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "db")
	st, a := openLog(t, path, Options{})
	_, b := openLog(t, path, Options{})
	if _, err := st.DB().Exec(`CREATE TABLE things (k TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	const turns = 30
	for i := 0; i < turns; i++ {
		l := []*Log{a, b}[i%2]
		k := fmt.Sprint("t", i)
		rec, err := l.AppendWith(ctx, Entry{Actor: "x", Kind: "k", Data: map[string]int{"i": i}}, insertThing(k))
		if err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
		if rec.Seq != int64(i+1) {
			t.Fatalf("turn %d got seq %d, want %d", i, rec.Seq, i+1)
		}
		if seq, h := l.Head(); seq != rec.Seq || h != rec.Hash {
			t.Fatalf("turn %d: head is %d %s, want the record's %d %s", i, seq, h, rec.Seq, rec.Hash)
		}
	}
	var n int
	if err := st.ReadDB().QueryRow(`SELECT count(*) FROM things`).Scan(&n); err != nil || n != turns {
		t.Fatalf("things: %d rows (%v), want %d", n, err, turns)
	}
	mustVerifyOK(t, a, turns)
}

// TestVanishedHeadIsNotBuried: a record cut from the end of the table
// (someone dropped the trigger) leaves a gap the next append does not
// close, since the Log chains onto the record it committed, and Verify
// names the missing seq.
func TestVanishedHeadIsNotBuried(t *testing.T) {
	ctx := context.Background()
	st, l := openLog(t, filepath.Join(t.TempDir(), "db"), Options{})
	appendN(t, l, 3)
	for _, q := range []string{`DROP TRIGGER audit_log_no_delete`, `DELETE FROM audit_log WHERE seq = 3`} {
		if _, err := st.DB().Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	rec, err := l.Append(ctx, Entry{Actor: "x", Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Seq != 4 {
		t.Fatalf("append after the cut got seq %d, want 4", rec.Seq)
	}
	res, err := l.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.OK || res.BadSeq != 3 || res.Problem != ProblemMissing {
		t.Fatalf("Verify = %+v, want record 3 missing", res)
	}
}

func TestAppendValidation(t *testing.T) {
	ctx := context.Background()
	l := newLog(t, Options{})
	for name, e := range map[string]Entry{
		"no actor":         {Kind: "k"},
		"no kind":          {Actor: "a"},
		"data not object":  {Actor: "a", Kind: "k", Data: []string{"x"}},
		"bad utf8 session": {Actor: "a", Kind: "k", Session: "\xff"},
	} {
		if _, err := l.Append(ctx, e); err == nil {
			t.Errorf("%s: Append accepted %+v", name, e)
		}
	}
	if l.LastSeq() != 0 {
		t.Errorf("rejected appends consumed seqs: LastSeq %d", l.LastSeq())
	}
}

func TestAppendAfterCloseAndCanceled(t *testing.T) {
	ctx := context.Background()
	l := newLog(t, Options{})
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Append(cctx, Entry{Actor: "a", Kind: "k"}); !errors.Is(err, context.Canceled) {
		t.Errorf("Append with canceled ctx: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := l.Append(ctx, Entry{Actor: "a", Kind: "k"}); !errors.Is(err, ErrClosed) {
		t.Errorf("Append after Close: %v, want ErrClosed", err)
	}
}

func TestCloseFlushesQueuedAppends(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "db")
	_, l := openLog(t, path, Options{MaxDelay: 20 * time.Millisecond, MaxBatch: 7})
	const n = 100
	var wg sync.WaitGroup
	results := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := l.Append(ctx, Entry{Actor: "a", Kind: "k", Data: map[string]int{"i": i}})
			results <- err
		}()
	}
	// Close while appends are in flight: every Append must either succeed
	// (and then be in the log) or fail with ErrClosed.
	time.Sleep(5 * time.Millisecond)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(results)
	ok := 0
	for err := range results {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, ErrClosed):
		default:
			t.Errorf("Append: %v", err)
		}
	}
	st2 := openStore(t, path)
	defer st2.Close()
	l2, err := New(ctx, st2, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	mustVerifyOK(t, l2, int64(ok))
}

func TestFollowAndWait(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	path := filepath.Join(t.TempDir(), "db")
	_, l := openLog(t, path, Options{})
	appendN(t, l, 3)

	got := make(chan int64, 100)
	fctx, fcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- l.Follow(fctx, 1, func(r Record) error {
			got <- r.Seq
			return nil
		})
	}()
	want := int64(2)
	expect := func(n int64) {
		t.Helper()
		for ; want <= n; want++ {
			select {
			case s := <-got:
				if s != want {
					t.Fatalf("Follow gave seq %d, want %d", s, want)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("Follow did not deliver seq %d", want)
			}
		}
	}
	expect(3)
	appendN(t, l, 2) // woken by the committer, not by polling
	expect(5)
	fcancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Follow returned %v, want context.Canceled", err)
	}

	// Wait sees records appended by another Log (another process, in real
	// life) by polling.
	_, l3 := openLog(t, path, Options{PollInterval: 10 * time.Millisecond})
	waitErr := make(chan error, 1)
	go func() { waitErr <- l3.Wait(ctx, 5) }()
	time.Sleep(20 * time.Millisecond)
	if _, err := l.Append(ctx, Entry{Actor: "a", Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waitErr:
		if err != nil {
			t.Fatalf("Wait: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not notice a record appended through another Log")
	}
}

func TestFakeClockAndTimeFormat(t *testing.T) {
	ctx := context.Background()
	clock := func() time.Time { return mustTime(t, "2031-02-03T04:05:06.1+05:00") }
	l := newLog(t, Options{Clock: clock})
	r, err := l.Append(ctx, Entry{Actor: "a", Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if got := FormatTime(r.Time); got != "2031-02-02T23:05:06.100000000Z" {
		t.Errorf("time %s", got)
	}
	var ts string
	if err := l.read.QueryRow(`SELECT time FROM audit_log WHERE seq = 1`).Scan(&ts); err != nil {
		t.Fatal(err)
	}
	if ts != "2031-02-02T23:05:06.100000000Z" {
		t.Errorf("stored time %q", ts)
	}
}

func TestSecretNeverReachesFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "db")
	const (
		daemonKey = "daemon-admin-token-4f1c9a2b7e"
		sk        = "sk-ant-api03-ZZZZsecretZZZZ0123456789abcdefABCDEF"
		pw        = "correct horse battery staple"
	)
	st := openStore(t, path)
	l, err := New(ctx, st, Options{Redactor: NewRedactor(daemonKey)})
	if err != nil {
		t.Fatal(err)
	}
	r, err := l.Append(ctx, Entry{
		Session: "s1",
		Actor:   "api",
		Kind:    KindModelRequest,
		Data: map[string]any{
			"headers": map[string]string{"Authorization": "Bearer " + daemonKey, "x-api-key": sk},
			"argv":    []string{"sh", "-c", "echo " + daemonKey + " | login --password '" + pw + "'"},
			"db":      map[string]string{"password": pw},
			"prompt":  "please use " + sk,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{daemonKey, sk, pw} {
		if strings.Contains(string(r.Data), s) {
			t.Errorf("returned record holds %q: %s", s, r.Data)
		}
	}
	// The hash covers the redacted data: it recomputes from what is stored.
	if h, _ := r.ComputeHash(); h != r.Hash {
		t.Error("hash was not computed over the redacted data")
	}
	l.Close()
	st.Close()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{daemonKey, sk, "ZZZZsecretZZZZ", "battery staple"} {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s contains secret %q", e.Name(), s)
			}
		}
		if !bytes.Contains(b, []byte(Redacted)) && e.Name() == "db" {
			t.Errorf("%s does not contain the redacted record at all", e.Name())
		}
	}
}

func TestEmptyLog(t *testing.T) {
	ctx := context.Background()
	l := newLog(t, Options{})
	res, err := l.Verify(ctx)
	if err != nil || !res.OK || res.Checked != 0 || res.LastSeq != 0 || res.LastHash != GenesisHash {
		t.Errorf("Verify on an empty log = %+v, %v", res, err)
	}
	if seq, h := l.Head(); seq != 0 || h != GenesisHash {
		t.Errorf("Head = %d %s", seq, h)
	}
	recs, err := l.Tail(ctx, 0, 10)
	if err != nil || len(recs) != 0 {
		t.Errorf("Tail = %v, %v", recs, err)
	}
	var buf bytes.Buffer
	if err := l.Export(ctx, &buf, 0); err != nil || buf.Len() != 0 {
		t.Errorf("Export wrote %q, %v", buf.String(), err)
	}
	if res, err := VerifyJSONLines(ctx, &buf); err != nil || !res.OK || res.Checked != 0 {
		t.Errorf("VerifyJSONLines(empty) = %+v, %v", res, err)
	}
	r, err := l.Append(ctx, Entry{Actor: "a", Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if seq, h := l.Head(); seq != 1 || h != r.Hash {
		t.Errorf("Head after one append = %d %s, want 1 %s", seq, h, r.Hash)
	}
}
