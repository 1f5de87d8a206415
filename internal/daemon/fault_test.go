package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/daemontest"
)

// A full disk under the data directory: writes answer 507
// insufficient_storage and change nothing (a command whose audit record
// cannot be written does not run), reads keep working, and once there is
// room again the daemon carries on with an intact audit chain.
func TestHostileFullDisk(t *testing.T) {
	daemontest.NeedSandbox(t)
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs for the data directory needs root")
	}
	root := t.TempDir()
	dir := filepath.Join(root, "data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "size=24m,mode=0700"); err != nil {
		t.Fatalf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	r := startDaemon(t, dir, func(c *Config) { c.RatePerSecond, c.RateBurst = 1e6, 1e6 })
	ag, op := r.client(t, false), r.client(t, true)
	ctx := context.Background()
	sb := daemontest.CreateSandbox(t, ag)
	// Each command line is long, so its records fill the store fast.
	pad := strings.Repeat("x", 3000)
	run := func(i int) error {
		_, err := ag.Exec(ctx, sb.ID, client.ExecRequest{Cmd: fmt.Sprintf("echo %d >> /workspace/ran # %s", i, pad)})
		return err
	}
	if err := run(0); err != nil {
		t.Fatal(err)
	}

	// Fill the file system, then write until the store cannot take more.
	filler := filepath.Join(dir, "filler")
	fill(t, filler)
	full := -1
	for i := 1; i <= 5000 && full < 0; i++ {
		err := run(i)
		switch {
		case err == nil:
		case client.IsCode(err, "insufficient_storage"):
			full = i
		default:
			t.Fatalf("exec %d on a full disk: %v", i, err)
		}
	}
	if full < 0 {
		t.Fatal("5000 execs on a full disk all succeeded")
	}
	// The refused command did not run.
	var ran bytes.Buffer
	if err := ag.GetFile(ctx, sb.ID, "/workspace/ran", &ran); err != nil {
		t.Fatalf("reading a file on a full disk: %v", err)
	}
	if lines := strings.Fields(ran.String()); len(lines) != full || lines[len(lines)-1] != fmt.Sprint(full-1) {
		t.Fatalf("refused exec %d: the sandbox's log holds %v", full, lines)
	}
	// Other writes are refused the same way; reads work.
	if _, err := ag.CreateSandbox(ctx, client.CreateRequest{}); !client.IsCode(err, "insufficient_storage") {
		t.Errorf("create on a full disk: %v", err)
	}
	if err := ag.PutFile(ctx, sb.ID, "/workspace/up", strings.NewReader("x"), 0o644); !client.IsCode(err, "insufficient_storage") {
		t.Errorf("upload on a full disk: %v", err)
	}
	if got, err := ag.GetSandbox(ctx, sb.ID); err != nil || got.State != "running" {
		t.Errorf("get on a full disk: %+v %v", got, err)
	}
	if list, err := ag.ListSandboxes(ctx, nil); err != nil || len(list) != 1 {
		t.Errorf("list on a full disk: %v %v", list, err)
	}
	if _, err := op.AuditTail(ctx, 0, 10); err != nil {
		t.Errorf("audit tail on a full disk: %v", err)
	}
	if r := healthz(t, r.addr); r != 200 {
		t.Errorf("healthz on a full disk: %d", r)
	}

	// Room again: everything works, and the chain is whole.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := run(1000); err != nil {
		t.Fatalf("exec after the disk has room again: %v", err)
	}
	if _, err := ag.CreateSandbox(ctx, client.CreateRequest{}); err != nil {
		t.Fatalf("create after the disk has room again: %v", err)
	}
	v, err := op.AuditVerify(ctx)
	if err != nil || !v.OK {
		t.Fatalf("verify after a full disk: %+v %v", v, err)
	}
}

// fill writes to path until the file system is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	// The last partial block too.
	for n := len(buf) / 2; n > 0; n /= 2 {
		_, _ = f.Write(buf[:n])
	}
}

func healthz(t *testing.T, addr string) int {
	t.Helper()
	c := &client.Client{Addr: addr}
	if err := c.Health(context.Background()); err != nil {
		return 0
	}
	return 200
}
