package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// A name is matched, looked up in the pinned hosts and resolved in one
// spelling: a name with an empty label is refused before any of them, so
// "api.test.." cannot match rule api.test and then miss the pinned
// address and go to DNS.
func TestNameEmptyLabels(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(hello))
	defer srv.Close()
	port, _ := strconv.Atoi(portOf(t, srv.URL))
	var lookups atomic.Int32
	resolver := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
		lookups.Add(1)
		return nil, errors.New("no DNS in this test")
	}}
	h := newHarness(t, []string{fmt.Sprintf("api.test:%d", port), fmt.Sprintf("127.0.0.1:%d", port)}, func(c *Config) { c.Resolver = resolver })
	for _, host := range []string{"api.test..", "API.test..", ".api.test", "api..test", "api.test...", "."} {
		got := rawExchange(t, h.addr, fmt.Sprintf("GET http://%s:%d/ HTTP/1.1\r\nHost: x\r\n\r\n", host, port))
		if !strings.Contains(got, "403 Forbidden") || !strings.Contains(got, "empty label") {
			t.Errorf("http %s: %.300q", host, got)
		}
		got = rawExchange(t, h.addr, fmt.Sprintf("CONNECT %s:%d HTTP/1.1\r\n\r\n", host, port))
		if !strings.Contains(got, "403 Forbidden") || !strings.Contains(got, "empty label") {
			t.Errorf("connect %s: %.300q", host, got)
		}
		c, rep := socks5(t, h.addr, 1, 3, host, port)
		c.Close()
		if rep != socksNotAllowed {
			t.Errorf("socks5 %s: reply %#x", host, rep)
		}
	}
	// One trailing dot is the same name, pinned as well.
	for _, host := range []string{"api.test.", "API.TEST.", "127.0.0.1."} {
		got := rawExchange(t, h.addr, fmt.Sprintf("GET http://%s:%d/ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", host, port))
		if !strings.Contains(got, "hello GET /ok") {
			t.Errorf("http %s: %.300q", host, got)
		}
	}
	if n := lookups.Load(); n != 0 {
		t.Errorf("%d DNS lookups; every name here is pinned or refused", n)
	}
	for _, r := range h.waitRecords(21) {
		if !r.Allowed && (r.Rule != "" || !strings.Contains(r.Reason, "empty label")) {
			t.Errorf("record %+v", r)
		}
	}
}
