package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseFullPolicy(t *testing.T) {
	p, err := Parse(strings.NewReader(`
egress:
  allow: ["api.github.com", "*.pypi.org:443"]
  unknown: deny
  allow_private: ["127.0.0.0/8"]
approvals:
  timeout: 90s
  max_pending: 5
  webhooks: ["https://hooks.example.com/ironclaw"]
exec:
  require_approval: ["^curl ", "rm -rf /"]
`))
	if err != nil {
		t.Fatal(err)
	}
	if p.Egress.Unknown != UnknownDeny || len(p.Egress.Allow) != 2 || time.Duration(p.Approvals.Timeout) != 90*time.Second || p.Approvals.MaxPending != 5 {
		t.Fatalf("parsed: %+v", p)
	}
	for line, want := range map[string]bool{"curl -s x": true, "sudo rm -rf / --no-preserve-root": true, "echo curl": false, "ls": false} {
		if got, _ := p.Exec.NeedsApproval(line); got != want {
			t.Errorf("NeedsApproval(%q) = %v", line, got)
		}
	}
}

func TestDefaults(t *testing.T) {
	for _, p := range []*Policy{Default(), mustParse(t, "")} {
		if p.Egress.Unknown != UnknownAsk || time.Duration(p.Approvals.Timeout) != 10*time.Minute || p.Approvals.MaxPending != 20 {
			t.Fatalf("defaults: %+v", p)
		}
		if need, _ := p.Exec.NeedsApproval("curl x"); need {
			t.Fatal("default policy marks commands")
		}
	}
}

func mustParse(t *testing.T, s string) *Policy {
	t.Helper()
	p, err := Parse(strings.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// wantInvalid checks that Parse refuses each document with ErrInvalid.
func wantInvalid(t *testing.T, docs ...string) {
	t.Helper()
	for _, doc := range docs {
		if _, err := Parse(strings.NewReader(doc)); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v", doc, err)
		}
	}
}

// Every mistake is an error naming the field; a typo in a key cannot
// silently drop a rule.
func TestInvalidPolicies(t *testing.T) {
	wantInvalid(t,
		"egress:\n  alow: [x.com]\n",
		"egress:\n  allow: ['*']\n",
		"egress:\n  unknown: maybe\n",
		"egress:\n  allow_private: [10.0.0.0/99]\n",
		"approvals:\n  timeout: soon\n",
		"approvals:\n  timeout: 1ms\n",
		"approvals:\n  max_pending: -1\n",
		"approvals:\n  webhooks: ['not a url']\n",
		"exec:\n  require_approval: ['(']\n",
		"other: 1\n",
	)
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// exec.gate names programs by name or absolute path; the API asks for an
// approval when an exec's own program has a gated name.
func TestExecGate(t *testing.T) {
	p := mustParse(t, "exec:\n  gate: [curl, /usr/bin/ssh, curl]\n")
	for argv0, want := range map[string]string{"curl": "curl", "/usr/bin/curl": "curl", "./curl": "curl", "ssh": "ssh",
		"/opt/ssh": "ssh", "curl2": "", "c''url": "", "": "", "env": ""} {
		if got := p.Exec.Gated(argv0); got != want {
			t.Errorf("Gated(%q) = %q, want %q", argv0, got, want)
		}
	}
	wantInvalid(t,
		"exec:\n  gate: [bin/curl]\n",
		"exec:\n  gate: ['/workspace/curl']\n",
		"exec:\n  gate: ['/usr/../bin/curl']\n",
		"exec:\n  gate: ['']\n",
		"exec:\n  gates: [curl]\n",
	)
}

func TestPortsSection(t *testing.T) {
	p, err := Parse(strings.NewReader("ports:\n  inbound: true\n  url_ttl: 2h\n"))
	if err != nil || !p.Ports.Inbound || time.Duration(p.Ports.URLTTL) != 2*time.Hour {
		t.Fatalf("ports: %+v %v", p.Ports, err)
	}
	if d := Default(); d.Ports.Inbound || time.Duration(d.Ports.URLTTL) != DefaultPortURLTTL {
		t.Fatalf("default ports: %+v", d.Ports)
	}
	wantInvalid(t, "ports:\n  url_ttl: 48h\n", "ports:\n  url_ttl: 1ms\n", "ports:\n  outbound: true\n")
}

func TestIdleAction(t *testing.T) {
	if got := mustParse(t, "").Limits.IdleAction; got != IdleDestroy {
		t.Errorf("default idle_action %q, want destroy", got)
	}
	if got := mustParse(t, "limits: {idle_action: pause}").Limits.IdleAction; got != IdlePause {
		t.Errorf("idle_action %q, want pause", got)
	}
	if _, err := Parse(strings.NewReader("limits: {idle_action: hibernate}")); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "idle_action") {
		t.Errorf("idle_action hibernate: %v", err)
	}
}
