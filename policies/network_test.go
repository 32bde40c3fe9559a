package policies

import "testing"

func TestHostPatternMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		host    string
		port    int
		want    bool
	}{
		{"api.example.com:443", "api.example.com", 443, true},
		{"*:443", "api.example.com", 443, true},
		{"*:443", "localhost", 443, true}, // names resolve in the proxy, whose address checks refuse loopback
		{"*:443", "93.184.216.34", 443, true},
		{"*:443", "[2001:db8::1]", 443, true},
		{"*:443", "api.example.com", 80, false},
		{"*:443", "bad_host!", 443, false},
		{"api.example.com:443", "API.Example.COM.", 443, true},
		{"api.example.com:443", "api.example.com", 80, false},
		{"api.example.com:443", "x.api.example.com", 443, false},
		{"api.example.com:443", "example.com", 443, false},
		{"api.example.com:*", "api.example.com", 8443, true},
		{"api.example.com:*", "api.example.com", 0, false},
		{"api.example.com:*", "api.example.com", 70000, false},
		{"*.cdn.example.com:443", "a.cdn.example.com", 443, true},
		{"*.cdn.example.com:443", "a.b.cdn.example.com", 443, true},
		{"*.cdn.example.com:443", "cdn.example.com", 443, false},
		{"*.cdn.example.com:443", "xcdn.example.com", 443, false},
		{"*.cdn.example.com:443", "evil.com/.cdn.example.com", 443, false},
		{"1.2.3.4:80", "1.2.3.4", 80, true},
		{"1.2.3.4:80", "1.2.3.5", 80, false},
		{"1.2.3.4:80", "::ffff:1.2.3.4", 80, true},
		{"10.0.0.0/8:443", "10.200.3.4", 443, true},
		{"10.0.0.0/8:443", "11.0.0.1", 443, false},
		{"10.0.0.0/8:443", "ten.example", 443, false},
		{"[::1]:8080", "::1", 8080, true},
		{"[::1]:8080", "[::1]", 8080, true},
		{"[fd00::/8]:443", "fd12::1", 443, true},
		{"[fd00::/8]:443", "fe80::1", 443, false},
		{"[fd00::/8]:443", "fd12::1%eth0", 443, false},
		{"localhost:80", "127.0.0.1", 80, false}, // a name never matches an IP literal
		{"host:*", "host", 1, true},
	} {
		h, err := ParseHostPattern(tc.pattern)
		if err != nil {
			t.Fatalf("%s: %v", tc.pattern, err)
		}
		if got := h.Match(tc.host, tc.port); got != tc.want {
			t.Errorf("%s.Match(%q, %d) = %v, want %v", tc.pattern, tc.host, tc.port, got, tc.want)
		}
	}
}

func TestHostPatternString(t *testing.T) {
	for in, want := range map[string]string{
		"API.Example.com.:443":     "api.example.com:443",
		"*.CDN.example.com:*":      "*.cdn.example.com:*",
		"[::FFFF:1.2.3.4]:80":      "1.2.3.4:80",
		"[::ffff:10.0.0.0/104]:80": "10.0.0.0/8:80",
		"1.2.3.4/32:80":            "1.2.3.4:80",
		"[FD00::/8]:443":           "[fd00::/8]:443",
		"[::1]:8080":               "[::1]:8080",
	} {
		h, err := ParseHostPattern(in)
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if h.String() != want {
			t.Errorf("%s: got %q, want %q", in, h.String(), want)
		}
		h2, err := ParseHostPattern(h.String())
		if err != nil || h2 != h {
			t.Errorf("%s: String does not read back: %v %v", in, h2, err)
		}
	}
}

func TestIntersectPatterns(t *testing.T) {
	for _, tc := range []struct{ a, b, want string }{
		{"a.com:443", "a.com:443", "a.com:443"},
		{"a.com:443", "b.com:443", ""},
		{"x.a.com:443", "*.a.com:*", "x.a.com:443"},
		{"a.com:443", "*.a.com:443", ""},
		{"*.x.a.com:*", "*.a.com:443", "*.x.a.com:443"},
		{"*.a.com:443", "*.b.com:443", ""},
		{"a.com:443", "a.com:80", ""},
		{"10.0.0.0/8:*", "10.1.0.0/16:443", "10.1.0.0/16:443"},
		{"10.0.0.0/8:*", "11.0.0.0/8:*", ""},
		// A single special address may be the host's own, which only an
		// exact naming opens: a range over it does not keep it.
		{"10.1.2.3:22", "10.0.0.0/8:*", ""},
		{"10.1.2.3:22", "10.1.2.3:*", "10.1.2.3:22"},
		{"8.8.8.8:443", "0.0.0.0/0:*", "8.8.8.8:443"},
		// A range that alone opens no loopback, link-local or private
		// address does not let a narrower one open them.
		{"0.0.0.0/0:*", "127.0.0.1:*", ""},
		{"0.0.0.0/0:*", "169.254.169.254:80", ""},
		{"0.0.0.0/0:*", "10.0.0.0/8:*", ""},
		{"8.0.0.0/6:*", "10.1.0.0/16:*", ""},
		{"[::/0]:*", "[::1]:*", ""},
		{"[::/0]:*", "[fd00::/8]:*", ""},
		{"0.0.0.0/0:*", "192.0.0.0/8:*", "192.0.0.0/8:*"},
		{"[::/0]:*", "[64:ff9b::/96]:443", "[64:ff9b::/96]:443"},
		{"10.0.0.0/8:*", "10.1.0.0/16:443", "10.1.0.0/16:443"},
		{"10.1.2.3:22", "[::/0]:*", ""},
		{"a.com:443", "1.2.3.4:443", ""},
		// Any host: the other side's hosts on the common port; an address
		// range keeps only what * itself would reach (no special address).
		{"*:443", "a.com:*", "a.com:443"},
		{"*:443", "*.a.com:443", "*.a.com:443"},
		{"*:443", "*:443", "*:443"},
		{"*:443", "*:80", ""},
		{"*:443", "8.8.8.8:*", "8.8.8.8:443"},
		{"*:443", "10.0.0.0/8:443", ""},
		{"*:443", "127.0.0.1:*", ""},
		{"*:443", "[::1]:443", ""},
	} {
		a, _ := ParseHostPattern(tc.a)
		b, _ := ParseHostPattern(tc.b)
		for _, order := range [][2]HostPattern{{a, b}, {b, a}} {
			r, ok := intersectPatterns(order[0], order[1])
			got := ""
			if ok {
				got = r.String()
			}
			if got != tc.want {
				t.Errorf("%s ∩ %s = %q, want %q", order[0], order[1], got, tc.want)
			}
		}
	}
}

func TestHostPatternPrefix(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string // "" for name patterns
	}{
		{"api.example.com:443", ""},
		{"*.example.com:*", ""},
		{"127.0.0.1:80", "127.0.0.1/32"},
		{"10.0.0.0/8:*", "10.0.0.0/8"},
		{"[::1]:443", "::1/128"},
		{"[::ffff:10.0.0.0/104]:443", "10.0.0.0/8"},
	} {
		h, err := ParseHostPattern(c.in)
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		p, ok := h.Prefix()
		if ok != (c.want != "") || ok && p.String() != c.want {
			t.Errorf("%s: Prefix() = %v, %v; want %q", c.in, p, ok, c.want)
		}
	}
}
