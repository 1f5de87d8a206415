package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ironclaw/ironclaw/internal/rootfs"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/container"
	"github.com/ironclaw/ironclaw/internal/sandbox/docker/engine"
	"github.com/ironclaw/ironclaw/internal/sandbox/seal"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
)

// DefaultStateDir holds the staged helper and one directory per sandbox.
const DefaultStateDir = "/run/ironclaw/docker"

// DefaultHost is the daemon's socket when neither Options.Host nor
// DOCKER_HOST says otherwise.
const DefaultHost = engine.DefaultHost

// EmptyImage is the image of a root without top-level symlinks: no files
// at all. Roots with symlinks (a merged-/usr host's /bin -> usr/bin) get
// one image per set of symlinks, tagged RootImageRepo:<hash>.
const (
	EmptyImage    = "ironclaw/empty:1"
	RootImageRepo = "ironclaw/root"
)

// Options configure a Runtime. Every field may be zero.
type Options struct {
	// Host is the Docker daemon's address; "" means DOCKER_HOST, else
	// DefaultHost. Only unix sockets are accepted: sandboxes bind host
	// paths and sockets, which must be on the daemon's own machine.
	Host string
	// Runtime is the Docker runtime containers use (a name registered
	// with dockerd, e.g. "runsc"); "" is the daemon's default (runc).
	Runtime string
	// StateDir holds the staged helper and the sandboxes' synthetic /etc
	// and sockets; "" means DefaultStateDir.
	StateDir string
	// Exe is the ironclaw binary bound into every sandbox as the in-sandbox
	// helper (see package oci/helper); "" means os.Executable(). It is
	// copied once into StateDir.
	Exe string
	// Logf receives diagnostics (never secrets); nil discards them.
	Logf func(format string, args ...any)
}

// Runtime creates sandboxes as Docker containers. It embeds the container
// backends' skeleton (package container), which runs the sandbox's
// lifecycle; this package says how the container is made and how a process
// runs in it. It is safe for concurrent use; Close destroys every sandbox
// it still holds.
type Runtime struct {
	*container.Runtime
	opts    Options
	cli     *engine.Client
	version string // dockerd's version
	runsc   bool   // the containers' runtime is gVisor's runsc
	ncpu    int    // the daemon's CPU count
	userns  bool   // dockerd runs with userns-remap
	bundles string // parent of every sandbox's state directory
	helper  string // staged copy of Options.Exe

	cpus *sandbox.CPUPicker

	imgMu  sync.Mutex
	images map[string]bool // image tags known to exist

	closeOnce sync.Once
}

var _ sandbox.Runtime = (*Runtime)(nil)

// New connects to dockerd, checks that it can run a sealed container here
// (a probe container reports the seal it runs under), removes what
// crashed earlier daemons left, and returns a ready Runtime. A daemon that
// is unreachable or cannot run the seal gives an error wrapping
// sandbox.ErrUnsupported that says why.
func New(ctx context.Context, opts Options) (_ *Runtime, retErr error) {
	if opts.Host == "" {
		opts.Host = os.Getenv("DOCKER_HOST")
	}
	if opts.Host == "" {
		opts.Host = DefaultHost
	}
	if u, err := url.Parse(opts.Host); err != nil || u.Scheme != "unix" {
		return nil, fmt.Errorf("%w: docker host %q: only a local daemon on a unix socket can run IronClaw sandboxes (they bind host paths and sockets)", sandbox.ErrUnsupported, opts.Host)
	}
	var err error
	if opts.StateDir, err = container.StateDir(opts.StateDir, DefaultStateDir); err != nil {
		return nil, err
	}
	if opts.Exe, err = container.ResolveExe(opts.Exe); err != nil {
		return nil, err
	}
	cli, err := engine.New(opts.Host)
	if err != nil {
		return nil, fmt.Errorf("%w: docker client: %v", sandbox.ErrUnsupported, err)
	}
	defer func() {
		if retErr != nil {
			cli.Close()
		}
	}()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := cli.Ping(pctx); err != nil {
		return nil, fmt.Errorf("%w: the Docker daemon at %s is unreachable: %v", sandbox.ErrUnsupported, opts.Host, err)
	}
	in, err := cli.Info(pctx)
	if err != nil {
		return nil, fmt.Errorf("%w: docker info: %v", sandbox.ErrUnsupported, err)
	}
	if in.OSType != "" && in.OSType != "linux" {
		return nil, fmt.Errorf("%w: the Docker daemon runs %s containers, not linux", sandbox.ErrUnsupported, in.OSType)
	}
	name := "docker"
	runsc := false
	if opts.Runtime != "" {
		rt, ok := in.Runtimes[opts.Runtime]
		if !ok {
			return nil, fmt.Errorf("%w: dockerd has no runtime %q registered (it has %s)", sandbox.ErrUnsupported, opts.Runtime, strings.Join(mapKeys(in.Runtimes), ", "))
		}
		runsc = opts.Runtime == "runsc" || filepath.Base(rt.Path) == "runsc"
		name = "docker-" + opts.Runtime
	}
	if _, err := seal.Profile(); err != nil {
		return nil, fmt.Errorf("%w: %v", sandbox.ErrUnsupported, err)
	}
	r := &Runtime{
		opts:    opts,
		cli:     cli,
		version: in.ServerVersion,
		runsc:   runsc,
		ncpu:    in.NCPU,
		cpus:    sandbox.NewCPUPicker(),
		bundles: filepath.Join(opts.StateDir, "b"),
		images:  map[string]bool{},
	}
	if r.Runtime, err = container.NewRuntime(container.Options{Name: name, IDPrefix: "dkr-", Backend: r,
		NProcLimit: runsc, Logf: opts.Logf}); err != nil {
		return nil, err
	}
	for _, o := range in.SecurityOptions {
		if strings.Contains(o, "name=userns") {
			r.userns = true
		}
	}
	if err := os.MkdirAll(r.bundles, 0o711); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	if r.helper, err = container.StageHelper(opts.Exe, opts.StateDir, "ironclaw-docker-helper-"); err != nil {
		return nil, fmt.Errorf("staging the helper binary: %w", err)
	}
	r.collect(ctx)
	if err := r.probe(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

func mapKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// Create implements sandbox.Runtime. Nothing is left behind on error.
func (r *Runtime) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	sb, err := r.Runtime.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return &Sandbox{Sandbox: sb, box: sb.Container().(*box)}, nil
}

// Version is dockerd's version, e.g. "20.10.24+dfsg1".
func (r *Runtime) Version() string { return r.version }

// UsernsRemap reports whether dockerd maps container ids through a user
// namespace (its userns-remap option), so container root is not host root.
func (r *Runtime) UsernsRemap() bool { return r.userns }

// Close destroys every sandbox still held and closes the API client.
func (r *Runtime) Close(ctx context.Context) error {
	err := r.Runtime.Close(ctx)
	r.closeOnce.Do(func() {
		if cerr := r.cli.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	})
	return err
}

// ensureImage returns the tag of the image for a root with these top-level
// symlinks, importing it once: a tar holding nothing but the symlinks.
// dockerd never pulls it; no registry is involved.
func (r *Runtime) ensureImage(ctx context.Context, symlinks []rootfs.Entry) (string, error) {
	tag := EmptyImage
	if len(symlinks) > 0 {
		h := sha256.New()
		for _, s := range symlinks {
			fmt.Fprintf(h, "%s\x00%s\n", s.Path, s.Target)
		}
		tag = RootImageRepo + ":" + hex.EncodeToString(h.Sum(nil))[:16]
	}
	r.imgMu.Lock()
	defer r.imgMu.Unlock()
	if r.images[tag] {
		return tag, nil
	}
	if ok, err := r.cli.ImageExists(ctx, tag); err != nil {
		return "", fmt.Errorf("inspecting image %s: %w", tag, err)
	} else if ok {
		r.images[tag] = true
		return tag, nil
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, s := range symlinks {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: strings.TrimPrefix(s.Path, "/"),
			Linkname: s.Target, Mode: 0o777, ModTime: time.Unix(0, 0)}); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := r.cli.ImageImport(ctx, &buf, tag, "IronClaw sandbox root: top-level symlinks only"); err != nil {
		return "", fmt.Errorf("importing image %s: %w", tag, err)
	}
	r.images[tag] = true
	r.Logf("imported image %s (%d symlinks)", tag, len(symlinks))
	return tag, nil
}

// probe runs one short container with the full seal and checks what the
// helper inside reports: the only reliable test that this daemon, its
// runtime and this kernel give the seal.
func (r *Runtime) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	id := "probe-" + container.RandHex(6)
	s := state{dir: filepath.Join(r.bundles, id)}
	defer os.RemoveAll(s.dir)
	spec := container.ProbeSpec()
	sl, err := seal.New(spec)
	if err != nil {
		return fmt.Errorf("%w: %v", sandbox.ErrUnsupported, err)
	}
	cid, err := r.createContainer(ctx, id, s, spec, sl, r.Owner(), []string{wire.HelperPath, wire.ModeProbe})
	if err != nil {
		return fmt.Errorf("%w: docker cannot create a sealed container here: %v", sandbox.ErrUnsupported, err)
	}
	defer r.removeContainer(context.WithoutCancel(ctx), cid)
	wait, err := r.cli.ContainerWait(ctx, cid, "next-exit")
	if err != nil {
		return fmt.Errorf("%w: waiting for the probe container: %v", sandbox.ErrUnsupported, err)
	}
	if err := r.cli.ContainerStart(ctx, cid); err != nil {
		return fmt.Errorf("%w: docker cannot start a sealed container here: %v", sandbox.ErrUnsupported, err)
	}
	res := <-wait
	if res.Err != nil {
		return fmt.Errorf("%w: waiting for the probe container: %v", sandbox.ErrUnsupported, res.Err)
	}
	code := res.StatusCode
	stdout, stderr := r.logs(ctx, cid)
	if code != 0 {
		return fmt.Errorf("%w: docker %s probe container exited %d: %s", sandbox.ErrUnsupported, r.version, code, strings.TrimSpace(stderr+" "+stdout))
	}
	if err := wire.ParseProbe(stdout); err != nil {
		return fmt.Errorf("%w: docker %s probe container is not sealed: %v", sandbox.ErrUnsupported, r.version, err)
	}
	r.Logf("%s works here (dockerd %s, userns-remap %v)", r.Name(), r.version, r.userns)
	return nil
}

// logs returns what a container's pid 1 wrote (bounded).
func (r *Runtime) logs(ctx context.Context, cid string) (stdout, stderr string) {
	rc, err := r.cli.ContainerLogs(ctx, cid, "20")
	if err != nil {
		return "", err.Error()
	}
	defer rc.Close()
	var o, e bytes.Buffer
	_, _ = engine.Demux(&o, &e, io.LimitReader(rc, 64<<10))
	return o.String(), e.String()
}

// createContainer lays out the state directory s and creates (does not
// start) the sealed container for spec running args. On error nothing is
// left but s.dir, which the caller removes.
func (r *Runtime) createContainer(ctx context.Context, id string, s state, spec sandbox.Spec, sl *seal.Seal, owner string, args []string) (string, error) {
	p, err := prepare(s, spec, sl, r.helper)
	if err != nil {
		return "", err
	}
	if err := container.WriteOwnerFile(s.dir, owner); err != nil {
		return "", err
	}
	img, err := r.ensureImage(ctx, p.symlinks)
	if err != nil {
		return "", err
	}
	cfg, hc, err := containerConfig(spec, sl, p, containerOpts{id: id, image: img, state: s, owner: owner,
		runtime: r.opts.Runtime, runsc: r.runsc, hostCPUs: r.ncpu, cpuset: sandbox.CPUList(r.cpus.Pick(spec.Limits.CPUs)), args: args})
	if err != nil {
		return "", err
	}
	res, err := r.cli.ContainerCreate(ctx, "ironclaw-"+id, cfg, hc)
	if err != nil {
		return "", err
	}
	for _, w := range res.Warnings {
		r.Logf("%s: dockerd: %s", id, w)
	}
	return res.ID, nil
}

// removeContainer kills and removes a container with its anonymous
// volumes; a container already gone is not an error.
func (r *Runtime) removeContainer(ctx context.Context, cid string) error {
	err := r.cli.ContainerRemove(ctx, cid, true, true)
	if err != nil && !errors.Is(err, engine.ErrNotFound) {
		return err
	}
	return nil
}

// collect removes the containers and state directories of daemons (this
// process or an earlier one) that are gone; a live owner's are never
// touched. Containers of other hosts' daemons cannot appear: only a local
// daemon is accepted.
func (r *Runtime) collect(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	list, err := r.cli.ContainerList(ctx, true, ownerLabel)
	if err != nil {
		r.Logf("listing leftover containers: %v", err)
	} else {
		for _, c := range list {
			if sandbox.OwnerAlive(c.Labels[ownerLabel]) {
				continue
			}
			if err := r.removeContainer(ctx, c.ID); err != nil {
				r.Logf("removing leftover container %s: %v", c.ID, err)
				continue
			}
			if dir := c.Labels[stateLabel]; filepath.Dir(dir) == r.bundles {
				_ = os.RemoveAll(dir)
			}
			r.Logf("collected leftover sandbox %s", c.Labels[sandboxLabel])
		}
	}
	// The state directories of containers that went above, or never
	// existed.
	r.CollectDirs(r.bundles, nil)
}
