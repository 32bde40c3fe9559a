package egress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// routeKind is what the host's routing says an address is.
type routeKind int

const (
	routeElsewhere routeKind = iota // another machine (or no route at all)
	routeOwn                        // this host: a local or anycast address
	routeBroadcast                  // a broadcast address
)

// routeOf asks the host's routing table, as the kernel would for a dial,
// whether a is this host's own: the local table holds every address of
// every interface (and all of 127.0.0.0/8), so nothing the host answers on
// is missed, and nothing is cached.
func routeOf(a netip.Addr) (routeKind, error) {
	routes, err := netlink.RouteGet(net.IP(a.AsSlice()))
	if err != nil {
		// No route: the kernel would refuse the dial too, and an address
		// of this host always has one (in the local table).
		if errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.EHOSTUNREACH) {
			return routeElsewhere, nil
		}
		return 0, err
	}
	kind := routeElsewhere
	for _, r := range routes {
		switch r.Type {
		case unix.RTN_LOCAL, unix.RTN_ANYCAST:
			return routeOwn, nil
		case unix.RTN_BROADCAST:
			kind = routeBroadcast
		case unix.RTN_UNICAST, unix.RTN_UNREACHABLE, unix.RTN_PROHIBIT, unix.RTN_BLACKHOLE, unix.RTN_MULTICAST:
		default:
			return 0, fmt.Errorf("route type %d", r.Type)
		}
	}
	return kind, nil
}
