package image_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/ironclaw/ironclaw/internal/image"
	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// What an API client may name as its root is the operator's call: local
// images only beneath the allowed directories (never "/" or a symlink out),
// pulls only from the allowed registries.
func TestRootsPolicy(t *testing.T) {
	s, _ := newStore(t, image.Options{})
	allowed := t.TempDir()
	plain := filepath.Join(allowed, "plain")
	os.MkdirAll(filepath.Join(plain, "bin"), 0o755)
	layoutDir := writeLayout(t, []v1.Image{imageOf(t, layer(t, reg("etc/os-release", "ID=roots\n")))}, "v1")
	inAllowed := filepath.Join(allowed, "layout")
	if err := os.Rename(layoutDir, inAllowed); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	os.Symlink(outside, filepath.Join(allowed, "escape"))
	reg1 := newRegistry(t)
	ref := reg1.push(t, "app:v1", imageOf(t, layer(t, reg("etc/app", "pulled\n"))))

	r := &image.Roots{Store: s, LocalDirs: []string{allowed}, Registries: []string{reg1.host}}
	ctx := context.Background()
	root, err := r.Root(ctx, plain)
	if err != nil || root.Kind != sandbox.RootDirectory || root.Path != plain {
		t.Fatalf("plain directory: %+v %v", root, err)
	}
	root, err = r.Root(ctx, inAllowed+":v1")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root.Path, "etc/os-release")); string(b) != "ID=roots\n" {
		t.Fatalf("layout root %s: %q", root.Path, b)
	}
	root, err = r.Root(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root.Path, "etc/app")); string(b) != "pulled\n" {
		t.Fatalf("pulled root: %q", b)
	}
	// A docker save tarball takes its image's repo:tag after the path
	// (Root's "/srv/app.tar:app:1"), with the colons that brings.
	tag, err := name.NewTag("example.com/roots/app:1.0")
	if err != nil {
		t.Fatal(err)
	}
	saved := imageOf(t, layer(t, reg("etc/os-release", "ID=saved\n")))
	for _, p := range []string{filepath.Join(allowed, "app.tar"), filepath.Join(outside, "app.tar")} {
		if err := tarball.WriteToFile(p, tag, saved); err != nil {
			t.Fatal(err)
		}
	}
	root, err = r.Root(ctx, filepath.Join(allowed, "app.tar")+":"+tag.String())
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root.Path, "etc/os-release")); string(b) != "ID=saved\n" {
		t.Fatalf("docker save tarball root %s: %q", root.Path, b)
	}
	for _, bad := range []string{"/", "/etc", outside, filepath.Join(allowed, "escape"), allowed + "/../" + filepath.Base(outside),
		filepath.Join(outside, "app.tar") + ":" + tag.String(), filepath.Join(allowed, "escape", "app.tar") + ":" + tag.String()} {
		if _, err := r.Root(ctx, bad); !errors.Is(err, image.ErrNotAllowed) || !errors.Is(err, sandbox.ErrInvalidSpec) {
			t.Errorf("%s: %v", bad, err)
		}
	}
	if _, err := r.Root(ctx, "ghcr.io/org/app:1"); !errors.Is(err, image.ErrNotAllowed) {
		t.Errorf("unlisted registry: %v", err)
	}
	none := &image.Roots{Store: s}
	if _, err := none.Root(ctx, plain); !errors.Is(err, image.ErrNotAllowed) {
		t.Errorf("no allowed dirs: %v", err)
	}
	if _, err := none.Root(ctx, ref); !errors.Is(err, image.ErrNotAllowed) {
		t.Errorf("no allowed registries: %v", err)
	}
}
