package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	for _, c := range []*cobra.Command{newRunCmd(&env{}), newServeCmd(&env{}), newSandboxCmd(&env{}),
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
		d, ok := f.Value.(*durationValue)
		if !ok {
			t.Errorf("%s is a %T, not the CLI's duration flag", name, f.Value)
			return
		}
		for in, want := range map[string]time.Duration{"30s": 30 * time.Second, "1m30s": 90 * time.Second, "2h": 2 * time.Hour, "0": 0, " 250ms ": 250 * time.Millisecond} {
			if err := f.Value.Set(in); err != nil || *d.p != want {
				t.Errorf("%s %q: %v, %v", name, in, *d.p, err)
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
			if d.off && (err != nil || *d.p != -1 || f.Value.String() != "off") {
				t.Errorf("%s %s: %v %v, want off", name, off, *d.p, err)
			}
			if !d.off && err == nil {
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

// Integer, size and rate flags refuse what they cannot mean, and those
// that can be off take off.
func TestNumberFlags(t *testing.T) {
	s := &serveSettings{}
	f := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	s.flags(f)
	for _, tc := range []struct {
		flag, in string
		ok       bool
	}{
		{"pool", "off", true}, {"pool", "-1", true}, {"pool", "0", true}, {"pool", "3", true}, {"pool", "2.5", false}, {"pool", "many", false},
		{"max-sandboxes", "-1", false}, {"max-sandboxes", "off", false}, {"max-sandboxes", "0", true},
		{"rate", "-1", false}, {"rate", "NaN", false}, {"rate", "+Inf", false}, {"rate", "12.5", true},
		{"sandbox-rate", "-1", false}, {"sandbox-rate", "NaN", false}, {"sandbox-rate", "7.5", true},
		{"sandbox-rate-burst", "-1", false}, {"sandbox-rate-burst", "9", true}, {"rate-buckets", "off", false}, {"rate-buckets", "64", true},
		{"max-body", "-1M", false}, {"max-body", "off", false}, {"max-body", "2M", true}, {"max-body", "0", true},
		{"store-size-warn", "off", true}, {"store-size-warn", "-1", true}, {"store-size-warn", "-x", false}, {"store-size-warn", "2G", true},
		{"model-budget-agent", "off", true}, {"model-budget-agent", "99999999999", true},
		{"model-token-max", "-2", false},
		{"model-port", "99999999999999999999", false},
	} {
		err := f.Set(tc.flag, tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("--%s %q: %v, want ok=%v", tc.flag, tc.in, err, tc.ok)
		}
	}
	if s.cfg.StoreSizeWarn != 2<<30 || s.cfg.RatePerSecond != 12.5 || s.cfg.PoolSize != 3 || s.cfg.MaxBodyBytes != 0 ||
		s.cfg.SandboxRatePerSecond != 7.5 || s.cfg.SandboxRateBurst != 9 || s.cfg.RateBuckets != 64 {
		t.Errorf("parsed %+v", s.cfg)
	}
}

// The serve flags and daemon.Config apply one rule: for every number,
// size and duration flag, 0 is accepted and valid (the default), and a
// negative value is accepted by the flag exactly when the daemon reads it
// as none rather than refusing it.
func TestServeFlagsFollowDaemonRule(t *testing.T) {
	probe := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	(&serveSettings{}).flags(probe)
	checked := 0
	probe.VisitAll(func(pf *pflag.Flag) {
		if pf.Deprecated != "" {
			return
		}
		s := &serveSettings{}
		f := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		s.flags(f)
		fl := f.Lookup(pf.Name)
		var setNegative func()
		switch v := fl.Value.(type) {
		case *durationValue:
			setNegative = func() { *v.p = -1 }
		case *intValue[int]:
			setNegative = func() { *v.p = -1 }
		case *intValue[int64]:
			setNegative = func() { *v.p = -1 }
		case *sizeValue:
			setNegative = func() { *v.p = -1 }
		case *rateValue:
			setNegative = func() { *v.p = -1 }
		default:
			return // strings, lists, booleans
		}
		checked++
		if err := f.Set(pf.Name, "0"); err != nil {
			t.Errorf("--%s 0: %v", pf.Name, err)
		} else if err := s.cfg.Validate(); err != nil {
			t.Errorf("--%s 0: the daemon refuses it: %v", pf.Name, err)
		}
		flagErr := f.Set(pf.Name, "-1")
		setNegative()
		daemonErr := s.cfg.Validate()
		if (flagErr == nil) != (daemonErr == nil) {
			t.Errorf("--%s -1: the flag says %v, the daemon says %v", pf.Name, flagErr, daemonErr)
		}
		if flagErr == nil && !strings.Contains(pf.Usage, "off") {
			t.Errorf("--%s can be off, but its help does not say so: %q", pf.Name, pf.Usage)
		}
	})
	if checked < 20 {
		t.Fatalf("only %d numeric serve flags checked", checked)
	}
}

// The config file speaks the flags' language, "off" included.
func TestServeConfigFileRule(t *testing.T) {
	t.Setenv("IRONCLAW_LISTEN", "")
	t.Setenv("IRONCLAW_DATA_DIR", "")
	file := filepath.Join(t.TempDir(), "c.yaml")
	parse := func(yaml string) (*serveSettings, error) {
		os.WriteFile(file, []byte(yaml), 0o600)
		s := &serveSettings{}
		f := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		s.flags(f)
		return s, layerSettings(f, file)
	}
	s, err := parse("pool: off\ndefault-ttl: off\ndefault-idle: 0\nstore-size-warn: off\nmodel-port: -1\negress-port: none\nmax-sandboxes: 0\n")
	if err != nil {
		t.Fatal(err)
	}
	c := s.cfg
	if c.PoolSize != -1 || c.DefaultTTL != -1 || c.DefaultIdle != 0 || c.StoreSizeWarn != -1 || c.Model.Port != -1 || c.Egress.Port != -1 || c.MaxSandboxes != 0 {
		t.Errorf("from the file: %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("daemon: %v", err)
	}
	for yaml, want := range map[string]string{
		"max-sandboxes: -5\n": "max-sandboxes: must not be negative",
		"default-idle: 30\n":  "no unit",
		"body-timeout: off\n": "body-timeout",
	} {
		if _, err := parse(yaml); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", yaml, err, want)
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
