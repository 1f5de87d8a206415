package egress

import (
	"net/netip"
	"testing"
)

func TestParseRule(t *testing.T) {
	good := []struct {
		in   string
		want Rule
	}{
		{"api.github.com", Rule{"api.github.com", 0}},
		{"  API.GitHub.com.  ", Rule{"api.github.com", 0}},
		{"*.pypi.org:443", Rule{"*.pypi.org", 443}},
		{"*.PyPI.org", Rule{"*.pypi.org", 0}},
		{"example.com:8080", Rule{"example.com", 8080}},
		{"my_host.internal.example", Rule{"my_host.internal.example", 0}},
		{"localhost", Rule{"localhost", 0}},
		{"203.0.113.7", Rule{"203.0.113.7", 0}},
		{"203.0.113.7:22", Rule{"203.0.113.7", 22}},
		{"::ffff:203.0.113.7", Rule{"203.0.113.7", 0}},
		{"2001:DB8::1", Rule{"2001:db8::1", 0}},
		{"[2001:db8::1]:443", Rule{"2001:db8::1", 443}},
		{"[2001:db8::1]", Rule{"2001:db8::1", 0}},
		{"a.b:65535", Rule{"a.b", 65535}},
	}
	for _, tc := range good {
		got, err := ParseRule(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseRule(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			continue
		}
		// String round-trips.
		again, err := ParseRule(got.String())
		if err != nil || again != got {
			t.Errorf("ParseRule(%q.String()=%q) = %+v, %v", tc.in, got.String(), again, err)
		}
	}
	bad := []string{
		"", "   ", "*", "*:443", "*.com", "*.*.example.com", "a*.example.com", "*example.com",
		"foo.*.com", "*.1.2.3.4", "http://example.com", "example.com/path", "user@example.com",
		"example.com:", ":443", "example.com:0", "example.com:65536", "example.com:-1",
		"example.com:http", "example.com:443:1", "-bad.example.com", "bad-.example.com",
		"exa mple.com", "ex..ample.com", "1.2.3", "127.1", "0x7f.1", "host.123",
		"fe80::1%eth0", "[fe80::1%eth0]:443", "[example.com]:443", "[2001:db8::1", "[2001:db8::1]x",
		"ünicode.example", "a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s.t.u.v.w.x.y.z.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.com",
		"999.1.1.1",
	}
	for _, s := range bad {
		if r, err := ParseRule(s); err == nil {
			t.Errorf("ParseRule(%q) = %+v, want error", s, r)
		}
	}
}

func TestAllowlistMatching(t *testing.T) {
	a, err := NewAllowlist("*.pypi.org", "api.github.com", "example.com:8443", "203.0.113.7:22", "*.npmjs.org:443")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		host string
		port int
		want bool
	}{
		{"files.pypi.org", 443, true},
		{"a.b.pypi.org", 80, true},
		{"FILES.PYPI.ORG.", 443, true},
		{"pypi.org", 443, false},
		{"evilpypi.org", 443, false},
		{"pypi.org.evil.com", 443, false},
		{"files.pypi.org", 8443, false},
		{"api.github.com", 443, true},
		{"api.github.com", 80, true},
		{"api.github.com", 22, false},
		{"x.api.github.com", 443, false},
		{"github.com", 443, false},
		{"example.com", 8443, true},
		{"example.com", 443, false},
		{"203.0.113.7", 22, true},
		{"::ffff:203.0.113.7", 22, true},
		{"203.0.113.7", 443, false},
		{"registry.npmjs.org", 443, true},
		{"registry.npmjs.org", 80, false},
		{"", 443, false},
		{"bad host", 443, false},
	}
	for _, tc := range cases {
		if got := a.Allows(tc.host, tc.port); got != tc.want {
			t.Errorf("Allows(%q, %d) = %v, want %v", tc.host, tc.port, got, tc.want)
		}
	}
	if err := a.Add(Rule{Host: "NEW.example.com", Port: 0}); err != nil {
		t.Fatal(err)
	}
	if err := a.Add(Rule{Host: "new.example.com"}); err != nil { // duplicate
		t.Fatal(err)
	}
	if err := a.Add(Rule{Host: "*"}); err == nil {
		t.Error("Add(*) succeeded")
	}
	if err := a.Add(Rule{Host: "x.com", Port: 70000}); err == nil {
		t.Error("Add(port 70000) succeeded")
	}
	if n := len(a.Rules()); n != 6 {
		t.Errorf("%d rules: %v", n, a.Rules())
	}
	if !a.Allows("new.example.com", 443) {
		t.Error("added rule not effective")
	}
	if !a.Remove(Rule{Host: "new.example.com"}) || a.Allows("new.example.com", 443) {
		t.Error("Remove failed")
	}
	var nilList *Allowlist
	if nilList.Allows("a.com", 443) || nilList.Rules() != nil {
		t.Error("nil allowlist admits")
	}
	var zero Allowlist
	if zero.Allows("a.com", 443) {
		t.Error("zero allowlist admits")
	}
}

func TestIsSpecial(t *testing.T) {
	special := []string{
		"0.0.0.0", "0.1.2.3", "10.0.0.5", "100.64.0.1", "100.127.255.254", "127.0.0.1", "127.8.9.10",
		"169.254.169.254", "169.254.0.1", "172.16.0.1", "172.31.255.255", "192.168.1.1", "192.0.0.8",
		"192.0.2.1", "198.18.0.1", "198.51.100.1", "203.0.113.1", "224.0.0.1", "239.255.255.250",
		"240.0.0.1", "255.255.255.255",
		"::", "::1", "::ffff:10.0.0.5", "::ffff:127.0.0.1", "::ffff:169.254.169.254", "::10.0.0.5",
		"fc00::1", "fd00:ec2::254", "fe80::1", "fec0::1", "ff02::1", "100::1",
		"64:ff9b::a00:5", "64:ff9b::7f00:1", "2002:a00:5::1", "2002:7f00:1::",
		"2001:db8::1", "2001::1", "3fff::1", "fe80::1%eth0",
	}
	public := []string{
		"1.1.1.1", "8.8.8.8", "100.63.255.255", "100.128.0.0", "172.32.0.1", "169.253.255.255",
		"::ffff:8.8.8.8", "2606:4700:4700::1111", "2a00:1450:4001::200e", "64:ff9b::808:808", "2002:808:808::1",
	}
	for _, s := range special {
		if !isSpecial(netip.MustParseAddr(s)) {
			t.Errorf("isSpecial(%s) = false", s)
		}
	}
	for _, s := range public {
		if isSpecial(netip.MustParseAddr(s)) {
			t.Errorf("isSpecial(%s) = true", s)
		}
	}
	if isSpecial(netip.Addr{}) != true {
		t.Error("invalid address not special")
	}
	allow := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	if !allowedPrivate(netip.MustParseAddr("::ffff:127.0.0.1"), allow) || allowedPrivate(netip.MustParseAddr("10.0.0.1"), allow) {
		t.Error("allowedPrivate")
	}
}
