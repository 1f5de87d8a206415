package image_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/ironclaw/ironclaw/internal/image"
)

// ent is one tar entry of a test layer.
type ent struct {
	hdr  tar.Header
	body string
}

var testTime = time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)

func reg(name, body string) ent {
	return ent{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(body)), ModTime: testTime}, body: body}
}

func regMode(name, body string, mode int64, uid, gid int) ent {
	e := reg(name, body)
	e.hdr.Mode, e.hdr.Uid, e.hdr.Gid = mode, uid, gid
	return e
}

func dir(name string) ent {
	return ent{hdr: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755, ModTime: testTime}}
}

func symlink(name, target string) ent {
	return ent{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777, ModTime: testTime}}
}

func hardlink(name, target string) ent {
	return ent{hdr: tar.Header{Typeflag: tar.TypeLink, Name: name, Linkname: target, Mode: 0o644, ModTime: testTime}}
}

func tarBytes(t testing.TB, ents ...ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	writeEnts(t, tw, ents...)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// writeEnts writes ents to tw, which stays open for more.
func writeEnts(t testing.TB, tw *tar.Writer, ents ...ent) {
	t.Helper()
	for _, e := range ents {
		h := e.hdr
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatalf("tar header %q: %v", h.Name, err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			t.Fatal(err)
		}
	}
}

// layerOf makes a gzip layer (or as opts say) from raw tar bytes.
func layerOf(t testing.TB, raw []byte, opts ...tarball.LayerOption) v1.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(raw)), nil
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func layer(t testing.TB, ents ...ent) v1.Layer {
	t.Helper()
	return layerOf(t, tarBytes(t, ents...))
}

// imageOf stacks layers into a linux/GOARCH image with a small config.
func imageOf(t testing.TB, layers ...v1.Layer) v1.Image {
	t.Helper()
	return imageFor(t, runtime.GOARCH, layers...)
}

func imageFor(t testing.TB, arch string, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{
		OS:           "linux",
		Architecture: arch,
		RootFS:       v1.RootFS{Type: "layers"},
		Config: v1.Config{
			Entrypoint: []string{"/bin/hello"},
			Cmd:        []string{"world"},
			Env:        []string{"PATH=/bin", "GREETING=hi"},
			WorkingDir: "/work",
			User:       "65532:65532",
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.AppendLayers(img, layers...)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// writeLayout writes imgs to a new OCI layout directory, each with a
// ref.name annotation from tags (when given).
func writeLayout(t testing.TB, imgs []v1.Image, tags ...string) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(d, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	for i, img := range imgs {
		var opts []layout.Option
		if i < len(tags) {
			opts = append(opts, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tags[i]}))
		}
		if err := p.AppendImage(img, opts...); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func newStore(t testing.TB, opts image.Options) (*image.Store, string) {
	t.Helper()
	d := filepath.Join(t.TempDir(), "cache")
	// Unprivileged, read-only directories in roots would stop TempDir's
	// cleanup (which runs after this one).
	t.Cleanup(func() {
		filepath.WalkDir(d, func(p string, de fs.DirEntry, err error) error {
			if err == nil && de.IsDir() {
				os.Chmod(p, 0o700)
			}
			return nil
		})
	})
	s, err := image.Open(d, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s, d
}

func resolve(t testing.TB, s *image.Store, ref string) image.Image {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	img, err := s.Resolve(ctx, ref)
	if err != nil {
		t.Fatalf("Resolve(%q): %v", ref, err)
	}
	return img
}

func resolveErr(s *image.Store, ref string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := s.Resolve(ctx, ref)
	return err
}

// listTree maps every path under root to a short description of it
// ("file:<content>", "dir", "link:<target>").
func listTree(t testing.TB, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			tgt, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[rel] = "link:" + tgt
		case d.IsDir():
			out[rel] = "dir"
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = "file:" + string(b)
		default:
			out[rel] = "other:" + d.Type().String()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// dirNames lists a cache subdirectory, e.g. "layers/sha256".
func dirNames(t testing.TB, cache, sub string) []string {
	t.Helper()
	des, err := os.ReadDir(filepath.Join(cache, sub))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, de := range des {
		out = append(out, de.Name())
	}
	sort.Strings(out)
	return out
}

// tarDir writes the directory d as a tar file at dst (for layout tarballs).
func tarDir(t testing.TB, d, dst string) {
	t.Helper()
	f, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	if err := tw.AddFS(os.DirFS(d)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}
