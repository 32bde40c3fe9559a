package policies

import "net/netip"

// AddrClass is a special-purpose address range: what DNS rebinding aims at.
// A name rule never opens an address in one; an address rule opens it only
// when it is at least as specific as the range (see HostPattern.Opens).
type AddrClass struct {
	Prefix netip.Prefix
	Name   string
	Never  bool // no rule opens it: nothing legitimate is reached there over TCP
}

// specialRanges are the IANA special-purpose ranges. Order does not
// matter; the most specific range containing an address decides.
var specialRanges = func() []AddrClass {
	var out []AddrClass
	add := func(never bool, name string, cidrs ...string) {
		for _, c := range cidrs {
			out = append(out, AddrClass{netip.MustParsePrefix(c), name, never})
		}
	}
	add(true, "unspecified", "0.0.0.0/8", "::/128")
	add(true, "multicast", "224.0.0.0/4", "ff00::/8")
	add(true, "reserved or broadcast", "240.0.0.0/4", "::/96", "2001::/32", "100::/64")
	add(false, "loopback", "127.0.0.0/8", "::1/128")
	add(false, "link-local", "169.254.0.0/16", "fe80::/10")
	add(false, "private", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7", "fec0::/10")
	add(false, "shared (CGNAT)", "100.64.0.0/10")
	add(false, "special-purpose", "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "198.18.0.0/15",
		"198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32", "64:ff9b:1::/48", "2001:20::/28")
	return out
}()

var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// Embedded returns the IPv4 address a NAT64 (64:ff9b::/96) or 6to4
// (2002::/16) address leads to, if it is one.
func Embedded(a netip.Addr) (netip.Addr, bool) {
	a = a.Unmap()
	if !a.Is6() {
		return netip.Addr{}, false
	}
	b := a.As16()
	switch {
	case nat64.Contains(a):
		return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}), true
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), true
	}
	return netip.Addr{}, false
}

// Classify returns the special range an address falls in, if any. NAT64
// and 6to4 addresses are judged by the IPv4 address they embed.
func Classify(a netip.Addr) (AddrClass, bool) {
	a = a.Unmap()
	if e, ok := Embedded(a); ok {
		a = e
	}
	return classifyPrefix(netip.PrefixFrom(a, a.BitLen()))
}

// classifyPrefix returns the most specific special range holding all of p.
func classifyPrefix(p netip.Prefix) (AddrClass, bool) {
	var best AddrClass
	found := false
	for _, c := range specialRanges {
		if c.Prefix.Bits() <= p.Bits() && c.Prefix.Contains(p.Addr()) && (!found || c.Prefix.Bits() > best.Prefix.Bits()) {
			best, found = c, true
		}
	}
	return best, found
}

// Opens reports whether h opens address a on port, where a is special (in
// a range Classify knows) or own (the host's own address), and so needs
// an address rule:
//   - a never-range address is opened by nothing;
//   - the host's own address only by a rule naming exactly that address;
//   - any other special address by an address rule covering it that is at
//     least as specific as its range (0.0.0.0/0 does not open loopback,
//     127.0.0.1 does);
//   - a NAT64 or 6to4 address that embeds a special or own IPv4 address
//     only by an IPv4 rule that opens the embedded address by the two
//     rules above (an IPv6 rule for 64:ff9b::/96 opens none of them).
//
// For an address that is neither special nor own, Opens is Match.
func (h HostPattern) Opens(a netip.Addr, port int, own bool) bool {
	a = a.Unmap().WithZone("")
	class, special := Classify(a)
	if !special && !own {
		return h.Match(a.String(), port)
	}
	if class.Never {
		return false
	}
	if e, ok := Embedded(a); ok {
		a = e
	}
	pre, ok := h.Prefix()
	if !ok || port < 1 || port > 65535 || h.port != 0 && h.port != port || !pre.Contains(a) {
		return false
	}
	if own {
		return pre.IsSingleIP()
	}
	return pre.Bits() >= class.Prefix.Bits()
}
