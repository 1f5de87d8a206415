package full

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/cli/flagtypes"
	"github.com/spf13/pflag"
)

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
		{"spares", "off", true}, {"spares", "4", true}, {"spares", "few", false},
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
	if s.cfg.StoreSizeWarn != 2<<30 || s.cfg.RatePerSecond != 12.5 || s.cfg.PoolSize != 3 || s.cfg.Spares != 4 || s.cfg.MaxBodyBytes != 0 ||
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
		v, ok := fl.Value.(flagtypes.Value)
		if !ok {
			return // strings, lists, booleans
		}
		checked++
		if err := f.Set(pf.Name, "0"); err != nil {
			t.Errorf("--%s 0: %v", pf.Name, err)
		} else if err := s.cfg.Validate(); err != nil {
			t.Errorf("--%s 0: the daemon refuses it: %v", pf.Name, err)
		}
		flagErr := f.Set(pf.Name, "-1")
		v.SetNone()
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

func TestServeSettingsPrecedence(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(file, []byte("listen: 127.0.0.1:1111\ndata-dir: /from/file\npool: 5\ndefault-idle: 5m\nmax-upload: 1G\n"), 0o600)
	parse := func(args ...string) *serveFlagsView {
		c := serveCommand(io.Discard)
		if err := c.ParseFlags(args); err != nil {
			t.Fatal(err)
		}
		cf, _ := c.Flags().GetString("config")
		if err := layerSettings(c.Flags(), cf); err != nil {
			t.Fatal(err)
		}
		v := &serveFlagsView{}
		v.listen, _ = c.Flags().GetString("listen")
		v.dataDir, _ = c.Flags().GetString("data-dir")
		v.pool, _ = c.Flags().GetInt("pool")
		v.idle, _ = c.Flags().GetDuration("default-idle")
		v.upload, _ = c.Flags().GetString("max-upload")
		return v
	}
	t.Setenv("IRONCLAW_LISTEN", "")
	t.Setenv("IRONCLAW_DATA_DIR", "")
	v := parse("--config", file)
	if v.listen != "127.0.0.1:1111" || v.dataDir != "/from/file" || v.pool != 5 || v.idle != 5*time.Minute || v.upload != "1G" {
		t.Errorf("file: %+v", v)
	}
	t.Setenv("IRONCLAW_LISTEN", "127.0.0.1:2222")
	v = parse("--config", file, "--pool", "1")
	if v.listen != "127.0.0.1:2222" || v.dataDir != "/from/file" || v.pool != 1 {
		t.Errorf("env over file, flag over file: %+v", v)
	}
	v = parse("--config", file, "--listen", "127.0.0.1:3333")
	if v.listen != "127.0.0.1:3333" {
		t.Errorf("flag over env: %+v", v)
	}
}

type serveFlagsView struct {
	listen, dataDir, upload string
	pool                    int
	idle                    time.Duration
}

// The E2B flags fill the daemon's Config: templates repeatable or comma
// separated, ports likewise and within 1024-65535.
func TestServeE2BFlags(t *testing.T) {
	s := &serveSettings{}
	f := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	s.flags(f)
	err := f.Parse([]string{"--e2b-template", "base=/srv/images/base", "--e2b-template", "py=/srv/images/py,node=",
		"--e2b-port", "3000", "--e2b-port", "5173,8080", "--e2b-domain", "sb.example.com", "--no-e2b"})
	if err != nil {
		t.Fatal(err)
	}
	c := s.cfg
	if len(c.E2BTemplates) != 3 || c.E2BTemplates["base"] != "/srv/images/base" || c.E2BTemplates["py"] != "/srv/images/py" || c.E2BTemplates["node"] != "" {
		t.Fatalf("templates %v", c.E2BTemplates)
	}
	if len(c.E2BPorts) != 3 || c.E2BPorts[0] != 3000 || c.E2BPorts[2] != 8080 || c.E2BDomain != "sb.example.com" || !c.DisableE2B {
		t.Fatalf("config %+v %v", c.E2BPorts, c.E2BDomain)
	}
	for _, bad := range []string{"80", "70000", "x"} {
		f := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		f.SetOutput(io.Discard)
		(&serveSettings{}).flags(f)
		if err := f.Parse([]string{"--e2b-port", bad}); err == nil {
			t.Errorf("--e2b-port %s accepted", bad)
		}
	}
}
