package egress

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/policies"
)

func FuzzParseHosts(f *testing.F) {
	f.Add("127.0.0.1 a.test b.test\n::1 a.test # c\n")
	f.Add("# only a comment\n\n")
	f.Add("fe80::1%eth0 x\n")
	f.Fuzz(func(t *testing.T, text string) {
		hosts, err := ParseHosts(strings.NewReader(text))
		if err != nil {
			return
		}
		for name, addrs := range hosts {
			if name == "" || strings.ContainsAny(name, " \t#") || len(addrs) == 0 {
				t.Errorf("entry %q: %v", name, addrs)
			}
		}
	})
}

// FuzzProxyInput feeds arbitrary bytes to the proxy as a sandbox would:
// whatever comes in, the proxy answers or closes, never panics or hangs,
// and never dials anything but the one allowed upstream.
func FuzzProxyInput(f *testing.F) {
	srv := httptest.NewServer(http.HandlerFunc(hello))
	defer srv.Close()
	allowed := strings.TrimPrefix(srv.URL, "http://")
	for _, seed := range []string{
		"GET http://" + allowed + "/ HTTP/1.1\r\nHost: x\r\n\r\n",
		"CONNECT " + allowed + " HTTP/1.1\r\n\r\n",
		"\x05\x01\x00\x05\x01\x00\x03\x08api.test\x00\x50",
		"\x05\x02\x00\x02\x05\x01\x00\x01\x7f\x00\x00\x01\x00\x50",
		"\x04\x01\x00\x50\x7f\x00\x00\x01\x00",
		"POST http://" + allowed + "/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"GET http://[::1 HTTP/1.1\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	var mu sync.Mutex
	var dialed []string
	p := New(Config{Policy: "fuzz", Allow: mustRules(f, allowed), HandshakeTimeout: time.Second, IdleTimeout: time.Second,
		Audit: func(r Record) {
			if r.Addr != "" {
				mu.Lock()
				dialed = append(dialed, r.Addr)
				mu.Unlock()
			}
		}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	go p.Serve(ln)
	defer p.Close()
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write(in)
		c.(*net.TCPConn).CloseWrite()
		var out bytes.Buffer
		if _, err := out.ReadFrom(c); err != nil {
			t.Fatalf("no end to the answer for %q: %v", in, err)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, a := range dialed {
			if a != allowed {
				t.Fatalf("dialed %s", a)
			}
		}
	})
}

func mustRules(f *testing.F, rules ...string) []policies.HostPattern {
	f.Helper()
	var out []policies.HostPattern
	for _, r := range rules {
		h, err := policies.ParseHostPattern(r)
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, h)
	}
	return out
}
