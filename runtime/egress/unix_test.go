package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// unixHarness serves h's proxy on a unix stream listener as well: how a
// gVisor sandbox's connections reach it (relayed by its agent).
func unixHarness(t *testing.T, h *harness) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "egress.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	go h.p.Serve(ln)
	return path
}

// TestUnixStreamClients: a client on a unix stream socket gets what a TCP
// one gets: forwarded requests, CONNECT tunnels that carry bytes exactly
// and pass a half close on, refusals, and the idle timeout (read off the
// upstream alone).
func TestUnixStreamClients(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(hello))
	defer srv.Close()
	echo := loopbackServer(t, func(c net.Conn) {
		io.Copy(c, c)
		c.(*net.TCPConn).CloseWrite()
	})
	port := portOf(t, srv.URL)
	h := newHarness(t, []string{"api.test:" + port, "127.0.0.1:" + port, "127.0.0.1:" + echo}, func(c *Config) { c.IdleTimeout = 400 * time.Millisecond })
	path := unixHarness(t, h)
	dial := func() net.Conn {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	u, _ := url.Parse("http://proxy")
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(u),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return net.Dial("unix", path) }}}
	if code, body := get(t, client, "http://api.test:"+port+"/x"); code != 200 || body != "hello GET /x host=api.test:"+port {
		t.Errorf("forwarded over a unix socket: %d %q", code, body)
	}
	if code, _ := get(t, client, "http://other.test:"+port+"/"); code != 403 {
		t.Errorf("a host no rule names, over a unix socket: %d, want 403", code)
	}

	// A tunnel: 4 MiB there and back, byte for byte, then a half close.
	c := dial()
	fmt.Fprintf(c, "CONNECT 127.0.0.1:%s HTTP/1.1\r\n\r\n", echo)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT over a unix socket: %v %v", resp, err)
	}
	data := make([]byte, 4<<20)
	rand.Read(data)
	go func() {
		c.Write(data)
		c.(*net.UnixConn).CloseWrite()
	}()
	got, err := io.ReadAll(br)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("through the tunnel: %d bytes (want %d), equal %v, %v", len(got), len(data), bytes.Equal(got, data), err)
	}

	// Silent for longer than the idle timeout: closed.
	c = dial()
	fmt.Fprintf(c, "CONNECT 127.0.0.1:%s HTTP/1.1\r\n\r\n", echo)
	br = bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("an idle tunnel over a unix socket: %v, want EOF", err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("closed after %v, before the idle timeout", d)
	}
	var idled bool
	for _, r := range h.waitRecords(4) {
		idled = idled || strings.Contains(r.Reason, "idle timeout")
	}
	if !idled {
		t.Errorf("no record says the idle tunnel was closed for it: %+v", h.records())
	}
}
