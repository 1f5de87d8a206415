package seal

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironclaw/ironclaw/internal/rootfs"
	"github.com/ironclaw/ironclaw/internal/sandbox"
)

func trustDir(t *testing.T, files map[string]os.FileMode) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "trust")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for n, m := range files {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("PEM"), m); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(dir, n), m)
	}
	return dir
}

func TestTrustMount(t *testing.T) {
	dir := trustDir(t, map[string]os.FileMode{"ca-certificates.crt": 0o644, "ironclaw-egress-ca.crt": 0o644})
	s, err := New(sandbox.Spec{Trust: dir}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	var got *Mount
	for i, m := range s.Mounts {
		if m.Target == sandbox.TrustDir {
			got = &s.Mounts[i]
		}
	}
	if got == nil || got.Kind != KindCopy || got.Source != dir {
		t.Fatalf("trust mount %+v", got)
	}
	link := false
	for _, e := range s.Root {
		if e.Path == sandbox.SystemBundle {
			link = e.Kind == rootfs.KindSymlink && e.Target == sandbox.TrustBundle
		}
	}
	if !link {
		t.Error("the host view has no /etc/ssl/certs/ca-certificates.crt link to the bundle")
	}
	// A directory root keeps its own /etc.
	img := t.TempDir()
	os.Mkdir(filepath.Join(img, "etc"), 0o755)
	s, err = New(sandbox.Spec{Trust: dir, Root: sandbox.Root{Kind: sandbox.RootDirectory, Path: img}}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range s.Root {
		if strings.HasPrefix(e.Path, "/etc/") {
			t.Errorf("entry %s added to an image's /etc", e.Path)
		}
	}
}

func TestTrustBounds(t *testing.T) {
	for name, files := range map[string]map[string]os.FileMode{
		"private file": {"ca.crt": 0o600},
		"too many":     {"1": 0o644, "2": 0o644, "3": 0o644, "4": 0o644, "5": 0o644, "6": 0o644, "7": 0o644, "8": 0o644, "9": 0o644},
	} {
		_, err := New(sandbox.Spec{Trust: trustDir(t, files)}.WithDefaults())
		if !errors.Is(err, sandbox.ErrInvalidSpec) {
			t.Errorf("%s: %v", name, err)
		}
	}
	priv := trustDir(t, nil)
	os.Chmod(priv, 0o700)
	if _, err := New(sandbox.Spec{Trust: priv}.WithDefaults()); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("private directory: %v", err)
	}
	if err := (sandbox.Spec{Trust: "relative"}).WithDefaults().Validate(); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("relative trust: %v", err)
	}
	spec := sandbox.Spec{Mounts: []sandbox.Mount{{Source: "/usr", Target: sandbox.TrustDir}}}.WithDefaults()
	if err := spec.Validate(); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("a mount over the trust directory: %v", err)
	}
}

// The spec's name for the system bundle and the root plan's are one path.
func TestSystemBundlePathsAgree(t *testing.T) {
	if sandbox.SystemBundle != rootfs.SystemBundle {
		t.Fatalf("sandbox.SystemBundle %q != rootfs.SystemBundle %q", sandbox.SystemBundle, rootfs.SystemBundle)
	}
}
