package image_test

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/compression"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/ironclaw/ironclaw/internal/image"
)

// testRegistry is an in-process registry on loopback that counts the blob
// downloads it serves.
type testRegistry struct {
	host string
	mu   sync.Mutex
	gets map[string]int // blob digest -> GETs
}

func newRegistry(t testing.TB) *testRegistry {
	t.Helper()
	r := &testRegistry{gets: map[string]int{}}
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/blobs/") {
			r.mu.Lock()
			r.gets[req.URL.Path[strings.LastIndex(req.URL.Path, "/")+1:]]++
			r.mu.Unlock()
		}
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	r.host = strings.TrimPrefix(srv.URL, "http://")
	return r
}

func (r *testRegistry) blobGets(dg v1.Hash) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gets[dg.String()]
}

func (r *testRegistry) push(t testing.TB, repoTag string, img v1.Image) string {
	t.Helper()
	ref, err := name.ParseReference(r.host + "/" + repoTag)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithContext(t.Context())); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	return ref.String()
}

func TestRegistry(t *testing.T) {
	reg1 := newRegistry(t)
	gz := layer(t, dir("etc/"), reg("etc/os-release", "ID=test\n"))
	zst := layerOf(t, tarBytes(t, reg("etc/zstd", "zstd layer")), tarball.WithCompression(compression.ZStd))
	img := imageOf(t, gz, zst)
	ref := reg1.push(t, "test/img:v1", img)
	dg, _ := img.Digest()

	s, _ := newStore(t, image.Options{})
	got := resolve(t, s, ref)
	if got.Digest != dg.String() {
		t.Fatalf("Digest = %s, want %s", got.Digest, dg)
	}
	tree := listTree(t, got.RootDir)
	if tree["etc/os-release"] != "file:ID=test\n" || tree["etc/zstd"] != "file:zstd layer" {
		t.Fatalf("root = %v", tree)
	}
	layers := []v1.Layer{gz, zst}
	for _, l := range layers {
		if d, _ := l.Digest(); reg1.blobGets(d) != 1 {
			t.Fatalf("layer %s fetched %d times, want 1", d, reg1.blobGets(d))
		}
	}
	cfg, _ := img.ConfigName()

	// Again, by tag and by digest: the root is cached, so no blob at all
	// (not even the config) is fetched again.
	for _, again := range []string{ref, reg1.host + "/test/img@" + dg.String()} {
		if g := resolve(t, s, again); g.RootDir != got.RootDir || g.Digest != got.Digest {
			t.Fatalf("Resolve(%s) = %+v, want %+v", again, g, got)
		}
	}
	for _, d := range []v1.Hash{cfg, mustDigest(t, gz), mustDigest(t, zst)} {
		if n := reg1.blobGets(d); n != 1 {
			t.Fatalf("blob %s fetched %d times after cached resolves, want 1", d, n)
		}
	}

	// Another image sharing the gzip layer fetches only its new layer.
	more := layer(t, reg("etc/more", "more"))
	img2 := imageOf(t, gz, more)
	ref2 := reg1.push(t, "test/img:v2", img2)
	got2 := resolve(t, s, ref2)
	if reg1.blobGets(mustDigest(t, gz)) != 1 || reg1.blobGets(mustDigest(t, more)) != 1 {
		t.Fatalf("shared layer refetched: gz %d, new %d", reg1.blobGets(mustDigest(t, gz)), reg1.blobGets(mustDigest(t, more)))
	}
	if tree := listTree(t, got2.RootDir); tree["etc/more"] != "file:more" || tree["etc/zstd"] != "" {
		t.Fatalf("second root = %v", tree)
	}
}

func mustDigest(t testing.TB, l v1.Layer) v1.Hash {
	t.Helper()
	d, err := l.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestRegistryIndexPicksPlatform(t *testing.T) {
	other := "s390x"
	if runtime.GOARCH == other {
		other = "arm64"
	}
	native := imageOf(t, layer(t, reg("arch", runtime.GOARCH)))
	foreign := imageFor(t, other, layer(t, reg("arch", other)))
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: foreign, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: other}}},
		mutate.IndexAddendum{Add: native, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}}},
	)
	r := newRegistry(t)
	ref, err := name.ParseReference(r.host + "/multi/arch:latest")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, idx, remote.WithContext(t.Context())); err != nil {
		t.Fatal(err)
	}
	s, _ := newStore(t, image.Options{})
	got := resolve(t, s, ref.String())
	if b, err := os.ReadFile(filepath.Join(got.RootDir, "arch")); err != nil || string(b) != runtime.GOARCH {
		t.Fatalf("picked %q %v, want %s", b, err, runtime.GOARCH)
	}
	if want, _ := native.Digest(); got.Digest != want.String() {
		t.Fatalf("Digest = %s, want the platform manifest's %s", got.Digest, want)
	}
	if r.blobGets(mustDigest(t, mustLayers(t, foreign)[0])) != 0 {
		t.Fatalf("the foreign image's layer was fetched")
	}

	// The same index in an OCI layout, as index.json's only entry.
	d := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(d, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendIndex(idx); err != nil {
		t.Fatal(err)
	}
	if got := resolve(t, s, d); got.RootDir != resolve(t, s, ref.String()).RootDir {
		t.Fatalf("layout index picked %s", got.RootDir)
	}
}

func mustLayers(t testing.TB, img v1.Image) []v1.Layer {
	t.Helper()
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

// TestConcurrentResolve: four Resolves of one image at once unpack it
// once and agree on the root.
func TestConcurrentResolve(t *testing.T) {
	r := newRegistry(t)
	ls := []v1.Layer{
		layer(t, reg("a", strings.Repeat("a", 256<<10))),
		layer(t, reg("b", strings.Repeat("b", 256<<10))),
		layer(t, reg("c", "c")),
	}
	ref := r.push(t, "conc/img:v1", imageOf(t, ls...))
	s, cache := newStore(t, image.Options{})

	const n = 4
	roots := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			img, err := s.Resolve(t.Context(), ref)
			roots[i], errs[i] = img.RootDir, err
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Resolve %d: %v", i, errs[i])
		}
		if roots[i] != roots[0] {
			t.Fatalf("roots differ: %v", roots)
		}
	}
	for _, l := range ls {
		if got := r.blobGets(mustDigest(t, l)); got != 1 {
			t.Errorf("layer %s fetched %d times, want 1", mustDigest(t, l), got)
		}
	}
	if got := dirNames(t, cache, "layers/sha256"); len(got) != len(ls) {
		t.Errorf("cached layers %v, want %d", got, len(ls))
	}
	if got := dirNames(t, cache, "roots/sha256"); len(got) != 1 {
		t.Errorf("roots %v, want 1", got)
	}
	if got := dirNames(t, cache, "tmp"); len(got) != 0 {
		t.Errorf("tmp left behind: %v", got)
	}
	if tree := listTree(t, roots[0]); len(tree) != 3 {
		t.Errorf("root = %d entries, want 3", len(tree))
	}
}

func TestResolveCancelled(t *testing.T) {
	r := newRegistry(t)
	ref := r.push(t, "cancel/img:v1", imageOf(t, layer(t, reg("f", "x"))))
	s, cache := newStore(t, image.Options{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.Resolve(ctx, ref); !errors.Is(err, context.Canceled) {
		t.Fatalf("Resolve(cancelled) = %v, want context.Canceled", err)
	}
	if n := dirNames(t, cache, "roots/sha256"); len(n) != 0 {
		t.Fatalf("roots after a cancelled Resolve: %v", n)
	}
}
