package policies

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// HostPattern is one network.allow entry: a host name, a "*.domain"
// wildcard, an IP address or a CIDR range, or any host ("*"), and a port
// or any port.
type HostPattern struct {
	name     string       // lower-case, no trailing dot; "" for address patterns
	wildcard bool         // name matches strict subdomains of name
	any      bool         // every name and address; special addresses still need their own rule
	prefix   netip.Prefix // for address patterns; a single address is a full-length prefix
	port     int          // 0: any port
}

// ParseHostPattern reads "host:port", "*.domain:port", "1.2.3.4:port",
// "10.0.0.0/8:port", "[::1]:port", "[fd00::/8]:port" or "*:port" (any
// host on that port); port is 1-65535 or *, except after a bare *.
func ParseHostPattern(s string) (HostPattern, error) {
	var h HostPattern
	if s == "" {
		return h, fmt.Errorf("empty host pattern; write host:port, e.g. \"api.example.com:443\"")
	}
	var host, port string
	if strings.HasPrefix(s, "[") {
		end := strings.Index(s, "]")
		if end < 0 {
			return h, fmt.Errorf("%q has no closing ]", s)
		}
		host, port = s[1:end], s[end+1:]
		if !strings.HasPrefix(port, ":") {
			return h, fmt.Errorf("%q has no port; write [address]:port, e.g. \"[::1]:8080\"", s)
		}
		port = port[1:]
		if !strings.Contains(host, ":") {
			return h, fmt.Errorf("%q: brackets are only for IPv6 addresses", s)
		}
	} else {
		i := strings.LastIndex(s, ":")
		if i < 0 {
			return h, fmt.Errorf("%q has no port; write host:port, e.g. %q or %q", s, s+":443", s+":*")
		}
		host, port = s[:i], s[i+1:]
		if strings.Contains(host, ":") {
			return h, fmt.Errorf("%q: put an IPv6 address in brackets, e.g. \"[::1]:443\"", s)
		}
	}
	var err error
	if h.port, err = parsePort(port); err != nil {
		return h, fmt.Errorf("%q: %v", s, err)
	}
	if err := h.parseHost(host); err != nil {
		return h, fmt.Errorf("%q: %v", s, err)
	}
	if h.any && h.port == 0 {
		return h, fmt.Errorf("%q would allow every host on every port; name the port, e.g. \"*:443\"", s)
	}
	return h, nil
}

func parsePort(s string) (int, error) {
	if s == "*" {
		return 0, nil
	}
	if s == "" {
		return 0, fmt.Errorf("empty port; use 1-65535 or *")
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("port %q is not a number; use 1-65535 or *", s)
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 || s[0] == '0' {
		return 0, fmt.Errorf("port %s is out of range; use 1-65535 or *", s)
	}
	return n, nil
}

func (h *HostPattern) parseHost(host string) error {
	if host == "" {
		return fmt.Errorf("empty host")
	}
	if strings.Contains(host, "/") {
		p, err := netip.ParsePrefix(host)
		if err != nil {
			return fmt.Errorf("bad CIDR range %q; write e.g. \"10.0.0.0/8\"", host)
		}
		if p.Addr().Zone() != "" {
			return fmt.Errorf("zones are not supported in %q", host)
		}
		if p.Bits() < unmapBits(p.Addr()) {
			return fmt.Errorf("CIDR range %q mixes IPv4-mapped and IPv6 addresses", host)
		}
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-unmapBits(p.Addr()))
		if p != p.Masked() {
			return fmt.Errorf("CIDR range %q has host bits set; write %q", host, p.Masked().String())
		}
		h.prefix = p
		return nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return fmt.Errorf("zones are not supported in %q", host)
		}
		a = a.Unmap()
		h.prefix = netip.PrefixFrom(a, a.BitLen())
		return nil
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	if name == "*" {
		h.any = true
		return nil
	}
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		h.wildcard = true
		name = rest
		if !strings.Contains(name, ".") {
			return fmt.Errorf("*.%s would allow a whole top-level domain; name at least two labels after the *", name)
		}
	}
	if strings.Contains(name, "*") {
		return fmt.Errorf("a wildcard may only be the whole first label, as in *.example.com")
	}
	if err := checkHostName(name); err != nil {
		return err
	}
	h.name = name
	return nil
}

// unmapBits is how many prefix bits an IPv4-mapped IPv6 address spends on
// the ::ffff: part, so [::ffff:10.0.0.0/104] becomes 10.0.0.0/8.
func unmapBits(a netip.Addr) int {
	if a.Is4In6() {
		return 96
	}
	return 0
}

func checkHostName(name string) error {
	if len(name) > 253 {
		return fmt.Errorf("host name longer than 253 characters")
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return fmt.Errorf("host name %q has an empty or over-long label", name)
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Errorf("host name %q has a label starting or ending with -", name)
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("host name %q has character %q; use letters, digits, - and _", name, c)
			}
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return fmt.Errorf("%q is neither an IP address nor a host name", name)
	}
	return nil
}

// Match reports whether a connection to host:port is allowed by h. Host
// names compare case-insensitively with a trailing dot ignored; "*.d"
// matches subdomains of d but not d itself; an address pattern matches only
// IP literals inside it, and a name pattern never matches an IP literal.
func (h HostPattern) Match(host string, port int) bool {
	if port < 1 || port > 65535 || h.port != 0 && port != h.port {
		return false
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if h.any {
			return a.Zone() == ""
		}
		return h.name == "" && h.prefix.IsValid() && a.Zone() == "" && h.prefix.Contains(a.Unmap())
	}
	if h.any {
		return checkHostName(host) == nil
	}
	if h.name == "" || checkHostName(host) != nil {
		return false
	}
	if h.wildcard {
		return strings.HasSuffix(host, "."+h.name)
	}
	return host == h.name
}

// Prefix returns the address range of an IP or CIDR pattern; ok is false
// for name patterns and for "*" (which opens no special address).
func (h HostPattern) Prefix() (prefix netip.Prefix, ok bool) {
	return h.prefix, h.name == "" && h.prefix.IsValid()
}

// String returns the canonical form, which ParseHostPattern reads back.
func (h HostPattern) String() string {
	var host string
	switch {
	case h.any:
		host = "*"
	case h.wildcard:
		host = "*." + h.name
	case h.name != "":
		host = h.name
	case !h.prefix.IsValid():
		return "invalid"
	case h.prefix.IsSingleIP():
		host = h.prefix.Addr().String()
	default:
		host = h.prefix.String()
	}
	if h.prefix.Addr().Is6() {
		host = "[" + host + "]"
	}
	port := "*"
	if h.port != 0 {
		port = strconv.Itoa(h.port)
	}
	return host + ":" + port
}

// intersectPatterns returns the pattern matching exactly what both match,
// if anything. Names and wildcards are nested or disjoint, and so are CIDR
// ranges, so one pattern always suffices. A narrower address pattern that
// would open special addresses the wider one does not open (see Opens) is
// dropped instead: 0.0.0.0/0 ∩ 127.0.0.1 is nothing, since 0.0.0.0/0 alone
// never reaches loopback.
func intersectPatterns(a, b HostPattern) (HostPattern, bool) {
	port := a.port
	switch {
	case a.port == 0:
		port = b.port
	case b.port != 0 && a.port != b.port:
		return HostPattern{}, false
	}
	var r HostPattern
	switch {
	case b.any:
		r = a
		if a.name == "" && !a.any && !opensAsMuch(netip.PrefixFrom(netip.IPv6Unspecified(), 0), a.prefix) {
			return HostPattern{}, false
		}
	case a.any:
		return intersectPatterns(b, a)
	case a.name != "" && b.name != "":
		switch {
		case narrowerName(a, b):
			r = a
		case narrowerName(b, a):
			r = b
		default:
			return HostPattern{}, false
		}
	case a.name == "" && b.name == "":
		if !a.prefix.Overlaps(b.prefix) {
			return HostPattern{}, false
		}
		r = a
		w := b
		if b.prefix.Bits() > a.prefix.Bits() {
			r, w = b, a
		}
		if !opensAsMuch(w.prefix, r.prefix) {
			return HostPattern{}, false
		}
	default:
		return HostPattern{}, false
	}
	r.port = port
	return r, true
}

// opensAsMuch reports whether the wide range w opens every special address
// the narrower range r inside it opens. A special address r opens lies in
// a special range holding all of r, at most as specific as r; w opens it
// only if w is at least as specific as that range. A single address in a
// special range may be the host's own, which only an exact naming opens,
// so it survives only against the same single address.
func opensAsMuch(w, r netip.Prefix) bool {
	if w == r {
		return true
	}
	c, ok := classifyPrefix(r)
	if !ok || c.Never {
		return true
	}
	return !r.IsSingleIP() && w.Bits() >= c.Prefix.Bits()
}

// narrowerName reports whether every name a matches is matched by b.
func narrowerName(a, b HostPattern) bool {
	if !b.wildcard {
		return !a.wildcard && a.name == b.name
	}
	return strings.HasSuffix(a.name, "."+b.name) || a.wildcard && a.name == b.name
}
