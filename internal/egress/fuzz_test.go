package egress

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// FuzzParseRule: the rules an agent asks for (sandbox create, widen,
// egress.host approvals) and the operator writes (policy, global rules).
// A rule either parses into the normal form, which String spells so that
// it parses back to itself, or is refused with an "egress: " error that
// is one safe line to show: valid UTF-8 without control, bidi or other
// format characters (the input is quoted, never echoed raw).
func FuzzParseRule(f *testing.F) {
	for _, s := range []string{
		"api.github.com", "  API.GitHub.com.  ", "*.pypi.org:443", "*.PyPI.org", "example.com:8080",
		"my_host.internal.example", "localhost", "203.0.113.7", "203.0.113.7:22", "::ffff:203.0.113.7",
		"2001:DB8::1", "[2001:db8::1]:443", "[2001:db8::1]", "a.b:65535",
		"", "*", "*.com", "*.*.example.com", "a*.example.com", "*.1.2.3.4", "http://example.com",
		"example.com:0", "example.com:65536", "example.com:+1", "example.com:0443", "1.2.3", "127.1", "0x7f.1",
		"fe80::1%eth0", "[::1]:", "[::ffff:1.2.3.4]:80", "ex\u0430mple.com", "a.b.\u202e", "a\x1b[2J.com",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRule(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "egress: ") {
				t.Fatalf("ParseRule(%q): error %q does not say it is egress's", s, err)
			}
			if !safeLine(err.Error()) {
				t.Fatalf("ParseRule(%q): error %q is not one safe line", s, err)
			}
			return
		}
		checkRule(t, s, r)
		again, err := ParseRule(r.String())
		if err != nil || again != r {
			t.Fatalf("ParseRule(%q) = %+v, whose String %q parses as %+v, %v", s, r, r.String(), again, err)
		}
	})
}

// safeLine: valid UTF-8, no line break, no control or format (bidi,
// invisible) character. (Stricter textsafe.Check also refuses U+FFFD,
// which strings.ToLower makes of invalid bytes and the errors quote.)
func safeLine(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029' {
			return false
		}
	}
	return true
}

// checkRule asserts what every parsed rule is: a port in range, and a
// lower-case host that is a canonical IP address, a DNS name of valid
// labels, or "*." and such a name of two labels or more.
func checkRule(t *testing.T, in string, r Rule) {
	t.Helper()
	if r.Port < 0 || r.Port > 65535 {
		t.Fatalf("ParseRule(%q): port %d", in, r.Port)
	}
	if r.Host != strings.ToLower(r.Host) || r.Host == "" || len(r.Host) > 255 {
		t.Fatalf("ParseRule(%q): host %q", in, r.Host)
	}
	if a, err := netip.ParseAddr(r.Host); err == nil {
		if a.String() != r.Host || a.Is4In6() || a.Zone() != "" {
			t.Fatalf("ParseRule(%q): IP host %q is not canonical", in, r.Host)
		}
		return
	}
	name, wild := strings.CutPrefix(r.Host, "*.")
	if wild && !strings.Contains(name, ".") {
		t.Fatalf("ParseRule(%q): wildcard %q covers a top-level domain", in, r.Host)
	}
	if strings.HasSuffix(name, ".") {
		t.Fatalf("ParseRule(%q): host %q keeps its trailing dot", in, r.Host)
	}
	for _, l := range strings.Split(name, ".") {
		if l == "" || len(l) > 63 || strings.Trim(l, "abcdefghijklmnopqrstuvwxyz0123456789-_") != "" || l[0] == '-' || l[len(l)-1] == '-' {
			t.Fatalf("ParseRule(%q): host %q has the label %q", in, r.Host, l)
		}
	}
}

// FuzzAllows is the broker's decision for a target the sandbox names
// (any spelling, any port) under one rule. A rule admits exactly:
//
//   - for an exact rule, that host (after lower-casing and one trailing
//     dot) and for an IP rule that address in any spelling netip reads the
//     same (IPv4-mapped IPv6 is the IPv4 address);
//   - for "*.d", names strictly below d, never d itself, never an IP;
//   - at the rule's port, or at 80 and 443 for a rule without one.
//
// and the broker's own reading of "host:port" (parseTarget) agrees.
func FuzzAllows(f *testing.F) {
	for _, s := range []struct {
		rule, host string
		port       int
	}{
		{"*.pypi.org", "files.pypi.org", 443}, {"*.pypi.org", "pypi.org", 443}, {"*.pypi.org", "evilpypi.org", 443},
		{"*.pypi.org", "a.b.PYPI.org.", 80}, {"*.pypi.org", ".pypi.org", 443}, {"*.pypi.org", "x..pypi.org", 443},
		{"api.github.com", "API.GITHUB.COM.", 443}, {"api.github.com", "api.github.com..", 443},
		{"api.github.com", "api.github.com", 22}, {"203.0.113.7:22", "::ffff:203.0.113.7", 22},
		{"203.0.113.7", "203.0.113.007", 80}, {"2001:db8::1", "2001:DB8:0::1", 443}, {"*.1.2.3.4", "5.1.2.3.4", 443},
		{"example.com:8443", "example.com", 8443}, {"example.com", "example.com", -443}, {"example.com", "example.com", 65979},
	} {
		f.Add(s.rule, s.host, s.port)
	}
	f.Fuzz(func(t *testing.T, rule, host string, port int) {
		r, err := ParseRule(rule)
		if err != nil {
			return
		}
		a, err := NewAllowlist(rule)
		if err != nil {
			t.Fatalf("NewAllowlist(%q): %v, though ParseRule took it", rule, err)
		}
		got := a.Allows(host, port)
		if want := admits(r, host, port); got != want {
			t.Fatalf("rule %q (%+v) on %q:%d: Allows = %v, want %v", rule, r, host, port, got, want)
		}
		if port < 1 || port > 65535 {
			return
		}
		th, tp, _, terr := parseTarget(authority(host, port), 0)
		if terr != nil {
			if got {
				t.Fatalf("rule %q admits %q:%d, which the broker cannot read as a target: %v", rule, host, port, terr)
			}
			return
		}
		if tp != port || a.Allows(th, tp) != got {
			t.Fatalf("target %q reads as %q:%d, which the rule %q treats otherwise (Allows %v)", authority(host, port), th, tp, rule, got)
		}
	})
}

// authority is host:port as a CONNECT request names it ([v6]:port).
func authority(host string, port int) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + strconv.Itoa(port)
	}
	return host + ":" + strconv.Itoa(port)
}

// admits is the rule's meaning, written independently of Match.
func admits(r Rule, host string, port int) bool {
	if r.Port == 0 && port != 80 && port != 443 || r.Port != 0 && port != r.Port {
		return false
	}
	h := strings.ToLower(host)
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Zone() != "" {
			return false
		}
		ra, err := netip.ParseAddr(r.Host)
		return err == nil && ra == a.Unmap()
	}
	if strings.Contains(h, ":") || strings.Trim(h, "0123456789.") == "" {
		return false // not an address netip reads, not a name
	}
	h = strings.TrimSuffix(h, ".")
	if !validName(h) {
		return false
	}
	if d, ok := strings.CutPrefix(r.Host, "*."); ok {
		return strings.HasSuffix(h, "."+d) && len(h) > len(d)+1
	}
	return h == r.Host
}

// validName: labels of letters, digits, - and _ (not at a label's ends
// for -), at most 63 bytes each and 253 in all, the last not numeric.
func validName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	labels := strings.Split(h, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' || strings.Trim(l, "abcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
			return false
		}
	}
	last := labels[len(labels)-1]
	return strings.Trim(last, "0123456789") != "" && !strings.HasPrefix(last, "0x")
}

// FuzzParseTarget is the broker reading the target of a CONNECT (or of a
// plain request's Host) that a sandbox sent. What it accepts is a port in
// 1-65535 and a host in normal form (reading it again changes nothing), an
// IP address exactly when netip reads one, never a wildcard; what it
// refuses is refused as a name or address could be named in a rule.
func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{
		"api.github.com:443", "API.GitHub.com.:443", "[2001:db8::1]:443", "203.0.113.7:22", "[::ffff:10.0.0.1]:80",
		"*.pypi.org:443", "example.com", "example.com:", ":443", "[fe80::1%25eth0]:443", "1.2.3:80", "0x7f000001:80",
		"example.com:0", "example.com:65536", "exa mple.com:80", "\u0430pple.com:443",
	} {
		f.Add(s, 0)
		f.Add(s, 443)
	}
	f.Fuzz(func(t *testing.T, target string, defPort int) {
		if defPort != 0 {
			defPort = 80 // the broker's only default (plain HTTP)
		}
		host, port, isIP, err := parseTarget(target, defPort)
		if err != nil {
			return
		}
		if port < 1 || port > 65535 {
			t.Fatalf("parseTarget(%q) port %d", target, port)
		}
		if strings.Contains(host, "*") {
			t.Fatalf("parseTarget(%q) host %q is a wildcard", target, host)
		}
		again, againIP, err := normalizeHost(host)
		if err != nil || again != host || againIP != isIP {
			t.Fatalf("parseTarget(%q) host %q (ip %v) normalises to %q (ip %v), %v", target, host, isIP, again, againIP, err)
		}
		if _, perr := netip.ParseAddr(host); (perr == nil) != isIP {
			t.Fatalf("parseTarget(%q): host %q, isIP %v", target, host, isIP)
		}
		r, err := ParseRule(authority(host, port))
		if err != nil || r.Host != host || r.Port != port {
			t.Fatalf("parseTarget(%q) = %q:%d, which as a rule is %+v, %v", target, host, port, r, err)
		}
	})
}
