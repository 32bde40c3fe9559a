package integration

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/runtime/egress"
	"golang.org/x/sys/unix"
)

// pyFlood sends argv[3] denied CONNECTs to the proxy from 4 threads and,
// spread over the second half of them, argv[2] allowed GETs to argv[1]
// (through the proxy the environment names): each made by one thread
// while the others go on flooding, and hundreds of denials after the
// last. It prints the allowed answers and how many 403s it got.
const pyFlood = `import socket, sys, threading, urllib.request
url, sends, denials = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
step = denials // 4 // sends
allowed = {denials // 2 + i * step: i for i in range(sends)}
tickets = iter(range(denials + sends))
lock = threading.Lock()
answers, refused = [], [0]
def flood():
    while True:
        with lock:
            t = next(tickets, None)
        if t is None:
            return
        if t in allowed:
            body = urllib.request.urlopen(url + "?leak=%d" % allowed[t], timeout=30).read().decode().strip()
            with lock:
                answers.append(body)
            continue
        s = socket.create_connection(("127.0.0.1", 3128), timeout=30)
        s.sendall(b"CONNECT evil.egress.test:443 HTTP/1.1\r\n\r\n")
        out = s.makefile("rb").read()
        s.close()
        if out.startswith(b"HTTP/1.1 403 "):
            with lock:
                refused[0] += 1
ts = [threading.Thread(target=flood) for _ in range(4)]
for t in ts: t.start()
for t in ts: t.join()
for a in answers: print(a)
print("refused", refused[0])
`

// pyRaw sends argv[1] (with \r\n escapes) to the proxy, after argv[2]
// bytes of padding in an X-Pad header if given, and prints the answer.
const pyRaw = `import socket, sys
req = sys.argv[1].replace("\\r\\n", "\r\n")
if len(sys.argv) > 2:
    head, _, rest = req.partition("\r\n")
    req = head + "\r\nX-Pad: " + "p" * int(sys.argv[2]) + "\r\n" + rest
s = socket.create_connection(("127.0.0.1", 3128), timeout=30)
s.sendall(req.encode())
out = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    out += b
print(out.decode("latin-1"))
`

// TestEgressAuditFlood: a sandbox flooding the proxy with denied requests
// while it reaches an allowed host cannot keep those requests out of the
// audit log; denials over their budget are counted, all of them.
func TestEgressAuditFlood(t *testing.T) {
	u := startUpstreams(t)
	r := newRoot(t)
	id, _ := u.create(r, "egress-flood", u.egressPolicy())
	// The allowed requests come after the first 1,500 denials: over the
	// denials' budget unless those took longer than 13 s.
	const sends, denials = 10, 3000
	start := time.Now()
	res := u.exec(r, id, "python3", "-c", pyFlood, fmt.Sprintf("http://api.egress.test:%d/file", u.http), strconv.Itoa(sends), strconv.Itoa(denials))
	elapsed := time.Since(start)
	want(t, "allowed requests during a flood of denials", res, 0, fmt.Sprintf("refused %d", denials))
	if n := strings.Count(res.Stdout, egressBody); n != sends {
		t.Errorf("%d of %d allowed requests during the flood got through:\n%s", n, sends, res.Stdout)
	}
	// The denials' summary follows a second after the first one over the
	// budget: wait until every denial is accounted for.
	tally := func(recs []netRecord) (allowed, denied, counted int) {
		for _, rec := range recs {
			switch {
			case rec.Event == "net.allow" && rec.Host == "api.egress.test" && rec.Port == u.http:
				allowed++
			case rec.Event == "net.deny" && rec.Host == "evil.egress.test":
				denied++
			case rec.Event == "net.suppressed":
				counted += rec.Count
			}
		}
		return allowed, denied, counted
	}
	recs := settledRecords(t, r, id, func(recs []netRecord) bool {
		allowed, denied, counted := tally(recs)
		return allowed >= sends && denied+counted >= denials
	})
	allowed, denied, counted := tally(recs)
	for _, rec := range recs {
		if rec.Event == "net.allow" && rec.Count > 0 {
			t.Errorf("allowed requests summed up while under their budget: %+v", rec)
		} else if rec.Event == "net.allow" && (rec.BytesOut == 0 || rec.Addr == "" || rec.Reason != "") {
			t.Errorf("allowed line: %+v", rec)
		}
	}
	t.Logf("%d denied requests in %s: %d lines, %d counted in summaries; %d allowed lines", denials, elapsed, denied, counted, allowed)
	if allowed != sends {
		t.Errorf("%d of %d allowed requests made during the flood are in the audit log", allowed, sends)
	}
	if denied+counted != denials {
		t.Errorf("%d denied requests: %d lines + %d counted; want all accounted for", denials, denied, counted)
	}
	if counted == 0 {
		t.Errorf("%d denied requests in %s all have a line: the flood never went over the denials' budget, so the allowed requests were not made under it", denials, elapsed)
	}
	if budget := egress.AuditBurst + int(egress.AuditRate*elapsed.Seconds()); denied > budget {
		t.Errorf("%d denial lines in %s: over the budget of %d", denied, elapsed, budget)
	}
	want(t, "still refusing", u.exec(r, id, "curl", "-sS", "-w", "%{http_code}", fmt.Sprintf("http://other.egress.test:%d/file", u.http)), 0, "403")
}

// TestEgressRequestChecks: names with an empty label are refused before
// the pinned hosts or DNS; request heads are held to 64 KiB; a matched
// name that does not resolve or a destination that does not answer gets
// a 502 that does not show the host's resolver or errors, and a net.allow
// line that does.
func TestEgressRequestChecks(t *testing.T) {
	u := startUpstreams(t)
	closed := refusingPort(t)
	r := newRoot(t)
	policy := strings.Replace(u.egressPolicy(), "allow = [\n", fmt.Sprintf("allow = [\n  \"nx.egress.test:%d\", \"127.0.0.1:%d\",\n", u.http, closed), 1)
	id, _ := u.create(r, "egress-checks", policy)
	raw := func(req string, pad ...int) sandboxResult {
		argv := []string{"python3", "-c", pyRaw, req}
		for _, p := range pad {
			argv = append(argv, strconv.Itoa(p))
		}
		return u.exec(r, id, argv...)
	}
	H := u.http
	want(t, "one trailing dot", raw(fmt.Sprintf(`GET http://api.egress.test.:%d/file HTTP/1.1\r\nConnection: close\r\n\r\n`, H)), 0, egressBody)
	for _, host := range []string{"api.egress.test..", ".api.egress.test", "api..egress.test"} {
		want(t, host, raw(fmt.Sprintf(`GET http://%s:%d/file HTTP/1.1\r\n\r\n`, host, H)), 0, "403 Forbidden", "empty label")
		want(t, "CONNECT "+host, raw(fmt.Sprintf(`CONNECT %s:%d HTTP/1.1\r\n\r\n`, host, H)), 0, "403 Forbidden", "empty label")
	}
	get := fmt.Sprintf(`GET http://api.egress.test:%d/file HTTP/1.1\r\nConnection: close\r\n\r\n`, H)
	want(t, "a head under 64 KiB", raw(get, 60000), 0, egressBody)
	want(t, "a head of 97,000 bytes", raw(get, 97000), 0, "431 Request Header Fields Too Large", "head larger than 65536 bytes")
	for _, c := range []struct{ req, answer string }{
		{fmt.Sprintf(`GET http://nx.egress.test:%d/file HTTP/1.1\r\n\r\n`, H), "warden egress: cannot resolve nx.egress.test\n"},
		{fmt.Sprintf(`GET http://127.0.0.1:%d/file HTTP/1.1\r\n\r\n`, closed), fmt.Sprintf("warden egress: cannot connect to 127.0.0.1:%d\n", closed)},
	} {
		res := raw(c.req)
		if _, body, _ := strings.Cut(res.Stdout, "\r\n\r\n"); !strings.Contains(res.Stdout, "502 Bad Gateway") || strings.TrimSpace(body) != strings.TrimSpace(c.answer) {
			t.Errorf("%s: answer %q, want a 502 saying only %q", c.req, res.Stdout, c.answer)
		}
	}
	oversized := func(recs []netRecord) bool {
		for _, rec := range recs {
			if rec.Event == "net.deny" && strings.Contains(rec.Reason, "request head larger than 65536 bytes") {
				return true
			}
		}
		return false
	}
	recs := waitRecords(t, r, id, func(recs []netRecord) bool {
		return oversized(recs) && hasRecords(
			netRecord{Event: "net.allow", Proto: "http", Host: "nx.egress.test", Port: H},
			netRecord{Event: "net.allow", Proto: "http", Host: "127.0.0.1", Port: closed},
			netRecord{Event: "net.deny", Proto: "http", Host: "api.egress.test..", Port: H})(recs)
	})
	for _, c := range []struct {
		host string
		port int
	}{{"nx.egress.test", H}, {"127.0.0.1", closed}} {
		rec := findRecord(recs, "net.allow", "http", c.host, c.port)
		if rec == nil || rec.Rule != fmt.Sprintf("%s:%d", c.host, c.port) || rec.Addr != "" || !strings.HasPrefix(rec.Reason, "cannot ") || len(rec.Reason) < len("cannot connect to 127.0.0.1:1: x") {
			t.Errorf("%s:%d: want a net.allow line with the rule and the error, got %+v", c.host, c.port, rec)
		}
	}
	if rec := findRecord(recs, "net.deny", "http", "api.egress.test..", H); rec == nil || !strings.Contains(rec.Reason, "empty label") {
		t.Errorf("no net.deny line for api.egress.test..: %+v", rec)
	}
	if !oversized(recs) {
		t.Errorf("no net.deny line for the oversized head")
	}
}

// refusingPort binds a loopback port for the rest of the test and never
// listens on it: connections to it are refused, and nothing else can take
// it meanwhile (the socket lacks SO_REUSEADDR, so even a listener with it
// cannot share the port, and connect(2) does not pick a bound port).
func refusingPort(t *testing.T) int {
	t.Helper()
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
