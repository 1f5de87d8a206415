// Package sandbox defines what a sandbox is (Spec) and what every backend
// must do with one (Runtime and Sandbox). Backends live in sub-packages
// (native today; oci and docker later) and are proven against the same
// behaviour and containment tests.
package sandbox

import (
	"fmt"
	"path"
	"strings"
	"time"
)

// UID and GID are the identity every sandboxed command runs as, on every
// backend. 65532 is the conventional "nonroot" id of distroless images.
const (
	UID = 65532
	GID = 65532
)

// Paths every sandbox provides. Only these two are writable.
const (
	WorkspaceDir = "/workspace"
	TmpDir       = "/tmp"
)

// The trust inside every sandbox given Spec.Trust: TrustDir holds
// TrustBundle (the host's system CA bundle and the daemon's egress CA) and
// TrustCA (the daemon's egress CA alone), read-only. The host-toolchain
// view also links /etc/ssl/certs/ca-certificates.crt to TrustBundle.
const (
	TrustDir    = "/.ironclaw-ca"
	TrustBundle = TrustDir + "/ca-certificates.crt"
	TrustCA     = TrustDir + "/ironclaw-egress-ca.crt"
	// SystemBundle is where Debian-like systems keep theirs; the
	// host-toolchain view's is a link to TrustBundle.
	// (rootfs.SystemBundle is the same path; seal's tests hold them equal).
	SystemBundle = "/etc/ssl/certs/ca-certificates.crt"
)

// TrustEnv points every common TLS client inside at the trust files:
// OpenSSL (curl, git, python's ssl, Go's crypto/x509), curl, git,
// python requests, and Node (which adds NODE_EXTRA_CA_CERTS to its own
// roots).
var TrustEnv = []string{
	"SSL_CERT_FILE=" + TrustBundle,
	"CURL_CA_BUNDLE=" + TrustBundle,
	"GIT_SSL_CAINFO=" + TrustBundle,
	"REQUESTS_CA_BUNDLE=" + TrustBundle,
	"NODE_EXTRA_CA_CERTS=" + TrustCA,
}

// Spec describes one sandbox. The zero value plus DefaultLimits is a valid,
// fully sealed sandbox over the host-toolchain root. A Spec is plain data: it
// is validated by Validate and never mutated by a backend.
type Spec struct {
	// Root is the root filesystem. The zero value is the host-toolchain view.
	Root Root `json:"root"`
	// Env holds extra "KEY=VALUE" pairs for every command. Nothing from the
	// daemon's own environment is ever passed in.
	Env []string `json:"env,omitempty"`
	// Cwd is the default working directory of commands; "" means /workspace.
	Cwd string `json:"cwd,omitempty"`
	// Hostname inside the sandbox; "" means "sandbox".
	Hostname string `json:"hostname,omitempty"`
	// Limits are hard limits; zero fields are filled by WithDefaults: from
	// DefaultLimits, except the tmpfs sizes, which scale down to fit the
	// memory limit (see TmpfsBudget).
	Limits Limits `json:"limits"`
	// Workspace, when set, is a host directory bound read-write at
	// /workspace instead of a private size-limited tmpfs. Files created there
	// belong to the sandbox's mapped host uid.
	Workspace string `json:"workspace,omitempty"`
	// Mounts are extra host paths bound into the sandbox.
	Mounts []Mount `json:"mounts,omitempty"`
	// Network says which loopback ports are reachable inside. The sandbox
	// never has a network interface other than lo.
	Network Network `json:"network"`
	// Gate lists the programs (names looked up in PATH, or absolute paths)
	// that run only as an approved exec (ExecRequest.Gate); every path of
	// the root that reaches one is masked by a stub (package gate). The
	// daemon sets it from the policy's exec.gate.
	Gate []string `json:"gate,omitempty"`
	// Trust, when set, is a host directory holding the files of TrustDir
	// (the daemon sets it when it runs the egress broker): at most
	// MaxTrustFiles regular files of at most MaxTrustFileBytes each, which
	// every backend shows read-only at TrustDir.
	Trust string `json:"trust,omitempty"`
}

// Bounds of Spec.Trust.
const (
	MaxTrustFiles     = 8
	MaxTrustFileBytes = 4 << 20
)

// RootKind names a kind of root filesystem.
type RootKind string

const (
	// RootHostView is a fresh root with read-only binds of the host's /usr,
	// /bin, /sbin, /lib* and a synthetic /etc; no host data, sockets or home.
	RootHostView RootKind = ""
	// RootDirectory uses a host directory, read-only, as the root.
	RootDirectory RootKind = "dir"
)

// Root selects the root filesystem.
type Root struct {
	Kind RootKind `json:"kind,omitempty"`
	// Path is the directory for RootDirectory.
	Path string `json:"path,omitempty"`
}

// Mount binds a host path into the sandbox.
type Mount struct {
	Source   string `json:"source"` // absolute host path
	Target   string `json:"target"` // absolute path inside; a new top-level directory, or under /workspace or /tmp
	ReadOnly bool   `json:"read_only,omitempty"`
}

// Network lists the loopback TCP ports the sandbox may use. Everything else
// (other ports, host addresses, DNS) is unreachable by construction.
type Network struct {
	// ExposedTCP are ports on which the daemon serves inside the sandbox's
	// loopback (model proxy, egress broker): the sandbox may connect to them.
	ExposedTCP []uint16 `json:"exposed_tcp,omitempty"`
	// LoopbackTCP are ports the sandbox's own code may bind and connect to,
	// for example a test server. Empty by default.
	LoopbackTCP []uint16 `json:"loopback_tcp,omitempty"`
}

// Limits are per-sandbox hard limits.
type Limits struct {
	MemoryBytes    int64         `json:"memory_bytes"`    // memory incl. tmpfs pages; no swap; see TmpfsBudget
	Pids           int64         `json:"pids"`            // processes and threads of the workload; pid 1 may have InitPidsReserve more
	CPUs           float64       `json:"cpus"`            // CPU bandwidth, in CPUs
	Timeout        time.Duration `json:"timeout_ns"`      // wall time per exec
	OutputBytes    int64         `json:"output_bytes"`    // stdout+stderr bytes kept per exec; the rest is dropped and reported
	WorkspaceBytes int64         `json:"workspace_bytes"` // size of the /workspace tmpfs
	TmpBytes       int64         `json:"tmp_bytes"`       // size of the /tmp tmpfs
	OpenFiles      int64         `json:"open_files"`      // RLIMIT_NOFILE
}

// DefaultLimits are used for every zero field of Spec.Limits. The default
// workspace and tmp sizes are the most WithDefaults gives; with a smaller
// memory limit they shrink to fit it (see TmpfsBudget). Together they use
// exactly the tmpfs budget of the default memory limit.
var DefaultLimits = Limits{
	MemoryBytes:    512 << 20,
	Pids:           256,
	CPUs:           1,
	Timeout:        30 * time.Second,
	OutputBytes:    4 << 20,
	WorkspaceBytes: 256 << 20,
	TmpBytes:       128 << 20,
	OpenFiles:      1024,
}

// minMemory is the smallest memory limit.
const minMemory = 8 << 20

// minProcessMemory is the least memory TmpfsBudget keeps for processes.
const minProcessMemory = 4 << 20

// TmpfsBudget is how much of a memory limit the /workspace and /tmp
// tmpfs may take together: a quarter of it (at least 4MiB) stays for
// processes. tmpfs pages are charged to the sandbox's memory, and the
// kernel cannot reclaim them, so tmpfs areas as large as the memory limit
// would let a full /workspace leave no memory for anything else, the
// sandbox's pid 1 included. It is 0 when memory is below 5.33MiB.
func TmpfsBudget(memory int64) int64 {
	return max(memory-max(memory/4, minProcessMemory), 0)
}

// MaxMounts bounds Spec.Mounts.
const MaxMounts = 32

// MaxLimits bound what a Spec may ask for; they exist so a typo ("--memory
// 512G") is an error instead of an unlimited sandbox.
var MaxLimits = Limits{
	MemoryBytes:    64 << 30,
	Pids:           65536,
	CPUs:           512,
	Timeout:        24 * time.Hour,
	OutputBytes:    1 << 30,
	WorkspaceBytes: 256 << 30,
	TmpBytes:       64 << 30,
	OpenFiles:      1 << 20,
}

// WithDefaults returns a copy of s whose zero fields hold their defaults.
func (s Spec) WithDefaults() Spec {
	l := &s.Limits
	d := DefaultLimits
	if l.MemoryBytes == 0 {
		l.MemoryBytes = d.MemoryBytes
	}
	if l.Pids == 0 {
		l.Pids = d.Pids
	}
	if l.CPUs == 0 {
		l.CPUs = d.CPUs
	}
	if l.Timeout == 0 {
		l.Timeout = d.Timeout
	}
	if l.OutputBytes == 0 {
		l.OutputBytes = d.OutputBytes
	}
	l.WorkspaceBytes, l.TmpBytes = fitTmpfs(l.MemoryBytes, l.WorkspaceBytes, l.TmpBytes, s.Workspace == "")
	if l.OpenFiles == 0 {
		l.OpenFiles = d.OpenFiles
	}
	if s.Cwd == "" {
		s.Cwd = WorkspaceDir
	}
	if s.Hostname == "" {
		s.Hostname = "sandbox"
	}
	s.Env = append([]string(nil), s.Env...)
	s.Mounts = append([]Mount(nil), s.Mounts...)
	s.Gate = append([]string(nil), s.Gate...)
	return s
}

// fitTmpfs fills zero tmpfs sizes so that they fit memory's TmpfsBudget
// together with the ones given: the default workspace and tmp sizes, or
// less (the workspace two thirds and tmp one third of the budget when both
// are zero; one takes what the other leaves). A workspace that is a host
// directory (wsTmpfs false) takes no budget. Sizes that were given are
// kept as they are (Validate judges them), and a zero that finds no room
// stays zero, for Validate to report.
func fitTmpfs(memory, ws, tmp int64, wsTmpfs bool) (int64, int64) {
	d := DefaultLimits
	budget := TmpfsBudget(memory)
	if memory <= 0 || memory > MaxLimits.MemoryBytes {
		budget = 0 // Validate refuses the memory limit itself
	}
	switch {
	case !wsTmpfs:
		if ws == 0 {
			ws = d.WorkspaceBytes // unused: /workspace is the host directory
		}
		if tmp == 0 {
			tmp = min(d.TmpBytes, budget)
		}
	case ws == 0 && tmp == 0:
		ws = min(d.WorkspaceBytes, budget*2/3)
		tmp = min(d.TmpBytes, budget-ws)
	case ws == 0:
		ws = min(d.WorkspaceBytes, max(budget-tmp, 0))
	case tmp == 0:
		tmp = min(d.TmpBytes, max(budget-ws, 0))
	}
	return ws, tmp
}

// validEnvKey: a letter or underscore, then letters, digits, underscores.
func validEnvKey(k string) bool {
	for i, c := range k {
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return k != ""
}

// validHostname: one DNS label, 1-63 letters, digits and inner hyphens.
func validHostname(h string) bool {
	if h == "" || len(h) > 63 || h[0] == '-' || h[len(h)-1] == '-' {
		return false
	}
	for _, c := range h {
		if !(c == '-' || c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z') {
			return false
		}
	}
	return true
}

var (
	reservedTop = map[string]bool{"/": true, "/proc": true, "/dev": true, "/etc": true, "/sys": true, "/workspace": true, "/tmp": true, "/usr": true, "/bin": true, "/sbin": true, "/lib": true, "/lib64": true, "/lib32": true, "/libx32": true, TrustDir: true}
)

// Validate checks a Spec (after WithDefaults) and returns an error wrapping
// ErrInvalidSpec that names the first bad field.
func (s Spec) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidSpec, fmt.Sprintf(format, a...))
	}
	switch s.Root.Kind {
	case RootHostView:
		if s.Root.Path != "" {
			return bad("root: a path is only allowed with a directory root")
		}
	case RootDirectory:
		if !path.IsAbs(s.Root.Path) {
			return bad("root: directory %q must be an absolute path", s.Root.Path)
		}
	default:
		return bad("root: unknown kind %q", s.Root.Kind)
	}
	for _, kv := range s.Env {
		if err := ValidateEnv(kv); err != nil {
			return bad("env: %v", err)
		}
	}
	if !path.IsAbs(s.Cwd) || path.Clean(s.Cwd) != s.Cwd {
		return bad("cwd %q must be a clean absolute path", s.Cwd)
	}
	if !validHostname(s.Hostname) {
		return bad("hostname %q is not a valid host name", s.Hostname)
	}
	if s.Workspace != "" && !path.IsAbs(s.Workspace) {
		return bad("workspace %q must be an absolute host path", s.Workspace)
	}
	if s.Trust != "" && !path.IsAbs(s.Trust) {
		return bad("trust %q must be an absolute host path", s.Trust)
	}
	if len(s.Mounts) > MaxMounts {
		return bad("%d mounts is more than the %d allowed", len(s.Mounts), MaxMounts)
	}
	for _, m := range s.Mounts {
		if !path.IsAbs(m.Source) {
			return bad("mount source %q must be an absolute host path", m.Source)
		}
		t := path.Clean(m.Target)
		if !path.IsAbs(m.Target) || t != m.Target {
			return bad("mount target %q must be a clean absolute path", m.Target)
		}
		if reservedTop[t] || strings.HasPrefix(t, "/proc/") || strings.HasPrefix(t, "/dev/") || strings.HasPrefix(t, "/etc/") || strings.HasPrefix(t, "/sys/") {
			return bad("mount target %q is reserved", m.Target)
		}
		top := "/" + strings.SplitN(t[1:], "/", 2)[0]
		if top != t && top != WorkspaceDir && top != TmpDir {
			return bad("mount target %q must be a new top-level directory or lie under /workspace or /tmp", m.Target)
		}
	}
	seen := map[uint16]bool{}
	for _, p := range append(append([]uint16(nil), s.Network.ExposedTCP...), s.Network.LoopbackTCP...) {
		if p == 0 {
			return bad("network: port 0 is not a port")
		}
		if seen[p] {
			return bad("network: port %d is listed twice (exposed ports belong to the daemon)", p)
		}
		seen[p] = true
	}
	if len(seen) > MaxMounts {
		return bad("network: %d ports is more than the %d allowed", len(seen), MaxMounts)
	}
	if err := validGate(s.Gate); err != nil {
		return bad("gate: %v", err)
	}
	if l := s.Limits; l.MemoryBytes >= minMemory && l.MemoryBytes <= MaxLimits.MemoryBytes {
		budget := FormatBytes(TmpfsBudget(l.MemoryBytes))
		switch {
		case l.TmpBytes == 0 && l.WorkspaceBytes > 0 && s.Workspace == "":
			return bad("workspace size %s leaves no room for /tmp in memory %s (at most %s of tmpfs fit; tmpfs pages count against the memory limit)", FormatBytes(l.WorkspaceBytes), FormatBytes(l.MemoryBytes), budget)
		case l.WorkspaceBytes == 0 && l.TmpBytes > 0 && s.Workspace == "":
			return bad("tmp size %s leaves no room for /workspace in memory %s (at most %s of tmpfs fit; tmpfs pages count against the memory limit)", FormatBytes(l.TmpBytes), FormatBytes(l.MemoryBytes), budget)
		}
	}
	if err := s.Limits.Validate(); err != nil {
		return err
	}
	return s.Limits.ValidateTmpfs(s.Workspace == "")
}

// Changed is l with a running sandbox's limits change applied: each
// nonzero memory, pids, CPU, timeout or output limit of change replaces
// l's; the rest of l stays (the sizes fixed at create are not a change's
// to make). The session and every backend that changes limits in place
// merge a change this one way.
func (l Limits) Changed(change Limits) Limits {
	if change.MemoryBytes != 0 {
		l.MemoryBytes = change.MemoryBytes
	}
	if change.Pids != 0 {
		l.Pids = change.Pids
	}
	if change.CPUs != 0 {
		l.CPUs = change.CPUs
	}
	if change.Timeout != 0 {
		l.Timeout = change.Timeout
	}
	if change.OutputBytes != 0 {
		l.OutputBytes = change.OutputBytes
	}
	return l
}

// ValidateTmpfs checks that the tmpfs areas fit the memory limit: tmp and,
// when wsTmpfs (the workspace is not a host directory), the workspace,
// together at most TmpfsBudget(MemoryBytes). The error wraps
// ErrInvalidSpec and says how much would fit.
func (l Limits) ValidateTmpfs(wsTmpfs bool) error {
	budget := TmpfsBudget(l.MemoryBytes)
	used, what := l.TmpBytes, fmt.Sprintf("tmp size %s does", FormatBytes(l.TmpBytes))
	if wsTmpfs {
		used += l.WorkspaceBytes
		what = fmt.Sprintf("workspace size %s and tmp size %s do", FormatBytes(l.WorkspaceBytes), FormatBytes(l.TmpBytes))
	}
	if used <= budget {
		return nil
	}
	return fmt.Errorf("%w: %s not fit in memory %s: tmpfs pages count against the memory limit, and %s of it stays for processes, so at most %s of tmpfs fit (ask for more memory or smaller areas; a size left unset shrinks to fit)",
		ErrInvalidSpec, what, FormatBytes(l.MemoryBytes), FormatBytes(l.MemoryBytes-budget), FormatBytes(budget))
}

// Validate checks every limit is positive and within MaxLimits.
func (l Limits) Validate() error {
	m := MaxLimits
	type check struct {
		name   string
		v, max float64
		show   string
	}
	checks := []check{
		{"memory", float64(l.MemoryBytes), float64(m.MemoryBytes), FormatBytes(l.MemoryBytes)},
		{"pids", float64(l.Pids), float64(m.Pids), fmt.Sprint(l.Pids)},
		{"cpus", l.CPUs, m.CPUs, fmt.Sprint(l.CPUs)},
		{"timeout", float64(l.Timeout), float64(m.Timeout), l.Timeout.String()},
		{"output", float64(l.OutputBytes), float64(m.OutputBytes), FormatBytes(l.OutputBytes)},
		{"workspace size", float64(l.WorkspaceBytes), float64(m.WorkspaceBytes), FormatBytes(l.WorkspaceBytes)},
		{"tmp size", float64(l.TmpBytes), float64(m.TmpBytes), FormatBytes(l.TmpBytes)},
		{"open files", float64(l.OpenFiles), float64(m.OpenFiles), fmt.Sprint(l.OpenFiles)},
	}
	if l.MemoryBytes > 0 && l.MemoryBytes < minMemory {
		// First: the tmpfs sizes that follow from it would be zero too.
		return fmt.Errorf("%w: memory %s is below the 8MiB minimum", ErrInvalidSpec, FormatBytes(l.MemoryBytes))
	}
	for _, c := range checks {
		if c.v <= 0 {
			return fmt.Errorf("%w: %s must be positive, got %s", ErrInvalidSpec, c.name, c.show)
		}
		if c.v > c.max {
			return fmt.Errorf("%w: %s %s is above the maximum", ErrInvalidSpec, c.name, c.show)
		}
	}

	if l.Pids < 4 {
		return fmt.Errorf("%w: pids %d is below the minimum of 4", ErrInvalidSpec, l.Pids)
	}
	if l.CPUs < 0.01 {
		return fmt.Errorf("%w: cpus %v is below the minimum of 0.01", ErrInvalidSpec, l.CPUs)
	}
	if l.OpenFiles < 16 {
		return fmt.Errorf("%w: open files %d is below the minimum of 16", ErrInvalidSpec, l.OpenFiles)
	}
	return nil
}

// ValidateEnv checks one "KEY=VALUE" pair.
func ValidateEnv(kv string) error {
	k, v, ok := strings.Cut(kv, "=")
	if !ok {
		return fmt.Errorf("%q is not KEY=VALUE", kv)
	}
	if !validEnvKey(k) {
		return fmt.Errorf("%q is not a valid variable name", k)
	}
	if strings.ContainsRune(v, 0) {
		return fmt.Errorf("value of %s contains a NUL byte", k)
	}
	return nil
}
