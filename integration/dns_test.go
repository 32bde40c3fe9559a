package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// In a session without network a name lookup fails at once, in glibc's
// resolver and in Go's own: nothing answers on the sandbox's loopback, and
// resolv.conf asks for one short try (a resolver that retried for seconds
// per lookup made Go's net tests run minutes).
func TestLookupFailsAtOnceWithoutNetwork(t *testing.T) {
	skill := tempDir(t)
	src := filepath.Join(tempDir(t), "lookup")
	os.MkdirAll(src, 0o755)
	writeFile(t, src, "go.mod", "module lookup\n\ngo 1.22\n")
	writeFile(t, src, "main.go", `package main

import (
	"fmt"
	"net"
	"os"
	"time"
)

func main() {
	start := time.Now()
	_, err := net.LookupHost("example.com")
	fmt.Printf("go lookup: err=%v took=%dms\n", err != nil, time.Since(start).Milliseconds())
	if err == nil {
		os.Exit(1)
	}
}
`)
	build := exec.Command("/usr/local/go/bin/go", "build", "-o", filepath.Join(skill, "lookup"), ".")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the lookup probe: %v\n%s", err, out)
	}
	r := newRoot(t)
	id := r.id("dns")
	policy := r.policy("name = \"dns\"\n[fs]\nread = [\"$SKILL_DIR\"]\nwrite = [\"$WORK_DIR\"]\n")
	if res := r.warden("session", "create", "--id", id, "--policy", policy, "--workspace", tempDir(t), "--skill-dir", skill); res.Exit != 0 {
		t.Fatalf("session create: %s", res.Stderr)
	}
	for name, argv := range map[string][]string{
		"go":    {"/skill/lookup"},
		"glibc": {"getent", "hosts", "example.com"},
	} {
		start := time.Now()
		res := r.exec(id, nil, argv...)
		took := time.Since(start)
		failed := res.Exit != 0 // getent: 2, not found
		if name == "go" {
			failed = res.Exit == 0 && strings.Contains(res.Stdout, "err=true")
		}
		if !failed || took > 3*time.Second {
			t.Errorf("%s lookup without network: exit %d after %s (%q %q); want a failure within 3 s", name, res.Exit, took.Round(time.Millisecond), res.Stdout, res.Stderr)
		}
	}
}
