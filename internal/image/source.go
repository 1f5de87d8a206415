package image

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// source is one image found by a reference, not yet unpacked.
type source struct {
	img v1.Image
	// digest is the manifest's digest, checked against the manifest's
	// bytes; "" for docker save tarballs, which hold no manifest.
	digest string
	// manifest says img has a real manifest whose config descriptor may be
	// read cheaply (false for docker save tarballs, where ggcr would have
	// to compress every layer to make one up).
	manifest bool
	// release frees what opening the source took (an extracted tarball).
	release func()
}

// open finds the image ref names. Local paths win over registry names:
// "dir", "dir:tag", "dir@sha256:...", "file.tar", "file.tar:repo:tag".
func (s *Store) open(ctx context.Context, ref string) (*source, error) {
	if ref == "" {
		return nil, fmt.Errorf("%w: empty reference", ErrNotImage)
	}
	if p, sel, fi, ok := splitLocal(ref); ok {
		return s.openPath(ctx, p, fi, sel)
	}
	if ref[0] == '/' || ref[0] == '.' {
		return nil, fmt.Errorf("%w: %w", ErrNotImage, fs.ErrNotExist)
	}
	return s.openRemote(ctx, ref)
}

// splitLocal splits a local reference into the path it names and its
// selector ("", ":tag", "@digest" or, for a docker save tarball,
// ":repo:tag"): ref itself when it exists, else the first prefix ending
// before a ':' or '@' that is an image file or an OCI layout. Only an
// image may take a selector: a directory that happens to be called
// "localhost" must not hide the registry localhost:5000. ok is false when
// no such path exists.
func splitLocal(ref string) (p, sel string, fi fs.FileInfo, ok bool) {
	if fi, err := os.Stat(ref); err == nil {
		return ref, "", fi, true
	}
	for i := 1; i < len(ref); i++ {
		if ref[i] != ':' && ref[i] != '@' {
			continue
		}
		p := ref[:i]
		if fi, err := os.Stat(p); err == nil && (fi.Mode().IsRegular() || isLayout(p)) {
			return p, ref[i:], fi, true
		}
	}
	return "", "", nil, false
}

// openPath opens an OCI layout directory or an image tarball. sel is ""
// or ":tag" or "@digest".
func (s *Store) openPath(ctx context.Context, p string, fi fs.FileInfo, sel string) (*source, error) {
	switch {
	case fi.IsDir():
		if !isLayout(p) {
			return nil, fmt.Errorf("%w: directory %s has no oci-layout file", ErrNotImage, p)
		}
		return openLayout(p, sel)
	case fi.Mode().IsRegular():
		kind, err := sniffTar(p)
		if err != nil {
			return nil, err
		}
		if kind == "docker" {
			return openDockerTar(p, sel)
		}
		dir, release, err := s.extractLayout(ctx, p)
		if err != nil {
			return nil, err
		}
		src, err := openLayout(dir, sel)
		if err != nil {
			release()
			return nil, err
		}
		src.release = release
		return src, nil
	}
	return nil, fmt.Errorf("%w: %s is neither a directory nor a file", ErrNotImage, p)
}

func isLayout(dir string) bool {
	fi, err := os.Stat(filepath.Join(dir, "oci-layout"))
	return err == nil && fi.Mode().IsRegular()
}

func openLayout(dir, sel string) (*source, error) {
	lp, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: OCI layout %s: %v", ErrNotImage, dir, err)
	}
	idx, err := lp.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	img, desc, err := pick(idx, sel, 0)
	if err != nil {
		return nil, err
	}
	return &source{img: img, digest: desc.Digest.String(), manifest: true}, nil
}

// sniffTar tells an OCI layout tarball ("oci") from a docker save tarball
// ("docker") by its entry names, without reading the entries' contents.
// Docker 25 and later write both; the OCI layout is preferred then.
func sniffTar(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	tr := tar.NewReader(f) // an *os.File seeks past contents
	var ociLayout, index, manifest bool
	for n := 0; ; n++ {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			if n == 0 {
				return "", fmt.Errorf("%w: %s is not a tar archive: %v", ErrNotImage, p, err)
			}
			return "", fmt.Errorf("read %s: %w", p, err)
		}
		switch tarName(hdr) {
		case "oci-layout":
			ociLayout = true
		case "index.json":
			index = true
		case "manifest.json":
			manifest = true
		}
		if ociLayout && index {
			return "oci", nil
		}
	}
	if manifest {
		return "docker", nil
	}
	return "", fmt.Errorf("%w: tarball %s holds neither an OCI layout nor a docker save manifest.json", ErrNotImage, p)
}

// extractLayout copies an OCI layout tarball's layout files (oci-layout,
// index.json, blobs/<alg>/<hex>) into a fresh directory under the cache's
// tmp; every other entry is ignored. Names are checked against that fixed
// shape, and the directory is new and ours, so nothing lands elsewhere.
func (s *Store) extractLayout(ctx context.Context, p string) (dir string, release func(), err error) {
	dir, release, err = s.tempDir("src")
	if err != nil {
		return "", nil, err
	}
	defer func() {
		if err != nil {
			release()
		}
	}()
	f, err := os.Open(p)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	b := &budget{limit: s.maxBytes, what: "OCI layout tarball " + p}
	tr := tar.NewReader(f)
	for {
		if err := ctx.Err(); err != nil {
			return "", nil, err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			return dir, release, nil
		}
		if err != nil {
			return "", nil, fmt.Errorf("read %s: %w", p, err)
		}
		rel := tarName(hdr)
		if hdr.Typeflag != tar.TypeReg || !layoutFile(rel) {
			continue
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(rel)), 0o700); err != nil {
			return "", nil, err
		}
		out, err := os.OpenFile(filepath.Join(dir, rel), os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return "", nil, err
		}
		_, err = io.Copy(out, &chargedReader{r: tr, b: b})
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return "", nil, fmt.Errorf("extract %s from %s: %w", rel, p, err)
		}
	}
}

// tarName is an image tarball entry's name relative to the archive's top
// ("./index.json" and "/index.json" are "index.json").
func tarName(hdr *tar.Header) string {
	return strings.TrimLeft(strings.TrimPrefix(hdr.Name, "./"), "/")
}

// layoutFile reports whether rel is a file of an OCI layout.
func layoutFile(rel string) bool {
	if rel == "oci-layout" || rel == "index.json" {
		return true
	}
	parts := strings.Split(rel, "/")
	return len(parts) == 3 && parts[0] == "blobs" && isToken(parts[1], "abcdefghijklmnopqrstuvwxyz0123456789") &&
		isToken(parts[2], "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789=_-")
}

func isToken(s, alphabet string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for _, c := range s {
		if !strings.ContainsRune(alphabet, c) {
			return false
		}
	}
	return true
}

func openDockerTar(p, sel string) (*source, error) {
	if strings.HasPrefix(sel, "@") {
		return nil, fmt.Errorf("%w: docker save tarball %s: select an image by tag, not digest", ErrNoManifest, p)
	}
	opener := func() (io.ReadCloser, error) { return os.Open(p) }
	m, err := tarball.LoadManifest(opener)
	if err != nil {
		return nil, fmt.Errorf("docker save tarball %s: %w", p, err)
	}
	var tag *name.Tag
	if sel != "" {
		t, err := name.NewTag(sel[1:])
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrNoManifest, sel[1:], err)
		}
		tag = &t
		found := false
		for _, d := range m {
			for _, rt := range d.RepoTags {
				if other, err := name.NewTag(rt); err == nil && other.Name() == t.Name() {
					found = true
				}
			}
		}
		if !found {
			return nil, fmt.Errorf("%w: docker save tarball %s has no image tagged %s", ErrNoManifest, p, sel[1:])
		}
	} else if len(m) != 1 {
		return nil, fmt.Errorf("%w: docker save tarball %s holds %d images; name one as %s:repo:tag", ErrNoManifest, p, len(m), p)
	}
	img, err := tarball.Image(opener, tag)
	if err != nil {
		return nil, fmt.Errorf("docker save tarball %s: %w", p, err)
	}
	return &source{img: img}, nil
}

// pick chooses one image from an index: the one sel names (":tag" by its
// ref.name annotation, "@digest" by digest), else the only one, else the
// one for linux/GOARCH. Nested indexes are followed a few levels deep.
// Every manifest read is checked against its descriptor's digest.
func pick(idx v1.ImageIndex, sel string, depth int) (v1.Image, v1.Descriptor, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, v1.Descriptor{}, fmt.Errorf("read index: %w", err)
	}
	var cands []v1.Descriptor
	for _, d := range im.Manifests {
		if d.MediaType.IsImage() || d.MediaType.IsIndex() {
			cands = append(cands, d)
		}
	}
	switch {
	case strings.HasPrefix(sel, "@"):
		h, err := v1.NewHash(sel[1:])
		if err != nil {
			return nil, v1.Descriptor{}, fmt.Errorf("%w: %v", ErrNoManifest, err)
		}
		cands = filter(cands, func(d v1.Descriptor) bool { return d.Digest == h })
	case strings.HasPrefix(sel, ":"):
		tag := sel[1:]
		cands = filter(cands, func(d v1.Descriptor) bool {
			for _, k := range []string{"org.opencontainers.image.ref.name", "io.containerd.image.name"} {
				if v := d.Annotations[k]; v == tag || strings.HasSuffix(v, ":"+tag) {
					return true
				}
			}
			return false
		})
	}
	if len(cands) > 1 {
		cands = filter(cands, func(d v1.Descriptor) bool {
			return d.Platform != nil && d.Platform.OS == "linux" && d.Platform.Architecture == runtime.GOARCH
		})
	}
	if len(cands) != 1 {
		what := "none"
		if len(cands) > 1 {
			what = fmt.Sprintf("%d", len(cands))
		}
		return nil, v1.Descriptor{}, fmt.Errorf("%w: %s of the index's manifests match %q for linux/%s", ErrNoManifest, what, sel, runtime.GOARCH)
	}
	d := cands[0]
	if d.MediaType.IsIndex() {
		if depth >= 3 {
			return nil, v1.Descriptor{}, fmt.Errorf("%w: indexes nested too deep", ErrNoManifest)
		}
		child, err := idx.ImageIndex(d.Digest)
		if err != nil {
			return nil, v1.Descriptor{}, err
		}
		if err := checkManifest(child.RawManifest, d.Digest); err != nil {
			return nil, v1.Descriptor{}, err
		}
		return pick(child, "", depth+1)
	}
	img, err := idx.Image(d.Digest)
	if err != nil {
		return nil, v1.Descriptor{}, err
	}
	if err := checkManifest(img.RawManifest, d.Digest); err != nil {
		return nil, v1.Descriptor{}, err
	}
	return img, d, nil
}

func filter(ds []v1.Descriptor, keep func(v1.Descriptor) bool) []v1.Descriptor {
	var out []v1.Descriptor
	for _, d := range ds {
		if keep(d) {
			out = append(out, d)
		}
	}
	return out
}

// checkManifest verifies the manifest bytes against the digest naming
// them (a layout's blobs are read without any check).
func checkManifest(raw func() ([]byte, error), want v1.Hash) error {
	b, err := raw()
	if err != nil {
		return err
	}
	return checkSHA256(b, want, "manifest")
}

func checkSHA256(b []byte, want v1.Hash, what string) error {
	if want.Algorithm != "sha256" {
		return fmt.Errorf("%s %s: only sha256 digests are supported", what, want)
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != want.Hex {
		return fmt.Errorf("%w: %s %s hashes to sha256:%s", ErrDigestMismatch, what, want, got)
	}
	return nil
}

// openRemote finds ref in its registry. Only the manifest is fetched
// here; config and layers are fetched later, and only if not cached.
func (s *Store) openRemote(ctx context.Context, ref string) (*source, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotImage, err)
	}
	if s.plainHTTPAllowed(r.Context().RegistryStr()) {
		if r, err = name.ParseReference(ref, name.Insecure); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrNotImage, err)
		}
	}
	opts := []remote.Option{
		remote.WithContext(ctx),
		remote.WithTransport(httpsOnly{next: remote.DefaultTransport, allowed: s.plainHTTPAllowed}),
		remote.WithUserAgent("ironclaw"),
	}
	if s.keychain != nil {
		opts = append(opts, remote.WithAuthFromKeychain(s.keychain))
	}
	desc, err := remote.Get(r, opts...)
	if err != nil {
		return nil, fmt.Errorf("fetch manifest: %w", err)
	}
	if desc.MediaType.IsIndex() {
		idx, err := desc.ImageIndex()
		if err != nil {
			return nil, err
		}
		img, d, err := pick(idx, "", 0)
		if err != nil {
			return nil, err
		}
		return &source{img: img, digest: d.Digest.String(), manifest: true}, nil
	}
	img, err := desc.Image()
	if err != nil {
		return nil, err
	}
	if err := checkSHA256(desc.Manifest, desc.Digest, "manifest"); err != nil {
		return nil, err
	}
	return &source{img: img, digest: desc.Digest.String(), manifest: true}, nil
}

// plainHTTPAllowed: loopback registries, and those the options list.
func (s *Store) plainHTTPAllowed(host string) bool {
	if s.insecure[host] {
		return true
	}
	h := host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		h = hh
	}
	if s.insecure[h] || h == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(h, "[]"))
	return ip != nil && ip.IsLoopback()
}

// httpsOnly refuses plain HTTP to any host not allowed it. go-containerregistry
// on its own also falls back to HTTP for RFC 1918 addresses, where anyone on
// the path could then swap the image's manifest.
type httpsOnly struct {
	next    http.RoundTripper
	allowed func(host string) bool
}

func (h httpsOnly) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "https" && !h.allowed(req.URL.Host) {
		return nil, fmt.Errorf("%w: %s://%s", ErrPlainHTTP, req.URL.Scheme, req.URL.Host)
	}
	return h.next.RoundTrip(req)
}
