package session

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// A snapshot copies /workspace's directories and files (modes kept,
// symlinks skipped); a create from it starts with exactly that; quotas hold
// and a deleted snapshot is gone from the disk.
func TestSnapshotAndFork(t *testing.T) {
	f := newFixture(t)
	dir := filepath.Join(t.TempDir(), "snaps")
	m := f.manager(t, Options{SnapshotDir: dir})
	ctx := context.Background()
	src := create(t, m, "agent", CreateRequest{})
	sh := func(id, script string) string {
		t.Helper()
		var out, errb strings.Builder
		res, err := m.Exec(ctx, "agent", id, sandbox.ExecRequest{Argv: []string{"sh", "-c", script}, Stdout: &out, Stderr: &errb})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%q: %+v %v %s", script, res, err, errb.String())
		}
		return out.String()
	}
	sh(src.ID, "cd /workspace && mkdir -p d/e empty && echo one > a && echo deep > d/e/f && printf '#!/bin/sh\\necho ran\\n' > run.sh && chmod 755 run.sh && ln -s a link && chmod 0500 d/e")
	// Paused: the snapshot resumes it.
	if err := m.Pause(ctx, "agent", src.ID); err != nil {
		t.Fatal(err)
	}
	snap, err := m.Snapshot(ctx, "agent", src.ID)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Files != 3 || snap.Dirs != 3 || snap.Skipped != 1 || snap.Bytes != int64(len("one\ndeep\n#!/bin/sh\necho ran\n")) || snap.Principal != "agent" || snap.Sandbox != src.ID {
		t.Fatalf("snapshot = %+v", snap)
	}
	sh(src.ID, "echo changed > /workspace/a")
	fork, err := m.Create(ctx, "agent", CreateRequest{Snapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	got := sh(fork.ID, "cd /workspace && cat a d/e/f && ./run.sh && test -d empty && test ! -e link && stat -c %a d/e && echo ok")
	if got != "one\ndeep\nran\n500\nok\n" {
		t.Errorf("fork's /workspace: %q", got)
	}
	if _, err := m.Create(ctx, "agent", CreateRequest{Snapshot: "snap-nope"}); !errors.Is(err, ErrSnapshotNotFound) {
		t.Errorf("create from an unknown snapshot: %v", err)
	}
	if l, _ := m.ListSnapshots("agent"); len(l) != 1 || l[0].ID != snap.ID {
		t.Errorf("ListSnapshots = %+v", l)
	}
	for i := 1; i < SnapshotsPerPrincipal; i++ {
		if _, err := m.Snapshot(ctx, "agent", fork.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Snapshot(ctx, "agent", fork.ID); !errors.Is(err, ErrLimit) {
		t.Errorf("snapshot beyond the principal's quota: %v", err)
	}
	if err := m.DeleteSnapshot(ctx, "agent", snap.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, snap.ID)); !os.IsNotExist(err) {
		t.Errorf("deleted snapshot's directory: %v", err)
	}
	if _, err := m.GetSnapshot(snap.ID); !errors.Is(err, ErrSnapshotNotFound) {
		t.Errorf("deleted snapshot: %v", err)
	}
	f.verify(t)
	// Without a snapshot directory: unsupported.
	plain := f.manager(t, Options{})
	if _, err := plain.Snapshot(ctx, "agent", src.ID); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("snapshot without a directory: %v", err)
	}
}
