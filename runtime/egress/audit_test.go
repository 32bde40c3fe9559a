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
	"strings"
	"sync"
	"testing"
	"time"
)

// A sandbox flooding the proxy with denied requests while it sends data to
// an allowed destination: every allowed exchange is logged with its bytes,
// and only denials are summed up.
func TestAuditFloodKeepsAllowed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // else the server may reset before all of it is sent
		hello(w, r)
	}))
	defer srv.Close()
	port := portOf(t, srv.URL)
	h := newHarness(t, []string{"api.test:" + port, "127.0.0.1:" + port}, nil)
	stop := make(chan struct{})
	var flood sync.WaitGroup
	var denials int
	var mu sync.Mutex
	for i := 0; i < 4; i++ {
		flood.Add(1)
		go func() {
			defer flood.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.Dial("tcp", h.addr)
				if err != nil {
					continue
				}
				io.WriteString(c, "CONNECT evil.test:443 HTTP/1.1\r\n\r\n")
				b, _ := io.ReadAll(c)
				c.Close()
				if strings.Contains(string(b), "403") {
					mu.Lock()
					denials++
					mu.Unlock()
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond) // the denials' budget is spent
	secret := strings.Repeat("s", 5000)
	const sends = 20
	for i := 0; i < sends; i++ {
		got := rawExchange(t, h.addr, fmt.Sprintf("POST http://api.test:%s/exfil%d HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", port, i, len(secret), secret))
		if !strings.Contains(got, "hello POST /exfil") {
			t.Fatalf("allowed POST %d during the flood: %.200q", i, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	flood.Wait()
	h.p.Close()
	var allowed, logged, suppressed int
	for _, r := range h.records() {
		switch {
		case r.Allowed && r.Suppressed > 0:
			t.Errorf("allowed records summed up while under their budget: %+v", r)
		case r.Allowed:
			allowed++
			if r.Host != "api.test" || r.BytesOut < int64(len(secret)) || r.Addr == "" {
				t.Errorf("allowed record: %+v", r)
			}
		case r.Suppressed > 0:
			suppressed += r.Suppressed
			if !strings.Contains(r.Reason, "denied egress requests were not logged") {
				t.Errorf("denials' summary: %q", r.Reason)
			}
		default:
			logged++
		}
	}
	t.Logf("%d denials: %d logged, %d summed up; %d allowed logged", denials, logged, suppressed, allowed)
	if allowed != sends {
		t.Errorf("%d of %d allowed exchanges logged during a flood of denials", allowed, sends)
	}
	if suppressed == 0 || logged+suppressed != denials {
		t.Errorf("%d denials logged + %d summed up, want %d with some summed up", logged, suppressed, denials)
	}
}

// Allowed records have a budget too (requests on a kept-alive connection
// are not bounded by the connection limit), generous, and what goes over
// it is one record naming the destinations and carrying every byte.
func TestAuditAllowedBudget(t *testing.T) {
	h := newHarness(t, []string{"*.api.test:443"}, nil)
	n := AuditAllowBurst + 1000
	var out, in int64
	for i := 0; i < n; i++ {
		r := Record{Allowed: true, Proto: "connect", Host: fmt.Sprintf("h%d.api.test", i%40), Port: 443, Addr: "192.0.2.1:443", Rule: "*.api.test:443", BytesOut: int64(i), BytesIn: 2 * int64(i)}
		out += r.BytesOut
		in += r.BytesIn
		h.p.audit(r)
	}
	// Denials have their own budget: still logged.
	h.p.audit(Record{Proto: "http", Host: "evil.test", Port: 80, Reason: "denied"})
	if recs := h.records(); len(recs) > AuditAllowBurst+AuditAllowRate+1 || recs[len(recs)-1].Allowed {
		t.Fatalf("%d records written for %d allowed decisions, the last %+v", len(recs), n, recs[len(recs)-1])
	}
	// The summary comes a second after the first record over the budget,
	// not only when the proxy closes.
	var sum Record
	for deadline := time.Now().Add(3 * time.Second); sum.Suppressed == 0; {
		for _, r := range h.records() {
			if r.Suppressed > 0 {
				sum = r
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no summary of the allowed records over the budget within 3 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	h.p.Close()
	var gotOut, gotIn int64
	var count int
	for _, r := range h.records() {
		if !r.Allowed {
			continue
		}
		gotOut += r.BytesOut
		gotIn += r.BytesIn
		if r.Suppressed > 0 {
			count += r.Suppressed
		} else {
			count++
		}
	}
	if count != n || gotOut != out || gotIn != in {
		t.Errorf("allowed records account for %d decisions, %d bytes out, %d in; want %d, %d, %d", count, gotOut, gotIn, n, out, in)
	}
	if !sum.Allowed || len(sum.Hosts) != SummaryHosts || !strings.HasSuffix(sum.Hosts[0], ".api.test:443") ||
		!strings.Contains(sum.Reason, "allowed requests and connections summed up") || !strings.Contains(sum.Reason, "to destinations not listed") {
		t.Errorf("summary: %+v", sum)
	}
}

// A matched rule whose name does not resolve or whose destination does not
// answer is an allowed request that failed, not a denial; the sandbox is
// told what failed, not the host's resolver or its dial errors, which the
// audit record keeps.
func TestFailureAnswers(t *testing.T) {
	closed := refusingPort(t)
	resolver := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
		return nil, errors.New("dial udp 10.255.255.53:53: no resolver here")
	}}
	h := newHarness(t, []string{"nx.test:*", fmt.Sprintf("127.0.0.1:%d", closed)}, func(c *Config) { c.Resolver = resolver })
	for _, tc := range []struct{ in, want string }{
		{"GET http://nx.test/ HTTP/1.1\r\nHost: nx.test\r\n\r\n", "502 Bad Gateway"},
		{"CONNECT nx.test:443 HTTP/1.1\r\n\r\n", "502 Bad Gateway"},
		{fmt.Sprintf("GET http://127.0.0.1:%d/ HTTP/1.1\r\nHost: x\r\n\r\n", closed), "502 Bad Gateway"},
		{fmt.Sprintf("CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n", closed), "502 Bad Gateway"},
	} {
		got := rawExchange(t, h.addr, tc.in)
		_, body, _ := strings.Cut(got, "\r\n\r\n")
		if !strings.Contains(got, tc.want) || (body != "warden egress: cannot resolve nx.test\n" && body != fmt.Sprintf("warden egress: cannot connect to 127.0.0.1:%d\n", closed)) {
			t.Errorf("%q: answer %q", tc.in, got)
		}
	}
	c, rep := socks5(t, h.addr, 1, 3, "nx.test", 443)
	c.Close()
	if rep != socksHostUnreach {
		t.Errorf("SOCKS5 to a name that does not resolve: reply %#x", rep)
	}
	c, rep = socks5(t, h.addr, 1, 1, "127.0.0.1", closed)
	c.Close()
	if rep != socksRefused {
		t.Errorf("SOCKS5 to a closed port: reply %#x", rep)
	}
	for _, r := range h.waitRecords(6) {
		detail := "connection refused"
		if r.Host == "nx.test" {
			detail = "10.255.255.53:53"
		}
		if !r.Allowed || r.Rule == "" || r.Addr != "" || r.BytesOut != 0 || !strings.Contains(r.Reason, "cannot ") || !strings.Contains(r.Reason, detail) {
			t.Errorf("failed request on a matched rule: %+v; want allowed, its rule, and the reason with %q", r, detail)
		}
	}
}

// An upstream that fails mid-exchange: the sandbox gets a generic answer,
// the audit record the error.
func TestUpstreamFailureAnswer(t *testing.T) {
	port := loopbackServer(t, func(c net.Conn) {
		http.ReadRequest(bufio.NewReader(c))
		io.WriteString(c, "garbage\r\n\r\n")
		c.Close()
	})
	h := newHarness(t, []string{"127.0.0.1:" + port}, nil)
	got := rawExchange(t, h.addr, "GET http://127.0.0.1:"+port+"/ HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, body, _ := strings.Cut(got, "\r\n\r\n"); !strings.Contains(got, "502") || body != "warden egress: no valid response from 127.0.0.1:"+port+"\n" {
		t.Errorf("answer %q", got)
	}
	if r := h.waitRecords(1)[0]; !r.Allowed || !strings.Contains(r.Reason, "malformed HTTP") {
		t.Errorf("record %+v", r)
	}
}
