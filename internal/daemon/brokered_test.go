package daemon

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/daemontest"
	"github.com/ironclaw/ironclaw/internal/egress"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/backend"
)

// secretRig is a TLS upstream (secret.test, with the tests' own CA) that
// echoes the Authorization it got and serves a git repository to those
// presenting the real value, and a plain-HTTP one (other.test).
type secretRig struct {
	ca        *egress.CA // the upstream's CA, given to the daemon with TrustCA
	caFile    string
	port      int // the TLS upstream's
	plainPort int
	mu        sync.Mutex
	auths     []string // Authorization values the TLS upstream saw
	plainHits int
}

const brokerValue = "ghp_RealValueNeverInside0123456789"

func newSecretRig(t *testing.T) *secretRig {
	t.Helper()
	g := &secretRig{}
	var err error
	if g.ca, err = egress.NewCA(); err != nil {
		t.Fatal(err)
	}
	g.caFile = filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(g.caFile, g.ca.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	repos := gitRepo(t)
	git := &cgi.Handler{Path: "/usr/lib/git-core/git-http-backend", Root: "/git",
		Env: []string{"GIT_PROJECT_ROOT=" + repos, "GIT_HTTP_EXPORT_ALL=1"}}
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		g.mu.Lock()
		g.auths = append(g.auths, auth)
		g.mu.Unlock()
		if strings.HasPrefix(r.URL.Path, "/git/") {
			if auth != "Bearer "+brokerValue {
				http.Error(w, "no", http.StatusUnauthorized)
				return
			}
			git.ServeHTTP(w, r)
			return
		}
		w.Header().Set("X-Echo-Authorization", auth)
		fmt.Fprintf(w, "upstream saw proto=%s auth=%s\n", r.Proto, auth)
	}))
	up.EnableHTTP2 = true
	up.TLS = &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) { return g.ca.Leaf(h.ServerName) }}
	up.StartTLS()
	t.Cleanup(up.Close)
	g.port = up.Listener.Addr().(*net.TCPAddr).Port
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.plainHits++
		g.mu.Unlock()
	}))
	t.Cleanup(plain.Close)
	g.plainPort = plain.Listener.Addr().(*net.TCPAddr).Port
	return g
}

// gitRepo makes a bare repository repo.git holding one commit.
func gitRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	run := func(args ...string) {
		cmd := exec.Command("git", args...)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t",
			"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	run("init", "-q", "-b", "main", work)
	if err := os.WriteFile(filepath.Join(work, "README"), []byte("cloned through the broker\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run("-C", work, "add", "README")
	run("-C", work, "commit", "-q", "-m", "one")
	run("clone", "-q", "--bare", work, filepath.Join(dir, "repos", "repo.git"))
	return filepath.Join(dir, "repos")
}

// nodeForTests finds a Node whose fetch follows HTTPS_PROXY under
// NODE_USE_ENV_PROXY (22.21 or later): the one the SDK's dev dependencies
// bring, $IRONCLAW_TEST_NODE, node on PATH, or, with
// IRONCLAW_REQUIRE_NODE=1 and npm on PATH, node@22 installed with npm into
// a cache directory (as the mock provider's client test does). "" and why
// when there is none.
func nodeForTests(t *testing.T) (string, string) {
	t.Helper()
	var cands []string
	cands = append(cands, "../../sdk/typescript/node_modules/node/bin/node", os.Getenv("IRONCLAW_TEST_NODE"))
	if p, err := exec.LookPath("node"); err == nil {
		cands = append(cands, p)
	}
	cache := filepath.Join(os.TempDir(), "ironclaw-test-node22")
	cands = append(cands, filepath.Join(cache, "node_modules", "node", "bin", "node"))
	why := "no node found"
	for _, p := range cands {
		if p == "" {
			continue
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			continue
		}
		if st, err := os.Stat(abs); err != nil || !st.Mode().IsRegular() {
			continue
		}
		out, err := exec.Command(abs, "--version").Output()
		if err != nil {
			continue
		}
		if nodeHasEnvProxy(strings.TrimSpace(string(out))) {
			return abs, ""
		}
		why = fmt.Sprintf("%s is %s, older than 22.21 (no proxy support in fetch)", abs, strings.TrimSpace(string(out)))
	}
	if os.Getenv("IRONCLAW_REQUIRE_NODE") != "1" {
		return "", why
	}
	if _, err := exec.LookPath("npm"); err != nil {
		t.Fatalf("IRONCLAW_REQUIRE_NODE=1 but %s and npm is not on PATH", why)
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("npm", "install", "--no-audit", "--no-fund", "--loglevel=error", "--no-save", "node@22")
	cmd.Dir = cache
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install node@22: %v\n%s", err, out)
	}
	p := filepath.Join(cache, "node_modules", "node", "bin", "node")
	if out, err := exec.Command(p, "--version").Output(); err != nil || !nodeHasEnvProxy(strings.TrimSpace(string(out))) {
		t.Fatalf("node@22 from npm: %q %v", out, err)
	}
	return p, ""
}

// nodeHasEnvProxy reports whether a `node --version` is 22.21+ or 24.5+.
func nodeHasEnvProxy(v string) bool {
	var maj, min int
	if _, err := fmt.Sscanf(strings.TrimPrefix(v, "v"), "%d.%d", &maj, &min); err != nil {
		return false
	}
	return maj == 22 && min >= 21 || maj == 24 && min >= 5 || maj >= 25
}

// TestBrokeredSecretsInsideEveryBackend runs real clients inside a sandbox
// of every backend (curl, python3 urllib, git clone over a git
// http-backend, node fetch), through the broker, trusting the daemon's CA
// from the sandbox's trust files: the upstream saw the real value, the
// sandbox only its placeholder (env, files, /proc, echoed responses), and
// a placeholder sent elsewhere is refused and recorded.
func TestBrokeredSecretsInsideEveryBackend(t *testing.T) {
	g := newSecretRig(t)
	node, noNode := nodeForTests(t)
	for _, name := range []string{backend.Native, backend.Runc, backend.Runsc, backend.Docker} {
		t.Run(name, func(t *testing.T) {
			if name != backend.Native {
				required := slices.Contains(strings.Split(os.Getenv("IRONCLAW_REQUIRE_OCI"), ","), name) ||
					(name == backend.Docker && os.Getenv("IRONCLAW_REQUIRE_DOCKER") == "1")
				probe, err := backend.Open(context.Background(), backend.Options{Name: name, Exe: daemontest.InitExe()})
				if err != nil {
					if required || !errors.Is(err, sandbox.ErrUnsupported) {
						t.Fatalf("%s: %v", name, err)
					}
					t.Skipf("%s cannot run here: %v", name, err)
				}
				probe.Close(context.Background())
			}
			testBrokeredSecrets(t, g, name, node, noNode)
		})
	}
}

func testBrokeredSecrets(t *testing.T, g *secretRig, runtime, node, noNode string) {
	ports := strconv.Itoa(g.port)
	r := startDaemon(t, t.TempDir(), func(c *Config) {
		c.Runtime = runtime
		c.Egress.Allow = []string{"secret.test:" + ports, "other.test:" + strconv.Itoa(g.plainPort)}
		c.Egress.AllowPrivate = []string{"127.0.0.0/8"}
		c.Egress.DenyUnknown = true
		c.Egress.Resolver = fakeDNS{"secret.test": "127.0.0.1", "other.test": "127.0.0.1"}
		c.Egress.TrustCA = []string{g.caFile}
	})
	cl, op := r.client(t, false), r.client(t, true)
	ctx := context.Background()
	// The daemon's own secrets (package secrets): set by the operator,
	// granted at the create, the placeholder the daemon's.
	if _, err := op.SetSecret(ctx, "gh", client.SecretSettings{Hosts: []string{"secret.test:" + ports}, Env: "GH_TOKEN", Grant: "all"},
		[]byte(brokerValue)); err != nil {
		t.Fatal(err)
	}
	sb, err := cl.CreateSandbox(ctx, client.CreateRequest{Secrets: []string{"gh"}})
	if err != nil {
		t.Fatal(err)
	}
	ph := brokerExec(t, cl, sb.ID, `printf %s "$GH_TOKEN"`, nil)
	if !strings.HasPrefix(ph, "ironclaw-secret-gh-") || len(ph) != len("ironclaw-secret-gh-")+32 {
		t.Fatalf("GH_TOKEN inside = %q, want the daemon's placeholder", ph)
	}
	script := fmt.Sprintf(`
set -u
echo "env SSL_CERT_FILE=$SSL_CERT_FILE NODE_EXTRA_CA_CERTS=$NODE_EXTRA_CA_CERTS GIT_SSL_CAINFO=$GIT_SSL_CAINFO"
grep -c 'BEGIN CERTIFICATE' %[2]s | sed 's/^/bundle certs=/'
test -r %[3]s && echo "etc bundle readable"
touch %[4]s/x 2>/dev/null || echo "trust dir read-only"
echo "curl: $(curl -sS -H "Authorization: Bearer $GH_TOKEN" https://secret.test:%[1]s/echo)"
echo "curl-h2: $(curl -sS --http2 -H "Authorization: Bearer $GH_TOKEN" https://secret.test:%[1]s/echo)"
echo "curl-echo-header: $(curl -sS -D - -o /dev/null -H "Authorization: Bearer $GH_TOKEN" https://secret.test:%[1]s/echo | grep -i '^x-echo')"
python3 -c 'import os, urllib.request as u
r = u.Request("https://secret.test:%[1]s/echo", headers={"Authorization": "Bearer " + os.environ["GH_TOKEN"]})
print("python:", u.urlopen(r).read().decode().strip())'
git -c http.extraHeader="Authorization: Bearer $GH_TOKEN" clone -q https://secret.test:%[1]s/git/repo.git /tmp/clone && echo "git: $(cat /tmp/clone/README)"
echo "misuse: $(curl -sS -o /dev/null -w '%%{http_code}' -H "Authorization: Bearer $GH_TOKEN" http://other.test:%[5]d/)"
echo "leak-env: $(env | grep -c %[6]s)"
echo "leak-proc: $(grep -c %[6]s /proc/self/environ)"
echo "leak-files: $(grep -rl %[6]s /workspace /tmp 2>/dev/null | wc -l)"
`, ports, sandbox.TrustBundle, sandbox.SystemBundle, sandbox.TrustDir, g.plainPort, brokerValue)
	var env map[string]string // GH_TOKEN is the daemon's
	got := brokerExec(t, cl, sb.ID, script, env)
	for _, want := range []string{
		"env SSL_CERT_FILE=" + sandbox.TrustBundle + " NODE_EXTRA_CA_CERTS=" + sandbox.TrustCA + " GIT_SSL_CAINFO=" + sandbox.TrustBundle,
		"etc bundle readable", "trust dir read-only",
		"curl: upstream saw proto=HTTP/2.0 auth=Bearer " + ph, // the echo, scrubbed
		"curl-h2: upstream saw proto=HTTP/2.0 auth=Bearer " + ph,
		"curl-echo-header: x-echo-authorization: Bearer " + ph,
		"python: upstream saw proto=HTTP/2.0 auth=Bearer " + ph,
		"git: cloned through the broker",
		"misuse: 403",
		"leak-env: 0", "leak-proc: 0", "leak-files: 0",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	t.Logf("inside %s:\n%s", runtime, got)
	if n := certCount(got); n < 2 {
		t.Errorf("the trust bundle holds %d certificates; want the system's and the egress CA\n%s", n, got)
	}
	if node != "" {
		f, err := os.Open(node)
		if err != nil {
			t.Fatal(err)
		}
		err = cl.PutFile(ctx, sb.ID, "/workspace/node", f, 0o755)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		out := brokerExec(t, cl, sb.ID, fmt.Sprintf(`/workspace/node --no-warnings -e '
fetch("https://secret.test:%s/echo", {headers: {Authorization: "Bearer " + process.env.GH_TOKEN}})
  .then(r => r.text()).then(t => console.log("node: " + t.trim()), e => { console.log("node error", e, e.cause); process.exit(1) })'
rm -f /workspace/node`, ports), env)
		t.Logf("node inside %s:\n%s", runtime, out)
		if want := "node: upstream saw proto=HTTP/2.0 auth=Bearer " + ph; !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	} else {
		t.Logf("NOT RUN: node fetch inside the sandbox: %s (cd sdk/typescript && npm ci, or IRONCLAW_REQUIRE_NODE=1 to install it and require it)", noNode)
	}
	if strings.Contains(got, brokerValue) {
		t.Fatalf("the secret's value reached the sandbox:\n%s", got)
	}

	// The upstream saw the value, never the placeholder.
	g.mu.Lock()
	auths := slices.Clone(g.auths)
	plainHits := g.plainHits
	g.mu.Unlock()
	real := 0
	for _, a := range auths {
		if strings.Contains(a, ph) {
			t.Errorf("the upstream saw the placeholder: %q", a)
		}
		if a == "Bearer "+brokerValue {
			real++
		}
	}
	if real < 5 {
		t.Errorf("the upstream saw the value %d times, want at least 5 (curl x3, python, git)", real)
	}
	if plainHits != 0 {
		t.Errorf("the misused placeholder reached other.test")
	}

	// Audit: one secret.inject per swapped request (names, host, method,
	// path), the misuse, never the value.
	recs := daemontest.VerifiedAudit(t, op)
	inject, misuse := 0, 0
	for _, rec := range recs {
		if bytes.Contains(rec.Data, []byte(brokerValue)) {
			t.Errorf("the value is in audit record %s: %s", rec.Kind, rec.Data)
		}
		switch rec.Kind {
		case egress.KindSecretInject:
			inject++
			if !bytes.Contains(rec.Data, []byte(`"secret.test"`)) || !bytes.Contains(rec.Data, []byte(`"gh"`)) {
				t.Errorf("secret.inject %s", rec.Data)
			}
		case egress.KindSecretMisuse:
			misuse++
		}
	}
	if inject < 5 || misuse != 1 {
		t.Errorf("%d secret.inject, %d secret.misuse records; want >= 5 and 1", inject, misuse)
	}
}

func certCount(out string) int {
	i := strings.Index(out, "bundle certs=")
	if i < 0 {
		return 0
	}
	n, _ := strconv.Atoi(strings.Fields(out[i+len("bundle certs="):])[0])
	return n
}

func brokerExec(t *testing.T, cl *client.Client, id, script string, env map[string]string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	res, err := cl.Exec(ctx, id, client.ExecRequest{Stdout: &out, Stderr: &out, Cmd: script, Env: env, Timeout: 60 * time.Second})
	if err != nil || res.Exit != 0 {
		t.Fatalf("exec: %v %+v\n%s", err, res, out.String())
	}
	return out.String()
}
