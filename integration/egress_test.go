package integration

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// upstreams are real servers on the host's loopback that sandboxes reach
// through the egress proxy: HTTP on two ports, HTTPS with a test CA, and a
// port nobody is allowed. Test names resolve to 127.0.0.1 through a hosts
// file the daemon reads (WARDEN_EGRESS_HOSTS), never through DNS.
type upstreams struct {
	http, http2, tls, other int
	caPEM                   []byte
	hosts                   string // the hosts file
	env                     []string
	repo                    string // a git repository served over dumb HTTP
}

const egressBody = "egress-ok"

func startUpstreams(t *testing.T) *upstreams {
	t.Helper()
	u := &upstreams{}
	dir := tempDir(t)
	u.repo = filepath.Join(dir, "srv")
	mux := http.NewServeMux()
	mux.HandleFunc("/file", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "%s %s\n", egressBody, r.URL.Path) })
	mux.HandleFunc("/host", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "host=%s\n", r.Host) })
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Length", strconv.Itoa(n))
		w.Write(make([]byte, n))
	})
	mux.HandleFunc("/simple/warden-egress-probe/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<html><body><a href="/files/warden-egress-probe-1.2.3.tar.gz">warden-egress-probe-1.2.3.tar.gz</a></body></html>`)
	})
	mux.Handle("/git/", http.StripPrefix("/git/", http.FileServer(http.Dir(u.repo))))
	serve := func(tlsConfig *tls.Config) int {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if tlsConfig != nil {
			ln = tls.NewListener(ln, tlsConfig)
		}
		srv := &http.Server{Handler: mux}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		return ln.Addr().(*net.TCPAddr).Port
	}
	u.http, u.http2 = serve(nil), serve(nil)
	cert, caPEM := testCA(t)
	u.caPEM = caPEM
	u.tls = serve(&tls.Config{Certificates: []tls.Certificate{cert}})
	u.other = serve(nil)
	u.hosts = filepath.Join(dir, "hosts")
	hosts := "# names the egress tests control\n127.0.0.1 api.egress.test other.egress.test wild.egress.test a.wild.egress.test\n"
	if err := os.WriteFile(u.hosts, []byte(hosts), 0o644); err != nil {
		t.Fatal(err)
	}
	u.env = []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/root", "WARDEN_EGRESS_HOSTS=" + u.hosts}
	return u
}

// testCA makes a CA and a server certificate for the test names and
// 127.0.0.1, signed by it.
func testCA(t *testing.T) (tls.Certificate, []byte) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "warden egress test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "api.egress.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{"api.egress.test", "*.wild.egress.test"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
}

// makeRepo puts a git repository into the dumb-HTTP folder.
func (u *upstreams) makeRepo(t *testing.T) {
	t.Helper()
	work := filepath.Join(filepath.Dir(u.repo), "work")
	for _, args := range [][]string{
		{"init", "-q", work},
		{"-C", work, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "first"},
		{"clone", "-q", "--bare", work, filepath.Join(u.repo, "repo.git")},
		{"-C", filepath.Join(u.repo, "repo.git"), "update-server-info"},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
}

// egressPolicy allows the test upstreams; api.egress.test on http2 is
// allowed by name only, so its loopback address stays refused.
func (u *upstreams) egressPolicy() string {
	return fmt.Sprintf(`name = "egress-test"
[fs]
write = ["$WORK_DIR"]
[exec]
allow = ["curl", "sh", "cat", "python3", "git", "/usr/lib/git-core/git", "/usr/lib/git-core/git-remote-http"]
[network]
allow = [
  "127.0.0.1:%[1]d", "api.egress.test:%[1]d", "*.wild.egress.test:%[1]d",
  "api.egress.test:%[2]d", "127.0.0.1:%[2]d",
  "api.egress.test:%[3]d", "localhost:%[3]d",
]
[limits]
memory = "512MiB"
pids = 128
timeout = "30s"
`, u.http, u.tls, u.http2)
}

// egressExec runs a command in a session with the upstreams' environment,
// so a daemon started (or restarted) by the call reads the hosts file.
func (u *upstreams) exec(r *wardenRoot, id string, argv ...string) sandboxResult {
	r.t.Helper()
	return r.wardenEnv(u.env, append([]string{"exec", "--session", id, "--"}, argv...)...)
}

func (u *upstreams) create(r *wardenRoot, name, policy string) (string, string) {
	r.t.Helper()
	ws := tempDir(r.t)
	if err := os.WriteFile(filepath.Join(ws, "ca.pem"), u.caPEM, 0o644); err != nil {
		r.t.Fatal(err)
	}
	id := r.id(name)
	res := r.wardenEnv(u.env, "session", "create", "--policy", r.policy(policy), "--workspace", ws, "--id", id)
	if res.Exit != 0 {
		r.t.Fatalf("session create: exit %d: %s", res.Exit, res.Stderr)
	}
	return id, ws
}

// want checks one command's outcome: its exit code and text its output
// must contain.
func want(t *testing.T, what string, res sandboxResult, exit int, contains ...string) {
	t.Helper()
	out := res.Stdout + res.Stderr
	if res.Exit != exit {
		t.Errorf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", what, res.Exit, exit, res.Stdout, res.Stderr)
		return
	}
	for _, c := range contains {
		if !strings.Contains(out, c) {
			t.Errorf("%s: output lacks %q\nstdout: %s\nstderr: %s", what, c, res.Stdout, res.Stderr)
		}
	}
}

func hostIPv4(t *testing.T) string {
	t.Helper()
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	t.Fatal("the host has no non-loopback IPv4 address to try a direct connection to")
	return ""
}

func hostResolver(t *testing.T) string {
	data, _ := os.ReadFile("/etc/resolv.conf")
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "nameserver" && net.ParseIP(f[1]).To4() != nil {
			return f[1]
		}
	}
	return "8.8.8.8"
}

// pyConnect tries a direct connection from inside the sandbox and prints
// the errno it got (0: connected).
const pyConnect = `import socket, sys
fam = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
s = socket.socket(fam, socket.SOCK_DGRAM if sys.argv[3] == "udp" else socket.SOCK_STREAM)
s.settimeout(3)
try:
    if sys.argv[3] == "udp":
        # a DNS query for example.com
        q = bytes.fromhex("abcd01000001000000000000076578616d706c6503636f6d0000010001")
        s.sendto(q, (sys.argv[1], int(sys.argv[2])))
        s.recvfrom(512)
    elif sys.argv[3] == "bind":
        s.bind((sys.argv[1], int(sys.argv[2])))
    else:
        s.connect((sys.argv[1], int(sys.argv[2])))
    print("errno 0")
except socket.timeout:
    print("timeout")
except OSError as e:
    print("errno", e.errno)
`

type netRecord struct {
	Event    string  `json:"event"`
	Session  string  `json:"session"`
	Proto    string  `json:"proto"`
	Host     string  `json:"host"`
	Port     int     `json:"port"`
	Addr     string  `json:"addr"`
	Rule     string  `json:"rule"`
	BytesIn  int64   `json:"bytesIn"`
	BytesOut int64   `json:"bytesOut"`
	Duration float64 `json:"durationMs"`
	Reason   string  `json:"reason"`
	Count    int     `json:"count"` // a summary's: how many decisions it stands for
}

func netRecords(t *testing.T, out string) []netRecord {
	t.Helper()
	var recs []netRecord
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue // no lines
		}
		var rec netRecord
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("audit line is not JSON: %q", line)
		}
		if strings.HasPrefix(rec.Event, "net.") {
			recs = append(recs, rec)
		}
	}
	return recs
}

// findRecord returns the first record for host:port with the given event.
func findRecord(recs []netRecord, event, proto, host string, port int) *netRecord {
	for i, r := range recs {
		if r.Event == event && r.Host == host && r.Port == port && (proto == "" || r.Proto == proto) {
			return &recs[i]
		}
	}
	return nil
}

// waitRecords reads a session's egress records until done accepts them
// (10 s at most) and returns the last read, for the caller to check. The proxy writes a record
// after its answer has reached the sandbox, an allowed request's after
// the response and a CONNECT's once both sides have closed, so the
// command that caused it may have returned before it is in the log.
func waitRecords(t *testing.T, r *wardenRoot, id string, done func([]netRecord) bool) []netRecord {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		res := r.warden("logs", "--session", id)
		if res.Exit != 0 {
			t.Fatalf("logs: exit %d: %s", res.Exit, res.Stderr)
		}
		recs := netRecords(t, res.Stdout)
		if done(recs) || time.Now().After(deadline) {
			return recs
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// settledRecords waits for done, then reads the records again after
// longer than the proxy takes to write a summary (a second after the
// first record over a budget), for tests that count them exactly: a
// record past those awaited would show by then.
func settledRecords(t *testing.T, r *wardenRoot, id string, done func([]netRecord) bool) []netRecord {
	t.Helper()
	waitRecords(t, r, id, done)
	time.Sleep(1500 * time.Millisecond)
	return waitRecords(t, r, id, func([]netRecord) bool { return true })
}

// hasRecords accepts records holding one with each event, proto, host and
// port of want.
func hasRecords(want ...netRecord) func([]netRecord) bool {
	return func(recs []netRecord) bool {
		for _, w := range want {
			if findRecord(recs, w.Event, w.Proto, w.Host, w.Port) == nil {
				return false
			}
		}
		return true
	}
}

// TestEgress: a session reaches exactly what its network.allow names,
// through the proxy, with every decision audited; everything else fails.
// On both engines: under gVisor the sandbox's agent listens on the proxy's
// port and relays to the same proxy on the host.
func TestEgress(t *testing.T) {
	u := startUpstreams(t)
	u.makeRepo(t)
	onEngines(t, func(t *testing.T, engine string) { egressSuite(t, u, engine) })
}

// onEngines runs test on every session engine.
func onEngines(t *testing.T, test func(t *testing.T, engine string)) {
	for _, engine := range sessionEngines {
		t.Run(engine, func(t *testing.T) {
			if engine == "gvisor" {
				requireRunsc(t)
			}
			test(t, engine)
		})
	}
}

func egressSuite(t *testing.T, u *upstreams, engine string) {
	r := newRoot(t)
	id, _ := u.create(r, "egress", enginePolicy(engine, u.egressPolicy()))
	curl := func(args ...string) sandboxResult {
		return u.exec(r, id, append([]string{"curl", "-sS", "--max-time", "10"}, args...)...)
	}
	H, T, H2, O := u.http, u.tls, u.http2, u.other
	url := func(host string, port int, path string) string {
		return fmt.Sprintf("http://%s:%d%s", host, port, path)
	}

	t.Run("proxy variables", func(t *testing.T) {
		res := u.exec(r, id, "sh", "-c", `echo "$HTTP_PROXY $https_proxy $ALL_PROXY $NO_PROXY"`)
		want(t, "env", res, 0, "http://127.0.0.1:3128 http://127.0.0.1:3128 http://127.0.0.1:3128 localhost,127.0.0.1,::1")
	})
	t.Run("allowed", func(t *testing.T) {
		want(t, "http by address", curl("--noproxy", "", url("127.0.0.1", H, "/file")), 0, egressBody)
		want(t, "http by name", curl(url("api.egress.test", H, "/file")), 0, egressBody)
		want(t, "name case and trailing dot", curl(url("API.Egress.Test.", H, "/file")), 0, egressBody)
		want(t, "https through CONNECT, test CA", curl("--cacert", "/workspace/ca.pem", fmt.Sprintf("https://api.egress.test:%d/file", T)), 0, egressBody)
		want(t, "wildcard subdomain", curl(url("a.wild.egress.test", H, "/file")), 0, egressBody)
		want(t, "SOCKS5, name resolved by the proxy", curl("--socks5-hostname", "127.0.0.1:3128", url("api.egress.test", H, "/file")), 0, egressBody)
		want(t, "SOCKS5, IPv4 literal", curl("--socks5", "127.0.0.1:3128", "--noproxy", "", url("127.0.0.1", H, "/file")), 0, egressBody)
		want(t, "https over SOCKS5", curl("--socks5-hostname", "127.0.0.1:3128", "--cacert", "/workspace/ca.pem", fmt.Sprintf("https://api.egress.test:%d/file", T)), 0, egressBody)
		want(t, "python urllib (env proxies)", u.exec(r, id, "python3", "-c",
			fmt.Sprintf("import urllib.request; print(urllib.request.urlopen('http://api.egress.test:%d/file').read().decode())", H)), 0, egressBody)
		want(t, "python requests https (env proxies)", u.exec(r, id, "python3", "-c",
			fmt.Sprintf("import requests; print(requests.get('https://api.egress.test:%d/file', verify='/workspace/ca.pem').text)", T)), 0, egressBody)
		want(t, "pip, index over https (env proxies)", u.exec(r, id, "python3", "-m", "pip", "index", "versions", "warden-egress-probe",
			"--index-url", fmt.Sprintf("https://api.egress.test:%d/simple/", T), "--cert", "/workspace/ca.pem",
			"--disable-pip-version-check", "--no-cache-dir"), 0, "warden-egress-probe (1.2.3)")
		want(t, "git clone over http", u.exec(r, id, "sh", "-c",
			fmt.Sprintf("git clone -q http://api.egress.test:%d/git/repo.git /workspace/clone && git -C /workspace/clone log --format=%%s", H)), 0, "first")
		want(t, "Host header comes from the URL", curl("-H", "Host: evil.example", url("api.egress.test", H, "/host")), 0, fmt.Sprintf("host=api.egress.test:%d", H))
	})
	t.Run("refused by the proxy", func(t *testing.T) {
		rules := `policy "egress-test" (allows *.wild.egress.test:`
		want(t, "same host, another port", curl("-w", "%{http_code}", url("api.egress.test", O, "/file")), 0,
			fmt.Sprintf("api.egress.test:%d matches no network.allow rule of %s", O, rules), "403")
		want(t, "same address, another port", curl("--noproxy", "", "-w", "%{http_code}", url("127.0.0.1", O, "/file")), 0, "matches no network.allow rule", "403")
		want(t, "https, another port", curl("--cacert", "/workspace/ca.pem", fmt.Sprintf("https://api.egress.test:%d/file", O)), 56, "403")
		want(t, "another host", curl("-w", "%{http_code}", url("other.egress.test", H, "/file")), 0, "other.egress.test:"+strconv.Itoa(H)+" matches no network.allow rule", "403")
		want(t, "wildcard does not match the apex", curl("-w", "%{http_code}", url("wild.egress.test", H, "/file")), 0, "wild.egress.test:"+strconv.Itoa(H)+" matches no network.allow rule", "403")
		want(t, "a name resolving to loopback, address not named", curl("-w", "%{http_code}", url("api.egress.test", H2, "/file")), 0,
			"resolves to 127.0.0.1 (loopback), which only a network.allow rule naming the address opens", "403")
		want(t, "localhost from the host's /etc/hosts", curl("--noproxy", "", "-w", "%{http_code}", url("localhost", H2, "/file")), 0, "127.0.0.1 (loopback)", "403")
		want(t, "SOCKS5 to another host", curl("--socks5-hostname", "127.0.0.1:3128", url("other.egress.test", H, "/file")), 97)
		want(t, "SOCKS5 to another port", curl("--socks5-hostname", "127.0.0.1:3128", url("api.egress.test", O, "/file")), 97)
		want(t, "metadata address", curl("--noproxy", "", "-w", "%{http_code}", "http://169.254.169.254/latest/meta-data/"), 0, "169.254.169.254:80 matches no network.allow rule", "403")
		// The server on http2 answers from the host: the refusal is the proxy's.
		if resp, err := http.Get(url("127.0.0.1", H2, "/file")); err != nil {
			t.Errorf("the upstream on %d does not answer the host: %v", H2, err)
		} else {
			resp.Body.Close()
		}
	})
	t.Run("bypasses fail closed", func(t *testing.T) {
		py := func(args ...string) sandboxResult {
			return u.exec(r, id, append([]string{"python3", "-c", pyConnect}, args...)...)
		}
		want(t, "curl ignoring the proxy", curl("--noproxy", "*", url("127.0.0.1", H, "/file")), 7)
		want(t, "curl ignoring the proxy, by name (no DNS inside)", curl("--noproxy", "*", url("api.egress.test", H, "/file")), 6)
		want(t, "curl with SOCKS5 and local DNS", curl("--socks5", "127.0.0.1:3128", url("api.egress.test", H, "/file")), 97)
		want(t, "TCP to the sandbox's own loopback", py("127.0.0.1", strconv.Itoa(H), "tcp"), 0, "errno 111")
		want(t, "TCP to the host's address", py(hostIPv4(t), strconv.Itoa(H), "tcp"), 0, "errno 101")
		want(t, "TCP to an outside address", py("1.1.1.1", "443", "tcp"), 0, "errno 101")
		want(t, "TCP over IPv6", py("2606:4700:4700::1111", "443", "tcp"), 0, "errno 101")
		want(t, "UDP DNS to the host's resolver", py(hostResolver(t), "53", "udp"), 0, "errno 101")
		want(t, "UDP DNS to an outside resolver", py("8.8.8.8", "53", "udp"), 0, "errno 101")
		want(t, "DNS through the sandbox's resolv.conf", u.exec(r, id, "python3", "-c",
			"import socket\ntry:\n  socket.getaddrinfo('example.com', 80); print('resolved')\nexcept OSError as e: print('failed', e)"), 0, "failed")
		want(t, "TCP DNS to the host's resolver", py(hostResolver(t), "53", "tcp"), 0, "errno 101")
		want(t, "taking the proxy's port", py("127.0.0.1", "3128", "bind"), 0, "errno 98")
		want(t, "raw ICMP socket", u.exec(r, id, "python3", "-c",
			"import socket\ntry:\n  socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); print('opened')\nexcept OSError as e: print('errno', e.errno)"), 0, "errno 1")
		want(t, "ping socket", u.exec(r, id, "python3", "-c",
			"import socket\ntry:\n  s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP); s.sendto(b'\\x08\\0\\0\\0\\0\\0\\0\\0', ('1.1.1.1', 0)); print('sent')\nexcept OSError as e: print('errno', e.errno)"), 0, map[string]string{"container": "errno 13", "gvisor": "errno 101"}[engine]) // gVisor opens the socket; it has no route
	})
	t.Run("audit", func(t *testing.T) {
		// A denial's reason must contain the Reason given here.
		wanted := []netRecord{
			{Event: "net.allow", Proto: "http", Host: "127.0.0.1", Port: H},
			{Event: "net.allow", Proto: "http", Host: "api.egress.test", Port: H},
			{Event: "net.allow", Proto: "connect", Host: "api.egress.test", Port: T},
			{Event: "net.allow", Proto: "socks5", Host: "api.egress.test", Port: H},
			{Event: "net.allow", Proto: "socks5", Host: "127.0.0.1", Port: H},
			{Event: "net.deny", Proto: "http", Host: "api.egress.test", Port: O, Reason: "matches no network.allow rule"},
			{Event: "net.deny", Proto: "connect", Host: "api.egress.test", Port: O, Reason: "matches no network.allow rule"},
			{Event: "net.deny", Proto: "http", Host: "other.egress.test", Port: H, Reason: "matches no network.allow rule"},
			{Event: "net.deny", Proto: "http", Host: "wild.egress.test", Port: H, Reason: "matches no network.allow rule"},
			{Event: "net.deny", Proto: "http", Host: "api.egress.test", Port: H2, Reason: "(loopback)"},
			{Event: "net.deny", Proto: "http", Host: "localhost", Port: H2, Reason: "(loopback)"},
			{Event: "net.deny", Proto: "socks5", Host: "other.egress.test", Port: H, Reason: "matches no network.allow rule"},
			{Event: "net.deny", Proto: "socks5", Host: "api.egress.test", Port: O, Reason: "matches no network.allow rule"},
			{Event: "net.deny", Proto: "http", Host: "169.254.169.254", Port: 80, Reason: "matches no network.allow rule"},
		}
		recs := waitRecords(t, r, id, hasRecords(wanted...))
		for _, c := range wanted {
			rec := findRecord(recs, c.Event, c.Proto, c.Host, c.Port)
			switch {
			case rec == nil:
				t.Errorf("no %s record for %s %s:%d", c.Event, c.Proto, c.Host, c.Port)
			case c.Event == "net.allow" && (rec.BytesIn == 0 || rec.BytesOut == 0 || rec.Duration <= 0 || rec.Addr != fmt.Sprintf("127.0.0.1:%d", c.Port) || rec.Rule == "" || rec.Reason != ""):
				t.Errorf("allowed record lacks bytes, duration, address or rule: %+v", *rec)
			case c.Event == "net.deny" && !strings.Contains(rec.Reason, c.Reason):
				t.Errorf("denied record's reason %q lacks %q", rec.Reason, c.Reason)
			}
		}
		if rec := findRecord(recs, "net.allow", "http", "api.egress.test", H); rec != nil && rec.Rule != fmt.Sprintf("api.egress.test:%d + 127.0.0.1:%d", H, H) {
			t.Errorf("a name reaching loopback should name both rules: %q", rec.Rule)
		}
	})
	t.Run("the listener lives in the sandbox, served by the daemon", func(t *testing.T) {
		if engine == "gvisor" {
			// In gVisor's own network stack, which the host cannot list:
			// the bypass tests above show the port taken and served.
			if listenerInode(t, "/proc/self/net/tcp", "0100007F:0C38") != "" {
				t.Errorf("something listens on the host's 127.0.0.1:3128")
			}
			return
		}
		inode := checkListener(t, r, id)
		if res := r.warden("session", "rm", id); res.Exit != 0 {
			t.Fatalf("session rm: %s", res.Stderr)
		}
		if n := socketHolders(r, inode); n != 0 {
			t.Errorf("after session rm the daemon still holds the proxy's listener")
		}
	})
}

// checkListener: the sandbox's netns has 127.0.0.1:3128 listening on a
// socket the daemon holds, and the host's netns has no such listener.
func checkListener(t *testing.T, r *wardenRoot, id string) string {
	t.Helper()
	inode := listenerInode(t, fmt.Sprintf("/proc/%d/net/tcp", r.agentPid(id)), "0100007F:0C38")
	if inode == "" {
		t.Fatalf("nothing listens on 127.0.0.1:3128 inside session %s", id)
	}
	if hostInode := listenerInode(t, "/proc/self/net/tcp", "0100007F:0C38"); hostInode == inode {
		t.Errorf("the proxy's listener is in the host's network namespace")
	}
	// A child the daemon forks (a pool's refill) holds a copy for the
	// moment before it execs: the count settles at one.
	holders := socketHolders(r, inode)
	for deadline := time.Now().Add(5 * time.Second); holders != 1 && time.Now().Before(deadline); holders = socketHolders(r, inode) {
		time.Sleep(20 * time.Millisecond)
	}
	if holders != 1 {
		t.Errorf("the listener (inode %s) is held by %d processes of the daemon, want 1", inode, holders)
	}
	return inode
}

// socketHolders counts the descriptors of the root's processes open on a
// socket inode.
func socketHolders(r *wardenRoot, inode string) int {
	holders := 0
	for _, pid := range r.processes() {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); l == "socket:["+inode+"]" {
				holders++
			}
		}
	}
	return holders
}

func listenerInode(t *testing.T, path, local string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 9 && f[1] == local && f[3] == "0A" { // LISTEN
			return f[9]
		}
	}
	return ""
}

// TestEgressTwoSessions: two sessions with different allow-lists, used at
// the same time, each get exactly their own.
func TestEgressTwoSessions(t *testing.T) {
	u := startUpstreams(t)
	r := newRoot(t)
	policy := func(name string, port int) string {
		return fmt.Sprintf(`name = %q
[exec]
allow = ["curl"]
[network]
allow = ["api.egress.test:%[2]d", "127.0.0.1:%[2]d"]
`, name, port)
	}
	a, _ := u.create(r, "egress-a", policy("only-a", u.http))
	b, _ := u.create(r, "egress-b", policy("only-b", u.http2))
	var wg sync.WaitGroup
	results := map[string]sandboxResult{}
	var mu sync.Mutex
	for i := 0; i < 5; i++ {
		for _, c := range []struct {
			id   string
			port int
		}{{a, u.http}, {a, u.http2}, {b, u.http}, {b, u.http2}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res := u.exec(r, c.id, "curl", "-sS", "--max-time", "10", "-w", "%{http_code}", fmt.Sprintf("http://api.egress.test:%d/file", c.port))
				mu.Lock()
				results[fmt.Sprintf("%s %d %d", c.id, c.port, i)] = res
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	for key, res := range results {
		f := strings.Fields(key)
		id, port := f[0], f[1]
		own := id == a && port == strconv.Itoa(u.http) || id == b && port == strconv.Itoa(u.http2)
		if own {
			want(t, key+" (own)", res, 0, egressBody, "200")
		} else {
			policy := map[string]string{a: "only-a", b: "only-b"}[id]
			want(t, key+" (the other's)", res, 0, "403", `policy "`+policy+`"`)
		}
	}
	// b's own: 5 requests allowed (http2), 5 denied (http).
	recs := settledRecords(t, r, b, func(recs []netRecord) bool { return len(recs) >= 10 })
	allowed, denied := 0, 0
	for _, rec := range recs {
		switch {
		case rec.Session != b:
			t.Errorf("logs --session %s shows %+v", b, rec)
		case rec.Event == "net.allow" && rec.Port == u.http2:
			allowed++
		case rec.Event == "net.deny" && rec.Port == u.http:
			denied++
		}
	}
	if len(recs) != 10 || allowed != 5 || denied != 5 {
		t.Errorf("session %s: %d egress records, %d allowed to %d and %d denied to %d; want 10: 5 and 5", b, len(recs), allowed, u.http2, denied, u.http)
	}
}

// TestEgressDaemonRestart: after kill -9 of the daemon, the next one
// re-adopts the session and serves its network again; the dead daemon's
// listener is gone with it.
func TestEgressDaemonRestart(t *testing.T) {
	u := startUpstreams(t)
	onEngines(t, func(t *testing.T, engine string) { egressDaemonRestart(t, u, engine) })
}

func egressDaemonRestart(t *testing.T, u *upstreams, engine string) {
	r := newRoot(t)
	id, _ := u.create(r, "egress-restart", enginePolicy(engine, u.egressPolicy()))
	get := func() sandboxResult {
		return u.exec(r, id, "curl", "-sS", "--max-time", "10", fmt.Sprintf("http://api.egress.test:%d/file", u.http))
	}
	want(t, "before", get(), 0, egressBody)
	r.killDaemon(9)
	want(t, "after the daemon was killed and restarted", get(), 0, egressBody)
	want(t, "still refusing", u.exec(r, id, "curl", "-sS", "-w", "%{http_code}", fmt.Sprintf("http://other.egress.test:%d/file", u.http)), 0, "403")
	if engine == "container" {
		checkListener(t, r, id)
	}
}

// TestEgressDo: warden do serves the proxy from its own process.
func TestEgressDo(t *testing.T) {
	u := startUpstreams(t)
	onEngines(t, func(t *testing.T, engine string) { egressDo(t, u, engine) })
}

func egressDo(t *testing.T, u *upstreams, engine string) {
	r := newRoot(t)
	ws := tempDir(t)
	p := r.policy(enginePolicy(engine, u.egressPolicy()))
	res := r.wardenEnv(u.env, "do", "--policy", p, "--workspace", ws, "--", "sh", "-c",
		fmt.Sprintf("curl -sS http://api.egress.test:%d/file && curl -sS -w '%%{http_code}' http://other.egress.test:%d/file", u.http, u.http))
	want(t, "do", res, 0, egressBody, "403")
	data, err := os.ReadFile(filepath.Join(r.root, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	recs := netRecords(t, string(data))
	if findRecord(recs, "net.allow", "http", "api.egress.test", u.http) == nil || findRecord(recs, "net.deny", "http", "other.egress.test", u.http) == nil {
		t.Errorf("do's egress decisions are not in the audit log:\n%s", data)
	}
	for _, rec := range recs {
		if !strings.HasPrefix(rec.Session, "do-") {
			t.Errorf("record of session %q", rec.Session)
		}
	}
}

// TestEgressNone: without [network], no proxy and no way out.
func TestEgressNone(t *testing.T) {
	u := startUpstreams(t)
	onEngines(t, func(t *testing.T, engine string) { egressNone(t, u, engine) })
}

func egressNone(t *testing.T, u *upstreams, engine string) {
	r := newRoot(t)
	id, _ := u.create(r, "egress-none", enginePolicy(engine, `name = "offline"
[exec]
allow = ["curl", "sh"]
`))
	res := u.exec(r, id, "sh", "-c", `echo "proxy=[$HTTP_PROXY$http_proxy$ALL_PROXY]"`)
	want(t, "env", res, 0, "proxy=[]")
	want(t, "the proxy port", u.exec(r, id, "curl", "-sS", "--max-time", "5", "-x", "http://127.0.0.1:3128", fmt.Sprintf("http://api.egress.test:%d/file", u.http)), 7)
	want(t, "direct", u.exec(r, id, "curl", "-sS", "--max-time", "5", fmt.Sprintf("http://%s:%d/file", hostIPv4(t), u.http)), 7)
	if out := r.warden("logs", "--session", id); bytes.Contains([]byte(out.Stdout), []byte(`"net.`)) {
		t.Errorf("egress records for a session without network: %s", out.Stdout)
	}
}

// TestEgressPooled: a session that claims a pooled sandbox gets its proxy
// at the claim, before its first command, and it enforces the claiming
// policy as a cold start's does.
func TestEgressPooled(t *testing.T) {
	u := startUpstreams(t)
	r := newRoot(t)
	policy := r.policy(u.egressPolicy())
	if res := r.wardenEnv(u.env, "pool", "fill", "--policy", policy, "--size", "1"); res.Exit != 0 {
		t.Fatalf("pool fill: %s", res.Stderr)
	}
	r.waitPool(1)
	ws := tempDir(t)
	if err := os.WriteFile(filepath.Join(ws, "ca.pem"), u.caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	id := r.id("egress-pooled")
	if res := r.wardenEnv(u.env, "session", "create", "--policy", policy, "--workspace", ws, "--id", id); res.Exit != 0 {
		t.Fatalf("session create: %s", res.Stderr)
	}
	if r.container(id) == id || r.poolStatus()[0].Hits != 1 {
		t.Fatalf("session %s did not claim the pooled sandbox: %+v", id, r.poolStatus())
	}
	want(t, "allowed, by name", u.exec(r, id, "curl", "-sS", fmt.Sprintf("http://api.egress.test:%d/file", u.http)), 0, egressBody)
	want(t, "allowed, https", u.exec(r, id, "curl", "-sS", "--cacert", "/workspace/ca.pem", fmt.Sprintf("https://api.egress.test:%d/file", u.tls)), 0, egressBody)
	want(t, "another host", u.exec(r, id, "curl", "-sS", "-w", "%{http_code}", fmt.Sprintf("http://other.egress.test:%d/file", u.http)), 0, "403", `policy "egress-test"`)
	want(t, "direct", u.exec(r, id, "curl", "-sS", "--noproxy", "*", fmt.Sprintf("http://127.0.0.1:%d/file", u.http)), 7)
	checkListener(t, r, id)
	audited := hasRecords(
		netRecord{Event: "net.allow", Proto: "http", Host: "api.egress.test", Port: u.http},
		netRecord{Event: "net.deny", Proto: "http", Host: "other.egress.test", Port: u.http})
	if recs := waitRecords(t, r, id, audited); !audited(recs) {
		t.Errorf("pooled session's decisions are not audited under its id: %+v", recs)
	}
}
