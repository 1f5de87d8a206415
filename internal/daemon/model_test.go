package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/ironclaw/ironclaw/internal/client"
)

// A program inside a sandbox reaches the model proxy at its own loopback
// with its per-sandbox token; the planted provider key is nowhere inside;
// the token dies with the sandbox.
func TestModelProxyFromInsideSandbox(t *testing.T) {
	const planted = "sk-ironclaw-PLANTED-provider-key-0123456789"
	t.Setenv("OPENAI_API_KEY", planted)
	r := startDaemon(t, t.TempDir(), func(c *Config) { c.Model.Provider = "mock" })
	cl := r.client(t, false)
	ctx := context.Background()
	sb, err := cl.CreateSandbox(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	run := func(cmd string) string {
		t.Helper()
		var out, errb bytes.Buffer
		res, err := cl.Exec(ctx, sb.ID, client.ExecRequest{Cmd: cmd, Stdout: &out, Stderr: &errb})
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		if res.Exit != 0 {
			t.Fatalf("%s: exit %d: %s %s", cmd, res.Exit, out.String(), errb.String())
		}
		return out.String()
	}
	directive := `{"model":"mock-gpt","messages":[{"role":"user","content":"please {\"mock_tool_calls\":[{\"name\":\"shell\",\"arguments\":{\"command\":\"id\"}}]}"}],"tools":[{"type":"function","function":{"name":"shell","parameters":{"type":"object"}}}]}`
	// wget, through the in-sandbox address and the sandbox's own token.
	out := run(`printf '%s' '` + directive + `' > /tmp/req.json && wget -qO- --header "Authorization: Bearer $OPENAI_API_KEY" --header "Content-Type: application/json" --post-file /tmp/req.json "$OPENAI_BASE_URL/chat/completions"`)
	var comp struct {
		Choices []struct {
			Message struct {
				ToolCalls []struct {
					Function struct{ Name, Arguments string } `json:"function"`
				} `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal([]byte(out), &comp); err != nil || len(comp.Choices) != 1 || comp.Choices[0].FinishReason != "tool_calls" ||
		comp.Choices[0].Message.ToolCalls[0].Function.Name != "shell" {
		t.Fatalf("mock tool call through the in-sandbox proxy: %q %v", out, err)
	}
	// node, through the host-toolchain view, with Anthropic's wire format.
	if _, err := exec.LookPath("node"); err == nil {
		out = run(`node -e '
fetch(process.env.ANTHROPIC_BASE_URL + "/v1/messages", {method: "POST",
  headers: {"x-api-key": process.env.ANTHROPIC_API_KEY, "anthropic-version": "2023-06-01", "content-type": "application/json"},
  body: JSON.stringify({model: "mock-claude", max_tokens: 50, messages: [{role: "user", content: "hello from node"}]})})
.then(r => r.json()).then(j => console.log(j.content[0].text))'`)
		if !strings.Contains(out, "hello from node") {
			t.Fatalf("node through the proxy: %q", out)
		}
	}
	// The real key is nowhere inside.
	out = run(`env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n'; grep -rl PLANTED /workspace /tmp /etc /dev 2>/dev/null; echo end`)
	if strings.Contains(out, planted) || strings.Contains(out, "PLANTED") {
		t.Fatalf("the provider key is visible inside the sandbox")
	}
	var token string
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, "OPENAI_API_KEY="); ok {
			token = v
		}
	}
	if !strings.HasPrefix(token, "icp_") {
		t.Fatalf("no proxy token inside: %q", out)
	}
	// From the host through the API: the sandbox's token is refused (it
	// works only on its own sandbox's loopback).
	call := func(tok string) int {
		req, _ := http.NewRequest("POST", "http://"+r.addr+"/v1/model/openai/v1/chat/completions", strings.NewReader(`{"model":"mock-gpt","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := call(token); code != 401 {
		t.Fatalf("sandbox token on the host route: %d, want 401", code)
	}
	if _, err := cl.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	// The API tokens are not model tokens.
	if code := call(cl.Token); code != 401 {
		t.Fatalf("an API token at the model proxy: %d, want 401", code)
	}
}

// An agent on the host mints its own token; the real key goes upstream,
// the proxy token does not, and neither lands in the audit log.
func TestModelProxyHostTokenAndKeyCustody(t *testing.T) {
	const key = "sk-ironclaw-REAL-upstream-key-abcdef"
	var mu sync.Mutex
	var seen []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"upstream"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	}))
	defer up.Close()
	t.Setenv("OPENAI_API_KEY", key)
	t.Setenv("OPENAI_BASE_URL", up.URL+"/v1")
	dir := t.TempDir()
	r := startDaemon(t, dir, nil)
	cl := r.client(t, false)
	req, _ := http.NewRequest("POST", "http://"+r.addr+"/v1/model/tokens", nil)
	req.Header.Set("Authorization", "Bearer "+cl.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var minted struct{ Token, OpenAIBaseURL string }
	json.NewDecoder(resp.Body).Decode(&struct {
		Token         *string `json:"token"`
		OpenAIBaseURL *string `json:"openai_base_url"`
	}{&minted.Token, &minted.OpenAIBaseURL})
	resp.Body.Close()
	if resp.StatusCode != 201 || !strings.HasPrefix(minted.Token, "icp_") {
		t.Fatalf("mint: %d %+v", resp.StatusCode, minted)
	}
	req, _ = http.NewRequest("POST", minted.OpenAIBaseURL+"/chat/completions", strings.NewReader(`{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer "+minted.Token)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "upstream") {
		t.Fatalf("through the proxy: %d %s", resp.StatusCode, body)
	}
	mu.Lock()
	if len(seen) != 1 || seen[0] != "Bearer "+key {
		t.Fatalf("upstream saw %q, want the real key only", seen)
	}
	mu.Unlock()
	r.stop(t)
	db, _ := os.ReadFile(dir + "/" + DatabaseFile)
	wal, _ := os.ReadFile(dir + "/" + DatabaseFile + "-wal")
	for _, secret := range []string{key, minted.Token} {
		if bytes.Contains(db, []byte(secret)) || bytes.Contains(wal, []byte(secret)) {
			t.Fatalf("a secret reached the store: %.12s...", secret)
		}
	}
}
