package oci_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/oci"
	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
	"github.com/ironclaw/ironclaw/internal/testutil/int80"
)

// The behaviour and containment every backend shares is package
// conformance's (conformance_test.go); these are the OCI backend's own.

func TestNewRejects(t *testing.T) {
	ctx := context.Background()
	if _, err := oci.New(ctx, oci.Options{Runtime: "docker"}); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("New(docker) = %v, want ErrInvalidSpec", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("the remaining checks need root")
	}
	_, err := oci.New(ctx, oci.Options{Runtime: oci.Runc, Binary: "/nonexistent/runc", StateDir: sandboxtest.OCIStateDir()})
	if !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("New(missing binary) = %v, want ErrUnsupported", err)
	}
}

// config.json maps the container's ids 0..65535 to the host's
// oci.HostIDBase.. on runc and crun (runsc's sentry keeps its own ids).
func TestIDMaps(t *testing.T) {
	for _, name := range []string{oci.Runc, oci.Crun} {
		t.Run(name, func(t *testing.T) {
			b := sandboxtest.New(t, sandboxtest.OCI(t, name), sandbox.Spec{})
			o := b.Sh(`cat /proc/self/uid_map /proc/self/gid_map`)
			want := fmt.Sprintf("0 %[1]d 65536 0 %[1]d 65536", oci.HostIDBase)
			if got := strings.Join(strings.Fields(o.Stdout), " "); got != want {
				t.Fatalf("id maps: %q, want %q", o.Stdout, want)
			}
		})
	}
}

// The exact errno of each refused call, and the arch guard, through raw
// system calls (the shell tools of the conformance suite cannot make them).
func TestSeccomp(t *testing.T) {
	sandboxtest.EachOCI(t, func(t *testing.T, r *oci.Runtime) {
		b := sandboxtest.New(t, r, sandbox.Spec{})
		o := probe(b, "syscalls")
		want := map[string][]string{
			"unshare": {"EPERM"}, "mount": {"EPERM"}, "setns": {"EPERM"}, "clone3": {"ENOSYS"},
			"clone_newuser": {"EPERM"}, "keyctl": {"EPERM"}, "bpf": {"EPERM"}, "ptrace": {"EPERM"},
			"ioctl_tiocsti": {"EPERM"}, "socket_mptcp": {"EPROTONOSUPPORT"},
		}
		got := map[string]string{}
		for _, l := range sandboxtest.Lines(o.Stdout) {
			if k, v, ok := strings.Cut(l, " "); ok {
				got[k] = v
			}
		}
		for k, ok := range want {
			if g := got[k]; !slices.Contains(ok, g) {
				t.Errorf("%s: %q, want %v", k, g, ok)
			}
		}
		if r.Name() == oci.Runsc || int80.Refused() != "" {
			return // the sentry implements only the x86-64 ABI in any case; see int80.Refused
		}
		// libseccomp's bad-architecture action kills the calling thread
		// (the native filter kills the process): a Go probe then hangs
		// until the timeout. Either way the call never returns.
		o = b.Exec(sandbox.ExecRequest{Argv: []string{wire.HelperPath}, Env: []string{"IRONCLAW_OCI_PROBE=int80"}, Timeout: 3 * time.Second})
		if strings.Contains(o.Stdout, "survived") || (o.Res.ExitCode != 128+int(syscall.SIGSYS) && !o.Res.TimedOut) {
			t.Fatalf("int $0x80 keyctl: %+v %q, want killed by SIGSYS", o.Res, o.Stdout)
		}
	})
}

// Destroy leaves nothing of the sandbox on the host: not its bundle, its
// cgroups, a mount or a process.
func TestDestroyLeavesNothing(t *testing.T) {
	sandboxtest.EachOCI(t, func(t *testing.T, r *oci.Runtime) {
		b := sandboxtest.New(t, r, sandbox.Spec{Network: sandbox.Network{ExposedTCP: []uint16{4000}}})
		sb := b.SB.(*oci.Sandbox)
		if o := b.Exec(sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "sleep 100 & sleep 100 & echo started"}, Timeout: time.Second}); o.Err != nil {
			t.Fatal(o.Err)
		}
		cgs, bundle := sb.CgroupDirs(), sb.Bundle()
		for _, d := range append(cgs[:2:2], bundle) { // memory and pids; the rest depends on the runtime
			if _, err := os.Stat(d); err != nil {
				t.Fatalf("%s before Destroy: %v", d, err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sb.Destroy(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(bundle); !os.IsNotExist(err) {
			t.Errorf("bundle %s left: %v", bundle, err)
		}
		for _, d := range cgs {
			if _, err := os.Stat(d); !os.IsNotExist(err) {
				t.Errorf("cgroup %s left: %v", d, err)
			}
		}
		mi, _ := os.ReadFile("/proc/self/mountinfo")
		if strings.Contains(string(mi), sb.ID()) {
			t.Errorf("a mount mentions %s", sb.ID())
		}
		// No process anywhere on the host still refers to the sandbox.
		deadline := time.Now().Add(5 * time.Second)
		for {
			left := processesMentioning(sb.ID())
			if len(left) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("processes left: %v", left)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// processesMentioning lists host processes whose command line or cgroup
// names id.
func processesMentioning(id string) []string {
	var out []string
	des, _ := os.ReadDir("/proc")
	for _, de := range des {
		if de.Name()[0] < '0' || de.Name()[0] > '9' {
			continue
		}
		for _, f := range []string{"cmdline", "cgroup"} {
			b, err := os.ReadFile(filepath.Join("/proc", de.Name(), f))
			if err == nil && bytes.Contains(b, []byte(id)) {
				out = append(out, de.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
				break
			}
		}
	}
	return out
}
