package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// The shell blocks of README.md and docs/*.md each carry a marker on the
// line before the fence: readmeTested for a block this test runs as
// written, or "<!-- untested: REASON -->" for one it cannot run. A new
// block without either fails the test, so the docs and the test cannot
// drift apart.
const (
	readmeTested   = "<!-- tested: integration/readme_test.go runs this block as written -->"
	readmeUntested = "<!-- untested: "
)

// The defaults a newcomer gets: no --root, no --audit-log.
const (
	defaultRoot     = "/run/warden"
	defaultAuditDir = "/var/log/warden"
	defaultConfig   = "/etc/warden/config.toml"
)

type readmeBlock struct {
	file   string // relative to the repository
	line   int    // of the opening fence
	text   string
	tested bool
}

// docFiles lists the pages whose blocks the test reads, in the order it
// runs them: README.md first (its "two commands" build what the rest
// use), then docs/*.md by name.
func docFiles(t *testing.T, repo string) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(repo, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(pages)
	files := []string{"README.md"}
	for _, p := range pages {
		files = append(files, filepath.Join("docs", filepath.Base(p)))
	}
	return files
}

// readmeBlocks reads a page's fenced shell blocks and their markers; it
// fails on a shell block with neither marker. file is relative to repo.
func readmeBlocks(t *testing.T, repo, file string) []readmeBlock {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repo, file))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []readmeBlock
	var cur *readmeBlock
	prev := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur != nil && strings.TrimSpace(line) == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		case strings.HasPrefix(line, "```"):
			info := strings.TrimSpace(strings.TrimPrefix(line, "```"))
			shell := info == "" || info == "sh" || info == "bash" || info == "shell" || info == "console"
			b := readmeBlock{file: file, line: n, tested: strings.TrimSpace(prev) == readmeTested}
			switch {
			case b.tested && info != "sh":
				t.Errorf("%s:%d: a block marked tested must be a ```sh block, not %q", file, n, line)
			case shell && !b.tested && !strings.HasPrefix(strings.TrimSpace(prev), readmeUntested):
				t.Errorf("%s:%d: a shell block without a marker: put %q (this test then runs it as written) or \"<!-- untested: REASON -->\" on the line before it", file, n, readmeTested)
			}
			if !shell {
				b.tested = false
			}
			cur = &b
		}
		prev = line
	}
	if cur != nil {
		t.Fatalf("%s:%d: a fenced block is never closed", file, cur.line)
	}
	return blocks
}

// TestReadme runs the marked shell blocks of README.md and docs/*.md
// exactly as written, in docFiles' order, as a newcomer would: as root in
// the repository's folder, warden found on PATH, the default state root /run/warden and the default audit log
// /var/log/warden/audit.log (the other tests use private roots). A block
// that fails fails the test. Nothing of what it made is left behind, and
// a /run/warden in use (a daemon, sessions, pooled sandboxes) or a
// configuration file that would start pools is never touched: the test
// fails and says so.
func TestReadme(t *testing.T) {
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	var tested []readmeBlock
	for _, file := range docFiles(t, repo) {
		n := len(tested)
		for _, b := range readmeBlocks(t, repo, file) {
			if b.tested {
				tested = append(tested, b)
			}
		}
		if file == "README.md" && len(tested) == n {
			t.Errorf("README.md has no block marked %q", readmeTested)
		}
	}
	if t.Failed() {
		return
	}
	rootExisted := checkDefaultRootUnused(t)
	_, err = os.Stat(defaultAuditDir)
	auditDirExisted := err == nil
	auditLog := filepath.Join(defaultAuditDir, "audit.log")
	auditBefore := fileSize(auditLog)

	r := &wardenRoot{t: t, root: defaultRoot}
	t.Cleanup(func() {
		r.teardown()
		if t.Failed() && len(mountsBelow(defaultRoot)) > 0 {
			return // never remove a folder with a mount below it
		}
		if !rootExisted {
			if err := os.RemoveAll(defaultRoot); err != nil {
				t.Errorf("removing the %s this test made: %v", defaultRoot, err)
			}
		} else {
			checkRootEmptied(t)
		}
		if !auditDirExisted {
			os.RemoveAll(defaultAuditDir)
		}
	})

	env := readmeEnv(t)
	for _, b := range tested {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		cmd := exec.CommandContext(ctx, "bash", "-c", "set -euo pipefail\n"+b.text)
		cmd.Dir, cmd.Env = repo, env
		cmd.WaitDelay = 5 * time.Second
		start := time.Now()
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("%s:%d: the block failed (%v) after %s:\n%s\noutput:\n%s", b.file, b.line, err, time.Since(start).Round(time.Millisecond), b.text, out)
		}
		t.Logf("%s:%d: ran in %s", b.file, b.line, time.Since(start).Round(time.Millisecond))
	}

	// What the blocks ran through the default root's daemon is recorded
	// in the default audit log.
	data, err := os.ReadFile(auditLog)
	if err != nil {
		t.Fatalf("the default audit log: %v", err)
	}
	if int64(len(data)) < auditBefore {
		t.Fatalf("the default audit log %s shrank", auditLog)
	}
	var execs int
	for _, line := range strings.Split(string(data[auditBefore:]), "\n") {
		var rec auditRecord
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Event == "exec" {
			execs++
		}
	}
	if execs == 0 {
		t.Errorf("the documented commands wrote no exec line to the default audit log %s", auditLog)
	}
}

// checkDefaultRootUnused fails the test, touching nothing, when the
// default root is in use; it reports whether the root exists.
func checkDefaultRootUnused(t *testing.T) bool {
	t.Helper()
	if _, err := os.Stat(defaultConfig); err == nil {
		t.Fatalf("%s exists: a daemon on the default root would keep its pools, which this test would then stop; run the test on a host without it", defaultConfig)
	}
	if _, err := os.Stat(defaultRoot); errors.Is(err, fs.ErrNotExist) {
		return false
	} else if err != nil {
		t.Fatal(err)
	}
	r := &wardenRoot{t: t, root: defaultRoot}
	if pids := r.processes(); len(pids) > 0 || daemonAnswers(filepath.Join(defaultRoot, "warden.sock")) {
		t.Fatalf("a warden daemon serves %s (processes naming it: %v): this test runs the README's commands on the default root and would stop it; stop it and its sessions first, or run the test on another host", defaultRoot, pids)
	}
	if busy := rootContents(); len(busy) > 0 {
		t.Fatalf("%s holds %s: this test runs the README's commands on the default root and must not touch them; remove them (warden session rm, warden pool drain, warden gc) or run the test on another host", defaultRoot, strings.Join(busy, ", "))
	}
	return true
}

// daemonAnswers reports whether a daemon listens on the socket (a
// seqpacket socket; a stream one is tried too).
func daemonAnswers(sock string) bool {
	for _, network := range []string{"unixpacket", "unix"} {
		if conn, err := net.Dial(network, sock); err == nil {
			conn.Close()
			return true
		}
	}
	return false
}

// rootContents lists the default root's sessions, containers and pooled
// sandboxes.
func rootContents() []string {
	var out []string
	for _, d := range []string{"sessions", "containers", "pool", "oci"} {
		entries, _ := os.ReadDir(filepath.Join(defaultRoot, d))
		for _, e := range entries {
			if d == "pool" && (e.Name() == ".empty" || e.Name() == "pools.json") {
				continue
			}
			out = append(out, filepath.Join(defaultRoot, d, e.Name()))
		}
	}
	data, _ := os.ReadFile(filepath.Join(defaultRoot, "pool", "pools.json"))
	var pools struct {
		Pools []json.RawMessage `json:"pools"`
	}
	if json.Unmarshal(data, &pools) == nil && len(pools.Pools) > 0 {
		out = append(out, fmt.Sprintf("%d pools in pool/pools.json", len(pools.Pools)))
	}
	return out
}

// checkRootEmptied checks a default root that was there before holds no
// session, container or pool of the test's.
func checkRootEmptied(t *testing.T) {
	t.Helper()
	if left := rootContents(); len(left) > 0 {
		t.Errorf("left in %s: %s", defaultRoot, strings.Join(left, ", "))
	}
}

// readmeEnv is a newcomer's environment: the caller's, with warden on
// PATH from the binary under test, no WARDEN_* variable (WARDEN_ROOT
// would move the root), nothing of an outer make (make integration) and
// a home of the test's own (the blocks write into ~), shared by all
// blocks; Go and npm keep the caller's caches so make builds nothing
// twice and npm ci needs no network.
func readmeEnv(t *testing.T) []string {
	t.Helper()
	home := tempDir(t)
	realHome, _ := os.UserHomeDir()
	goEnv := map[string]string{"GOPATH": filepath.Join(realHome, "go"), "GOCACHE": filepath.Join(realHome, ".cache", "go-build"),
		"npm_config_cache": filepath.Join(realHome, ".npm")}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "WARDEN_") || strings.HasPrefix(k, "MAKE") || k == "MFLAGS" || k == "HOME" || k == "PATH" {
			continue
		}
		delete(goEnv, k)
		env = append(env, kv)
	}
	for k, v := range goEnv {
		env = append(env, k+"="+v)
	}
	path := filepath.Dir(wardenBinary) + ":/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	return append(env, "HOME="+home, "PATH="+path)
}

func fileSize(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}
