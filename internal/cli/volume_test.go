package cli

import (
	"os"
	"strings"
	"testing"

	"github.com/ironclaw/ironclaw/internal/client"
)

// volume create, ls (table and --json), sandbox create --volume, rm.
func TestVolumeCommands(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("volumes need root")
	}
	startDaemon(t)
	if code, out, stderr := run(t, "", "volume", "create", "notes", "--size", "32M"); code != 0 || out != "notes\n" {
		t.Fatalf("volume create: %d %q %q", code, out, stderr)
	}
	for _, bad := range [][]string{
		{"volume", "create", "x", "--size", "lots"},
		{"volume", "create", "x"},
		{"sandbox", "create", "--volume", "notes"},
		{"sandbox", "create", "--volume", "notes:relative"},
	} {
		if code, _, _ := run(t, "", bad...); code == 0 {
			t.Errorf("%v: exit 0, want an error", bad)
		}
	}
	code, out, stderr := run(t, "", "sandbox", "create", "--volume", "notes:/workspace/notes")
	if code != 0 {
		t.Fatalf("sandbox create --volume: %d %q", code, stderr)
	}
	id := strings.TrimSpace(out)
	code, out, _ = run(t, "", "volume", "ls", "--json")
	vols := jsonLines[client.Volume](t, "volume ls --json", out)
	if code != 0 || len(vols) != 1 || vols[0].Name != "notes" || vols[0].SizeBytes != 32<<20 || vols[0].Sandbox != id {
		t.Fatalf("volume ls --json: %d %+v", code, vols)
	}
	if code, out, _ := run(t, "", "volume", "ls"); code != 0 || !strings.Contains(out, "notes") || !strings.Contains(out, id) {
		t.Fatalf("volume ls: %d %q", code, out)
	}
	if code, _, stderr := run(t, "", "volume", "rm", "notes"); code == 0 || !strings.Contains(stderr, "mounted in sandbox") {
		t.Fatalf("volume rm while mounted: %d %q", code, stderr)
	}
	if code, _, stderr := run(t, "", "sandbox", "rm", id); code != 0 {
		t.Fatalf("sandbox rm: %d %q", code, stderr)
	}
	if code, out, stderr := run(t, "", "volume", "rm", "notes"); code != 0 || out != "notes\n" {
		t.Fatalf("volume rm: %d %q %q", code, out, stderr)
	}
}
