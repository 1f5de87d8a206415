package secrets

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ironclaw/ironclaw/internal/egress"
	"github.com/ironclaw/ironclaw/internal/errdefs"
)

// Bounds.
const (
	MaxSecrets     = 256      // secrets in all, the policy's included
	MaxHosts       = 16       // hosts (egress rules) per secret
	MaxPerSandbox  = 16       // secrets one sandbox may ask for
	MaxValueBytes  = 16 << 10 // one value
	MaxFormatBytes = 256      // a Format, "{value}" included
	maxNameBytes   = 64
	maxEnvBytes    = 128
	maxHeaderBytes = 64
)

// Grant modes.
const (
	GrantAsk = "ask" // one secret.use approval per sandbox (the default)
	GrantAll = "all" // every sandbox that asks gets it at once
)

// Sources.
const (
	SourcePolicy = "policy" // the policy file's secrets: section, read-only
	SourceAPI    = "api"    // PUT /v1/secrets/{name}
)

// Defaults.
const (
	DefaultHeader = "Authorization"
	DefaultFormat = "Bearer {value}"
	// ValueMark is where Format puts the value.
	ValueMark = "{value}"
	// PlaceholderPrefix begins every placeholder.
	PlaceholderPrefix = "ironclaw-secret-"
)

// Errors; check them with errors.Is.
var (
	ErrInvalid  = errdefs.New(errdefs.ErrInvalidArgument, "invalid secret")
	ErrNotFound = errdefs.New(errdefs.ErrNotFound, "secret not found")
	ErrReadOnly = errdefs.New(errdefs.ErrConflict, "secret comes from the policy file")
	ErrTooMany  = errdefs.New(errdefs.ErrLimitExceeded, "too many secrets")
	// ErrKey is a key file that cannot be used (see LoadKey), or a
	// secrets file the key does not open.
	ErrKey = errdefs.New(errdefs.ErrInvalidArgument, "secrets key")
	// ErrUnavailable is a grant that cannot be asked for (no gateway).
	ErrUnavailable = errdefs.New(errdefs.ErrUnavailable, "secret grants unavailable")
)

// Meta is what is known of a secret besides its value: everything the API
// lists.
type Meta struct {
	// Name is 1-64 of [a-z0-9_-], starting with a letter or digit.
	Name string `json:"name"`
	// Hosts are egress rules ("api.github.com", "*.example.com:443"):
	// where the broker swaps the placeholder for the value. 1-MaxHosts,
	// stored normalised.
	Hosts []string `json:"hosts"`
	// Env is the variable a granted sandbox sees holding its placeholder
	// (default: Name upper-cased, '-' as '_').
	Env string `json:"env"`
	// Header is the header whose value, when it is the placeholder alone,
	// becomes Format with the value in it (default Authorization);
	// elsewhere a placeholder is replaced by the bare value.
	Header string `json:"header"`
	// Format holds ValueMark exactly once (default "Bearer {value}").
	Format string `json:"format"`
	// Grant is GrantAsk (default) or GrantAll.
	Grant string `json:"grant"`
	// Source is SourcePolicy or SourceAPI; set by the store.
	Source string `json:"source"`
	// Version counts the sets of this secret (1 at the first); set by
	// the store.
	Version int64 `json:"version"`
	// UpdatedAt is the last set; set by the store.
	UpdatedAt time.Time `json:"updated_at"`
}

// The patterns compile on first use, not at init: every process of the
// binary (the CLI, each sandbox's pid 1) links this package, few check a
// secret.
var (
	nameRE   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`) })
	envRE    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })
	headerRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$") })
)

// CheckName validates a secret's name.
func CheckName(name string) error {
	if len(name) > maxNameBytes || !nameRE().MatchString(name) {
		return fmt.Errorf("%w: name %q: want 1-64 of a-z, 0-9, _ and -, starting with a letter or digit", ErrInvalid, clip(name))
	}
	return nil
}

// reservedEnv are variables the daemon sets itself or that change how
// programs load code or trust servers: a secret's placeholder must not
// replace them.
var reservedEnv = []string{
	"PATH", "HOME", "USER", "SHELL", "PWD", "TERM", "TMPDIR", "HOSTNAME", "IFS", "ENV", "BASH_ENV",
	"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "FTP_PROXY",
	"SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO",
	"NODE_OPTIONS", "PYTHONPATH", "PYTHONSTARTUP", "PERL5LIB", "RUBYOPT",
	"OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL",
}

// reservedEnvPrefixes are families of such variables.
var reservedEnvPrefixes = []string{"IRONCLAW_", "LD_", "GCONV_", "DYLD_"}

// reservedHeaders are headers the broker or HTTP itself owns.
var reservedHeaders = []string{
	"host", "connection", "content-length", "transfer-encoding", "te", "trailer", "upgrade", "keep-alive",
	"proxy-authorization", "proxy-authenticate", "proxy-connection", "expect",
}

// Normalize validates m, applies the defaults and normalises the hosts.
// Source, Version and UpdatedAt are the store's and are not checked.
func (m Meta) Normalize() (Meta, error) {
	if err := CheckName(m.Name); err != nil {
		return Meta{}, err
	}
	if len(m.Hosts) == 0 {
		return Meta{}, fmt.Errorf("%w: %s: give at least one host (where the value may go)", ErrInvalid, m.Name)
	}
	if len(m.Hosts) > MaxHosts {
		return Meta{}, fmt.Errorf("%w: %s: %d hosts, at most %d", ErrInvalid, m.Name, len(m.Hosts), MaxHosts)
	}
	hosts := make([]string, 0, len(m.Hosts))
	for _, h := range m.Hosts {
		r, err := egress.ParseRule(h)
		if err != nil {
			return Meta{}, fmt.Errorf("%w: %s: host %q: %v", ErrInvalid, m.Name, clip(h), err)
		}
		if s := r.String(); !slices.Contains(hosts, s) {
			hosts = append(hosts, s)
		}
	}
	m.Hosts = hosts
	if m.Env == "" {
		m.Env = strings.ToUpper(strings.ReplaceAll(m.Name, "-", "_"))
		if m.Env[0] >= '0' && m.Env[0] <= '9' {
			m.Env = "_" + m.Env
		}
	}
	if len(m.Env) > maxEnvBytes || !envRE().MatchString(m.Env) {
		return Meta{}, fmt.Errorf("%w: %s: env %q: want a variable name ([A-Za-z_][A-Za-z0-9_]*, at most %d bytes)", ErrInvalid, m.Name, clip(m.Env), maxEnvBytes)
	}
	up := strings.ToUpper(m.Env)
	if slices.Contains(reservedEnv, up) || slices.ContainsFunc(reservedEnvPrefixes, func(p string) bool { return strings.HasPrefix(up, p) }) {
		return Meta{}, fmt.Errorf("%w: %s: env %s is set by the daemon or changes how programs run; pick another name", ErrInvalid, m.Name, m.Env)
	}
	if m.Header == "" {
		m.Header = DefaultHeader
	}
	if len(m.Header) > maxHeaderBytes || !headerRE().MatchString(m.Header) {
		return Meta{}, fmt.Errorf("%w: %s: header %q is not a header name", ErrInvalid, m.Name, clip(m.Header))
	}
	if slices.Contains(reservedHeaders, strings.ToLower(m.Header)) {
		return Meta{}, fmt.Errorf("%w: %s: header %s belongs to HTTP or the broker", ErrInvalid, m.Name, m.Header)
	}
	if m.Format == "" {
		m.Format = DefaultFormat
	}
	if len(m.Format) > MaxFormatBytes || strings.Count(m.Format, ValueMark) != 1 || !headerSafe(m.Format) {
		return Meta{}, fmt.Errorf("%w: %s: format %q: want printable text holding %s exactly once (at most %d bytes)", ErrInvalid, m.Name, clip(m.Format), ValueMark, MaxFormatBytes)
	}
	switch m.Grant {
	case "":
		m.Grant = GrantAsk
	case GrantAsk, GrantAll:
	default:
		return Meta{}, fmt.Errorf("%w: %s: grant %q: want ask or all", ErrInvalid, m.Name, clip(m.Grant))
	}
	return m, nil
}

// CheckValue validates a value: 1-MaxValueBytes of what a header value may
// hold (visible ASCII and Latin-1 bytes, spaces and tabs; no line breaks or
// other control bytes, which would split the request). The error never
// quotes the value.
func CheckValue(v []byte) error {
	if len(v) == 0 {
		return fmt.Errorf("%w: the value is empty", ErrInvalid)
	}
	if len(v) > MaxValueBytes {
		return fmt.Errorf("%w: the value is %d bytes, at most %d", ErrInvalid, len(v), MaxValueBytes)
	}
	for i, c := range v {
		if (c < 0x20 && c != '\t') || c == 0x7f {
			return fmt.Errorf("%w: the value holds a control byte (0x%02x at offset %d): a line break or NUL cannot go into a header (a trailing newline from a file or echo? strip it)", ErrInvalid, c, i)
		}
	}
	return nil
}

func headerSafe(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// clip bounds what an error quotes of bad input.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// admits reports whether one of m's hosts admits host:port.
func (m Meta) admits(host string, port int) bool {
	list, err := egress.NewAllowlist(m.Hosts...)
	return err == nil && list.Allows(host, port)
}
