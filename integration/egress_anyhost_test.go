package integration

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// publicServer serves dir over HTTP on a public (not special) address in
// a network namespace the test makes, reached from the host over a veth
// pair: the kind of host "*:PORT" is for. It returns the address.
func publicServer(t *testing.T, dir string, port int) string {
	t.Helper()
	tag := randomHex(3)
	ns, host, peer := "wdn-pub-"+tag, "wpub"+tag, "wpeer"+tag
	const hostAddr, serverAddr = "11.77.0.2", "11.77.0.1"
	steps := [][]string{
		{"ip", "netns", "add", ns},
		{"ip", "link", "add", host, "type", "veth", "peer", "name", peer},
		{"ip", "link", "set", peer, "netns", ns},
		{"ip", "addr", "add", hostAddr + "/30", "dev", host},
		{"ip", "link", "set", host, "up"},
		{"ip", "netns", "exec", ns, "ip", "addr", "add", serverAddr + "/30", "dev", peer},
		{"ip", "netns", "exec", ns, "ip", "link", "set", peer, "up"},
		{"ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"},
	}
	t.Cleanup(func() {
		exec.Command("ip", "link", "del", host).Run()
		exec.Command("ip", "netns", "del", ns).Run()
	})
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", s, err, out)
		}
	}
	srv := exec.Command("ip", "netns", "exec", ns, "python3", "-m", "http.server", fmt.Sprint(port), "--bind", serverAddr, "--directory", dir)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("%s:%d", serverAddr, port), time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the public test server did not come up: %v", err)
		}
	}
	return serverAddr
}

// "*:PORT" lets a session reach any host on that port through the egress
// proxy, by name or address, while loopback, private, link-local and
// metadata addresses stay refused unless a rule names them, and other
// ports stay closed.
func TestEgressAnyHost(t *testing.T) {
	u := startUpstreams(t)
	site := tempDir(t)
	os.WriteFile(filepath.Join(site, "page"), []byte("public page\n"), 0o644)
	port := u.other + 1000
	if port > 65000 {
		port = 18080
	}
	addr := publicServer(t, site, port)
	hosts := filepath.Join(tempDir(t), "hosts")
	os.WriteFile(hosts, []byte(fmt.Sprintf("%s pub.egress.test\n127.0.0.1 api.egress.test\n", addr)), 0o644)
	u.env[len(u.env)-1] = "WARDEN_EGRESS_HOSTS=" + hosts
	r := newRoot(t)
	id, _ := u.create(r, "egress-any", fmt.Sprintf(`name = "any-host"
[exec]
allow = ["curl"]
[network]
allow = ["*:%d", "*:%d"]
`, port, u.http))
	curl := func(url string) sandboxResult {
		return u.exec(r, id, "curl", "-sS", "--max-time", "10", "-w", "%{http_code}", url)
	}
	want(t, "a public host by name", curl(fmt.Sprintf("http://pub.egress.test:%d/page", port)), 0, "public page", "200")
	want(t, "a public host by address", curl(fmt.Sprintf("http://%s:%d/page", addr, port)), 0, "public page", "200")
	want(t, "loopback by name", curl(fmt.Sprintf("http://api.egress.test:%d/file", u.http)), 0, "403")
	// curl does not proxy loopback (NO_PROXY); the sandbox's own has
	// nothing listening.
	want(t, "loopback by address", curl(fmt.Sprintf("http://127.0.0.1:%d/file", u.http)), 7)
	want(t, "metadata", curl(fmt.Sprintf("http://169.254.169.254:%d/", port)), 0, "403")
	want(t, "private", curl(fmt.Sprintf("http://10.1.2.3:%d/", port)), 0, "403")
	want(t, "the host's own address", curl(fmt.Sprintf("http://11.77.0.2:%d/", port)), 0, "403")
	want(t, "another port", curl(fmt.Sprintf("http://pub.egress.test:%d/page", port+1)), 0, "403")
}
