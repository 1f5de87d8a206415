package cli

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/store"
)

// auditFixture writes a keyed, checkpointed log of n records and its
// export, as a daemon would, and returns the paths.
func auditFixture(t *testing.T, n int) (dataDir, keyFile, cpFile, export string) {
	t.Helper()
	root := t.TempDir()
	dataDir = filepath.Join(root, "data")
	keyFile = filepath.Join(root, "audit.key")
	cpFile = filepath.Join(root, "checkpoints.jsonl")
	export = filepath.Join(root, "export.jsonl")
	key, _, err := audit.EnsureKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(dataDir, "ironclaw.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l, err := audit.New(ctx, st, audit.Options{Key: key, CheckpointFile: cpFile})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		// A hostile argv: a bidi override and an escape sequence.
		if _, err := l.Append(ctx, audit.Entry{Session: "sb-1", Actor: "agent", Kind: audit.KindSandboxExec,
			Data: map[string]any{"argv": []string{"echo", "\u202eevil\x1b[2J"}, "i": i}}); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Create(export)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := l.Export(ctx, f, 0); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return dataDir, keyFile, cpFile, export
}

// TestHostileAuditVerifyOffline: `audit verify --file` and `--data-dir`
// check MACs and checkpoints without a daemon, and catch a cut export.
func TestHostileAuditVerifyOffline(t *testing.T) {
	dataDir, keyFile, cpFile, export := auditFixture(t, 5)
	code, out, errOut := run(t, "", "audit", "verify", "--file", export, "--key", keyFile, "--checkpoints", cpFile)
	if code != 0 || out != "ok: 5 records\n" || !strings.Contains(errOut, "5 records authenticated") {
		t.Fatalf("verify --file: %d %q %q", code, out, errOut)
	}
	code, out, errOut = run(t, "", "audit", "verify", "--data-dir", dataDir, "--key", keyFile, "--checkpoints", cpFile)
	if code != 0 || out != "ok: 5 records\n" || !strings.Contains(errOut, "of 2 matched") {
		t.Fatalf("verify --data-dir: %d %q %q", code, out, errOut)
	}
	// Without a key the CLI says what it could not check.
	if code, _, errOut = run(t, "", "audit", "verify", "--file", export); code != 0 || !strings.Contains(errOut, "not checked") || !strings.Contains(errOut, "none given") {
		t.Fatalf("verify --file without key: %d %q", code, errOut)
	}
	// The export with its last two records cut.
	b, _ := os.ReadFile(export)
	lines := strings.SplitAfter(strings.TrimSpace(string(b)), "\n")
	cut := filepath.Join(t.TempDir(), "cut.jsonl")
	os.WriteFile(cut, []byte(strings.Join(lines[:3], "")), 0o600)
	code, out, _ = run(t, "", "audit", "verify", "--file", cut, "--key", keyFile, "--checkpoints", cpFile)
	if code != 1 || !strings.Contains(out, "bad: record 4: truncated") {
		t.Fatalf("verify of a cut export: %d %q", code, out)
	}
	if code, _, _ := run(t, "", "audit", "verify", "--key", keyFile); code != ExitIronClaw {
		t.Errorf("--key without an offline source: %d", code)
	}
}

// TestHostileAuditTerminalEscapes: agent text in records reaches the
// terminal escaped, and an escaped export still verifies.
func TestHostileAuditTerminalEscapes(t *testing.T) {
	_, keyFile, cpFile, export := auditFixture(t, 2)
	raw, err := os.ReadFile(export)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), "\u202e") {
		t.Fatal("fixture lost its bidi override")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/audit/export":
			w.Write(raw)
		case "/v1/audit":
			lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
			w.Write([]byte(`{"records":[` + strings.Join(lines, ",") + `]}`))
		}
	}))
	defer srv.Close()
	t.Setenv(client.EnvAddr, srv.URL)
	t.Setenv(client.EnvOperatorToken, "x")
	for _, args := range [][]string{{"audit", "tail"}, {"audit", "export"}} {
		code, out, _ := run(t, "", args...)
		if code != 0 || strings.ContainsAny(out, "\u202e\x1b") || !strings.Contains(out, `\u202e`) {
			t.Fatalf("%v: %d %q", args, code, out)
		}
		if args[1] == "export" {
			p := filepath.Join(t.TempDir(), "escaped.jsonl")
			os.WriteFile(p, []byte(out), 0o600)
			if code, vout, verr := run(t, "", "audit", "verify", "--file", p, "--key", keyFile, "--checkpoints", cpFile); code != 0 {
				t.Fatalf("escaped export does not verify: %d %q %q", code, vout, verr)
			}
		}
	}
}

func TestJSONSafeWriterSplitsRunes(t *testing.T) {
	in := "{\"a\":\"x\u202ey\U000E0041z\"}\n{\"b\":\"é\"}\n"
	var b strings.Builder
	w := &jsonSafeWriter{w: &b}
	for i := 0; i < len(in); i++ { // one byte at a time: every rune is split
		w.Write([]byte{in[i]})
	}
	w.flush()
	want := "{\"a\":\"x\\u202ey\\udb40\\udc41z\"}\n{\"b\":\"é\"}\n"
	if b.String() != want {
		t.Fatalf("got %q\nwant %q", b.String(), want)
	}
}
