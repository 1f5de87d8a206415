package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Rule admits one host (or family of hosts) at one port (or at 80 and 443).
//
// Host is a lower-case DNS name ("api.github.com"), a wildcard "*.pypi.org"
// matching any name strictly below pypi.org (files.pypi.org, a.b.pypi.org,
// but not pypi.org itself and not evilpypi.org), or a literal IP address in
// canonical form ("203.0.113.7", "2001:db8::1"), which is the only way to
// admit an IP target. Port 0 means 80 and 443; any other value admits
// exactly that port.
type Rule struct {
	Host string
	Port int
}

// String is the rule in the syntax ParseRule reads.
func (r Rule) String() string {
	if r.Port == 0 {
		return r.Host
	}
	if strings.Contains(r.Host, ":") {
		return "[" + r.Host + "]:" + strconv.Itoa(r.Port)
	}
	return r.Host + ":" + strconv.Itoa(r.Port)
}

// Match reports whether the rule admits host (already normalised, see
// normalizeHost) at port.
func (r Rule) Match(host string, port int) bool {
	if r.Port == 0 {
		if port != 80 && port != 443 {
			return false
		}
	} else if port != r.Port {
		return false
	}
	if suffix, ok := strings.CutPrefix(r.Host, "*"); ok {
		// suffix is ".pypi.org": require at least one label before it.
		return len(host) > len(suffix) && strings.HasSuffix(host, suffix) && host[len(host)-len(suffix)-1] != '.'
	}
	return host == r.Host
}

// ParseRule parses "host", "host:port", "*.domain", "*.domain:port", an IP
// address, "[v6]:port" or a bare IPv6 address. It lower-cases the host and
// drops one trailing dot. It rejects empty rules, a lone "*", wildcards
// anywhere but a leading "*." or over a single label ("*.com"), wildcard IPs,
// URLs (schemes, paths, userinfo), zones, ports outside 1-65535, and names
// whose last label is numeric.
func ParseRule(s string) (Rule, error) {
	in := s
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" {
		return Rule{}, errors.New("egress: empty rule")
	}
	if strings.Contains(s, "://") || strings.ContainsAny(s, "/?#@ \t\r\n") {
		return Rule{}, fmt.Errorf("egress: rule %q: want host, host:port or *.domain[:port], not a URL", in)
	}
	host, portStr, err := splitHostPortOpt(s)
	if err != nil {
		return Rule{}, fmt.Errorf("egress: rule %q: %v", in, err)
	}
	port := 0
	if portStr != "" {
		if port, err = parsePort(portStr); err != nil {
			return Rule{}, fmt.Errorf("egress: rule %q: %v", in, err)
		}
	}
	var norm string
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		if _, err := netip.ParseAddr(rest); err == nil {
			return Rule{}, fmt.Errorf("egress: rule %q: a wildcard cannot cover IP addresses", in)
		}
		n, _, err := normalizeHost(rest)
		if err != nil {
			return Rule{}, fmt.Errorf("egress: rule %q: %v", in, err)
		}
		if !strings.Contains(n, ".") {
			return Rule{}, fmt.Errorf("egress: rule %q: a wildcard must cover a domain with at least two labels", in)
		}
		norm = "*." + n
	} else {
		if norm, _, err = normalizeHost(host); err != nil {
			return Rule{}, fmt.Errorf("egress: rule %q: %v", in, err)
		}
	}
	return Rule{Host: norm, Port: port}, nil
}

// splitHostPortOpt splits "host[:port]", "[v6][:port]" or a bare v6 address.
func splitHostPortOpt(s string) (host, port string, err error) {
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", "", errors.New("missing ]")
		}
		host, rest := s[1:end], s[end+1:]
		if _, err := netip.ParseAddr(host); err != nil || !strings.Contains(host, ":") {
			return "", "", errors.New("brackets must hold an IPv6 address")
		}
		if rest == "" {
			return host, "", nil
		}
		p, ok := strings.CutPrefix(rest, ":")
		if !ok || p == "" {
			return "", "", errors.New("bad text after ]")
		}
		return host, p, nil
	}
	switch strings.Count(s, ":") {
	case 0:
		return s, "", nil
	case 1:
		h, p, _ := strings.Cut(s, ":")
		if h == "" || p == "" {
			return "", "", errors.New("empty host or port")
		}
		return h, p, nil
	default:
		return s, "", nil // bare IPv6; normalizeHost validates
	}
}

func parsePort(s string) (int, error) {
	if s == "" || len(s) > 5 || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Errorf("bad port %q", s)
	}
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 65535 {
		return 0, fmt.Errorf("port %q out of range 1-65535", s)
	}
	return p, nil
}

// normalizeHost lower-cases and validates a target host (no wildcard). For
// an IP address it returns the canonical, unmapped form and isIP.
func normalizeHost(h string) (norm string, isIP bool, err error) {
	h = strings.ToLower(h)
	if strings.Contains(h, ":") || strings.Trim(h, "0123456789.") == "" {
		a, err := netip.ParseAddr(h)
		if err != nil {
			return "", false, fmt.Errorf("bad IP address %q", h)
		}
		if a.Zone() != "" {
			return "", false, fmt.Errorf("IP address %q has a zone", h)
		}
		return a.Unmap().String(), true, nil
	}
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 253 {
		return "", false, fmt.Errorf("bad host name %q", h)
	}
	labels := strings.Split(h, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return "", false, fmt.Errorf("bad host name %q", h)
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return "", false, fmt.Errorf("bad host name %q", h)
			}
		}
	}
	last := labels[len(labels)-1]
	if strings.Trim(last, "0123456789") == "" || strings.HasPrefix(last, "0x") {
		return "", false, fmt.Errorf("host name %q ends in a numeric label", h)
	}
	return h, false, nil
}

// Allowlist is a sandbox's set of rules. It is safe for concurrent use; the
// zero value is an empty list that admits nothing.
type Allowlist struct {
	mu    sync.RWMutex
	rules []Rule
}

// NewAllowlist parses each rule with ParseRule.
func NewAllowlist(rules ...string) (*Allowlist, error) {
	a := &Allowlist{}
	for _, s := range rules {
		r, err := ParseRule(s)
		if err != nil {
			return nil, err
		}
		a.add(r)
	}
	return a, nil
}

// Add adds r after validating and normalising it as ParseRule(r.String())
// would. Adding a rule already present is a no-op.
func (a *Allowlist) Add(r Rule) error {
	if r.Port < 0 || r.Port > 65535 {
		return fmt.Errorf("egress: rule %v: port out of range", r)
	}
	n, err := ParseRule(r.String())
	if err != nil {
		return err
	}
	a.add(n)
	return nil
}

func (a *Allowlist) add(r Rule) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !slices.Contains(a.rules, r) {
		a.rules = append(a.rules, r)
	}
}

// Remove deletes r (compared after normalisation) and reports whether it
// was present.
func (a *Allowlist) Remove(r Rule) bool {
	n, err := ParseRule(r.String())
	if err != nil {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	i := slices.Index(a.rules, n)
	if i < 0 {
		return false
	}
	a.rules = slices.Delete(a.rules, i, i+1)
	return true
}

// Allows reports whether some rule admits host at port. host may be a name
// or an IP address in any case, with or without a trailing dot; invalid
// hosts are never allowed. Wildcard rules never match IP addresses.
func (a *Allowlist) Allows(host string, port int) bool {
	if a == nil {
		return false
	}
	h, _, err := normalizeHost(host)
	if err != nil {
		return false
	}
	return a.allows(h, port)
}

func (a *Allowlist) allows(h string, port int) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	for _, r := range a.rules {
		if r.Match(h, port) {
			return true
		}
	}
	return false
}

// Rules returns a copy of the rules in the order they were added.
func (a *Allowlist) Rules() []Rule {
	if a == nil {
		return nil
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	return slices.Clone(a.rules)
}
