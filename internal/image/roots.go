package image

import (
	"github.com/ironclaw/ironclaw/internal/errdefs"

	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// ErrNotAllowed: the image is outside what the operator allows.
var ErrNotAllowed = errdefs.New(errdefs.ErrForbidden, "image not allowed")

// Roots turns the image a create request names into a sandbox root, under
// the operator's rules. An agent must not be able to make a host directory
// (say "/") its root, nor make the daemon pull from anywhere: local images
// must lie beneath LocalDirs, and pulls must name one of Registries, unless
// the Any flags say otherwise (the CLI's one-shot run, where the caller is
// the operator).
type Roots struct {
	Store       *Store
	LocalDirs   []string // local images (directories, OCI layouts, tarballs) beneath these
	AnyLocal    bool
	Registries  []string // registry hosts pulls may use, e.g. "ghcr.io", "localhost:5000"
	AnyRegistry bool
}

// Root resolves ref: a local path ("/srv/images/app", "/srv/app.tar:app:1",
// "./layout@sha256:...") or a registry reference ("ghcr.io/org/app:1"). A
// plain directory that is not an OCI layout becomes a directory root as is;
// images are unpacked into the store's cache.
func (r *Roots) Root(ctx context.Context, ref string) (sandbox.Root, error) {
	if ref == "" || len(ref) > 1024 || strings.ContainsAny(ref, "\x00\n") {
		return sandbox.Root{}, fmt.Errorf("%w: image reference %q", sandbox.ErrInvalidSpec, ref)
	}
	if ref[0] == '/' || ref[0] == '.' {
		return r.local(ctx, ref)
	}
	n, err := name.ParseReference(ref)
	if err != nil {
		return sandbox.Root{}, fmt.Errorf("%w: image %q is neither a local path nor a registry reference: %v", sandbox.ErrInvalidSpec, ref, err)
	}
	host := n.Context().RegistryStr()
	if !r.AnyRegistry && !slices.Contains(r.Registries, host) {
		return sandbox.Root{}, fmt.Errorf("%w: %w: pulls from %s are not allowed (the operator lists registries with --image-registry)", sandbox.ErrInvalidSpec, ErrNotAllowed, host)
	}
	return r.resolve(ctx, ref)
}

func (r *Roots) local(ctx context.Context, ref string) (sandbox.Root, error) {
	p, sel, _, ok := splitLocal(ref)
	if !ok {
		p = ref // missing: EvalSymlinks says so
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return sandbox.Root{}, fmt.Errorf("%w: image %s: %v", sandbox.ErrInvalidSpec, ref, err)
	}
	if !r.AnyLocal && !beneathAny(real, r.LocalDirs) {
		return sandbox.Root{}, fmt.Errorf("%w: %w: %s is not beneath an image directory the operator allows (--image-dir)", sandbox.ErrInvalidSpec, ErrNotAllowed, ref)
	}
	root, err := r.resolve(ctx, real+sel)
	if errors.Is(err, ErrNotImage) && sel == "" {
		if fi, serr := os.Stat(real); serr == nil && fi.IsDir() {
			return sandbox.Root{Kind: sandbox.RootDirectory, Path: real}, nil
		}
	}
	return root, err
}

func (r *Roots) resolve(ctx context.Context, ref string) (sandbox.Root, error) {
	if r.Store == nil {
		return sandbox.Root{}, fmt.Errorf("%w: this daemon has no image cache", sandbox.ErrInvalidSpec)
	}
	img, err := r.Store.Resolve(ctx, ref)
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return sandbox.Root{}, err
		}
		return sandbox.Root{}, fmt.Errorf("%w: image %s: %w", sandbox.ErrInvalidSpec, ref, err)
	}
	return sandbox.Root{Kind: sandbox.RootDirectory, Path: img.RootDir}, nil
}

// beneathAny reports whether p (symlinks resolved) is one of dirs or below
// one of them (each resolved too).
func beneathAny(p string, dirs []string) bool {
	for _, d := range dirs {
		rd, err := filepath.EvalSymlinks(d)
		if err != nil {
			continue
		}
		rel, err := filepath.Rel(rd, p)
		if err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel) {
			return true
		}
	}
	return false
}
