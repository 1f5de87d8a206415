package mock

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestOfficialClients runs a tool loop with the official openai and
// @anthropic-ai/sdk packages against the mock: the wire formats must be
// good enough for real clients, not just for our own parser. It needs node
// and npm (CI has both); the packages are installed once into a cache
// directory named after testdata/clients/package.json.
func TestOfficialClients(t *testing.T) {
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("IRONCLAW_REQUIRE_NODE") == "1" {
				t.Fatalf("%s not found", tool)
			}
			t.Skipf("%s not found: the official-client check needs node and npm", tool)
		}
	}
	pkg, err := os.ReadFile(filepath.Join("testdata", "clients", "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(pkg)
	dir := filepath.Join(os.TempDir(), "ironclaw-mock-clients-"+hex.EncodeToString(sum[:6]))
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai")); err != nil {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "package.json"), pkg, 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("npm", "install", "--no-audit", "--no-fund", "--loglevel=error")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm install: %v\n%s", err, out)
		}
	}
	script, err := os.ReadFile(filepath.Join("testdata", "clients", "loop.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "loop.mjs"), script, 0o644); err != nil {
		t.Fatal(err)
	}

	p := New(nil)
	mux := http.NewServeMux()
	mux.Handle("/openai/", http.StripPrefix("/openai", p.OpenAI()))
	mux.Handle("/anthropic/", http.StripPrefix("/anthropic", p.Anthropic()))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	cmd := exec.Command("node", "loop.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "MOCK_BASE="+srv.URL)
	done := make(chan struct{})
	var out []byte
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatal("node did not finish within 2 minutes")
	}
	if err != nil {
		t.Fatalf("official clients: %v\n%s", err, out)
	}
	for _, want := range []string{"ok chat", "ok chat-stream", "ok responses", "ok anthropic"} {
		if !strings.Contains(string(out), want+"\n") {
			t.Fatalf("missing %q in:\n%s", want, out)
		}
	}
}
