package daemon

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/daemontest"
)

// A named volume keeps its files across sandboxes and daemon restarts, is
// in one running sandbox at a time, holds to its size, and belongs to its
// creator.
func TestVolumesOutliveSandboxesAndRestarts(t *testing.T) {
	daemontest.NeedSandbox(t)
	if os.Geteuid() != 0 {
		t.Skip("volumes need root")
	}
	ctx := context.Background()
	dir := t.TempDir()
	mkOther := agentClient(t, dir, "other")
	r := startDaemon(t, dir, nil)
	ag := r.client(t, false)
	v, err := ag.CreateVolume(ctx, "notes", 16<<20)
	if err != nil || v.Name != "notes" || v.SizeBytes != 16<<20 || v.Principal != "agent" {
		t.Fatalf("create: %+v %v", v, err)
	}
	// A path the sandbox's own root holds is refused, and reserves
	// nothing (the create below gets the volume).
	for _, p := range []string{"/proc", "/etc", "/workspace"} {
		if _, err := ag.CreateSandbox(ctx, client.CreateRequest{Volumes: []client.VolumeMount{{Name: "notes", Path: p}}}); !client.IsCode(err, "invalid_argument") {
			t.Fatalf("a volume over %s: %v", p, err)
		}
	}
	withVolume := client.CreateRequest{Volumes: []client.VolumeMount{{Name: "notes", Path: "/workspace/notes"}}}
	sb, err := ag.CreateSandbox(ctx, withVolume)
	if err != nil {
		t.Fatal(err)
	}
	run := func(id, cmd string) (string, int) {
		t.Helper()
		var out bytes.Buffer
		res, err := ag.Exec(ctx, id, client.ExecRequest{Cmd: cmd, Stdout: &out, Stderr: &out})
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		return out.String(), res.Exit
	}
	if out, code := run(sb.ID, `echo kept > /workspace/notes/a.txt && id -u && stat -c %U /workspace/notes/a.txt`); code != 0 || out != "65532\nsandbox\n" {
		t.Fatalf("write into the volume: %d %q", code, out)
	}
	// Its size is a hard quota inside the sandbox.
	if out, code := run(sb.ID, `dd if=/dev/zero of=/workspace/notes/fill bs=1M count=64 2>&1; echo "dd=$?"; rm /workspace/notes/fill`); code != 0 || !strings.Contains(out, "No space left") || strings.Contains(out, "dd=0") {
		t.Fatalf("filling the volume: %d %q", code, out)
	}
	// One running sandbox at a time, and not deletable while mounted.
	if _, err := ag.CreateSandbox(ctx, withVolume); !client.IsCode(err, "conflict") {
		t.Fatalf("a second sandbox with the volume: %v", err)
	}
	if _, err := ag.DeleteVolume(ctx, "notes"); !client.IsCode(err, "conflict") {
		t.Fatalf("delete while mounted: %v", err)
	}
	if got, _ := ag.GetVolume(ctx, "notes"); got.Sandbox != sb.ID {
		t.Fatalf("the volume says it is in %q, want %s", got.Sandbox, sb.ID)
	}
	// Another agent cannot see, mount or delete it.
	other := mkOther(r)
	if _, err := other.GetVolume(ctx, "notes"); !client.IsCode(err, "not_found") {
		t.Fatalf("another agent's get: %v", err)
	}
	if list, err := other.ListVolumes(ctx); err != nil || len(list) != 0 {
		t.Fatalf("another agent's list: %+v %v", list, err)
	}
	if _, err := other.CreateSandbox(ctx, client.CreateRequest{Volumes: []client.VolumeMount{{Name: "notes", Path: "/notes"}}}); !client.IsCode(err, "not_found") {
		t.Fatalf("another agent's mount: %v", err)
	}
	if _, err := other.DeleteVolume(ctx, "notes"); !client.IsCode(err, "not_found") {
		t.Fatalf("another agent's delete: %v", err)
	}
	if _, err := ag.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}

	// After a restart, a new sandbox sees what the first wrote.
	r.stop(t)
	r = startDaemon(t, dir, nil)
	ag, op := r.client(t, false), r.client(t, true)
	sb2, err := ag.CreateSandbox(ctx, withVolume)
	if err != nil {
		t.Fatal(err)
	}
	if out, code := run(sb2.ID, `cat /workspace/notes/a.txt`); code != 0 || out != "kept\n" {
		t.Fatalf("after a restart: %d %q", code, out)
	}
	if _, err := ag.DeleteSandbox(ctx, sb2.ID); err != nil {
		t.Fatal(err)
	}
	list, err := op.ListVolumes(ctx)
	if err != nil || len(list) != 1 || list[0].Sandbox != "" {
		t.Fatalf("operator's list after the sandbox ended: %+v %v", list, err)
	}
	if _, err := ag.DeleteVolume(ctx, "notes"); err != nil {
		t.Fatal(err)
	}
	if _, err := ag.GetVolume(ctx, "notes"); !client.IsCode(err, "not_found") {
		t.Fatalf("after delete: %v", err)
	}
	kinds := map[string]int{}
	for _, rec := range daemontest.VerifiedAudit(t, op) {
		kinds[rec.Kind]++
	}
	if kinds["volume.create.intent"] != 1 || kinds["volume.create"] != 1 || kinds["volume.delete"] < 1 {
		t.Fatalf("audit kinds: %v", kinds)
	}
}
