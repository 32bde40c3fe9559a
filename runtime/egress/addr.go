package egress

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// addrClass names a range that a name-based rule never opens.
type addrClass struct {
	prefix netip.Prefix
	name   string
	never  bool // no rule opens it: nothing legitimate is reached there over TCP
}

// specialRanges are the IANA special-purpose ranges (and the host's
// neighbours): what DNS rebinding aims at. Order does not matter; the most
// specific range containing an address decides.
var specialRanges = func() []addrClass {
	var out []addrClass
	add := func(never bool, name string, cidrs ...string) {
		for _, c := range cidrs {
			out = append(out, addrClass{netip.MustParsePrefix(c), name, never})
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

// classify returns the range an address falls in, if it is special. NAT64
// and 6to4 addresses are judged by the IPv4 address they embed.
func classify(a netip.Addr) (addrClass, bool) {
	a = a.Unmap()
	if a.Is6() {
		b := a.As16()
		switch {
		case netip.MustParsePrefix("64:ff9b::/96").Contains(a):
			return classify(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}))
		case netip.MustParsePrefix("2002::/16").Contains(a):
			return classify(netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}))
		}
	}
	var best addrClass
	found := false
	for _, c := range specialRanges {
		if c.prefix.Contains(a) && (!found || c.prefix.Bits() > best.prefix.Bits()) {
			best, found = c, true
		}
	}
	return best, found
}

// hostAddrs caches the host's own interface addresses for a moment: a
// connection must not reach the host's services through its public address
// either.
type hostAddrs struct {
	mu      sync.Mutex
	at      time.Time
	addrs   map[netip.Addr]bool
	listing func() ([]net.Addr, error)
}

func (h *hostAddrs) contains(a netip.Addr) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.addrs == nil || time.Since(h.at) > 2*time.Second {
		list := h.listing
		if list == nil {
			list = net.InterfaceAddrs
		}
		h.addrs = map[netip.Addr]bool{}
		if ifas, err := list(); err == nil {
			for _, ifa := range ifas {
				if n, ok := ifa.(*net.IPNet); ok {
					if x, ok := netip.AddrFromSlice(n.IP); ok {
						h.addrs[x.Unmap()] = true
					}
				}
			}
		}
		h.at = time.Now()
	}
	return h.addrs[a.Unmap()]
}
