package cli

import (
	"strings"
	"testing"
)

func TestSandboxPauseAndSnapshotCommands(t *testing.T) {
	startDaemon(t)
	code, out, stderr := run(t, "", "sandbox", "create")
	if code != 0 || !idRE.MatchString(out) {
		t.Fatalf("create: %d %q %q", code, out, stderr)
	}
	id := strings.TrimSpace(out)
	if code, out, stderr := run(t, "", "sandbox", "pause", id); code != 0 || out != id+"\tpaused\n" {
		t.Fatalf("pause: %d %q %q", code, out, stderr)
	}
	if code, out, stderr := run(t, "", "sandbox", "resume", id); code != 0 || out != id+"\trunning\n" {
		t.Fatalf("resume: %d %q %q", code, out, stderr)
	}
	if code, _, stderr := run(t, "", "sandbox", "pause", "sbx-0000000000000000"); code != ExitIronClaw || !strings.Contains(stderr, "sbx-0000000000000000") {
		t.Errorf("pause unknown: %d %q", code, stderr)
	}
	if code, _, stderr := run(t, "", "sandbox", "exec", id, "--", "sh", "-c", "echo forked > /workspace/f"); code != 0 {
		t.Fatalf("exec: %d %q", code, stderr)
	}
	code, out, stderr = run(t, "", "sandbox", "snapshot", id)
	if code != 0 || !strings.HasPrefix(out, "snap-") || !strings.Contains(out, "1 files") {
		t.Fatalf("snapshot: %d %q %q", code, out, stderr)
	}
	snap := strings.Fields(out)[0]
	if code, out, _ := run(t, "", "sandbox", "snapshot", "ls"); code != 0 || !strings.HasPrefix(out, snap+"\t"+id) {
		t.Errorf("snapshot ls: %d %q", code, out)
	}
	code, out, stderr = run(t, "", "sandbox", "create", "--from-snapshot", snap)
	if code != 0 || !idRE.MatchString(out) {
		t.Fatalf("create --from-snapshot: %d %q %q", code, out, stderr)
	}
	fork := strings.TrimSpace(out)
	if code, out, _ := run(t, "", "sandbox", "exec", fork, "--", "cat", "/workspace/f"); code != 0 || out != "forked\n" {
		t.Errorf("the fork's file: %d %q", code, out)
	}
	if code, out, _ := run(t, "", "sandbox", "snapshot", "rm", snap); code != 0 || strings.TrimSpace(out) != snap {
		t.Errorf("snapshot rm: %d %q", code, out)
	}
	run(t, "", "sandbox", "rm", id, fork)
}
