package conformance

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
	"github.com/ironclaw/ironclaw/internal/sandbox/seal"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
)

// The hostile cases (RunHostile): each tries an attack or a fault from
// inside (or on) a sandbox and checks it fails or is handled, the same on
// every backend.

func (s *suite) hostile(t *testing.T) {
	t.Run("sys is read-only and holds only the cgroup view", s.hostileSys)
	t.Run("dev holds only the listed nodes", s.hostileDev)
	t.Run("mknod of a device fails", s.hostileMknod)
	t.Run("setuid-root binary grants nothing", s.hostileSetuid)
	t.Run("cgroup view shows the limits read-only", s.hostileCgroupView)
	t.Run("CPU count follows the CPU limit", s.hostileCPUCount)
	t.Run("fork bomb does not stop the next exec", s.hostileForkBomb)
	t.Run("OOM with a full workspace spares pid 1", s.hostileOOMFullWorkspace)
	t.Run("pid 1 killed from the host closes Done", s.hostileKillInit)
	t.Run("aborted WriteFile keeps the old content", s.hostileAbortedWrite)
	t.Run("FIFO upload and download fail at once", s.hostileFIFO)
	t.Run("tmpfs sizes must fit the memory limit", s.hostileTmpfsSizes)
}

func (s *suite) hostileSys(t *testing.T) {
	b := s.create(t, sandbox.Spec{})
	// Outside /sys/fs/cgroup only empty directories may show (a masked
	// entry of the host's sysfs is an empty read-only tmpfs).
	o := b.Sh(`find /sys -mindepth 1 | while read -r f; do
	case "$f" in /sys/fs|/sys/fs/cgroup|/sys/fs/cgroup/*) continue;; esac
	if [ -d "$f" ] && [ ! -L "$f" ] && [ -z "$(find "$f" -mindepth 1 -print 2>/dev/null | head -n 1)" ]; then continue; fi
	echo "shows $f"
done
[ -d /sys/fs/cgroup ] || echo "no /sys/fs/cgroup"
for p in /sys/x /sys/fs/x /sys/fs/cgroup/x /sys/kernel/x; do (: > "$p") 2>/dev/null && echo "wrote $p"; done
mkdir /sys/y 2>/dev/null && echo "made /sys/y"
grep -E ' /sys(/| )' /proc/mounts | while read -r _ mnt _ opts _; do
	case ",$opts," in *,ro,*) ;; *) echo "writable mount $mnt ($opts)";; esac
done
echo done`)
	for _, l := range strings.Split(o.Stdout, "\n") {
		switch {
		case strings.HasPrefix(l, "shows"):
			t.Errorf("/sys %s: only the sandbox's cgroup view belongs there", l)
		case strings.HasPrefix(l, "no "), strings.HasPrefix(l, "wrote"), strings.HasPrefix(l, "made"):
			t.Errorf("%s", l)
		case strings.HasPrefix(l, "writable mount") && !s.writableMountAllowed(l):
			t.Errorf("%s", l)
		}
	}
	if !strings.HasSuffix(o.Stdout, "done\n") {
		t.Fatalf("probe did not finish: %q %q", o.Stdout, o.Stderr)
	}
}

// writableMountAllowed: a mount under /sys whose options lack "ro" is only
// acceptable at or below /sys/fs/cgroup, where Options.RootCgroupMounts
// says the backend's runtime leaves them so (root's files and directories:
// the writes around this check prove the sandbox user cannot write there).
func (s *suite) writableMountAllowed(line string) bool {
	return s.opts.RootCgroupMounts && (strings.HasPrefix(line, "writable mount /sys/fs/cgroup (") ||
		strings.HasPrefix(line, "writable mount /sys/fs/cgroup/"))
}

func (s *suite) hostileDev(t *testing.T) {
	b := s.create(t, sandbox.Spec{})
	// [ -c ] stats the node itself: find's -type trusts the directory
	// entry, which for a bind-mounted node is the mount point's type.
	o := b.Sh(`find /dev | while read -r f; do [ ! -L "$f" ] && { [ -c "$f" ] || [ -b "$f" ]; } && echo "$f"; done | sort | tr '\n' ' '; echo
(: > /dev/x) 2>/dev/null && echo "wrote /dev/x"; mkdir /dev/y 2>/dev/null && echo "made /dev/y"; echo done`)
	got := strings.Fields(strings.Split(o.Stdout, "\n")[0])
	if !slices.Equal(got, seal.DeviceNodes) {
		t.Errorf("device nodes in /dev: %v, want exactly %v", got, seal.DeviceNodes)
	}
	if strings.Contains(o.Stdout, "wrote") || strings.Contains(o.Stdout, "made") || !strings.HasSuffix(o.Stdout, "done\n") {
		t.Errorf("/dev is writable: %q", o.Stdout)
	}
	// The nodes that are there work.
	if o := b.Sh(`head -c 4 /dev/zero | od -An -tx1 | tr -d ' \n'; echo; echo x > /dev/null && echo null-ok`); o.Stdout != "00000000\nnull-ok\n" {
		t.Errorf("/dev/zero and /dev/null: %q %q", o.Stdout, o.Stderr)
	}
}

func (s *suite) hostileMknod(t *testing.T) {
	b := s.create(t, sandbox.Spec{})
	o := b.Sh(`for spec in "/tmp/c c 1 3" "/workspace/fuse c 10 229" "/workspace/tun c 10 200" "/tmp/b b 7 0"; do
	set -- $spec
	mknod "$@" 2>/dev/null && echo "made $1"
	[ -e "$1" ] && echo "exists $1"
done
mkfifo /tmp/fifo && [ -p /tmp/fifo ] && echo fifo-ok`)
	if o.Stdout != "fifo-ok\n" {
		t.Fatalf("device nodes could be made (or a FIFO could not): %q %q", o.Stdout, o.Stderr)
	}
}

// A setuid-root copy of id, reachable inside through a bind mount, runs
// as the sandbox user: the binds are nosuid, and no_new_privs holds where
// a backend cannot make them so.
func (s *suite) hostileSetuid(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making a setuid-root binary needs root")
	}
	id, err := exec.LookPath("id")
	if err != nil {
		t.Skip("no id binary on the host")
	}
	// The container runtimes open bind sources as the container's root
	// (host uid 100000 on runc): every directory must be searchable.
	dir, err := os.MkdirTemp("", "ironclaw-conformance-suid-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(id)
	if err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(dir, "id")
	if err := os.WriteFile(copyPath, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(copyPath, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(copyPath, 0o755|os.ModeSetuid|os.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	b := s.create(t, sandbox.Spec{Mounts: []sandbox.Mount{{Source: dir, Target: "/suid", ReadOnly: true}}})
	o := b.Sh(`[ -u /suid/id ] && echo setuid-bit-visible; /suid/id; /suid/id -u; /suid/id -g`)
	lines := strings.Split(strings.TrimSpace(o.Stdout), "\n")
	if o.Res.ExitCode != 0 || len(lines) < 3 || strings.Contains(o.Stdout, "euid=") || strings.Contains(o.Stdout, "egid=") ||
		lines[len(lines)-2] != "65532" || lines[len(lines)-1] != "65532" {
		t.Fatalf("a setuid-root binary changed the identity: %q %q", o.Stdout, o.Stderr)
	}
}

// cgroupScript prints the sandbox's memory, pids and CPU limits as its own
// cgroup view at /sys/fs/cgroup shows them, found the way runtimes find
// them (the path in /proc/self/cgroup; a controller /proc/self/cgroup does
// not list is read at the root of its directory), then tries to change
// them.
const cgroupScript = `cg=/sys/fs/cgroup
path() { # controller ("" for v2) -> this process's cgroup path in its hierarchy
	while IFS=: read -r id ctrls p; do
		case ",$ctrls," in ",$1,"|*",$1,"*) [ -n "$1" ] || [ "$id" = 0 ] && { echo "$p"; return; };; esac
	done < /proc/self/cgroup
	echo /
}
if [ -e $cg/cgroup.controllers ]; then
	d=$cg$(path "")
	echo "version 2"
	echo "memory $(cat $d/memory.max)"
	echo "pids $(cat $d/pids.max)"
	echo "cpu $(cat $d/cpu.max)"
	f=$d/memory.max
else
	echo "version 1"
	echo "memory $(cat $cg/memory$(path memory)/memory.limit_in_bytes)"
	echo "pids $(cat $cg/pids$(path pids)/pids.max)"
	echo "cpu $(cat $cg/cpu$(path cpu)/cpu.cfs_quota_us) $(cat $cg/cpu$(path cpu)/cpu.cfs_period_us)"
	f=$cg/memory$(path memory)/memory.limit_in_bytes
fi
(echo 1073741824 > "$f") 2>/dev/null && echo "wrote $f"
mkdir "$(dirname "$f")/child" 2>/dev/null && echo "made a child cgroup"
(: > $cg/x) 2>/dev/null && echo "wrote $cg/x"
echo done`

func (s *suite) hostileCgroupView(t *testing.T) {
	const mem, pids, cpus = 96 << 20, 48, 0.5
	b := s.create(t, sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: mem, Pids: pids, CPUs: cpus}})
	o := b.Sh(cgroupScript)
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(o.Stdout), "\n") {
		k, v, _ := strings.Cut(l, " ")
		if k == "wrote" || k == "made" {
			t.Errorf("the cgroup view is writable: %s", l)
		}
		got[k] = v
	}
	if got["done"] == "" && !strings.HasSuffix(o.Stdout, "done\n") {
		t.Fatalf("cgroup view: %q %q", o.Stdout, o.Stderr)
	}
	want := map[string]string{"memory": strconv.Itoa(mem), "pids": strconv.Itoa(pids), "cpu": "50000 100000"}
	if got["version"] == "2" {
		want["cpu"] = "50000 100000"
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s limit in the cgroup view (v%s): %q, want %q (output %q, stderr %q)", k, got["version"], got[k], w, o.Stdout, o.Stderr)
		}
	}
}

func (s *suite) hostileCPUCount(t *testing.T) {
	host := runtime.NumCPU()
	for _, cpus := range []float64{0.5, 1, 1.5} {
		want := min(int(math.Ceil(cpus)), host)
		b := s.create(t, sandbox.Spec{Limits: sandbox.Limits{CPUs: cpus}})
		o := b.Sh(`nproc`)
		if got := strings.TrimSpace(o.Stdout); got != strconv.Itoa(want) {
			t.Errorf("cpus %v on a %d-CPU host: nproc says %q, want %d", cpus, host, got, want)
		}
	}
}

// untilAlive runs echo until it works, the sandbox ends or a minute passes;
// it reports whether the sandbox is still alive.
func untilAlive(t *testing.T, b *sandboxtest.Box, what string) bool {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		o := b.Exec(sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "echo alive"}, Timeout: 10 * time.Second})
		if o.Err == nil && o.Stdout == "alive\n" {
			return true
		}
		select {
		case <-b.SB.Done():
			return false
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s the sandbox neither answers nor ends: %q %v", what, o.Stdout, o.Err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (s *suite) hostileForkBomb(t *testing.T) {
	b := s.create(t, sandbox.Spec{Limits: sandbox.Limits{Pids: 64}})
	o := b.Exec(sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", `b() { b | b & }; b; sleep 4`}, Timeout: 4 * time.Second})
	t.Logf("fork bomb: exit %d, timed out %v, err %v", o.Res.ExitCode, o.Res.TimedOut, o.Err)
	if !untilAlive(t, b, "a fork bomb") {
		if !s.opts.InitMayDie {
			t.Fatal("the fork bomb ended the sandbox (its pid 1 has no reserved PIDs on this backend?)")
		}
		t.Log("the fork bomb ended the sandbox, and Done closed")
	}
}

func (s *suite) hostileOOMFullWorkspace(t *testing.T) {
	b := s.create(t, sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 96 << 20, Pids: 64}})
	// Fill both tmpfs areas (ENOSPC ends each), then allocate past the rest.
	o := b.Exec(sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", `head -c 200000000 /dev/zero > /workspace/fill 2>/dev/null
head -c 200000000 /dev/zero > /tmp/fill 2>/dev/null
x=$(head -c 200000000 /dev/zero | tr '\0' a); echo "${#x}"`}, Timeout: 30 * time.Second})
	if strings.Contains(o.Stdout, "200000000") {
		t.Fatalf("allocated 200 MB beside full tmpfs areas under a 96 MiB limit: %+v", o.Res)
	}
	t.Logf("allocation: exit %d, OOM killed %v, err %v", o.Res.ExitCode, o.Res.OOMKilled, o.Err)
	if !untilAlive(t, b, "an OOM with full tmpfs areas") {
		t.Fatal("the OOM killer took pid 1: the sandbox ended")
	}
	// pid 1 is the OOM killer's last choice (where the kernel's OOM killer
	// is the one choosing): commands start at the most.
	if !s.opts.NoOOMScore {
		// The native init raises itself to the commands' value while it
		// starts one (see boot.aroundFork): a command that reads pid 1's
		// at once may still see that, so it reads until pid 1 is back.
		o := b.Sh(`self=$(cat /proc/self/oom_score_adj)
for i in $(seq 100); do init=$(cat /proc/1/oom_score_adj); [ "$init" -lt "$self" ] && break; sleep 0.05; done
echo "$init $self"; sh -c 'cat /proc/self/oom_score_adj'`)
		f := strings.Fields(o.Stdout)
		if len(f) != 3 {
			t.Fatalf("oom_score_adj: %q %q", o.Stdout, o.Stderr)
		}
		init, self, child := atoi(f[0]), atoi(f[1]), atoi(f[2])
		if self != sandbox.WorkloadOOMScoreAdj || child != self || init >= self {
			t.Errorf("oom_score_adj of pid 1 is %d, of a command %d and of its child %d: commands must start at %d, above pid 1",
				init, self, child, sandbox.WorkloadOOMScoreAdj)
		}
	}
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return math.MaxInt
	}
	return n
}

func (s *suite) hostileKillInit(t *testing.T) {
	if s.opts.KillInit == nil {
		t.Fatal("the backend's test gives no Options.KillInit")
	}
	b := s.create(t, sandbox.Spec{})
	b.Sh(`sleep 300 >/dev/null 2>&1 &`)
	if err := s.opts.KillInit(b.SB); err != nil {
		t.Fatalf("killing pid 1 from the host: %v", err)
	}
	select {
	case <-b.SB.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("Done did not close after pid 1 was killed")
	}
	o := b.Exec(sandbox.ExecRequest{Argv: []string{"true"}})
	if !errors.Is(o.Err, sandbox.ErrClosed) {
		t.Fatalf("Exec after pid 1 died: %v, want ErrClosed", o.Err)
	}
}

// failingReader yields data, then fails.
type failingReader struct {
	data []byte
	err  error
}

func (r *failingReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

// blockingReader yields data, then blocks until released.
type blockingReader struct {
	data    []byte
	release chan struct{}
}

func (r *blockingReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		<-r.release
		return 0, errors.New("released")
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

func (s *suite) hostileAbortedWrite(t *testing.T) {
	b := s.create(t, sandbox.Spec{})
	ctx := context.Background()
	const p = "/workspace/dir/keep.txt"
	if err := b.SB.WriteFile(ctx, p, strings.NewReader("the old content"), 0o644); err != nil {
		t.Fatal(err)
	}
	check := func(how string) {
		t.Helper()
		var got bytes.Buffer
		if err := b.SB.ReadFile(ctx, p, &got); err != nil || got.String() != "the old content" {
			t.Fatalf("after %s: the file holds %d bytes (%q...), %v", how, got.Len(), first(got.String(), 20), err)
		}
		// The helper may still be cleaning up when the call returns.
		deadline := time.Now().Add(30 * time.Second)
		for {
			list, err := b.SB.ListDir(ctx, "/workspace/dir")
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, fi := range list {
				names = append(names, fi.Name)
			}
			if slices.Equal(names, []string{"keep.txt"}) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("after %s the directory holds %v", how, names)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// The client's stream fails half-way.
	big := bytes.Repeat([]byte("new!"), 512<<10)
	err := b.SB.WriteFile(ctx, p, &failingReader{data: big, err: errors.New("client went away")}, 0o644)
	if err == nil {
		t.Fatal("WriteFile from a failing reader succeeded")
	}
	t.Logf("failing reader: %v", err)
	check("a failed upload")
	// The caller gives up while the stream stalls.
	cctx, cancel := context.WithCancel(ctx)
	r := &blockingReader{data: big, release: make(chan struct{})}
	errc := make(chan error, 1)
	go func() { errc <- b.SB.WriteFile(cctx, p, r, 0o644) }()
	time.Sleep(200 * time.Millisecond) // some of it is on its way in
	cancel()
	err = <-errc
	close(r.release)
	if err == nil {
		t.Fatal("a cancelled WriteFile succeeded")
	}
	check("a cancelled upload")
	// A complete upload still replaces it.
	if err := b.SB.WriteFile(ctx, p, bytes.NewReader(big), 0o600); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := b.SB.ReadFile(ctx, p, &got); err != nil || !bytes.Equal(got.Bytes(), big) {
		t.Fatalf("after a complete upload: %d bytes, %v", got.Len(), err)
	}
	if o := b.Sh(`find /workspace/dir -mindepth 1 -printf '%f\n'`); o.Stdout != "keep.txt\n" {
		t.Fatalf("directory after the uploads: %q", o.Stdout)
	}
}

func first(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func (s *suite) hostileFIFO(t *testing.T) {
	b := s.create(t, sandbox.Spec{})
	b.Sh(`mkfifo /workspace/fifo /tmp/fifo`)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, p := range []string{"/workspace/fifo", "/tmp/fifo"} {
		err := b.SB.WriteFile(ctx, p, strings.NewReader("data"), 0o644)
		if !errors.Is(err, sandbox.ErrInvalidRequest) && !errors.Is(err, sandbox.ErrPermission) {
			t.Errorf("WriteFile(%s) = %v, want ErrInvalidRequest or ErrPermission", p, err)
		}
		err = b.SB.ReadFile(ctx, p, io.Discard)
		if !errors.Is(err, sandbox.ErrInvalidRequest) && !errors.Is(err, sandbox.ErrPermission) {
			t.Errorf("ReadFile(%s) = %v, want ErrInvalidRequest or ErrPermission", p, err)
		}
		if err != nil && !strings.Contains(err.Error(), "FIFO") {
			t.Errorf("ReadFile(%s): %v does not say it is a FIFO", p, err)
		}
	}
	if ctx.Err() != nil {
		t.Fatal("a file operation on a FIFO hung until the deadline")
	}
	if o := b.Sh(`[ -p /workspace/fifo ] && [ -p /tmp/fifo ] && echo still-fifos; find /workspace /tmp -name '` + wire.UploadTempPrefix + `*' | wc -l`); o.Stdout != "still-fifos\n0\n" {
		t.Fatalf("after the refused operations: %q", o.Stdout)
	}
	// The sandbox's pid 1 is not stuck: it still runs commands and files.
	if err := b.SB.WriteFile(ctx, "/workspace/ok", strings.NewReader("ok"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (s *suite) hostileTmpfsSizes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), sandboxtest.CreateTimeout)
	defer cancel()
	for _, l := range []sandbox.Limits{
		{MemoryBytes: 256 << 20, WorkspaceBytes: 256 << 20},
		{MemoryBytes: 256 << 20, WorkspaceBytes: 128 << 20, TmpBytes: 128 << 20},
	} {
		sb, err := s.rt.Create(ctx, sandbox.Spec{Limits: l})
		if err == nil {
			sb.Destroy(ctx)
			t.Fatalf("created a sandbox whose tmpfs areas (%s + %s) do not fit its memory %s", sandbox.FormatBytes(l.WorkspaceBytes),
				sandbox.FormatBytes(l.TmpBytes), sandbox.FormatBytes(l.MemoryBytes))
		}
		if !errors.Is(err, sandbox.ErrInvalidSpec) {
			t.Fatalf("Create: %v, want ErrInvalidSpec", err)
		}
	}
	// What a default sandbox gets fits its memory.
	const mem = 64 << 20
	b := s.create(t, sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: mem}})
	o := b.Sh(`s=0; for k in $(df -k --output=size /workspace /tmp | tail -n +2); do s=$((s + k)); done; echo $((s * 1024))`)
	got := int64(atoi(strings.TrimSpace(o.Stdout)))
	if got <= 0 || got > sandbox.TmpfsBudget(mem) {
		t.Fatalf("the tmpfs areas of a %s sandbox hold %s together (%q), budget %s", sandbox.FormatBytes(mem), sandbox.FormatBytes(got),
			o.Stdout, sandbox.FormatBytes(sandbox.TmpfsBudget(mem)))
	}
}
