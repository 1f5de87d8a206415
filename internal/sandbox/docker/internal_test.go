package docker

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/container"
	"github.com/ironclaw/ironclaw/internal/sandbox/docker/engine"
	"github.com/ironclaw/ironclaw/internal/sandbox/seal"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
)

// The container's seccomp profile is the seal's, whose test
// (seal.TestProfileMatchesFilter) checks it against internal/seccomp;
// here, that seccompOpt carries exactly that profile.
func TestSeccompOpt(t *testing.T) {
	p, err := seal.Profile()
	if err != nil {
		t.Fatal(err)
	}
	opt, err := seccompOpt(p)
	if err != nil || !strings.HasPrefix(opt, "seccomp={") || !json.Valid([]byte(strings.TrimPrefix(opt, "seccomp="))) {
		t.Fatalf("seccompOpt = %.80q, %v", opt, err)
	}
	want, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimPrefix(opt, "seccomp="); got != string(want) {
		t.Errorf("seccompOpt carries %.200s, want seal.Profile %.200s", got, want)
	}
}

// TestContainerConfig checks the seal as Docker settings, without a daemon.
func TestContainerConfig(t *testing.T) {
	spec := sandbox.Spec{Network: sandbox.Network{ExposedTCP: []uint16{80, 4000}},
		Limits: sandbox.Limits{CPUs: 8}}.WithDefaults()
	s := state{dir: t.TempDir()}
	sl, err := seal.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	p, err := prepare(s, spec, sl, "/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	cfg, hc, err := containerConfig(spec, sl, p, containerOpts{id: "dkr-x", image: EmptyImage, state: s, owner: "1.2",
		hostCPUs: 2, args: []string{wire.HelperPath, wire.ModeAgent}})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.User != "65532:65532" || cfg.WorkingDir != "/workspace" || cfg.Hostname != "sandbox" || cfg.Labels[ownerLabel] != "1.2" {
		t.Errorf("config: %+v", cfg)
	}
	if hc.NetworkMode != "none" || !hc.ReadonlyRootfs || !slices.Equal(hc.CapDrop, []string{"ALL"}) ||
		!slices.Contains(hc.SecurityOpt, "no-new-privileges") || len(hc.SecurityOpt) != 2 || !strings.HasPrefix(hc.SecurityOpt[1], "seccomp={") ||
		hc.Privileged || hc.IpcMode != "none" || len(hc.GroupAdd) != 0 || len(hc.CapAdd) != 0 {
		t.Errorf("host config seal: %+v", hc)
	}
	r := hc.Resources
	if r.Memory != spec.Limits.MemoryBytes || r.MemorySwap != r.Memory || r.PidsLimit == nil || *r.PidsLimit != spec.Limits.Pids || r.NanoCPUs != 2e9 {
		t.Errorf("resources: %+v (CPUs are capped at the host's 2)", r)
	}
	if hc.Sysctls["net.ipv4.ip_unprivileged_port_start"] != "80" {
		t.Errorf("sysctls: %v", hc.Sysctls)
	}
	if !strings.Contains(hc.Tmpfs["/workspace"], "uid=65532") || !strings.Contains(hc.Tmpfs["/tmp"], "mode=1777") {
		t.Errorf("tmpfs: %v", hc.Tmpfs)
	}
	targets := map[string]bool{}
	for _, m := range p.mounts {
		targets[m.Target] = true
		if m.Target != "/workspace" && !m.ReadOnly {
			t.Errorf("bind %s -> %s is writable", m.Source, m.Target)
		}
	}
	for _, want := range []string{"/usr", "/etc", "/etc/hosts", "/etc/resolv.conf", "/etc/hostname", wire.HelperPath, wire.SockDir} {
		if !targets[want] {
			t.Errorf("no mount at %s: %+v", want, p.mounts)
		}
	}
	if st, err := os.Stat(s.sockDir()); err != nil || st.Mode().Perm() != 0o711 {
		t.Errorf("socket directory: %v %v", st.Mode(), err)
	}
}

// TestCollect: a restarted daemon removes the containers and state of
// owners that are gone, and never a live owner's.
func TestCollect(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := t.TempDir()
	r, err := New(ctx, Options{StateDir: dir})
	if err != nil {
		if os.Getenv("IRONCLAW_REQUIRE_DOCKER") == "1" {
			t.Fatal(err)
		}
		t.Skipf("docker cannot run here: %v", err)
	}
	defer r.Close(ctx)
	spec := sandbox.Spec{}.WithDefaults()
	sl, err := seal.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	mk := func(owner string) (string, state) {
		t.Helper()
		id := "dkr-" + container.RandHex(8)
		s := state{dir: filepath.Join(r.bundles, id)}
		cid, err := r.createContainer(ctx, id, s, spec, sl, owner, []string{wire.HelperPath, wire.ModeProbe})
		if err != nil {
			t.Fatal(err)
		}
		return cid, s
	}
	deadCID, deadState := mk("1.0") // pid 1 never started at tick 0: gone
	liveCID, liveState := mk(r.Owner())
	defer r.removeContainer(ctx, liveCID)
	r.collect(ctx)
	if _, err := r.cli.ContainerInspect(ctx, deadCID); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("dead owner's container: %v, want removed", err)
	}
	if _, err := os.Stat(deadState.dir); !os.IsNotExist(err) {
		t.Errorf("dead owner's state: %v, want removed", err)
	}
	if _, err := r.cli.ContainerInspect(ctx, liveCID); err != nil {
		t.Errorf("live owner's container: %v, want kept", err)
	}
	if _, err := os.Stat(liveState.dir); err != nil {
		t.Errorf("live owner's state: %v, want kept", err)
	}
}
