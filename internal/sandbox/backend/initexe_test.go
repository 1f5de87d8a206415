package backend_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ironclaw/ironclaw/internal/sandbox/backend"
	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
	"github.com/ironclaw/ironclaw/internal/testutil/gobuild"
)

const (
	cliPkg  = "github.com/ironclaw/ironclaw/cmd/ironclaw"
	initPkg = "github.com/ironclaw/ironclaw/cmd/ironclaw-sandbox"
)

// pair returns a fresh directory holding ironclaw and, unless without,
// ironclaw-sandbox of one build.
func pair(t *testing.T, withInit bool) string {
	t.Helper()
	built := gobuild.Commands(t, cliPkg, initPkg)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	names := []string{"ironclaw"}
	if withInit {
		names = append(names, backend.InitExeName)
	}
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join(built, n))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, n), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func runCLI(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(dir, "ironclaw"), args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ironclaw %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// doctorLine is doctor's line for the small init.
func doctorLine(t *testing.T, dir string) string {
	t.Helper()
	for _, l := range strings.Split(runCLI(t, dir, "doctor"), "\n") {
		if strings.Contains(l, "small sandbox init") {
			return l
		}
	}
	t.Fatal("doctor has no line for the small sandbox init")
	return ""
}

// initText is the size of the text its binary maps (VmExe, in kB) of a
// fresh sandbox's pid 1, as the sandbox's own /proc says: the small init's
// is a fraction of ironclaw's. (Its name says nothing: the init is run
// through /proc/self/fd/N.)
func initText(t *testing.T, dir string) int {
	t.Helper()
	out := strings.TrimSpace(runCLI(t, dir, "run", "--", "sh", "-c", "sed -n 's/^VmExe:[[:space:]]*\\([0-9]*\\) kB$/\\1/p' /proc/1/status"))
	n, err := strconv.Atoi(out)
	if err != nil {
		t.Fatalf("VmExe of pid 1: %q", out)
	}
	return n
}

// The CLI beside ironclaw-sandbox of its own build runs that as every
// sandbox's init; alone, or beside one of another build, it re-executes
// itself, says why in doctor, and sandboxes work the same.
func TestInitExeBesideTheCLI(t *testing.T) {
	if !sandboxtest.Required("native") && os.Geteuid() != 0 {
		t.Skip("needs a host that runs native sandboxes")
	}
	both := pair(t, true)
	if l := doctorLine(t, both); !strings.HasPrefix(l, "ok") || !strings.Contains(l, filepath.Join(both, backend.InitExeName)) {
		t.Errorf("doctor beside its init: %q", l)
	}
	small := initText(t, both)

	alone := pair(t, false)
	if l := doctorLine(t, alone); !strings.HasPrefix(l, "warn") || !strings.Contains(l, "no ironclaw-sandbox beside") {
		t.Errorf("doctor alone: %q", l)
	}
	big := initText(t, alone)
	if small*2 > big {
		t.Errorf("pid 1 beside its init maps %d kB of text, alone %d kB: want the small init beside, ironclaw alone", small, big)
	}

	// Another build's init (here: another program altogether) is not run.
	other := pair(t, false)
	if err := os.WriteFile(filepath.Join(other, backend.InitExeName), mustRead(t, otherProgram(t)), 0o755); err != nil {
		t.Fatal(err)
	}
	if l := doctorLine(t, other); !strings.HasPrefix(l, "warn") || !strings.Contains(l, "is from another build") {
		t.Errorf("doctor beside another build's init: %q", l)
	}
	if got := initText(t, other); got != big {
		t.Errorf("pid 1 beside another build's init maps %d kB of text, want ironclaw's %d", got, big)
	}
}

// A dynamically linked file (a cgo build) is refused as the init.
func TestInitExeRefusesDynamicBinaries(t *testing.T) {
	dyn := ""
	for _, p := range []string{"/bin/true", "/usr/bin/true"} {
		if out, err := exec.Command("sh", "-c", "od -An -c -N4 "+p).Output(); err == nil && strings.Contains(string(out), "E   L   F") {
			dyn = p
			break
		}
	}
	if dyn == "" {
		t.Skip("no ELF true on this host")
	}
	dir := pair(t, false)
	data := mustRead(t, dyn)
	if err := os.WriteFile(filepath.Join(dir, backend.InitExeName), data, 0o755); err != nil {
		t.Fatal(err)
	}
	if l := doctorLine(t, dir); !strings.Contains(l, "dynamically linked") {
		// A static coreutils would make this test pointless, not wrong.
		if !strings.Contains(l, "holds no Go build information") {
			t.Errorf("doctor beside a dynamic binary: %q", l)
		}
	}
}

// otherProgram builds a static Go program of another module.
func otherProgram(t *testing.T) string {
	t.Helper()
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module example.com/other\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "other")
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building another program: %v\n%s", err, b)
	}
	return out
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
