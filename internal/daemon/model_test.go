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
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/daemontest"
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
	sb := daemontest.CreateSandbox(t, cl)
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
		code, _ := hostChat(t, r.addr, tok)
		return code
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
	code, b := daemontest.Do(t, "POST", "http://"+r.addr+"/v1/model/tokens", cl.Token, "")
	var minted struct{ Token, OpenAIBaseURL string }
	json.Unmarshal(b, &struct {
		Token         *string `json:"token"`
		OpenAIBaseURL *string `json:"openai_base_url"`
	}{&minted.Token, &minted.OpenAIBaseURL})
	if code != 201 || !strings.HasPrefix(minted.Token, "icp_") {
		t.Fatalf("mint: %d %+v", code, minted)
	}
	code, body := daemontest.Do(t, "POST", minted.OpenAIBaseURL+"/chat/completions", minted.Token, `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}`)
	if code != 200 || !strings.Contains(string(body), "upstream") {
		t.Fatalf("through the proxy: %d %s", code, body)
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

// sandboxRun runs cmd in sandbox id and returns its stdout.
func sandboxRun(t *testing.T, cl *client.Client, id, cmd string) string {
	t.Helper()
	var out, errb bytes.Buffer
	res, err := cl.Exec(context.Background(), id, client.ExecRequest{Cmd: cmd, Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	if res.Exit != 0 {
		t.Fatalf("%s: exit %d: %s %s", cmd, res.Exit, out.String(), errb.String())
	}
	return out.String()
}

// mintHost mints a host model token through the API with the bearer tok.
func mintHost(t *testing.T, addr, tok string) (status int, token, session string) {
	t.Helper()
	status, b := daemontest.Do(t, "POST", "http://"+addr+"/v1/model/tokens", tok, `{}`)
	var v struct{ Token, Session, ExpiresAt string }
	json.Unmarshal(b, &struct {
		Token     *string `json:"token"`
		Session   *string `json:"session"`
		ExpiresAt *string `json:"expires_at"`
	}{&v.Token, &v.Session, &v.ExpiresAt})
	if status == 201 && (v.ExpiresAt == "" || !strings.HasPrefix(v.Token, "icp_")) {
		t.Fatalf("minted %+v", v)
	}
	return status, v.Token, v.Session
}

// hostChat posts a chat completion to the host route with tok.
func hostChat(t *testing.T, addr, tok string) (int, string) {
	t.Helper()
	code, b := daemontest.Do(t, "POST", "http://"+addr+"/v1/model/openai/v1/chat/completions", tok,
		`{"model":"mock-gpt","messages":[{"role":"user","content":"hi"}]}`)
	return code, string(b)
}

// In a real sandbox, its proxy listener accepts its own token only:
// another sandbox's token (read out of that sandbox) and a host-minted
// token are 401 there, with the same answer as garbage, and the sandbox's
// token is 401 on the host route.
func TestHostileModelTokenOtherSandbox(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("needs curl in the host-toolchain view")
	}
	r := startDaemon(t, t.TempDir(), func(c *Config) { c.Model.Provider = "mock" })
	cl := r.client(t, false)
	a := daemontest.CreateSandbox(t, cl)
	b := daemontest.CreateSandbox(t, cl)
	tokA := strings.TrimSpace(sandboxRun(t, cl, a.ID, `echo "$OPENAI_API_KEY"`))
	tokB := strings.TrimSpace(sandboxRun(t, cl, b.ID, `echo "$OPENAI_API_KEY"`))
	if !strings.HasPrefix(tokA, "icp_") || !strings.HasPrefix(tokB, "icp_") || tokA == tokB {
		t.Fatalf("tokens %q %q", tokA, tokB)
	}
	status, host, _ := mintHost(t, r.addr, cl.Token)
	if status != 201 {
		t.Fatalf("mint: %d", status)
	}
	// From inside A, at A's own listener.
	try := func(tok string) string {
		return sandboxRun(t, cl, a.ID, `printf '%s' '{"model":"mock-gpt","messages":[{"role":"user","content":"hi"}]}' > /tmp/q.json; `+
			`curl -s -o /tmp/out -w '%{http_code}' -H "Authorization: Bearer `+tok+`" -H 'Content-Type: application/json' --data-binary @/tmp/q.json "$OPENAI_BASE_URL/chat/completions"; echo; cat /tmp/out`)
	}
	garbage := try("icp_" + strings.Repeat("A", 43))
	if !strings.HasPrefix(garbage, "401\n") {
		t.Fatalf("unknown token: %q", garbage)
	}
	if got := try(tokA); !strings.HasPrefix(got, "200\n") || !strings.Contains(got, "mock: hi") {
		t.Fatalf("own token: %q", got)
	}
	for name, tok := range map[string]string{"another sandbox's token": tokB, "a host-minted token": host} {
		if got := try(tok); got != garbage {
			t.Fatalf("%s inside a sandbox: %q, want the unknown token's %q", name, got, garbage)
		}
	}
	// On the host route: the sandbox tokens are refused, the host token works.
	for _, tok := range []string{tokA, tokB} {
		if code, body := hostChat(t, r.addr, tok); code != 401 {
			t.Fatalf("sandbox token on the host route: %d %s", code, body)
		}
	}
	if code, body := hostChat(t, r.addr, host); code != 200 {
		t.Fatalf("host token: %d %s", code, body)
	}
}

// A sandbox's budget holds from inside it: requests through its own
// listener stop at the budget, and they also spend its creator's budget.
func TestHostileModelBudgetInsideSandbox(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("needs curl in the host-toolchain view")
	}
	r := startDaemon(t, t.TempDir(), func(c *Config) {
		c.Model.Provider = "mock"
		c.Model.SandboxBudget = 200
		c.Model.AgentBudget = 300
	})
	cl := r.client(t, false)
	ctx := context.Background()
	sb := daemontest.CreateSandbox(t, cl)
	// Streams (the proxy asks the mock for usage), until refused.
	out := sandboxRun(t, cl, sb.ID, `printf '%s' '{"model":"mock-gpt","stream":true,"messages":[{"role":"user","content":"hi"}]}' > /tmp/q.json; `+
		`for i in $(seq 1 100); do c=$(curl -s -o /tmp/out -w '%{http_code}' -H "Authorization: Bearer $OPENAI_API_KEY" --data-binary @/tmp/q.json "$OPENAI_BASE_URL/chat/completions"); `+
		`echo "$c"; [ "$c" = 200 ] || { cat /tmp/out; break; }; done`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	ok := 0
	for _, l := range lines {
		if l == "200" {
			ok++
		}
	}
	if ok == 0 || ok >= 100 || !strings.Contains(out, "429") || !strings.Contains(out, "limit_exceeded") {
		t.Fatalf("%d streams passed: %s", ok, out)
	}
	// The refusal and the settled streams are in the audit log (the proxy
	// writes a request's end after its answer: wait for the refusal).
	op := r.client(t, true)
	var recs []client.AuditRecord
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var err error
		if recs, err = op.AuditTail(ctx, 0, 1000); err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(recs, func(r client.AuditRecord) bool { return strings.Contains(string(r.Data), `"refused"`) }) || time.Now().After(deadline) {
			break
		}
	}
	var settled, refused int64
	for _, rec := range recs {
		if rec.Kind != "model.request" || rec.Session != sb.ID {
			continue
		}
		var d struct {
			Reserved int64  `json:"reserved_tokens"`
			Settled  int64  `json:"settled_tokens"`
			Reported bool   `json:"usage_reported"`
			Refused  string `json:"refused"`
			Prin     string `json:"principal"`
		}
		json.Unmarshal(rec.Data, &d)
		if d.Prin != "agent" {
			t.Fatalf("record %s", rec.Data)
		}
		if d.Refused != "" {
			if d.Refused != "budget_sandbox" {
				t.Fatalf("refusal %s", rec.Data)
			}
			refused++
			continue
		}
		if !d.Reported || d.Settled <= 0 || d.Reserved < d.Settled {
			t.Fatalf("settled stream %s", rec.Data)
		}
		settled += d.Settled
	}
	if refused != 1 || settled > 200 {
		t.Fatalf("%d refusals, %d tokens settled of a budget of 200", refused, settled)
	}
	// A new sandbox has a budget of its own, but its creator's is shared:
	// it stops at 300 less what the first one spent.
	sb2 := daemontest.CreateSandbox(t, cl)
	out = sandboxRun(t, cl, sb2.ID, `printf '%s' '{"model":"mock-gpt","messages":[{"role":"user","content":"hi"}]}' > /tmp/q.json; `+
		`for i in $(seq 1 100); do c=$(curl -s -o /tmp/out -w '%{http_code}' -H "Authorization: Bearer $OPENAI_API_KEY" --data-binary @/tmp/q.json "$OPENAI_BASE_URL/chat/completions"); `+
		`echo "$c"; [ "$c" = 200 ] || { cat /tmp/out; break; }; done`)
	if !strings.Contains(out, "200") || !strings.Contains(out, "this principal's budget") {
		t.Fatalf("second sandbox: %s", out)
	}
}

// Minting fresh host tokens neither renews the principal's budget nor
// escapes a restart: spend is kept in the store. Live tokens are capped
// per principal; a principal revokes only its own.
func TestHostileModelBudgetFreshTokensAndRestart(t *testing.T) {
	dir := t.TempDir()
	if _, err := AddAgent(dir, "bob"); err != nil {
		t.Fatal(err)
	}
	bob, err := os.ReadFile(dir + "/" + AgentsDir + "/bob.token")
	if err != nil {
		t.Fatal(err)
	}
	mod := func(c *Config) {
		c.Model.Provider = "mock"
		c.Model.AgentBudget = 60
		c.Model.MaxTokens = 2
	}
	r := startDaemon(t, dir, mod)
	agent := r.client(t, false).Token
	del := func(tok, session string) int {
		code, _ := daemontest.Do(t, "DELETE", "http://"+r.addr+"/v1/model/tokens/"+session, tok, "")
		return code
	}
	spent := 0
	for i := 0; ; i++ {
		status, tok, session := mintHost(t, r.addr, agent)
		if status != 201 {
			t.Fatalf("mint %d: %d", i, status)
		}
		code, body := hostChat(t, r.addr, tok)
		if code == 429 {
			if !strings.Contains(body, "limit_exceeded") {
				t.Fatal(body)
			}
			break
		}
		if code != 200 || i > 30 {
			t.Fatalf("request %d with a fresh token: %d %s", i, code, body)
		}
		spent++
		// Revoke it, so the cap does not stop the loop first.
		if code := del(agent, session); code != 204 {
			t.Fatalf("revoke: %d", code)
		}
	}
	if spent == 0 {
		t.Fatal("no request passed")
	}
	// The cap: two live tokens, the third is refused; bob cannot revoke
	// the agent's; the agent can.
	_, _, s1 := mintHost(t, r.addr, agent)
	mintHost(t, r.addr, agent)
	if status, _, _ := mintHost(t, r.addr, agent); status != 429 {
		t.Fatalf("third live token: %d", status)
	}
	if code := del(strings.TrimSpace(string(bob)), s1); code != 404 {
		t.Fatalf("another principal revoked a token: %d", code)
	}
	if code := del(agent, s1); code != 204 {
		t.Fatalf("revoke own: %d", code)
	}
	// bob has a budget of its own.
	_, bobTok, _ := mintHost(t, r.addr, strings.TrimSpace(string(bob)))
	if code, body := hostChat(t, r.addr, bobTok); code != 200 {
		t.Fatalf("another principal: %d %s", code, body)
	}
	r.stop(t)

	// After a restart the agent's budget is still spent.
	r = startDaemon(t, dir, mod)
	_, tok, _ := mintHost(t, r.addr, agent)
	if code, body := hostChat(t, r.addr, tok); code != 429 {
		t.Fatalf("after a restart: %d %s, want the budget still spent", code, body)
	}
	_, bobTok, _ = mintHost(t, r.addr, strings.TrimSpace(string(bob)))
	if code, body := hostChat(t, r.addr, bobTok); code != 200 {
		t.Fatalf("bob after a restart: %d %s", code, body)
	}
}
