package policies

import (
	"net/netip"
	"testing"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		addr, class string
	}{
		{"127.0.0.1", "loopback"}, {"127.255.0.9", "loopback"}, {"::1", "loopback"},
		{"::ffff:127.0.0.1", "loopback"}, {"64:ff9b::7f00:1", "loopback"}, {"2002:7f00:1::1", "loopback"},
		{"10.0.0.1", "private"}, {"172.31.255.255", "private"}, {"192.168.1.1", "private"}, {"fd12::1", "private"},
		{"169.254.169.254", "link-local"}, {"fe80::1", "link-local"}, {"100.100.1.1", "shared (CGNAT)"},
		{"0.0.0.0", "unspecified"}, {"::", "unspecified"}, {"224.0.0.1", "multicast"}, {"ff02::1", "multicast"},
		{"255.255.255.255", "reserved or broadcast"}, {"::127.0.0.1", "reserved or broadcast"}, {"192.0.2.1", "special-purpose"},
		{"8.8.8.8", ""}, {"172.32.0.1", ""}, {"2606:4700::1", ""}, {"64:ff9b::808:808", ""},
	} {
		c, ok := Classify(netip.MustParseAddr(tc.addr))
		got := ""
		if ok {
			got = c.Name
		}
		if got != tc.class {
			t.Errorf("Classify(%s) = %q, want %q", tc.addr, got, tc.class)
		}
	}
}

func TestOpens(t *testing.T) {
	for _, tc := range []struct {
		rule, addr string
		port       int
		own, want  bool
	}{
		{"8.8.8.8:443", "8.8.8.8", 443, false, true},
		{"0.0.0.0/0:*", "8.8.8.8", 443, false, true},
		{"0.0.0.0/0:*", "8.8.8.8", 443, true, false}, // the host's own public address
		{"8.8.8.8:443", "8.8.8.8", 443, true, true},
		{"8.8.8.8:443", "8.8.8.8", 80, true, false},
		{"0.0.0.0/0:*", "127.0.0.1", 80, false, false},
		{"127.0.0.0/8:*", "127.0.0.1", 80, false, true},
		{"127.0.0.0/8:*", "127.0.0.1", 80, true, false},
		{"127.0.0.1:*", "127.0.0.1", 80, true, true},
		{"10.0.0.0/8:*", "10.1.2.3", 80, false, true},
		{"10.0.0.0/8:*", "10.1.2.3", 80, true, false},
		{"10.0.0.0/7:*", "10.1.2.3", 80, false, false},
		{"169.254.169.254:80", "169.254.169.254", 80, false, true},
		{"a.com:80", "169.254.169.254", 80, false, false},
		{"0.0.0.0:80", "0.0.0.0", 80, false, false},
		{"[64:ff9b::/96]:443", "64:ff9b::7f00:1", 443, false, false},
		{"[64:ff9b::7f00:1]:443", "64:ff9b::7f00:1", 443, false, false},
		{"127.0.0.1:443", "64:ff9b::7f00:1", 443, false, true},
		{"127.0.0.0/8:443", "64:ff9b::7f00:1", 443, true, false},
		{"10.0.0.0/8:443", "2002:a00:5::1", 443, false, true},
		{"[64:ff9b::/96]:443", "64:ff9b::808:808", 443, false, true},
	} {
		h, err := ParseHostPattern(tc.rule)
		if err != nil {
			t.Fatal(err)
		}
		if got := h.Opens(netip.MustParseAddr(tc.addr), tc.port, tc.own); got != tc.want {
			t.Errorf("%s opens %s port %d (own %v) = %v, want %v", tc.rule, tc.addr, tc.port, tc.own, got, tc.want)
		}
	}
}
