package image

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"
)

// DefaultMaxImageBytes is Options.MaxImageBytes when it is zero.
const DefaultMaxImageBytes = 4 << 30

// maxConfigBytes bounds an image config; real ones are a few KiB.
const maxConfigBytes = 8 << 20

// Options configure a Store. The zero value is ready to use.
type Options struct {
	// MaxImageBytes bounds one image: the bytes its layers unpack to (file
	// contents plus 512 per entry) and, separately, the bytes of their
	// uncompressed tar streams. An image over it fails with ErrTooLarge
	// and leaves nothing behind. Zero means DefaultMaxImageBytes.
	MaxImageBytes int64
	// InsecureRegistries are registry hosts ("host" or "host:port") that
	// may be reached over plain HTTP. Loopback registries always may;
	// every other host must use HTTPS.
	InsecureRegistries []string
	// Keychain supplies registry credentials; nil pulls anonymously.
	Keychain authn.Keychain
}

// Store resolves image references to unpacked, read-only root directories
// kept in a content-addressed cache (see the package doc for its layout).
// A Store is safe for concurrent use, and several processes may share one
// cache directory.
type Store struct {
	dir      string
	maxBytes int64
	insecure map[string]bool
	keychain authn.Keychain
	chown    bool // keep the archive's uid/gid: only root may
}

// Image is a resolved image.
type Image struct {
	// Digest is the digest of the image's manifest ("sha256:..."), the
	// platform's manifest when the reference named an index. It is empty
	// for docker save tarballs, which hold no manifest.
	Digest string
	// ID is the digest of the image's config. It names RootDir: images
	// with the same ID share one root.
	ID string
	// RootDir is the absolute path of the unpacked root. It is shared and
	// must never be modified: bind it read-only.
	RootDir string
	// Config is the run configuration from the image's config.
	Config Config
}

// Config is what an image says about running it.
type Config struct {
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
	User       string
}

// Open opens (creating if needed) the cache in dir, e.g. <data-dir>/images.
// It also removes work a crashed process left in the cache's tmp.
func Open(dir string, opts Options) (*Store, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("image cache: %w", err)
	}
	for _, sub := range []string{"", "configs/sha256", "layers/sha256", "roots/sha256", "locks", "tmp"} {
		if err := os.MkdirAll(filepath.Join(abs, sub), 0o700); err != nil {
			return nil, fmt.Errorf("image cache: %w", err)
		}
	}
	s := &Store{
		dir:      abs,
		maxBytes: opts.MaxImageBytes,
		insecure: map[string]bool{},
		keychain: opts.Keychain,
		chown:    os.Geteuid() == 0,
	}
	if s.maxBytes <= 0 {
		s.maxBytes = DefaultMaxImageBytes
	}
	for _, h := range opts.InsecureRegistries {
		s.insecure[h] = true
	}
	s.sweep()
	return s, nil
}

// Resolve finds the image ref names, unpacks what the cache lacks, and
// returns its root. ref is a registry reference ("host/repo:tag",
// "host:port/repo@sha256:..."), an OCI layout directory (optionally
// "dir:tag" or "dir@sha256:..." to pick a manifest), or an OCI layout or
// docker save tarball ("file.tar", "file.tar:repo:tag"). Local paths win
// over registry names. A plain directory, or a path that does not exist,
// gives an error wrapping ErrNotImage.
//
// Layers are fetched only if their unpacked form is not cached, and not
// at all if the image's root is.
func (s *Store) Resolve(ctx context.Context, ref string) (Image, error) {
	src, err := s.open(ctx, ref)
	if err != nil {
		return Image{}, fmt.Errorf("image %s: %w", ref, err)
	}
	if src.release != nil {
		defer src.release()
	}
	img, err := s.resolve(ctx, src)
	if err != nil {
		return Image{}, fmt.Errorf("image %s: %w", ref, err)
	}
	return img, nil
}

func (s *Store) resolve(ctx context.Context, src *source) (Image, error) {
	// The manifest names the config; ConfigName would fetch the config
	// to hash it, which a cached image does not need.
	var id v1.Hash
	var err error
	if src.manifest {
		var m *v1.Manifest
		if m, err = src.img.Manifest(); err == nil {
			id = m.Config.Digest
		}
	} else {
		id, err = src.img.ConfigName()
	}
	if err != nil {
		return Image{}, fmt.Errorf("config digest: %w", err)
	}
	if id.Algorithm != "sha256" || !isHex(id.Hex) {
		return Image{}, fmt.Errorf("config digest %s: only sha256 digests are supported", id)
	}
	raw, err := s.config(src, id)
	if err != nil {
		return Image{}, err
	}
	cf, err := v1.ParseConfigFile(bytes.NewReader(raw))
	if err != nil {
		return Image{}, fmt.Errorf("config %s: %w", id, err)
	}
	if (cf.OS != "" && cf.OS != "linux") || (cf.Architecture != "" && cf.Architecture != runtime.GOARCH) {
		return Image{}, fmt.Errorf("%w: the image is for %s/%s, this host runs linux/%s", ErrNoManifest, cf.OS, cf.Architecture, runtime.GOARCH)
	}
	out := Image{
		Digest:  src.digest,
		ID:      id.String(),
		RootDir: filepath.Join(s.dir, "roots", "sha256", id.Hex),
		Config: Config{
			Entrypoint: cf.Config.Entrypoint,
			Cmd:        cf.Config.Cmd,
			Env:        cf.Config.Env,
			WorkingDir: cf.Config.WorkingDir,
			User:       cf.Config.User,
		},
	}
	if exists(out.RootDir) {
		return out, nil
	}
	if err := s.buildRoot(ctx, src.img, cf, id, out.RootDir); err != nil {
		return Image{}, err
	}
	return out, nil
}

// config returns the image's config bytes, verified against id, from the
// cache or from the source (and then caches them), so a cached image
// needs no more than its manifest.
func (s *Store) config(src *source, id v1.Hash) ([]byte, error) {
	p := filepath.Join(s.dir, "configs", "sha256", id.Hex)
	if b, err := os.ReadFile(p); err == nil && checkSHA256(b, id, "config") == nil {
		return b, nil
	}
	if src.manifest {
		m, err := src.img.Manifest()
		if err != nil {
			return nil, fmt.Errorf("manifest: %w", err)
		}
		if m.Config.Size > maxConfigBytes {
			return nil, fmt.Errorf("%w: config %s is %d bytes", ErrTooLarge, id, m.Config.Size)
		}
	}
	b, err := src.img.RawConfigFile()
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", id, err)
	}
	if len(b) > maxConfigBytes {
		return nil, fmt.Errorf("%w: config %s is %d bytes", ErrTooLarge, id, len(b))
	}
	if err := checkSHA256(b, id, "config"); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(filepath.Join(s.dir, "tmp"), "config-")
	if err != nil {
		return nil, err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), p)
	}
	if err != nil {
		os.Remove(f.Name())
		return nil, fmt.Errorf("cache config %s: %w", id, err)
	}
	return b, nil
}

// buildRoot unpacks the image's missing layers and assembles its root at
// final, under the root's lock so concurrent Resolves do the work once.
func (s *Store) buildRoot(ctx context.Context, img v1.Image, cf *v1.ConfigFile, id v1.Hash, final string) error {
	unlock, err := s.lock(ctx, "root-"+id.Hex)
	if err != nil {
		return err
	}
	defer unlock()
	if exists(final) {
		return nil // another Resolve finished it while we waited
	}
	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("layers: %w", err)
	}
	if len(layers) != len(cf.RootFS.DiffIDs) {
		return fmt.Errorf("the manifest lists %d layers, the config %d", len(layers), len(cf.RootFS.DiffIDs))
	}
	size := &budget{limit: s.maxBytes, what: "the image's unpacked size"}
	stream := &budget{limit: s.maxBytes, what: "the image's uncompressed layers"}
	dirs := make([]unpacked, len(layers))
	for i, diffID := range cf.RootFS.DiffIDs {
		if dirs[i], err = s.layer(ctx, layers[i], diffID, size, stream); err != nil {
			return fmt.Errorf("layer %d (%s): %w", i, diffID, err)
		}
	}
	tmp, release, err := s.tempDir("root-" + id.Hex)
	if err != nil {
		return err
	}
	defer release()
	t, err := openTree(tmp, s.chown)
	if err != nil {
		return err
	}
	defer t.close()
	if err := assemble(ctx, t, dirs); err != nil {
		return err
	}
	if err := unix.Fchmod(t.root, 0o755); err != nil {
		return err
	}
	return commit(t.root, tmp, final)
}

// layerMeta is stored next to an unpacked layer.
type layerMeta struct {
	// Size is what the layer cost against Options.MaxImageBytes.
	Size int64 `json:"size"`
	// Implicit lists the directories the layer's archive did not list,
	// made for the entries beneath them (see tree.implicit).
	Implicit []string `json:"implicit,omitempty"`
}

func (m layerMeta) unpacked(dir string) unpacked {
	u := unpacked{dir: filepath.Join(dir, "fs"), implicit: map[string]bool{}}
	for _, p := range m.Implicit {
		u.implicit[p] = true
	}
	return u
}

// layer returns the directory holding the layer's unpacked tree,
// unpacking it first if the cache lacks it. The layer is named by its
// diffID (the digest of its uncompressed tar), and its stream is hashed
// while it is unpacked: a mismatch discards everything.
func (s *Store) layer(ctx context.Context, l v1.Layer, diffID v1.Hash, size, stream *budget) (unpacked, error) {
	if diffID.Algorithm != "sha256" || !isHex(diffID.Hex) {
		return unpacked{}, fmt.Errorf("diffID %s: only sha256 digests are supported", diffID)
	}
	final := filepath.Join(s.dir, "layers", "sha256", diffID.Hex)
	if m, err := readLayerMeta(final); err == nil {
		return m.unpacked(final), size.charge(m.Size)
	}
	unlock, err := s.lock(ctx, "layer-"+diffID.Hex)
	if err != nil {
		return unpacked{}, err
	}
	defer unlock()
	if m, err := readLayerMeta(final); err == nil {
		return m.unpacked(final), size.charge(m.Size)
	}

	tmp, release, err := s.tempDir("layer-" + diffID.Hex)
	if err != nil {
		return unpacked{}, err
	}
	defer release()
	if err := os.Mkdir(filepath.Join(tmp, "fs"), 0o755); err != nil {
		return unpacked{}, err
	}
	t, err := openTree(filepath.Join(tmp, "fs"), s.chown)
	if err != nil {
		return unpacked{}, err
	}
	defer t.close()

	rc, err := l.Uncompressed()
	if err != nil {
		return unpacked{}, fmt.Errorf("open: %w", err)
	}
	defer rc.Close()
	h := sha256.New()
	r := io.TeeReader(&chargedReader{r: ctxReader{ctx, rc}, b: stream}, h)
	before := size.used
	if err := unpack(ctx, r, t, size); err != nil {
		return unpacked{}, err
	}
	// The hash covers the whole stream, including what follows the tar's
	// end marker.
	if _, err := io.Copy(io.Discard, r); err != nil {
		return unpacked{}, fmt.Errorf("read: %w", err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != diffID.Hex {
		return unpacked{}, fmt.Errorf("%w: layer %s unpacked to sha256:%s", ErrDigestMismatch, diffID, got)
	}
	m := layerMeta{Size: size.used - before}
	for p := range t.implicit {
		m.Implicit = append(m.Implicit, p)
	}
	sort.Strings(m.Implicit)
	meta, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(tmp, "meta.json"), meta, 0o600); err != nil {
		return unpacked{}, err
	}
	if err := commit(t.root, tmp, final); err != nil {
		return unpacked{}, err
	}
	return m.unpacked(final), nil
}

func readLayerMeta(dir string) (layerMeta, error) {
	var m layerMeta
	b, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		return m, err
	}
	return m, json.Unmarshal(b, &m)
}

// commit makes the finished tree tmp visible as final in one rename, after
// flushing it, so neither a crash nor a reader ever sees half of it.
func commit(fd int, tmp, final string) error {
	if err := unix.Syncfs(fd); err != nil {
		return fmt.Errorf("sync %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		if exists(final) {
			return nil // made meanwhile by a process that ignored the lock: same content
		}
		return fmt.Errorf("commit %s: %w", final, err)
	}
	return nil
}

// tempDir makes a work directory in the cache's tmp and holds a flock on
// it until release, which also removes it (a no-op once it was renamed).
// The flock tells sweep the directory is in use.
func (s *Store) tempDir(prefix string) (string, func(), error) {
	p, err := os.MkdirTemp(filepath.Join(s.dir, "tmp"), prefix+"-")
	if err != nil {
		return "", nil, err
	}
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err == nil {
		err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err != nil {
			unix.Close(fd)
		}
	}
	if err != nil {
		os.Remove(p)
		return "", nil, fmt.Errorf("lock %s: %w", p, err)
	}
	return p, func() {
		removeTree(p)
		unix.Close(fd)
	}, nil
}

// sweepAge keeps sweep away from a work directory in the instant between
// its creation and its flock.
const sweepAge = time.Minute

// sweep removes work directories and files nobody holds: what a crashed
// process left in tmp.
func (s *Store) sweep() {
	tmp := filepath.Join(s.dir, "tmp")
	des, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, de := range des {
		p := filepath.Join(tmp, de.Name())
		fi, err := de.Info()
		if err != nil || time.Since(fi.ModTime()) < sweepAge {
			continue
		}
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) == nil {
			removeTree(p)
		}
		unix.Close(fd)
	}
}

// lockPoll is how often a waiting Resolve retries a busy lock.
const lockPoll = 20 * time.Millisecond

// lock takes the cache-wide lock called name (a flock, so it works across
// goroutines and processes alike), waiting until ctx is done.
func (s *Store) lock(ctx context.Context, name string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(s.dir, "locks", name), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	fd := int(f.Fd())
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil // closing the last descriptor releases the flock
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", name, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(lockPoll):
		}
	}
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil || !errors.Is(err, fs.ErrNotExist)
}

func isHex(s string) bool { return len(s) == 64 && strings.Trim(s, "0123456789abcdef") == "" }
