package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/daemontest"
	"github.com/ironclaw/ironclaw/internal/sandbox/inside"
	"github.com/ironclaw/ironclaw/internal/testutil/leakcheck"
)

// envDaemonDir makes the test binary a daemon on that data directory (see
// subprocessMain).
const envDaemonDir = "IRONCLAW_TEST_DAEMON_DIR"

func TestMain(m *testing.M) {
	if inside.Entered() {
		inside.Main()
	}
	if dir := os.Getenv(envDaemonDir); dir != "" {
		os.Exit(subprocessMain(dir))
	}
	leakcheck.Main(m)
}

// subprocessMain runs the daemon until SIGTERM, printing "ADDR host:port"
// on stdout once it serves.
func subprocessMain(dir string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	key, cps := daemontest.Custody(dir)
	err := Run(ctx, Config{
		Listen:              daemontest.Listen,
		DataDir:             dir,
		AuditKeyFile:        key,
		AuditCheckpointFile: cps,
		InitExe:             daemontest.InitExe(),
		Logf:                func(f string, a ...any) { fmt.Fprintf(os.Stderr, "daemon: "+f+"\n", a...) },
		Ready:               func(addr string) { fmt.Printf("ADDR %s\n", addr) },
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "daemon:", err)
		return 1
	}
	return 0
}

// running is a daemon started by startDaemon.
type running struct {
	d         *daemontest.Daemon
	addr, dir string
}

// startDaemon runs Run in-process on a free port; mod changes the Config.
func startDaemon(t *testing.T, dir string, mod func(*Config)) *running {
	t.Helper()
	daemontest.NeedSandbox(t)
	key, cps := daemontest.Custody(dir)
	cfg := Config{
		Listen:              daemontest.Listen,
		DataDir:             dir,
		AuditKeyFile:        key,
		AuditCheckpointFile: cps,
		PoolSize:            -1,
		InitExe:             daemontest.InitExe(),
	}
	if mod != nil {
		mod(&cfg)
	}
	d := daemontest.Start(t, func(ctx context.Context, ready func(string)) error {
		cfg.Ready = ready
		return Run(ctx, cfg)
	})
	return &running{d: d, addr: d.Addr, dir: dir}
}

func (r *running) stop(t *testing.T) { r.d.Stop(t) }

func (r *running) client(t *testing.T, operator bool) *client.Client {
	return daemontest.Client(t, r.addr, r.dir, operator)
}

func TestServeTokensAndLock(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	r := startDaemon(t, dir, nil)
	st, err := os.Stat(dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("data dir: %v %v", st.Mode(), err)
	}
	toks := map[string]string{}
	for _, name := range []string{AgentTokenFile, OperatorTokenFile} {
		p := filepath.Join(dir, name)
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %04o, want 0600", name, st.Mode().Perm())
		}
		b, _ := os.ReadFile(p)
		tok := strings.TrimSpace(string(b))
		if len(tok) != 64 {
			t.Errorf("%s holds %q, want 64 hex digits", name, tok)
		}
		toks[name] = tok
	}
	if toks[AgentTokenFile] == toks[OperatorTokenFile] {
		t.Fatal("agent and operator tokens are the same")
	}
	ctx := context.Background()
	if err := r.client(t, false).Health(ctx); err != nil {
		t.Fatal(err)
	}
	// Roles: the agent may not read the audit log; no token is 401.
	if _, err := r.client(t, false).AuditTail(ctx, 0, 10); !client.IsCode(err, "forbidden") {
		t.Errorf("agent reading audit: %v, want forbidden", err)
	}
	if _, err := (&client.Client{Addr: r.addr, Token: "nope-nope-nope-nope"}).ListSandboxes(ctx, nil); !client.IsCode(err, "unauthorized") {
		t.Errorf("bad token: %v, want unauthorized", err)
	}

	// Audit follow sees records as they are appended; file listing works.
	op := r.client(t, true)
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	followed := make(chan client.AuditRecord, 10)
	go op.AuditFollow(fctx, 0, func(rec client.AuditRecord) error { followed <- rec; return nil })
	sb := daemontest.CreateSandbox(t, r.client(t, false))
	select {
	case rec := <-followed:
		if rec.Kind != "sandbox.create" || rec.Session != sb.ID || rec.Actor != "agent" {
			t.Errorf("followed %+v", rec)
		}
	case <-fctx.Done():
		t.Fatal("follow saw nothing")
	}
	if err := r.client(t, false).PutFile(ctx, sb.ID, "/workspace/d/f", strings.NewReader("12345"), 0o600); err != nil {
		t.Fatal(err)
	}
	if ents, err := r.client(t, false).ListFiles(ctx, sb.ID, "/workspace/d"); err != nil || len(ents) != 1 || ents[0].Name != "f" || ents[0].Size != 5 {
		t.Errorf("ListFiles: %+v %v", ents, err)
	}

	// A second daemon on the same data directory is refused, and says why.
	err = Run(ctx, Config{Listen: "127.0.0.1:0", DataDir: dir, PoolSize: -1})
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("second daemon: %v", err)
	}

	// After a restart the tokens are the same.
	r.stop(t)
	r2 := startDaemon(t, dir, nil)
	for name, tok := range toks {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		if strings.TrimSpace(string(b)) != tok {
			t.Errorf("%s changed across a restart", name)
		}
	}
	if err := r2.client(t, false).Health(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestTokenFileChecks(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "agent.token")
	if err := os.WriteFile(p, []byte("0123456789abcdef0123\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ensureToken(p); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("world-readable token: %v", err)
	}
	os.Chmod(p, 0o600)
	if tok, err := ensureToken(p); err != nil || tok != "0123456789abcdef0123" {
		t.Errorf("existing token: %q %v", tok, err)
	}
	os.WriteFile(p, nil, 0o600)
	if _, err := ensureToken(p); err == nil {
		t.Error("empty token file accepted")
	}
	q := filepath.Join(dir, "new.token")
	tok, err := ensureToken(q)
	if err != nil || len(tok) != 64 {
		t.Fatalf("new token: %q %v", tok, err)
	}
	if again, _ := ensureToken(q); again != tok {
		t.Error("token not kept")
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Errorf("temporary files left: %v", ents)
	}
}

func TestDefaultDataDirAgrees(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", "/x/y")
	t.Setenv(client.EnvDataDir, "")
	c, _ := Config{}.withDefaults()
	if c.DataDir != "/x/y/ironclaw" || client.DefaultDataDir() != c.DataDir {
		t.Fatalf("the default data dir is %q, client's %q", c.DataDir, client.DefaultDataDir())
	}
}

// A listen failure stops the start-up cleanly and frees the data dir.
func TestListenFailure(t *testing.T) {
	daemontest.NeedSandbox(t)
	dir := t.TempDir()
	key, cps := daemontest.Custody(dir)
	err := Run(context.Background(), Config{Listen: "256.0.0.1:1", DataDir: dir, PoolSize: -1, InitExe: os.Getenv("IRONCLAW_TEST_INIT_EXE"),
		AuditKeyFile: key, AuditCheckpointFile: cps})
	if err == nil || !strings.Contains(err.Error(), "listen") {
		t.Fatalf("Run = %v", err)
	}
	r := startDaemon(t, dir, nil)
	_ = r
}

// daemonProc is the test binary as a daemon in another process.
type daemonProc struct {
	cmd  *exec.Cmd
	addr string
	errb *strings.Builder
}

// startProc starts the test binary as a daemon on dir (subprocessMain)
// and waits until it serves; the test is skipped where there are no
// sandboxes.
func startProc(t *testing.T, dir string) *daemonProc {
	t.Helper()
	daemontest.NeedSandbox(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = []string{envDaemonDir + "=" + dir, "IRONCLAW_TEST_INIT_EXE=" + os.Getenv("IRONCLAW_TEST_INIT_EXE"), "PATH=" + os.Getenv("PATH")}
	errb := &strings.Builder{}
	cmd.Stderr = errb
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &daemonProc{cmd: cmd, errb: errb}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	sc := bufio.NewScanner(out)
	got := make(chan string, 1)
	go func() {
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "ADDR "); ok {
				got <- a
			}
		}
		close(got)
	}()
	select {
	case a, ok := <-got:
		if !ok {
			cmd.Wait()
			t.Fatalf("daemon process exited: %s", errb.String())
		}
		p.addr = a
	case <-time.After(60 * time.Second):
		t.Fatalf("daemon process did not start: %s", errb.String())
	}
	return p
}

// cgroupDirs lists the cgroup directories whose name starts with prefix
// and ends with suffix.
func cgroupDirs(prefix, suffix string) []string {
	var out []string
	_ = filepath.WalkDir("/sys/fs/cgroup", func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && strings.HasPrefix(d.Name(), prefix) && strings.HasSuffix(d.Name(), suffix) {
			out = append(out, p)
			return filepath.SkipDir
		}
		return nil
	})
	return out
}

func cgroupPids(dirs []string) []int {
	seen := map[int]bool{}
	var out []int
	for _, d := range dirs {
		b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
				seen[pid] = true
				out = append(out, pid)
			}
		}
	}
	return out
}

// Restart safety: a SIGKILLed daemon's sandboxes die with it, the next
// daemon collects their cgroups, shows them as lost, and the audit chain
// still verifies.
func TestCrashThenRestart(t *testing.T) {
	dir := t.TempDir()
	p := startProc(t, dir)
	ctx := context.Background()
	ag := daemontest.Client(t, p.addr, dir, false)
	sb, err := ag.CreateSandbox(ctx, client.CreateRequest{Labels: map[string]string{"t": "crash"}})
	if err != nil {
		t.Fatal(err)
	}
	execErr := make(chan error, 1)
	go func() {
		_, err := ag.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "echo started; sleep 1000 & sleep 1000", Stdout: &signalWriter{}})
		execErr <- err
	}()
	daemonPid := p.cmd.Process.Pid
	prefix := fmt.Sprintf("ic-%d.", daemonPid)
	// Wait until the exec is running inside (more than the init in the cgroup).
	var pids []int
	deadline := time.Now().Add(20 * time.Second)
	for {
		pids = cgroupPids(cgroupDirs(prefix, sb.ID))
		if len(pids) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("exec did not start: pids %v in %v", pids, cgroupDirs(prefix, sb.ID))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.cmd.Wait()
	select {
	case err := <-execErr:
		if err == nil {
			t.Error("exec stream ended cleanly although its daemon was killed")
		}
	case <-time.After(10 * time.Second):
		t.Error("exec stream outlived its daemon")
	}
	deadline = time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for syscall.Kill(pid, 0) == nil {
			if time.Now().After(deadline) {
				t.Fatalf("sandbox process %d outlived its daemon", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	// A new daemon on the same data directory.
	p2 := startProc(t, dir)
	if left := cgroupDirs(prefix, ""); len(left) != 0 {
		t.Errorf("cgroups of the dead daemon remain: %v", left)
	}
	ag2 := daemontest.Client(t, p2.addr, dir, false)
	got, err := ag2.GetSandbox(ctx, sb.ID)
	if err != nil || got.State != "lost" {
		t.Fatalf("after restart: %+v %v", got, err)
	}
	if list, err := ag2.ListSandboxes(ctx, nil); err != nil || len(list) != 0 {
		t.Errorf("running after restart: %+v %v", list, err)
	}
	if _, err := ag2.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "true"}); err == nil {
		t.Error("exec in a lost sandbox worked")
	}
	op := daemontest.Client(t, p2.addr, dir, true)
	recs := daemontest.VerifiedAudit(t, op)
	var kinds []string
	for _, r := range recs {
		if r.Session == sb.ID {
			kinds = append(kinds, r.Kind)
		}
	}
	// The exec the kill cut short left its start record (written before it
	// ran) and no end.
	if strings.Join(kinds, " ") != "sandbox.create sandbox.exec.intent sandbox.lost" {
		t.Errorf("audit of %s: %v", sb.ID, kinds)
	}
	if err := p2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p2.cmd.Wait(); err != nil {
		t.Fatalf("daemon after SIGTERM: %v: %s", err, p2.errb.String())
	}
}

// SIGTERM: the daemon destroys its sandboxes (audited), exits 0 and leaves
// no cgroup.
func TestGracefulShutdown(t *testing.T) {
	dir := t.TempDir()
	p := startProc(t, dir)
	ctx := context.Background()
	ag := daemontest.Client(t, p.addr, dir, false)
	var ids []string
	for range 2 {
		sb := daemontest.CreateSandbox(t, ag)
		ids = append(ids, sb.ID)
	}
	// One exec in flight while shutting down.
	go ag.Exec(ctx, ids[0], client.ExecRequest{Cmd: "sleep 1000"})
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("daemon after SIGTERM: %v: %s", err, p.errb.String())
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("shutdown with an exec in flight took %v", d)
	}
	if left := cgroupDirs(fmt.Sprintf("ic-%d.", p.cmd.Process.Pid), ""); len(left) != 0 {
		t.Errorf("cgroups remain after a graceful shutdown: %v", left)
	}
	r := startDaemon(t, dir, nil)
	op := r.client(t, true)
	recs, err := op.AuditTail(ctx, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		found := false
		for _, rec := range recs {
			if rec.Session == id && rec.Kind == "sandbox.destroy" && strings.Contains(string(rec.Data), "daemon shut down") {
				found = true
			}
		}
		if !found {
			t.Errorf("no sandbox.destroy with reason \"daemon shut down\" for %s", id)
		}
		got, err := r.client(t, false).GetSandbox(ctx, id)
		if err != nil || got.State != "destroyed" {
			t.Errorf("%s after shutdown: %+v %v", id, got, err)
		}
	}
	if v, err := op.AuditVerify(ctx); err != nil || !v.OK {
		t.Fatalf("verify: %+v %v", v, err)
	}
}

type signalWriter struct{}

func (signalWriter) Write(p []byte) (int, error) { return len(p), nil }
