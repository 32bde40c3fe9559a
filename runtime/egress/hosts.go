package egress

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"strings"
)

// ParseHosts reads an /etc/hosts style file: an address, then names, per
// line; # starts a comment. Names are lower-cased; a name listed more than
// once gets every address.
func ParseHosts(r io.Reader) (map[string][]netip.Addr, error) {
	hosts := map[string][]netip.Addr{}
	s := bufio.NewScanner(r)
	for line := 1; s.Scan(); line++ {
		text, _, _ := strings.Cut(s.Text(), "#")
		f := strings.Fields(text)
		if len(f) == 0 {
			continue
		}
		a, err := netip.ParseAddr(f[0])
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("line %d: %q is not an IP address; write an address, then names", line, f[0])
		}
		if len(f) < 2 {
			return nil, fmt.Errorf("line %d: no name after %s", line, f[0])
		}
		for _, n := range f[1:] {
			n = strings.TrimSuffix(strings.ToLower(n), ".")
			hosts[n] = append(hosts[n], a.Unmap())
		}
	}
	return hosts, s.Err()
}
