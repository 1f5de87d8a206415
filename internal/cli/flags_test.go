package cli

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/cli/flagtypes"
	"github.com/ironclaw/ironclaw/internal/cli/full"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// allFlags calls fn with every flag of every command of the CLI.
func allFlags(t *testing.T, fn func(cmd string, f *pflag.Flag)) {
	t.Helper()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) { fn(c.CommandPath(), f) })
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	for _, c := range []*cobra.Command{newRunCmd(&env{}), full.Commands{}.ServeCommand(io.Discard), newSandboxCmd(&env{}),
		newAuditCmd(&env{}), newApprovalsCmd(&env{}), newToolsCmd(&env{}), newOperatorCmd(&env{}), newAgentCmd(&env{})} {
		walk(c)
	}
}

// Every duration flag of every command is the one duration type, and
// reads Go durations the same way: units required (but for 0), negative
// values only where the setting can be off.
func TestDurationFlagsEverywhere(t *testing.T) {
	n := 0
	allFlags(t, func(cmd string, f *pflag.Flag) {
		if f.Value.Type() != "duration" {
			return
		}
		n++
		name := cmd + " --" + f.Name
		d, ok := f.Value.(flagtypes.Value)
		if !ok {
			t.Errorf("%s is a %T, not the CLI's duration flag", name, f.Value)
			return
		}
		for in, want := range map[string]time.Duration{"30s": 30 * time.Second, "1m30s": 90 * time.Second, "2h": 2 * time.Hour, "0": 0, " 250ms ": 250 * time.Millisecond} {
			err := f.Value.Set(in)
			got, perr := time.ParseDuration(f.Value.String())
			if err != nil || perr != nil || got != want {
				t.Errorf("%s %q: %v (%v), %v", name, in, f.Value, perr, err)
			}
		}
		if err := f.Value.Set("30"); err == nil || !strings.Contains(err.Error(), "no unit") {
			t.Errorf("%s 30: %v, want refused for want of a unit", name, err)
		}
		if err := f.Value.Set("soon"); err == nil {
			t.Errorf("%s soon: accepted", name)
		}
		for _, off := range []string{"off", "none", "-1s"} {
			err := f.Value.Set(off)
			if d.CanBeOff() && (err != nil || f.Value.String() != "off") {
				t.Errorf("%s %s: %v %v, want off", name, off, f.Value, err)
			}
			if !d.CanBeOff() && err == nil {
				t.Errorf("%s %s: accepted, but the setting cannot be off", name, off)
			}
		}
	})
	if n < 10 {
		t.Fatalf("only %d duration flags found", n)
	}
}

// Every listing takes --json, defined one way.
func TestListingsHaveJSON(t *testing.T) {
	want := map[string]bool{"sandbox ls": false, "approvals ls": false, "audit tail": false, "tools ls": false}
	allFlags(t, func(cmd string, f *pflag.Flag) {
		if f.Name == "json" {
			if _, ok := want[cmd]; ok {
				want[cmd] = f.Value.Type() == "bool" && strings.Contains(f.Usage, "one per line")
			}
		}
	})
	for cmd, ok := range want {
		if !ok {
			t.Errorf("%s has no --json like the others", cmd)
		}
	}
}

func TestImageArg(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	home := t.TempDir()
	t.Setenv("HOME", home)
	for _, p := range []string{"rootfs", "layout", "app.tar"} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for in, want := range map[string]string{
		"":                               "",
		"ghcr.io/org/app:1":              "ghcr.io/org/app:1",
		"alpine":                         "alpine",
		"alpine:3.20":                    "alpine:3.20",
		"localhost:5000/app@sha256:0123": "localhost:5000/app@sha256:0123",
		"docker.io/library/busybox":      "docker.io/library/busybox",
		"/srv/images/base":               "/srv/images/base",
		"./rootfs":                       filepath.Join(dir, "rootfs"),
		"../x/y":                         filepath.Join(filepath.Dir(dir), "x/y"),
		"rootfs":                         filepath.Join(dir, "rootfs"),
		"layout:v1":                      filepath.Join(dir, "layout") + ":v1",
		"layout@sha256:abcd":             filepath.Join(dir, "layout") + "@sha256:abcd",
		"app.tar:ghcr.io/org/app:1":      filepath.Join(dir, "app.tar") + ":ghcr.io/org/app:1",
		"./missing:tag":                  filepath.Join(dir, "missing:tag"),
		"~":                              home,
		"~/img:tag":                      filepath.Join(home, "img:tag"),
	} {
		got, err := imageArg(in)
		if err != nil || got != want {
			t.Errorf("imageArg(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := imageArg("~bob/img"); err == nil {
		t.Error("~bob was guessed at")
	}
}
