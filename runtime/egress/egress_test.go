package egress

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/warden-sandbox/warden/policies"
	"golang.org/x/sys/unix"
)

// harness is a proxy on loopback with an audit trail.
type harness struct {
	t    *testing.T
	p    *Proxy
	addr string
	mu   sync.Mutex
	recs []Record
}

func newHarness(t *testing.T, rules []string, tweak func(*Config)) *harness {
	t.Helper()
	h := &harness{t: t}
	var allow []policies.HostPattern
	for _, r := range rules {
		hp, err := policies.ParseHostPattern(r)
		if err != nil {
			t.Fatal(err)
		}
		allow = append(allow, hp)
	}
	cfg := Config{
		Policy: "test",
		Allow:  allow,
		Hosts: map[string][]netip.Addr{
			"api.test":      {netip.MustParseAddr("127.0.0.1")},
			"svc.test":      {netip.MustParseAddr("127.0.0.1")},
			"a.svc.test":    {netip.MustParseAddr("127.0.0.1")},
			"rebind.test":   {netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("10.1.2.3")},
			"v6.test":       {netip.MustParseAddr("::1")},
			"metadata.test": {netip.MustParseAddr("169.254.169.254")},
		},
		DialTimeout: 2 * time.Second,
		Audit: func(r Record) {
			h.mu.Lock()
			h.recs = append(h.recs, r)
			h.mu.Unlock()
		},
	}
	if tweak != nil {
		tweak(&cfg)
	}
	h.p = New(cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr = ln.Addr().String()
	go h.p.Serve(ln)
	t.Cleanup(func() { h.p.Close() })
	return h
}

func (h *harness) records() []Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Record(nil), h.recs...)
}

// waitRecords waits for n audit records (the last is written when a
// connection ends).
func (h *harness) waitRecords(n int) []Record {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := h.records()
		if len(r) >= n || time.Now().After(deadline) {
			if len(r) < n {
				h.t.Fatalf("want %d audit records, got %d: %+v", n, len(r), r)
			}
			return r
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (h *harness) client() *http.Client {
	u, _ := url.Parse("http://" + h.addr)
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u), DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 10 * time.Second}
}

func portOf(t *testing.T, u string) string {
	t.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return pu.Port()
}

// loopbackServer serves each connection to a new loopback listener with
// handle, until the test ends, and returns the listener's port.
func loopbackServer(t *testing.T, handle func(net.Conn)) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	}()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// refusingPort is a loopback port that refuses connections until the test
// ends: a socket bound to it and never listening keeps anyone else from
// taking it.
func refusingPort(t *testing.T) int {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return sa.(*unix.SockaddrInet4).Port
}

func hello(w http.ResponseWriter, r *http.Request) {
	fmt.Fprintf(w, "hello %s %s host=%s", r.Method, r.URL.Path, r.Host)
}

func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestHTTPForward(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(hello))
	defer srv.Close()
	port := portOf(t, srv.URL)
	other := httptest.NewServer(http.HandlerFunc(hello))
	defer other.Close()
	h := newHarness(t, []string{"127.0.0.1:" + port, "api.test:" + port, "*.svc.test:" + port}, nil)
	c := h.client()
	for _, tc := range []struct {
		url      string
		code     int
		contains string
	}{
		{"http://127.0.0.1:" + port + "/x", 200, "hello GET /x host=127.0.0.1:" + port},
		{"http://api.test:" + port + "/y", 200, "hello GET /y host=api.test:" + port},
		{"http://API.Test.:" + port + "/case", 200, "hello GET /case"},
		{"http://a.svc.test:" + port + "/w", 200, "hello GET /w"},
		{"http://svc.test:" + port + "/apex", 403, `svc.test:` + port + ` matches no network.allow rule of policy "test"`},
		{"http://127.0.0.1:" + portOf(t, other.URL) + "/", 403, "matches no network.allow rule"},
		{"http://api.test:" + portOf(t, other.URL) + "/", 403, "matches no network.allow rule"},
		{"http://evil.test:" + port + "/", 403, "evil.test:" + port + " matches no network.allow rule"},
		{"http://localhost:" + port + "/", 403, "matches no network.allow rule"},
	} {
		code, body := get(t, c, tc.url)
		if code != tc.code || !strings.Contains(body, tc.contains) {
			t.Errorf("GET %s: %d %q; want %d containing %q", tc.url, code, body, tc.code, tc.contains)
		}
	}
	var allowed, denied int
	for _, r := range h.waitRecords(9) {
		switch {
		case r.Allowed && r.Proto == "http" && r.BytesIn > 0 && r.BytesOut > 0 && r.Addr == "127.0.0.1:"+port && r.Rule != "" && r.Reason == "":
			allowed++
		case !r.Allowed && strings.Contains(r.Reason, "matches no network.allow rule"):
			denied++
		default:
			t.Errorf("unexpected record %+v", r)
		}
	}
	if allowed != 4 || denied != 5 {
		t.Errorf("%d allowed and %d denied records, want 4 and 5", allowed, denied)
	}
}

// A name rule never opens loopback, link-local or private addresses: only a
// rule naming the address (at least as narrowly as its range) does.
func TestAddressChecks(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(hello))
	defer srv.Close()
	port := portOf(t, srv.URL)
	cases := []struct {
		rules    []string
		url      string
		code     int
		contains string
	}{
		{[]string{"api.test:" + port}, "http://api.test:" + port + "/", 403, "resolves to 127.0.0.1 (loopback), which only a network.allow rule naming the address opens"},
		{[]string{"api.test:" + port, "127.0.0.1:" + port}, "http://api.test:" + port + "/", 200, "hello"},
		// 127.0.0.1 is this host's: a range does not open it, however narrow.
		{[]string{"api.test:" + port, "127.0.0.0/8:*"}, "http://api.test:" + port + "/", 403, "127.0.0.1 (loopback)"},
		{[]string{"api.test:" + port, "0.0.0.0/0:*"}, "http://api.test:" + port + "/", 403, "(loopback)"},
		{[]string{"0.0.0.0/0:*"}, "http://127.0.0.1:" + port + "/", 403, "(loopback)"},
		{[]string{"api.test:" + port, "127.0.0.1:1"}, "http://api.test:" + port + "/", 403, "(loopback)"},
		{[]string{"rebind.test:" + port}, "http://rebind.test:" + port + "/", 403, "127.0.0.1 (loopback), 10.1.2.3 (private)"},
		{[]string{"metadata.test:80"}, "http://metadata.test/latest/", 403, "169.254.169.254 (link-local)"},
		{[]string{"0.0.0.0:" + port}, "http://0.0.0.0:" + port + "/", 403, "0.0.0.0 (unspecified, never allowed)"},
		{[]string{"[::ffff:127.0.0.1]:" + port}, "http://[::ffff:127.0.0.1]:" + port + "/", 200, "hello"},
		{[]string{"api.test:" + port}, "http://[::ffff:127.0.0.1]:" + port + "/", 403, "matches no network.allow rule"},
		// Other spellings of 127.0.0.1 are names no rule matches, never addresses.
		{[]string{"127.0.0.1:" + port}, "http://127.1:" + port + "/", 403, "127.1:" + port + " matches no network.allow rule"},
		{[]string{"127.0.0.1:" + port}, "http://2130706433:" + port + "/", 403, "matches no network.allow rule"},
		{[]string{"127.0.0.1:" + port}, "http://0x7f.0.0.1:" + port + "/", 403, "matches no network.allow rule"},
		{[]string{"127.0.0.1:" + port}, "http://[::1]:" + port + "/", 403, "matches no network.allow rule"},
	}
	for _, tc := range cases {
		h := newHarness(t, tc.rules, func(c *Config) { c.DialTimeout = 300 * time.Millisecond })
		code, body := get(t, h.client(), tc.url)
		if code != tc.code || !strings.Contains(body, tc.contains) {
			t.Errorf("rules %v, GET %s: %d %q; want %d containing %q", tc.rules, tc.url, code, body, tc.code, tc.contains)
		}
	}
}

// hostAddress returns an address of one of this machine's non-loopback
// interfaces and that interface's network.
func hostAddress(t *testing.T) (netip.Addr, netip.Prefix) {
	ifas, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, ifa := range ifas {
		if n, ok := ifa.(*net.IPNet); ok {
			a, _ := netip.AddrFromSlice(n.IP)
			a = a.Unmap()
			bits, _ := n.Mask.Size()
			if a.IsGlobalUnicast() || a.IsPrivate() {
				return a, netip.PrefixFrom(a, bits).Masked()
			}
		}
	}
	t.Fatalf("this machine has no non-loopback address to test with: %v", ifas)
	return netip.Addr{}, netip.Prefix{}
}

// The host's own addresses (kubelet, dockerd, the daemon's neighbours on
// localhost) are opened only by a rule naming exactly that address: not by
// a range covering them, whatever special range they are in.
func TestHostOwnAddressNeedsExactRule(t *testing.T) {
	ifAddr, ifNet := hostAddress(t)
	for _, own := range []struct {
		addr   netip.Addr
		ranges []string // each covers addr
	}{
		{ifAddr, []string{hostPattern(ifNet, "*"), hostPattern(netip.PrefixFrom(ifAddr, 8).Masked(), "*"), hostPattern(netip.PrefixFrom(ifAddr, 0).Masked(), "*")}},
		{netip.MustParseAddr("127.0.0.2"), []string{"127.0.0.0/8:*", "127.0.0.0/24:*"}},
	} {
		ln, err := net.Listen("tcp", netip.AddrPortFrom(own.addr, 0).String())
		if err != nil {
			t.Fatal(err)
		}
		srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(hello)}}
		srv.Start()
		port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
		literal := "http://" + net.JoinHostPort(own.addr.String(), port) + "/"
		type tc struct {
			rules []string
			url   string
			code  int
		}
		var cases []tc
		for _, r := range own.ranges {
			cases = append(cases,
				tc{[]string{r}, literal, 403},
				tc{[]string{"own.test:" + port, r}, "http://own.test:" + port + "/", 403})
		}
		exact := hostPattern(netip.PrefixFrom(own.addr, own.addr.BitLen()), port)
		cases = append(cases,
			tc{[]string{exact}, literal, 200},
			tc{[]string{"own.test:" + port, exact}, "http://own.test:" + port + "/", 200})
		for _, c := range cases {
			h := newHarness(t, c.rules, func(cfg *Config) { cfg.Hosts["own.test"] = []netip.Addr{own.addr} })
			code, body := get(t, h.client(), c.url)
			if code != c.code || c.code == 403 && !strings.Contains(body, own.addr.String()+" (") || c.code == 200 && !strings.HasPrefix(body, "hello GET /") {
				t.Errorf("rules %v, GET %s: %d %q; want %d", c.rules, c.url, code, body, c.code)
			}
		}
		srv.Close()
	}
}

func hostPattern(p netip.Prefix, port string) string {
	h := p.String()
	if p.IsSingleIP() {
		h = p.Addr().String()
	}
	if p.Addr().Is6() {
		h = "[" + h + "]"
	}
	return h + ":" + port
}

// When the routing table cannot be asked (EMFILE under a flood, say), an
// address is refused, not taken for someone else's.
func TestHostOwnAddressFailsClosed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(hello))
	defer srv.Close()
	port := portOf(t, srv.URL)
	ip := netip.MustParseAddr("192.0.2.77") // a peer address outside this test's control
	h := newHarness(t, []string{"pub.test:" + port, "192.0.2.0/24:*"}, func(c *Config) {
		c.Hosts["pub.test"] = []netip.Addr{ip}
	})
	if why, opener := h.p.refuseAddr(ip, 80); why != "" || opener != "192.0.2.0/24:*" {
		t.Fatalf("with routing: %q %q; want opened by 192.0.2.0/24:*", why, opener)
	}
	h.p.route = func(netip.Addr) (routeKind, error) { return 0, syscall.EMFILE }
	for _, a := range []string{"192.0.2.77", "8.8.4.4", "64:ff9b::808:808"} {
		why, _ := h.p.refuseAddr(netip.MustParseAddr(a), 80)
		if !strings.Contains(why, "cannot tell whether it is this host's own address: too many open files") {
			t.Errorf("%s with routing failing: %q", a, why)
		}
	}
	code, body := get(t, h.client(), "http://pub.test:"+port+"/")
	if code != 403 || !strings.Contains(body, "cannot tell") {
		t.Errorf("GET with routing failing: %d %q", code, body)
	}
}

// Routing, not the interface list, decides what is the host's: all of
// 127.0.0.0/8 is, broadcast addresses are never dialed, and others are not.
func TestRouteKinds(t *testing.T) {
	ifAddr, ifNet := hostAddress(t)
	want := map[string]routeKind{
		ifAddr.String(): routeOwn, "127.0.0.1": routeOwn, "127.3.4.5": routeOwn, "::1": routeOwn,
		"8.8.8.8": routeElsewhere,
	}
	if ifAddr.Is4() && ifNet.Bits() < 31 {
		b := ifNet.Addr().As4()
		for i := ifNet.Bits(); i < 32; i++ {
			b[i/8] |= 0x80 >> (i % 8)
		}
		want[netip.AddrFrom4(b).String()] = routeBroadcast
	}
	for a, k := range want {
		got, err := routeOf(netip.MustParseAddr(a))
		if err != nil || got != k {
			t.Errorf("routeOf(%s) = %v, %v; want %v", a, got, err, k)
		}
	}
}

// A NAT64 or 6to4 address is judged by the IPv4 address it embeds: only an
// IPv4 rule that opens that address opens it, never an IPv6 range.
func TestEmbeddedIPv4NeedsIPv4Rule(t *testing.T) {
	for _, tc := range []struct {
		rules []string
		addr  string
		open  bool
	}{
		{[]string{"[64:ff9b::/96]:443"}, "64:ff9b::7f00:1", false},
		{[]string{"[64:ff9b::/96]:443"}, "64:ff9b::a9fe:a9fe", false},
		{[]string{"[64:ff9b::/96]:443"}, "64:ff9b::a00:5", false},
		{[]string{"[2002::/16]:443"}, "2002:a9fe:a9fe::1", false},
		{[]string{"[64:ff9b::a00:5]:443"}, "64:ff9b::a00:5", false},
		{[]string{"[64:ff9b::/96]:443", "10.0.0.0/8:443"}, "64:ff9b::a00:5", true},
		{[]string{"[64:ff9b::/96]:443", "10.0.0.0/8:80"}, "64:ff9b::a00:5", false},
		{[]string{"[64:ff9b::/96]:443", "0.0.0.0/0:443"}, "64:ff9b::a00:5", false},
		{[]string{"[64:ff9b::/96]:443", "169.254.169.254:443"}, "64:ff9b::a9fe:a9fe", true},
		{[]string{"[64:ff9b::/96]:443", "127.0.0.0/8:443"}, "64:ff9b::7f00:1", false}, // the host's own
		{[]string{"[64:ff9b::/96]:443", "127.0.0.1:443"}, "64:ff9b::7f00:1", true},
		{[]string{"[64:ff9b::/96]:443"}, "64:ff9b::808:808", true},
	} {
		h := newHarness(t, tc.rules, nil)
		why, _ := h.p.refuseAddr(netip.MustParseAddr(tc.addr), 443)
		if (why == "") != tc.open {
			t.Errorf("rules %v: %s refused for %q; want open %v", tc.rules, tc.addr, why, tc.open)
		}
	}
}

func TestConnect(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(hello))
	defer srv.Close()
	port := portOf(t, srv.URL)
	h := newHarness(t, []string{"api.test:" + port, "127.0.0.1:" + port}, nil)
	c := h.client()
	code, body := get(t, c, "https://api.test:"+port+"/secure")
	if r := h.waitRecords(1)[0]; r.Rule != "api.test:"+port+" + 127.0.0.1:"+port {
		t.Errorf("rule %q does not name both the name and the address rule", r.Rule)
	}
	if code != 200 || !strings.Contains(body, "hello GET /secure host=api.test:"+port) {
		t.Fatalf("https through CONNECT: %d %q", code, body)
	}
	code, body = get(t, c, "https://other.test:"+port+"/")
	if code != 0 || !strings.Contains(body, "Forbidden") {
		t.Errorf("CONNECT to another host: %d %q; want the tunnel refused", code, body)
	}
	// The refusal itself, as a client sees it.
	conn, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "CONNECT api.test:1 HTTP/1.1\r\nHost: api.test:1\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 403 || strings.Count(string(b), "\n") != 1 || !strings.Contains(string(b), `policy "test" (allows api.test:`+port) {
		t.Errorf("CONNECT refusal: %d %q", resp.StatusCode, b)
	}
	recs := h.waitRecords(3)
	var r Record
	for _, x := range recs {
		if x.Allowed {
			r = x
		}
	}
	if !r.Allowed || r.Proto != "connect" || r.Host != "api.test" || r.BytesIn < 500 || r.BytesOut < 100 || r.Duration <= 0 {
		t.Errorf("CONNECT record: %+v", r)
	}
}

// socks5 dials through the proxy; atyp 1, 3 or 4. It returns the reply code.
func socks5(t *testing.T, proxy string, cmd, atyp byte, host string, port int) (net.Conn, byte) {
	t.Helper()
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write([]byte{5, 1, 0})
	var m [2]byte
	if _, err := io.ReadFull(c, m[:]); err != nil || m != [2]byte{5, 0} {
		t.Fatalf("socks5 greeting: %v %v", m, err)
	}
	req := []byte{5, cmd, 0, atyp}
	switch atyp {
	case 1:
		req = append(req, netip.MustParseAddr(host).AsSlice()...)
	case 4:
		a := netip.MustParseAddr(host).As16()
		req = append(req, a[:]...)
	case 3:
		req = append(append(req, byte(len(host))), host...)
	default:
		req = append(req, 1, 2, 3, 4)
	}
	req = binary.BigEndian.AppendUint16(req, uint16(port))
	c.Write(req)
	var rep [10]byte
	if _, err := io.ReadFull(c, rep[:]); err != nil {
		t.Fatalf("socks5 reply: %v", err)
	}
	return c, rep[1]
}

func TestSOCKS5(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(hello))
	defer srv.Close()
	port, _ := strconv.Atoi(portOf(t, srv.URL))
	h := newHarness(t, []string{fmt.Sprintf("api.test:%d", port), fmt.Sprintf("127.0.0.1:%d", port)}, nil)
	for _, tc := range []struct {
		name string
		cmd  byte
		atyp byte
		host string
		port int
		want byte
	}{
		{"name allowed (remote DNS)", 1, 3, "api.test", port, socksOK},
		{"IPv4 literal allowed", 1, 1, "127.0.0.1", port, socksOK},
		{"name as text of an address", 1, 3, "127.0.0.1", port, socksOK},
		{"another host", 1, 3, "evil.test", port, socksNotAllowed},
		{"another port", 1, 3, "api.test", port + 1, socksNotAllowed},
		{"IPv6 loopback not named", 1, 4, "::1", port, socksNotAllowed},
		{"BIND", 2, 3, "api.test", port, socksBadCommand},
		{"UDP ASSOCIATE", 3, 1, "127.0.0.1", port, socksBadCommand},
		{"bad address type", 1, 9, "", port, socksBadAddrType},
	} {
		c, rep := socks5(t, h.addr, tc.cmd, tc.atyp, tc.host, tc.port)
		if rep != tc.want {
			t.Errorf("%s: reply %#x, want %#x", tc.name, rep, tc.want)
		}
		if rep == socksOK {
			fmt.Fprintf(c, "GET /s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
			b, _ := io.ReadAll(c)
			if !strings.Contains(string(b), "hello GET /s") {
				t.Errorf("%s: through the tunnel: %q", tc.name, b)
			}
		}
		c.Close()
	}
	recs := h.waitRecords(9)
	var denied int
	for _, r := range recs {
		if r.Proto != "socks5" {
			t.Errorf("record %+v: proto", r)
		}
		if !r.Allowed {
			denied++
			if r.Reason == "" {
				t.Errorf("denied record without a reason: %+v", r)
			}
		}
	}
	if denied != 6 {
		t.Errorf("%d denied records, want 6: %+v", denied, recs)
	}
	// A client that insists on authentication is turned away.
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte{5, 1, 2})
	var m [2]byte
	if _, err := io.ReadFull(c, m[:]); err != nil || m != [2]byte{5, 0xff} {
		t.Errorf("user/password only: %v %v", m, err)
	}
}

// rawExchange writes text to the proxy and returns its whole answer.
func rawExchange(t *testing.T, addr, text string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, text)
	b, _ := io.ReadAll(c)
	return string(b)
}

func TestMalformed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(hello))
	defer srv.Close()
	port := portOf(t, srv.URL)
	h := newHarness(t, []string{"127.0.0.1:" + port}, nil)
	for _, tc := range []struct{ in, want string }{
		{"hello\r\n\r\n", "400 Bad Request"},
		{"GET / HTTP/1.1\r\nHost: 127.0.0.1:" + port + "\r\n\r\n", "is not a proxy request"},
		{"GET https://127.0.0.1:" + port + "/ HTTP/1.1\r\nHost: x\r\n\r\n", "is not a proxy request"},
		{"CONNECT 127.0.0.1 HTTP/1.1\r\n\r\n", "malformed CONNECT"},
		{"CONNECT 127.0.0.1:0 HTTP/1.1\r\n\r\n", "malformed CONNECT"},
		{"CONNECT 127.0.0.1:99999 HTTP/1.1\r\n\r\n", "malformed CONNECT"},
		{"GET http://127.0.0.1:" + port + "/ HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", "400 Bad Request"},
		{"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "400 Bad Request"},
		{"GET http://127.0.0.1:" + port + "@evil.test/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "evil.test:80 matches no network.allow rule"},
		{"\x04\x01\x00\x50\x7f\x00\x00\x01\x00", "\x00\x5b"},
	} {
		if got := rawExchange(t, h.addr, tc.in); !strings.Contains(got, tc.want) {
			t.Errorf("%q: got %q, want %q", tc.in, got, tc.want)
		}
	}
	for _, r := range h.waitRecords(9) {
		if r.Allowed || r.Reason == "" {
			t.Errorf("malformed input audited as %+v", r)
		}
	}
}

// The Host header sent upstream is the URL's, whatever the client wrote:
// no asking an allowed address for another site behind it.
func TestHostHeaderFromURL(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(hello))
	defer srv.Close()
	port := portOf(t, srv.URL)
	h := newHarness(t, []string{"127.0.0.1:" + port}, nil)
	got := rawExchange(t, h.addr, "GET http://127.0.0.1:"+port+"/f HTTP/1.1\r\nHost: evil.test\r\nProxy-Authorization: Basic eDp5\r\nConnection: close\r\n\r\n")
	if !strings.Contains(got, "host=127.0.0.1:"+port) {
		t.Errorf("upstream saw %q", got)
	}
}

func TestKeepAliveAndBodies(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/echo":
			b, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "got %d bytes", len(b))
		case "/chunked":
			w.Write([]byte("part1 "))
			w.(http.Flusher).Flush()
			w.Write([]byte("part2"))
		case "/big":
			w.Header().Set("Content-Length", strconv.Itoa(8<<20))
			w.Write(make([]byte, 8<<20))
		default:
			hello(w, r)
		}
	}))
	defer srv.Close()
	port := portOf(t, srv.URL)
	h := newHarness(t, []string{"127.0.0.1:" + port}, nil)
	u, _ := url.Parse("http://" + h.addr)
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u)}}
	base := "http://127.0.0.1:" + port
	for i := 0; i < 3; i++ {
		if code, body := get(t, c, base+"/k"); code != 200 || !strings.Contains(body, "hello GET /k") {
			t.Fatalf("keep-alive request %d: %d %q", i, code, body)
		}
	}
	if code, body := get(t, c, base+"/chunked"); code != 200 || body != "part1 part2" {
		t.Errorf("chunked: %d %q", code, body)
	}
	resp, err := c.Post(base+"/echo", "application/octet-stream", strings.NewReader(strings.Repeat("x", 300000)))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "got 300000 bytes" {
		t.Errorf("POST: %q", b)
	}
	resp, err = c.Head(base + "/big")
	if err != nil || resp.StatusCode != 200 || resp.ContentLength != 8<<20 {
		t.Fatalf("HEAD: %v %v", resp, err)
	}
	resp.Body.Close()
	resp, err = c.Get(base + "/big")
	if err != nil {
		t.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if n != 8<<20 {
		t.Errorf("big body: %d bytes", n)
	}
	// Expect: 100-continue answered by the proxy, body still delivered.
	got := rawExchange(t, h.addr, "POST "+base+"/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\nConnection: close\r\n\r\nhello")
	if !strings.HasPrefix(got, "HTTP/1.1 100 Continue") || !strings.Contains(got, "got 5 bytes") {
		t.Errorf("100-continue: %q", got)
	}
	// A denied request on a kept-alive connection ends it.
	got = rawExchange(t, h.addr, "GET "+base+"/a HTTP/1.1\r\nHost: x\r\n\r\nGET http://evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\nGET "+base+"/c HTTP/1.1\r\nHost: x\r\n\r\n")
	if !strings.Contains(got, "hello GET /a") || !strings.Contains(got, "403 Forbidden") || strings.Contains(got, "hello GET /c") {
		t.Errorf("pipelined allowed/denied/allowed: %q", got)
	}
	for _, r := range h.records() {
		if r.Allowed && r.Reason != "" {
			t.Errorf("allowed request failed: %+v", r)
		}
	}
	// Connections that ended are forgotten, upstream ones too.
	c.CloseIdleConnections()
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.p.mu.Lock()
		open := len(h.p.conns)
		h.p.mu.Unlock()
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still tracked after every client left", open)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Connections over the session's limit wait in the kernel's short backlog,
// holding none of the daemon's descriptors, and are served when a slot
// frees; a flood of them does not grow the daemon's open files.
func TestConnectionLimitQueues(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(hello))
	defer srv.Close()
	port := portOf(t, srv.URL)
	h := newHarness(t, []string{"127.0.0.1:" + port}, func(c *Config) { c.MaxConns = 2 })
	var held []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "CONNECT 127.0.0.1:%s HTTP/1.1\r\n\r\n", port)
		line, _ := bufio.NewReader(c).ReadString('\n')
		if !strings.Contains(line, "200") {
			t.Fatalf("tunnel %d: %q", i, line)
		}
		held = append(held, c)
	}
	// The third waits: no answer while both slots are taken.
	third, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	io.WriteString(third, "GET http://127.0.0.1:"+port+"/third HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	third.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := third.Read(make([]byte, 1)); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("over the limit: read %d, %v; want it to wait", n, err)
	}
	// A flood over the limit: the daemon's descriptors stay put.
	fds := openFiles(t)
	var flood []net.Conn
	for i := 0; i < 100; i++ {
		c, err := net.DialTimeout("tcp", h.addr, 20*time.Millisecond)
		if err == nil {
			io.WriteString(c, "GET http://127.0.0.1:"+port+"/ HTTP/1.1\r\n\r\n")
			flood = append(flood, c)
		}
	}
	// The test's own client ends are descriptors of this process too.
	if grown := openFiles(t) - fds - len(flood); grown > 4 {
		t.Errorf("%d connections over the limit: the proxy's open files grew by %d", len(flood), grown)
	}
	if len(flood) > 3*2+10 {
		t.Errorf("%d connections queued for a proxy of 2 slots; the backlog is not short", len(flood))
	}
	for _, c := range flood {
		c.Close()
	}
	held[0].Close()
	third.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, _ := io.ReadAll(third)
	if !strings.Contains(string(got), "hello GET /third") {
		t.Errorf("the waiting connection was not served when a slot freed: %q", got)
	}
	// SOCKS5 too goes through once a slot is free.
	held[1].Close()
	c, rep := socks5Refused(t, h.addr)
	c.Close()
	if rep != 0 {
		t.Errorf("SOCKS5 with a free slot: method reply %#x", rep)
	}
}

func openFiles(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// The slots of all proxies together are bounded: a proxy waits for one
// another proxy frees.
func TestGlobalConnectionLimit(t *testing.T) {
	if GlobalMaxConns < 256 || GlobalMaxConns > 16384 {
		t.Fatalf("GlobalMaxConns = %d", GlobalMaxConns)
	}
	srv := httptest.NewServer(http.HandlerFunc(hello))
	defer srv.Close()
	port := portOf(t, srv.URL)
	h := newHarness(t, []string{"127.0.0.1:" + port}, nil)
	// Take all global slots but one, as other sessions would.
	taken := 0
	defer func() {
		for ; taken > 0; taken-- {
			<-globalSlots
		}
	}()
	for len(globalSlots) < cap(globalSlots)-1 {
		globalSlots <- struct{}{}
		taken++
	}
	// The accept loop takes the last slot before it accepts. If it held
	// one already (it may have started before the loop above), the last
	// free one is taken here, so that exactly the accept loop's remains.
	for wait := time.Now().Add(time.Second); len(globalSlots) < cap(globalSlots) && time.Now().Before(wait); {
		time.Sleep(5 * time.Millisecond)
	}
	if len(globalSlots) < cap(globalSlots) {
		globalSlots <- struct{}{}
		taken++
	}
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT 127.0.0.1:%s HTTP/1.1\r\n\r\n", port)
	line, _ := bufio.NewReader(c).ReadString('\n')
	if !strings.Contains(line, "200") {
		t.Fatalf("with one global slot left: %q", line)
	}
	second, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	io.WriteString(second, "GET http://127.0.0.1:"+port+"/second HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	second.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := second.Read(make([]byte, 1)); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("no global slot left: read %d, %v; want it to wait", n, err)
	}
	<-globalSlots
	taken--
	second.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, _ := io.ReadAll(second)
	if !strings.Contains(string(got), "hello GET /second") {
		t.Errorf("not served when a global slot freed: %q", got)
	}
}

func socks5Refused(t *testing.T, addr string) (net.Conn, byte) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write([]byte{5, 1, 0})
	var m [2]byte
	io.ReadFull(c, m[:])
	return c, m[1]
}

func TestIdleTimeout(t *testing.T) {
	port := loopbackServer(t, func(c net.Conn) { io.Copy(c, c) }) // echo, never closes on its own
	h := newHarness(t, []string{"127.0.0.1:" + port}, func(c *Config) { c.IdleTimeout = 300 * time.Millisecond })
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT 127.0.0.1:%s HTTP/1.1\r\n\r\n", port)
	br := bufio.NewReader(c)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line == "\r\n" {
			break
		}
	}
	// Busy for longer than the idle timeout: stays open.
	var start time.Time
	for i := 0; i < 10; i++ {
		if i > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		fmt.Fprintf(c, "ping%d\n", i)
		if line, err := br.ReadString('\n'); err != nil || line != fmt.Sprintf("ping%d\n", i) {
			t.Fatalf("echo %d: %q %v", i, line, err)
		}
		start = time.Now()
	}
	// Then silent: closed after the idle timeout.
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("idle tunnel: %v, want EOF", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("closed after %v, before the idle timeout", d)
	}
	recs := h.waitRecords(1)
	if r := recs[0]; !r.Allowed || r.BytesOut != 60 || r.BytesIn != 60 || !strings.Contains(r.Reason, "idle timeout") {
		t.Errorf("record: %+v", r)
	}
}

func TestCloseEndsConnections(t *testing.T) {
	port := loopbackServer(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	h := newHarness(t, []string{"127.0.0.1:" + port}, nil)
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT 127.0.0.1:%s HTTP/1.1\r\n\r\n", port)
	bufio.NewReader(c).ReadString('\n')
	done := make(chan struct{})
	go func() { h.p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end an open tunnel")
	}
	if _, err := net.DialTimeout("tcp", h.addr, time.Second); err == nil {
		t.Error("the listener still accepts after Close")
	}
}

func TestParseHosts(t *testing.T) {
	m, err := ParseHosts(strings.NewReader("# test names\n127.0.0.1 api.test Other.Test.\n::1 api.test # six\n\n"))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(m["api.test"]) != "[127.0.0.1 ::1]" || fmt.Sprint(m["other.test"]) != "[127.0.0.1]" {
		t.Errorf("parsed %v", m)
	}
	for _, bad := range []string{"api.test 127.0.0.1\n", "127.0.0.1\n", "fe80::1%eth0 x\n"} {
		if _, err := ParseHosts(strings.NewReader(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// A sandbox hammering the proxy gets its decisions logged up to the rate,
// and the rest summed up, not written one by one.
func TestAuditRateLimit(t *testing.T) {
	h := newHarness(t, []string{"127.0.0.1:1"}, nil)
	n := AuditBurst + 500
	for i := 0; i < n; i++ {
		h.p.audit(Record{Proto: "http", Host: "evil.test", Port: 80, Reason: "denied"})
	}
	recs := h.records()
	if len(recs) > AuditBurst+AuditRate {
		t.Fatalf("%d records written for %d decisions", len(recs), n)
	}
	h.p.Close()
	recs = h.records()
	last := recs[len(recs)-1]
	suppressed, _ := strconv.Atoi(strings.Fields(last.Reason)[0])
	if !strings.Contains(last.Reason, "more denied egress requests were not logged") || last.Suppressed != suppressed || suppressed+len(recs)-1 != n {
		t.Errorf("summary %q after %d records, want the %d decisions accounted for", last.Reason, len(recs)-1, n)
	}
}

// A client may send its first bytes right behind CONNECT, before the 200.
func TestConnectPipelined(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(hello))
	defer srv.Close()
	port := portOf(t, srv.URL)
	h := newHarness(t, []string{"127.0.0.1:" + port}, nil)
	got := rawExchange(t, h.addr, "CONNECT 127.0.0.1:"+port+" HTTP/1.1\r\n\r\nGET /early HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	if !strings.HasPrefix(got, "HTTP/1.1 200 Connection established\r\n\r\n") || !strings.Contains(got, "hello GET /early") {
		t.Errorf("pipelined CONNECT: %q", got)
	}
}

// Heads are bounded: an endless header line from the sandbox, or from an
// allowed upstream, ends the exchange instead of growing the proxy.
func TestHeadLimits(t *testing.T) {
	port := loopbackServer(t, func(c net.Conn) {
		defer c.Close()
		http.ReadRequest(bufio.NewReader(c))
		io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Long: ")
		chunk := []byte(strings.Repeat("a", 64<<10))
		for i := 0; i < 64; i++ {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	})
	h := newHarness(t, []string{"127.0.0.1:" + port}, nil)
	got := rawExchange(t, h.addr, "GET http://127.0.0.1:"+port+"/ HTTP/1.1\r\nHost: x\r\n\r\n")
	if !strings.Contains(got, "502 Bad Gateway") {
		t.Errorf("endless upstream header: %.200q", got)
	}
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	go func() {
		io.WriteString(c, "GET http://127.0.0.1:"+port+"/ HTTP/1.1\r\nX-Long: ")
		chunk := []byte(strings.Repeat("a", 64<<10))
		for i := 0; i < 64; i++ {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	}()
	b, _ := io.ReadAll(c)
	if !strings.Contains(string(b), "431 Request Header Fields Too Large") || !strings.Contains(string(b), "head larger than") {
		t.Errorf("endless request header: %.200q", b)
	}
}

// An upstream that closes a kept-alive connection while it is idle does
// not turn the client's next request into an error.
func TestStaleUpstream(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(hello))
	srv.Config.IdleTimeout = 50 * time.Millisecond
	srv.Start()
	defer srv.Close()
	port := portOf(t, srv.URL)
	h := newHarness(t, []string{"127.0.0.1:" + port}, nil)
	u, _ := url.Parse("http://" + h.addr)
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u)}}
	for i := 0; i < 3; i++ {
		if code, body := get(t, c, "http://127.0.0.1:"+port+"/again"); code != 200 || !strings.Contains(body, "hello GET /again") {
			t.Fatalf("request %d after the upstream closed its idle connection: %d %q", i, code, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, r := range h.records() {
		if !r.Allowed || r.Reason != "" {
			t.Errorf("record %+v", r)
		}
	}
}

// What a record or an error answer repeats of what the sandbox sent is
// bounded: a 60 KiB name or request line makes a record of a few hundred
// bytes, not one as large as the request head.
func TestAuditRecordSizeBounded(t *testing.T) {
	h := newHarness(t, []string{"api.test:443"}, nil)
	long := strings.Repeat("a", 60<<10)
	for name, in := range map[string]string{
		"connect-host": "CONNECT " + long + ".test:443 HTTP/1.1\r\n\r\n",
		"http-host":    "GET http://" + long + ".test/ HTTP/1.1\r\n\r\n",
		"bad-line":     "GET " + long + "\r\n\r\n",
		"bad-connect":  "CONNECT " + long + " HTTP/1.1\r\n\r\n",
		"utf8-host":    "CONNECT " + strings.Repeat("é", 30<<10) + ":443 HTTP/1.1\r\n\r\n",
	} {
		before := len(h.records())
		answer := rawExchange(t, h.addr, in)
		rec := h.waitRecords(before + 1)[before]
		b, _ := json.Marshal(rec)
		if len(b) > 1500 || len(rec.Host) > MaxAuditHost+len("…+99999 bytes") || !utf8.ValidString(rec.Host) || !utf8.ValidString(rec.Reason) {
			t.Errorf("%s: record of %d bytes: %.300s", name, len(b), b)
		}
		if !strings.Contains(string(b), "bytes") || !strings.Contains(rec.Host+rec.Reason, "…+") {
			t.Errorf("%s: the record does not say it was shortened: %.300s", name, b)
		}
		if len(answer) > 1024 || !strings.HasPrefix(answer, "HTTP/1.1 4") {
			t.Errorf("%s: answer of %d bytes: %.200q", name, len(answer), answer)
		}
	}
	// Short texts pass whole.
	before := len(h.records())
	rawExchange(t, h.addr, "CONNECT evil.test:443 HTTP/1.1\r\n\r\n")
	if rec := h.waitRecords(before + 1)[before]; rec.Host != "evil.test" || strings.Contains(rec.Reason, "…") {
		t.Errorf("short record changed: %+v", rec)
	}
}

// A sandbox sending denied requests with long names as fast as it can
// writes at most the byte budget to the audit log, and every decision is
// still accounted for in the summary.
func TestAuditBytesRateLimit(t *testing.T) {
	h := newHarness(t, []string{"api.test:443"}, nil)
	in := "CONNECT " + strings.Repeat("a", 60<<10) + ".test:443 HTTP/1.1\r\n\r\n"
	start := time.Now()
	n := 0
	for time.Since(start) < time.Second {
		c, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, in)
		io.Copy(io.Discard, c)
		c.Close()
		n++
	}
	h.p.Close()
	elapsed := time.Since(start).Seconds()
	var total, logged, suppressed int
	for _, r := range h.records() {
		b, _ := json.Marshal(r)
		total += len(b)
		if r.Suppressed > 0 {
			suppressed += r.Suppressed
		} else {
			logged++
		}
	}
	budget := AuditBytesBurst + int(elapsed*AuditBytesRate) + 2048
	t.Logf("%d requests in %.1fs: %d records, %d bytes of audit (budget %d), %d suppressed", n, elapsed, logged, total, budget, suppressed)
	if total > budget {
		t.Errorf("%d bytes of audit in %.1fs, over the budget of %d", total, elapsed, budget)
	}
	if logged+suppressed != n {
		t.Errorf("%d logged + %d suppressed != %d decisions", logged, suppressed, n)
	}
}

// A server that stops reading stalls a tunnel with a bounded amount of
// the sandbox's data waiting in the daemon's kernel buffers: not the
// kernel's autotuned maxima (up to tens of MiB per connection).
func TestStalledPeerPinsLittle(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var held []net.Conn
	var mu sync.Mutex
	defer func() {
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.(*net.TCPConn).SetReadBuffer(4096)
			mu.Lock()
			held = append(held, c) // never reads
			mu.Unlock()
		}
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	h := newHarness(t, []string{"127.0.0.1:" + port}, nil)
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.(*net.TCPConn).SetWriteBuffer(4096)
	io.WriteString(c, "CONNECT 127.0.0.1:"+port+" HTTP/1.1\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, _ := bufio.NewReader(io.LimitReader(c, 12)).ReadString(' '); line != "HTTP/1.1 " {
		t.Fatalf("CONNECT: %q", line)
	}
	chunk := make([]byte, 64<<10)
	var n int
	for {
		c.SetWriteDeadline(time.Now().Add(500 * time.Millisecond))
		k, err := c.Write(chunk)
		n += k
		if err != nil || n > 64<<20 {
			break
		}
	}
	t.Logf("stalled after %d KiB", n>>10)
	if n > 3<<20 || n < 64<<10 {
		t.Errorf("%d KiB taken before the tunnel stalled; want 64 KiB to 3 MiB", n>>10)
	}
}

// An operator ceiling of any address intersected with a skill naming the
// metadata service or loopback opens neither: the ceiling alone does not.
func TestIntersectionOpensNoSpecialAddress(t *testing.T) {
	ceiling, err := policies.Parse("ceiling.toml", []byte("name = \"ceiling\"\n[network]\nallow = [\"0.0.0.0/0:*\", \"api.test:*\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	skill, err := policies.Parse("skill.toml", []byte("name = \"skill\"\n[network]\nallow = [\"169.254.169.254:80\", \"127.0.0.1:*\", \"8.8.8.8:80\", \"api.test:80\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	eff, err := policies.Intersect(skill, ceiling)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(eff.Network.Allow, " "); got != "8.8.8.8:80 api.test:80" {
		t.Errorf("effective network.allow %q", got)
	}
	for _, rules := range [][]string{eff.Network.Allow, ceiling.Network.Allow} {
		h := newHarness(t, rules, nil)
		for _, a := range []string{"169.254.169.254", "127.0.0.1"} {
			if why, opener := h.p.refuseAddr(netip.MustParseAddr(a), 80); why == "" {
				t.Errorf("rules %v open %s:80 (by %s)", rules, a, opener)
			}
		}
	}
}
