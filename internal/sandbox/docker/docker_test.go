package docker_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/docker"
	"github.com/ironclaw/ironclaw/internal/sandbox/docker/engine"
	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
)

// The behaviour and containment every backend shares is package
// conformance's (conformance_test.go); these are the Docker backend's own.

func TestNewUnreachable(t *testing.T) {
	ctx := context.Background()
	for _, host := range []string{"unix:///nonexistent/docker.sock", "tcp://127.0.0.1:2375"} {
		_, err := docker.New(ctx, docker.Options{Host: host, StateDir: t.TempDir()})
		if !errors.Is(err, sandbox.ErrUnsupported) {
			t.Errorf("New(%s) = %v, want ErrUnsupported", host, err)
		}
	}
	_, err := docker.New(ctx, docker.Options{Host: "unix:///nonexistent/docker.sock", StateDir: "relative"})
	if !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("New(relative state dir) = %v, want ErrInvalidSpec", err)
	}
}

// The runtime is named after dockerd's runtime it runs on.
func TestName(t *testing.T) {
	want := "docker"
	if r := sandboxtest.DockerRuntime(); r != "" {
		want += "-" + r
	}
	if got := sandboxtest.Docker(t).Name(); got != want {
		t.Errorf("Name() = %q, want %s", got, want)
	}
}

func TestUnknownRuntime(t *testing.T) {
	sandboxtest.Docker(t)
	_, err := docker.New(context.Background(), docker.Options{Runtime: "no-such-runtime", StateDir: sandboxtest.DockerStateDir()})
	if !errors.Is(err, sandbox.ErrUnsupported) || !strings.Contains(err.Error(), "no-such-runtime") {
		t.Fatalf("New(unknown runtime) = %v, want ErrUnsupported naming it", err)
	}
}

// Destroy leaves nothing of the sandbox: not its state directory, nor a
// container carrying its label.
func TestDestroyLeavesNothing(t *testing.T) {
	b := sandboxtest.New(t, sandboxtest.Docker(t), sandbox.Spec{Network: sandbox.Network{ExposedTCP: []uint16{4000}}})
	sb := b.SB.(*docker.Sandbox)
	if o := b.Exec(sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "sleep 100 & sleep 100 & echo started"}, Timeout: time.Second}); o.Err != nil {
		t.Fatal(o.Err)
	}
	cid, dir := sb.ContainerID(), sb.StateDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cli, err := engine.New(os.Getenv("DOCKER_HOST"))
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if err := cli.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	labelled := func() []string {
		t.Helper()
		list, err := cli.ContainerList(ctx, true, "ironclaw.sandbox="+sb.ID())
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, c := range list {
			ids = append(ids, c.ID)
		}
		return ids
	}
	if ids := labelled(); len(ids) != 1 || ids[0] != cid {
		t.Fatalf("containers labelled with the sandbox before Destroy: %v, want %s", ids, cid)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("state directory before Destroy: %v", err)
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("state directory %s left: %v", dir, err)
	}
	if ids := labelled(); len(ids) != 0 {
		t.Errorf("containers left: %v", ids)
	}
	if _, err := cli.ContainerInspect(ctx, cid); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("container %s after Destroy: %v, want not found", cid, err)
	}
}

// The helper's directory is the container backends' own: no mount may
// shadow it. A refused Create leaves no state behind.
func TestCreateRejects(t *testing.T) {
	r := sandboxtest.Docker(t)
	ctx, cancel := context.WithTimeout(context.Background(), sandboxtest.CreateTimeout)
	defer cancel()
	sb, err := r.Create(ctx, sandbox.Spec{Mounts: []sandbox.Mount{{Source: "/usr", Target: wire.HelperDir}}})
	if err == nil {
		sb.Destroy(ctx)
	}
	if !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("Create(mount at %s) = %v, want ErrInvalidSpec", wire.HelperDir, err)
	}
	des, _ := os.ReadDir(filepath.Join(sandboxtest.DockerStateDir(), "b"))
	for _, de := range des {
		t.Errorf("state left after failed creates: %s", de.Name())
	}
}
