package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/daemon"
	"github.com/ironclaw/ironclaw/internal/daemontest"
)

// startDaemon runs the daemon in-process on a free port in a fresh data
// directory and points the CLI's environment at it.
func startDaemon(t *testing.T) (addr, dir string) {
	t.Helper()
	daemontest.NeedSandbox(t)
	dir = filepath.Join(t.TempDir(), "data")
	addr = startDaemonAt(t, dir)
	t.Setenv(client.EnvDataDir, dir)
	t.Setenv(client.EnvAgentToken, daemontest.Token(t, dir, client.AgentTokenFile))
	t.Setenv(client.EnvOperatorToken, daemontest.Token(t, dir, client.OperatorTokenFile))
	return addr, dir
}

// startDaemonAt runs the daemon in-process on a free port with its data in
// dir and points the CLI's $IRONCLAW_ADDR at it.
func startDaemonAt(t *testing.T, dir string) (addr string) {
	t.Helper()
	key, cps := daemontest.Custody(dir)
	d := daemontest.Start(t, func(ctx context.Context, ready func(string)) error {
		return daemon.Run(ctx, daemon.Config{Listen: daemontest.Listen, DataDir: dir, PoolSize: -1,
			AuditKeyFile: key, AuditCheckpointFile: cps, InitExe: daemontest.InitExe(), Ready: ready})
	})
	t.Setenv(client.EnvAddr, d.Addr) // host:port, as a user may write it
	return d.Addr
}

func TestServeSecondRefused(t *testing.T) {
	_, dir := startDaemon(t)
	code, _, stderr := run(t, "", "serve", "--listen", "127.0.0.1:0", "--data-dir", dir, "--pool", "off")
	if code != ExitIronClaw || !strings.Contains(stderr, "another ironclaw daemon") || strings.Count(stderr, "\n") != 1 {
		t.Fatalf("second serve: exit %d, stderr %q", code, stderr)
	}
}

// serve's settings through the whole command line: a bad config file is
// one clear error, and --help is the daemon's (package full tests the
// precedence of flags, environment and file).
func TestServeSettingsErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(file, []byte("lisen: x\n"), 0o600)
	code, _, stderr := run(t, "", "serve", "--config", file)
	if code != ExitIronClaw || !strings.Contains(stderr, `unknown setting "lisen"`) {
		t.Errorf("unknown key: %d %q", code, stderr)
	}
	os.WriteFile(file, []byte("pool: many\n"), 0o600)
	if code, _, stderr := run(t, "", "serve", "--config", file); code != ExitIronClaw || !strings.Contains(stderr, "pool") {
		t.Errorf("bad value: %d %q", code, stderr)
	}
	if code, out, _ := run(t, "", "serve", "--help"); code != 0 || !strings.Contains(out, "order of precedence") {
		t.Errorf("help: %d %q", code, out)
	}
}

var idRE = regexp.MustCompile(`^sbx-[0-9a-f]+\n$`)

func TestSandboxCommands(t *testing.T) {
	startDaemon(t)
	code, out, stderr := run(t, "", "sandbox", "create", "--label", "team=a", "--label", "x=1", "--memory", "256M", "--idle", "10m")
	if code != 0 || !idRE.MatchString(out) {
		t.Fatalf("create: %d %q %q", code, out, stderr)
	}
	id := strings.TrimSpace(out)
	if code, out, _ := run(t, "", "sandbox", "create", "--memory", "lots"); code != ExitIronClaw || out != "" {
		t.Errorf("create with a bad size: %d %q", code, out)
	}

	code, out, _ = run(t, "", "sandbox", "ls")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[0], "STATE") ||
		!strings.Contains(lines[1], id) || !strings.Contains(lines[1], "running") || !strings.Contains(lines[1], "team=a,x=1") {
		t.Errorf("ls: %d\n%s", code, out)
	}
	if _, out, _ := run(t, "", "sandbox", "ls", "--label", "team=b"); strings.Contains(out, id) {
		t.Errorf("ls --label team=b lists %s:\n%s", id, out)
	}
	if _, out, _ := run(t, "", "sandbox", "ls", "-l", "team=a"); !strings.Contains(out, id) {
		t.Errorf("ls --label team=a misses %s:\n%s", id, out)
	}

	// exec: output, exit codes.
	code, out, stderr = run(t, "", "sandbox", "exec", id, "--", "sh", "-c", "echo out; echo err >&2; exit 3")
	if code != 3 || out != "out\n" || stderr != "err\n" {
		t.Errorf("exec: %d %q %q", code, out, stderr)
	}
	if code, _, stderr := run(t, "", "sandbox", "exec", id, "--", "no-such-command"); code != ExitNotFound || !strings.Contains(stderr, "not found") {
		t.Errorf("exec missing command: %d %q", code, stderr)
	}
	if code, _, _ := run(t, "", "sandbox", "exec", id, "--", "/etc"); code != ExitNotExecutable {
		t.Errorf("exec a directory: %d", code)
	}
	if code, _, stderr := run(t, "", "sandbox", "exec", "sbx-0000000000000000", "--", "true"); code != ExitIronClaw || strings.Count(stderr, "\n") != 1 {
		t.Errorf("exec in an unknown sandbox: %d %q", code, stderr)
	}
	if code, out, _ := run(t, "hello stdin", "sandbox", "exec", "-i", id, "--", "wc", "-c"); code != 0 || strings.TrimSpace(out) != "11" {
		t.Errorf("exec -i: %d %q", code, out)
	}

	// cp both ways, files and stdin/stdout.
	local := filepath.Join(t.TempDir(), "in.txt")
	os.WriteFile(local, []byte("from a file\n"), 0o640)
	if code, _, stderr := run(t, "", "sandbox", "cp", local, id+":/workspace/in.txt"); code != 0 {
		t.Fatalf("cp up: %d %q", code, stderr)
	}
	if code, _, stderr := run(t, "from stdin", "sandbox", "cp", "-", id+":/tmp/s.txt"); code != 0 {
		t.Fatalf("cp up from stdin: %d %q", code, stderr)
	}
	if code, out, _ := run(t, "", "sandbox", "exec", id, "--", "cat", "/workspace/in.txt", "/tmp/s.txt"); code != 0 || out != "from a file\nfrom stdin" {
		t.Errorf("uploaded: %d %q", code, out)
	}
	if code, out, _ := run(t, "", "sandbox", "cp", id+":/workspace/in.txt", "-"); code != 0 || out != "from a file\n" {
		t.Errorf("cp down to stdout: %d %q", code, out)
	}
	outDir := t.TempDir()
	if code, _, stderr := run(t, "", "sandbox", "cp", id+":/tmp/s.txt", outDir); code != 0 {
		t.Errorf("cp down into a dir: %d %q", code, stderr)
	} else if b, _ := os.ReadFile(filepath.Join(outDir, "s.txt")); string(b) != "from stdin" {
		t.Errorf("downloaded %q", b)
	}
	if code, _, _ := run(t, "", "sandbox", "cp", id+":/workspace/missing", filepath.Join(outDir, "m")); code != ExitIronClaw {
		t.Errorf("cp of a missing file: %d", code)
	}
	if _, err := os.Stat(filepath.Join(outDir, "m")); err == nil {
		t.Error("a failed download left a file")
	}
	if ents, _ := os.ReadDir(outDir); len(ents) != 1 {
		t.Errorf("download dir holds %v", ents)
	}
	if code, _, stderr := run(t, "", "sandbox", "cp", local, outDir); code != ExitIronClaw || !strings.Contains(stderr, "exactly one") {
		t.Errorf("cp local to local: %d %q", code, stderr)
	}

	// rm.
	if code, out, _ := run(t, "", "sandbox", "rm", id); code != 0 || strings.TrimSpace(out) != id {
		t.Errorf("rm: %d %q", code, out)
	}
	if code, _, _ := run(t, "", "sandbox", "exec", id, "--", "true"); code != ExitIronClaw {
		t.Errorf("exec after rm: %d", code)
	}
	if code, _, stderr := run(t, "", "sandbox", "rm", "sbx-0000000000000000"); code != ExitIronClaw || !strings.Contains(stderr, "sbx-0000000000000000") {
		t.Errorf("rm unknown: %d %q", code, stderr)
	}
	if _, out, _ := run(t, "", "sandbox", "ls"); strings.Contains(out, id) {
		t.Errorf("ls after rm:\n%s", out)
	}
}

func TestAuditCommands(t *testing.T) {
	startDaemon(t)
	_, out, _ := run(t, "", "sandbox", "create")
	id := strings.TrimSpace(out)
	run(t, "", "sandbox", "exec", id, "--", "true")
	run(t, "", "sandbox", "rm", id)

	code, out, stderr := run(t, "", "audit", "tail")
	if code != 0 {
		t.Fatalf("tail: %d %q", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var kinds []string
	for _, l := range lines {
		f := strings.SplitN(l, " ", 6)
		if len(f) != 6 {
			t.Fatalf("tail line %q: want seq time actor kind session data", l)
		}
		if f[4] == id {
			kinds = append(kinds, f[2]+":"+f[3])
		}
	}
	if strings.Join(kinds, " ") != "agent:sandbox.create agent:sandbox.exec.intent agent:sandbox.exec agent:sandbox.destroy" {
		t.Errorf("audit of %s: %v\n%s", id, kinds, out)
	}
	if _, out2, _ := run(t, "", "audit", "tail", "--after", "1"); strings.Count(out2, "\n") != len(lines)-1 {
		t.Errorf("tail --after 1:\n%s", out2)
	}

	code, out, _ = run(t, "", "audit", "verify")
	if code != 0 || out != fmt.Sprintf("ok: %d records\n", len(lines)) {
		t.Errorf("verify: %d %q", code, out)
	}
	code, out, _ = run(t, "", "audit", "export", "--format", "jsonl")
	exp := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(exp) != len(lines) {
		t.Fatalf("export: %d %d lines", code, len(exp))
	}
	var rec client.AuditRecord
	if err := json.Unmarshal([]byte(exp[0]), &rec); err != nil || rec.Seq != 1 || rec.Hash == "" {
		t.Errorf("export line 1: %+v %v", rec, err)
	}
	if code, _, _ := run(t, "", "audit", "export", "--format", "csv"); code != ExitIronClaw {
		t.Errorf("export --format csv: %d", code)
	}
	// The agent token may not read the audit log.
	t.Setenv(client.EnvOperatorToken, os.Getenv(client.EnvAgentToken))
	if code, _, stderr := run(t, "", "audit", "verify"); code != ExitIronClaw || !strings.Contains(stderr, "forbidden") {
		t.Errorf("verify as agent: %d %q", code, stderr)
	}
}

// A broken chain: exit 1 naming the first bad record (served by a stand-in,
// since the daemon's log cannot be edited through the API).
func TestAuditVerifyBroken(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"ok":false,"checked":4,"bad_seq":5,"problem":"edited","reason":"hash mismatch"}`))
	}))
	defer srv.Close()
	t.Setenv(client.EnvAddr, srv.URL)
	t.Setenv(client.EnvOperatorToken, "x")
	code, out, _ := run(t, "", "audit", "verify")
	if code != 1 || !strings.Contains(out, "record 5") || !strings.Contains(out, "edited: hash mismatch") {
		t.Errorf("verify: %d %q", code, out)
	}
}

func TestNoDaemon(t *testing.T) {
	t.Setenv(client.EnvAddr, "127.0.0.1:1")
	t.Setenv(client.EnvAgentToken, "x")
	code, _, stderr := run(t, "", "sandbox", "ls")
	if code != ExitIronClaw || !strings.Contains(stderr, "cannot reach the ironclaw daemon") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("ls without a daemon: %d %q", code, stderr)
	}
}

// `ironclaw serve` as a process: prints where the tokens are (never a
// token), serves, and on SIGTERM destroys its sandboxes and exits 0.
func TestServeProcessSIGTERM(t *testing.T) {
	daemontest.NeedSandbox(t)
	dir := filepath.Join(t.TempDir(), "data")
	exe, _ := os.Executable()
	cmd := exec.Command(exe, "serve", "--listen", "127.0.0.1:0", "--pool", "off",
		"--audit-key", dir+".custody/audit.key", "--audit-checkpoints", dir+".custody/checkpoints.jsonl")
	cmd.Env = []string{"IRONCLAW_CLI_TEST_MAIN=1", "IRONCLAW_DATA_DIR=" + dir, "IRONCLAW_TEST_INIT_EXE=" + os.Getenv("IRONCLAW_TEST_INIT_EXE"), "PATH=" + os.Getenv("PATH")}
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	var logb strings.Builder
	addrc := make(chan string, 1)
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		sc := bufio.NewScanner(errPipe)
		for sc.Scan() {
			logb.WriteString(sc.Text() + "\n")
			if _, a, ok := strings.Cut(sc.Text(), "listening on http://"); ok {
				addrc <- strings.Fields(a)[0]
			}
		}
	}()
	var addr string
	select {
	case addr = <-addrc:
	case <-time.After(60 * time.Second):
		t.Fatal("serve did not start")
	}
	agentTok := daemontest.Token(t, dir, client.AgentTokenFile)
	t.Setenv(client.EnvAddr, "http://"+addr)
	t.Setenv(client.EnvDataDir, dir) // tokens from the files
	t.Setenv(client.EnvAgentToken, "")
	t.Setenv(client.EnvOperatorToken, "")
	code, out, stderr := run(t, "", "sandbox", "create")
	if code != 0 {
		t.Fatalf("create: %d %q", code, stderr)
	}
	id := strings.TrimSpace(out)
	cmd.Process.Signal(syscall.SIGTERM)
	<-logDone
	if err := cmd.Wait(); err != nil {
		t.Fatalf("serve after SIGTERM: %v\n%s", err, logb.String())
	}
	log := logb.String()
	if !strings.Contains(log, "agent token in "+filepath.Join(dir, "agent.token")) || strings.Contains(log, agentTok) {
		t.Errorf("serve's log:\n%s", log)
	}
	// Look at the outcome with a new daemon on the same data directory.
	startDaemonAt(t, dir)
	if code, out, _ := run(t, "", "audit", "tail"); code != 0 || !regexp.MustCompile(`daemon sandbox.destroy `+id+` .*daemon shut down`).MatchString(out) {
		t.Errorf("audit after SIGTERM: %d\n%s", code, out)
	}
}

func TestApprovalsCommands(t *testing.T) {
	startDaemon(t)
	ctx := context.Background()
	cl := &client.Client{}
	a, err := cl.FileApproval(ctx, "tool.call", "", "deploy to prod", map[string]any{"tool": "deploy"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := cl.FileApproval(ctx, "tool.call", "", "", map[string]any{"tool": "drop-table"})
	if err != nil {
		t.Fatal(err)
	}
	code, out, stderr := run(t, "", "approvals", "ls")
	if code != 0 || !strings.Contains(out, a.ID) || !strings.Contains(out, "deploy to prod") || !strings.Contains(out, "STATE") {
		t.Fatalf("ls: %d %q %q", code, out, stderr)
	}
	code, out, _ = run(t, "", "approvals", "show", a.ID, "--json")
	if code != 0 || !strings.Contains(out, `"kind": "tool.call"`) {
		t.Fatalf("show: %d %q", code, out)
	}
	code, out, _ = run(t, "", "approvals", "approve", a.ID, "--reason", "looks fine")
	if code != 0 || strings.TrimSpace(out) != a.ID+" approved by operator" {
		t.Fatalf("approve: %d %q", code, out)
	}
	code, _, stderr = run(t, "", "approvals", "deny", a.ID)
	if code != ExitIronClaw || !strings.Contains(stderr, "conflict") {
		t.Fatalf("deny after approve: %d %q", code, stderr)
	}
	code, _, stderr = run(t, "", "approvals", "approve", b.ID, "--scope", "global")
	if code != ExitIronClaw || !strings.Contains(stderr, "egress.host") {
		t.Fatalf("scope on tool.call: %d %q", code, stderr)
	}
	if code, out, _ = run(t, "", "approvals", "deny", b.ID, "--reason", "no"); code != 0 || !strings.Contains(out, "denied by operator") {
		t.Fatalf("deny: %d %q", code, out)
	}
	code, _, stderr = run(t, "", "approvals", "approve", "apr-0000000000000000")
	if code != ExitIronClaw || !strings.Contains(stderr, "not_found") {
		t.Fatalf("unknown id: %d %q", code, stderr)
	}
	code, out, _ = run(t, "", "approvals", "ls", "--all", "--json")
	if code != 0 || strings.Count(out, "\n") != 2 || !strings.Contains(out, `"decided_by":"operator"`) {
		t.Fatalf("ls --all --json: %d %q", code, out)
	}
	// The agent token cannot decide.
	t.Setenv(client.EnvOperatorToken, os.Getenv(client.EnvAgentToken))
	c, err := cl.FileApproval(ctx, "tool.call", "", "", map[string]any{"tool": "x"})
	if err != nil {
		t.Fatal(err)
	}
	if code, _, stderr = run(t, "", "approvals", "approve", c.ID); code != ExitIronClaw || !strings.Contains(stderr, "forbidden") {
		t.Fatalf("agent approving: %d %q", code, stderr)
	}
}

func TestOperatorAdd(t *testing.T) {
	dir := t.TempDir()
	code, out, stderr := run(t, "", "operator", "add", "alice", "--data-dir", dir)
	if code != 0 {
		t.Fatalf("operator add: %d %q", code, stderr)
	}
	p := strings.TrimSpace(out)
	st, err := os.Stat(p)
	if err != nil || st.Mode().Perm() != 0o600 || filepath.Base(p) != "alice.token" {
		t.Fatalf("token file %q: %v %v", p, st, err)
	}
	if code, _, stderr = run(t, "", "operator", "add", "alice", "--data-dir", dir); code != ExitIronClaw || !strings.Contains(stderr, "exists") {
		t.Fatalf("adding twice: %d %q", code, stderr)
	}
	if code, _, _ = run(t, "", "operator", "add", "../x", "--data-dir", dir); code != ExitIronClaw {
		t.Fatal("a name with a slash was accepted")
	}
}
