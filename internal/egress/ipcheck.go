package egress

import "net/netip"

// special4 are IPv4 ranges the broker never dials unless AllowPrivate covers
// the address.
var special4 = mustPrefixes(
	"0.0.0.0/8",          // "this network", includes 0.0.0.0
	"10.0.0.0/8",         // RFC 1918
	"100.64.0.0/10",      // CGNAT (RFC 6598)
	"127.0.0.0/8",        // loopback
	"169.254.0.0/16",     // link-local, cloud metadata 169.254.169.254
	"172.16.0.0/12",      // RFC 1918
	"192.0.0.0/24",       // IETF protocol assignments
	"192.0.2.0/24",       // TEST-NET-1
	"192.88.99.0/24",     // 6to4 relay anycast
	"192.168.0.0/16",     // RFC 1918
	"198.18.0.0/15",      // benchmarking
	"198.51.100.0/24",    // TEST-NET-2
	"203.0.113.0/24",     // TEST-NET-3
	"224.0.0.0/4",        // multicast
	"240.0.0.0/4",        // reserved, includes 255.255.255.255 broadcast
	"255.255.255.255/32", // broadcast (explicit)
)

// special6 are IPv6 ranges inside 2000::/3 (global unicast) that are not
// ordinary internet hosts. Everything outside 2000::/3 is refused anyway,
// except NAT64, whose embedded IPv4 address is checked instead.
var special6 = mustPrefixes(
	"2001::/23",     // IETF protocol assignments (Teredo, ORCHID, ...)
	"2001:db8::/32", // documentation
	"3fff::/20",     // documentation
)

var (
	global6 = netip.MustParsePrefix("2000::/3")
	nat64   = netip.MustParsePrefix("64:ff9b::/96")
	sixto4  = netip.MustParsePrefix("2002::/16")
)

func mustPrefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// isSpecial reports whether a is not a public unicast address: loopback,
// private, CGNAT, link-local, unique-local, multicast, broadcast,
// unspecified, reserved or documentation space, including IPv4-mapped,
// NAT64 and 6to4 forms of such IPv4 addresses and any zoned address.
func isSpecial(a netip.Addr) bool {
	if !a.IsValid() || a.Zone() != "" {
		return true
	}
	a = a.Unmap()
	if a.Is4() {
		for _, p := range special4 {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	b := a.As16()
	switch {
	case nat64.Contains(a):
		return isSpecial(netip.AddrFrom4([4]byte(b[12:16])))
	case sixto4.Contains(a):
		return isSpecial(netip.AddrFrom4([4]byte(b[2:6])))
	case !global6.Contains(a):
		// ::/8 (::1, ::, IPv4-compatible), fc00::/7, fe80::/10, fec0::/10,
		// ff00::/8, 100::/64 and all unassigned space.
		return true
	}
	for _, p := range special6 {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// allowedPrivate reports whether a is inside one of the operator's
// exceptions, comparing both the address and its unmapped form.
func allowedPrivate(a netip.Addr, allow []netip.Prefix) bool {
	u := a.Unmap()
	for _, p := range allow {
		if p.Contains(a) || p.Contains(u) {
			return true
		}
	}
	return false
}
