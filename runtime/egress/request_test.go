package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
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

// headOf makes a request head of exactly n bytes.
func headOf(t *testing.T, port string, n int, extra string) string {
	t.Helper()
	head := "GET http://127.0.0.1:" + port + "/h HTTP/1.1\r\nHost: x\r\n" + extra + "X-Pad: "
	pad := n - len(head) - len("\r\n\r\n")
	if pad < 0 {
		t.Fatalf("a head of %d bytes is too short", n)
	}
	return head + strings.Repeat("p", pad) + "\r\n\r\n"
}

// Request heads are held to MaxHeaderBytes exactly, whatever the reader
// buffered ahead of them; over it the answer is 431 and an audit record,
// and nothing goes upstream. A body or a pipelined request after the head
// does not count.
func TestHeadLimitExact(t *testing.T) {
	var served atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "hello %s body %d", r.URL.Path, len(b))
	}))
	srv.Config.MaxHeaderBytes = 1 << 20 // before it serves: the race detector saw it set while serving
	srv.Start()
	defer srv.Close()
	port := portOf(t, srv.URL)
	h := newHarness(t, []string{"127.0.0.1:" + port}, nil)
	// At the limit, with a body and a second request right behind it.
	body := strings.Repeat("b", 20000)
	got := rawExchange(t, h.addr, headOf(t, port, MaxHeaderBytes, "Content-Length: 20000\r\n")+body+
		headOf(t, port, MaxHeaderBytes, "Connection: close\r\n"))
	if strings.Count(got, "hello /h") != 2 || !strings.Contains(got, "body 20000") {
		t.Fatalf("heads of exactly %d bytes: %.300q", MaxHeaderBytes, got)
	}
	before := served.Load()
	for _, n := range []int{MaxHeaderBytes + 1, MaxHeaderBytes + 4096, 97000} {
		got := rawExchange(t, h.addr, headOf(t, port, n, "Connection: close\r\n"))
		if !strings.Contains(got, "431 Request Header Fields Too Large") || !strings.Contains(got, "head larger than 65536 bytes") {
			t.Errorf("a head of %d bytes: %.300q", n, got)
		}
	}
	// The second request on a connection is held to it too.
	got = rawExchange(t, h.addr, headOf(t, port, 1000, "")+headOf(t, port, MaxHeaderBytes+1, ""))
	if !strings.Contains(got, "hello /h") || !strings.Contains(got, "431 Request Header Fields Too Large") {
		t.Errorf("an oversized second request: %.300q", got)
	}
	if n := served.Load() - before; n != 1 {
		t.Errorf("%d requests reached upstream; only the first of the last connection should", n)
	}
	var refused int
	for _, r := range h.records() {
		if !r.Allowed && strings.Contains(r.Reason, "request head larger than 65536 bytes") {
			refused++
		}
	}
	if refused != 4 {
		t.Errorf("%d audit records of oversized heads, want 4: %+v", refused, h.records())
	}
}

// Every request head on a connection must arrive within HandshakeTimeout
// of its first byte; between requests the connection may idle for
// IdleTimeout. A bad second request is audited like a first.
func TestHeadDeadlineEveryRequest(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(hello))
	defer srv.Close()
	port := portOf(t, srv.URL)
	h := newHarness(t, []string{"127.0.0.1:" + port}, func(c *Config) {
		c.HandshakeTimeout = 300 * time.Millisecond
		c.IdleTimeout = 10 * time.Second
	})
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	request := "GET http://127.0.0.1:" + port + "/k HTTP/1.1\r\nHost: x\r\n\r\n"
	for i := 0; i < 2; i++ {
		io.WriteString(c, request)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		time.Sleep(500 * time.Millisecond) // idle longer than the head deadline: fine
	}
	// A head dribbled a byte at a time is cut off at the head deadline,
	// not left to run to the idle timeout.
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, b := range []byte(request) {
			if _, err := c.Write([]byte{b}); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, _ := io.ReadAll(br)
	if d := time.Since(start); !strings.Contains(string(got), "408 Request Timeout") || d > 2*time.Second {
		t.Errorf("a dribbled second head: after %v, %q", d, got)
	}
	c.Close()
	<-done
	// A malformed second request is answered and audited.
	got2 := rawExchange(t, h.addr, request+"hello\r\n\r\n")
	if !strings.Contains(got2, "hello GET /k") || !strings.Contains(got2, "400 Bad Request") {
		t.Errorf("a malformed second request: %q", got2)
	}
	var slow, malformed int
	for _, r := range h.waitRecords(5) {
		switch {
		case r.Allowed:
		case strings.Contains(r.Reason, "request head not complete within 300ms"):
			slow++
		case strings.Contains(r.Reason, "malformed request"):
			malformed++
		default:
			t.Errorf("record %+v", r)
		}
	}
	if slow != 1 || malformed != 1 {
		t.Errorf("%d slow and %d malformed head records, want 1 and 1: %+v", slow, malformed, h.records())
	}
}
