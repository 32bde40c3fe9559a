package integration

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Bad input refused in one line, without reading it whole or changing
// anything: devices and FIFOs where a file belongs, oversized files, empty
// process args, out-of-range ids and counts, policies every run refuses.

// cappedResult is a warden run under runCapped.
type cappedResult struct {
	sandboxResult
	took   time.Duration
	maxRSS int64 // bytes
}

// runCapped runs warden under a 2 GiB address-space limit and a 10 s
// deadline, so a warden that reads /dev/zero without bound fails the test
// instead of exhausting the host.
func runCapped(t *testing.T, args ...string) cappedResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", append([]string{"-c", `ulimit -v 2097152 && exec "$0" "$@"`, wardenBinary}, args...)...)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/root"}
	cmd.WaitDelay = time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	res := cappedResult{sandboxResult: sandboxResult{Stdout: stdout.String(), Stderr: stderr.String()}, took: time.Since(start)}
	if ctx.Err() != nil {
		t.Errorf("warden %s: no answer within 10s (stderr %q)", strings.Join(args, " "), res.Stderr)
		res.Exit = -1
		return res
	}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		res.Exit = ee.ExitCode()
	case err != nil && !errors.Is(err, exec.ErrWaitDelay):
		t.Fatal(err)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		res.maxRSS = ru.Maxrss * 1024
	}
	return res
}

// expectQuickFailure: exit 125 and one line naming want, within a few
// seconds and well under the memory the input would have taken.
func expectQuickFailure(t *testing.T, res cappedResult, want ...string) {
	t.Helper()
	expectFailure(t, res.sandboxResult, want...)
	if res.took > 5*time.Second {
		t.Errorf("took %s to refuse", res.took)
	}
	if res.maxRSS > 200<<20 {
		t.Errorf("warden grew to %d MiB", res.maxRSS>>20)
	}
}

func TestInputLimitsDevicesAndBigFiles(t *testing.T) {
	dir := tempDir(t)
	root := filepath.Join(dir, "root")
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "policy.fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	// Valid TOML, 2 MiB of it: over the cap though it would parse.
	big := writeFile(t, dir, "big.toml", "name = \"big\"\n"+strings.Repeat("# padding padding padding padding\n", 2<<20/34))
	zeroLink := filepath.Join(dir, "zero.toml")
	if err := os.Symlink("/dev/zero", zeroLink); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"do --policy /dev/zero", []string{"--root", root, "do", "--policy", "/dev/zero", "--workspace", ws, "--", "true"}, []string{"policy /dev/zero: not a regular file"}},
		{"policy check /dev/zero", []string{"policy", "check", "/dev/zero"}, []string{"policy /dev/zero: not a regular file"}},
		{"policy check symlink to /dev/zero", []string{"policy", "check", zeroLink}, []string{"zero.toml: not a regular file"}},
		{"policy check fifo", []string{"policy", "check", fifo}, []string{"not a regular file (a FIFO)"}},
		{"policy check 2 MiB", []string{"policy", "check", big}, []string{"big.toml is 2 MiB; a policy may be at most 1 MiB"}},
		{"policy import /dev/zero", []string{"policy", "import", "/dev/zero"}, []string{"SKILL.md /dev/zero: not a regular file"}},
		{"daemon --config /dev/zero", []string{"--root", root, "daemon", "--config", "/dev/zero"}, []string{"config /dev/zero: not a regular file"}},
		{"logs --audit-log /dev/zero", []string{"--root", root, "logs", "--audit-log", "/dev/zero"}, []string{"audit log /dev/zero: not a regular file"}},
		{"logs --audit-log fifo", []string{"--root", root, "logs", "--audit-log", fifo}, []string{"not a regular file"}},
		{"exec --process /dev/zero", []string{"--root", root, "exec", "--process", "/dev/zero", "some-container"}, []string{"--process file /dev/zero: not a regular file"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			expectQuickFailure(t, runCapped(t, c.args...), c.want...)
		})
	}
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused commands made the state root: %v", err)
	}
	// The allowed half: a real policy, also through a symlink, still loads.
	link := filepath.Join(dir, "linked.toml")
	if err := os.Symlink(examplePath("inspector"), link); err != nil {
		t.Fatal(err)
	}
	if res := runCapped(t, "policy", "check", examplePath("inspector"), link); res.Exit != 0 {
		t.Errorf("policy check of a real policy: exit %d: %s", res.Exit, res.Stderr)
	}
}

func TestInputLimitsBundleConfigIsDevice(t *testing.T) {
	o := newOCIEnv(t)
	id := "oci-" + randomHex(4)
	bundle := busyboxBundle(t, id, func(s *specs.Spec) { s.Process.Args = []string{"true"} })
	if r := o.warden(t, "run", "--bundle", bundle, id); r.Exit != 0 {
		t.Fatalf("run with a real config.json: exit %d: %s", r.Exit, r.Stderr)
	}
	config := filepath.Join(bundle, "config.json")
	if err := os.Remove(config); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", config); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"create", "run"} {
		id := "oci-" + randomHex(4)
		expectQuickFailure(t, runCapped(t, "--root", o.root, cmd, "--bundle", bundle, id), "config.json", "not a regular file")
		assertAbsent(t, filepath.Join(o.root, "oci", id))
	}
}

func TestInputLimitsEmptyProcessArgs(t *testing.T) {
	o := newOCIEnv(t)
	id := "oci-" + randomHex(4)
	bundle := busyboxBundle(t, id, func(s *specs.Spec) { s.Process.Args = nil })
	for _, cmd := range []string{"run", "create"} {
		r := o.warden(t, cmd, "--bundle", bundle, id)
		expectFailure(t, r, "process.args must not be empty")
		if strings.Contains(r.Stderr, "panic") {
			t.Errorf("%s: a panic: %s", cmd, r.Stderr)
		}
		assertAbsent(t, filepath.Join(o.root, "oci", id))
	}
	if r := o.warden(t, "list", "-q"); strings.TrimSpace(r.Stdout) != "" {
		t.Errorf("containers left: %q", r.Stdout)
	}
	// The same bundle with a command runs.
	var s specs.Spec
	readJSON(t, filepath.Join(bundle, "config.json"), &s)
	s.Process.Args = []string{"true"}
	writeJSON(t, filepath.Join(bundle, "config.json"), &s)
	if r := o.warden(t, "run", "--bundle", bundle, id); r.Exit != 0 {
		t.Fatalf("run with args: exit %d: %s", r.Exit, r.Stderr)
	}
}

func TestInputLimitsNegativePreserveFDs(t *testing.T) {
	o := newOCIEnv(t)
	id := "oci-" + randomHex(4)
	bundle := busyboxBundle(t, id, func(s *specs.Spec) { s.Process.Args = []string{"true"} })
	for _, cmd := range []string{"create", "run"} {
		expectFailure(t, o.warden(t, cmd, "--preserve-fds", "-1", "--bundle", bundle, id), "--preserve-fds -1")
		assertAbsent(t, filepath.Join(o.root, "oci", id))
	}
	expectFailure(t, o.warden(t, "exec", "--preserve-fds", "-1", id, "true"), "--preserve-fds -1")
	if r := o.warden(t, "run", "--preserve-fds", "0", "--bundle", bundle, id); r.Exit != 0 {
		t.Fatalf("run --preserve-fds 0: exit %d: %s", r.Exit, r.Stderr)
	}
}

func TestInputLimitsInstallBadPolicy(t *testing.T) {
	dir := tempDir(t)
	daemonJSON := writeFile(t, dir, "daemon.json", "{\"debug\": true}\n")
	broken := writeFile(t, dir, "broken.toml", "name = \"broken\"\n[fs\nread = [\"/usr\"]\n")
	for _, c := range []struct {
		name, policy, want string
	}{
		{"missing", filepath.Join(dir, "absent.toml"), "absent.toml: no such file or directory"},
		{"syntax error", broken, "broken.toml:3: toml syntax"},
		{"device", "/dev/zero", "not a regular file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			expectQuickFailure(t, runCapped(t, "--policy", c.policy, "install", "docker", "--config", daemonJSON), c.want)
			if data, _ := os.ReadFile(daemonJSON); string(data) != "{\"debug\": true}\n" {
				t.Errorf("daemon.json changed: %q", data)
			}
		})
	}
	// A policy that loads is registered.
	expectOK(t, runWarden(t, nil, "--policy", examplePath("inspector"), "install", "docker", "--config", daemonJSON))
	if data, _ := os.ReadFile(daemonJSON); !strings.Contains(string(data), examplePath("inspector")) || !strings.Contains(string(data), "\"debug\": true") {
		t.Errorf("daemon.json after install: %s", data)
	}
}

func TestInputLimitsDaemonConfigMissing(t *testing.T) {
	dir := tempDir(t)
	res := runCapped(t, "--root", filepath.Join(dir, "root"), "daemon", "--config", filepath.Join(dir, "absent.toml"))
	expectQuickFailure(t, res, "--config", "absent.toml", "no such file")
	assertAbsent(t, filepath.Join(dir, "root"))
}

func TestInputLimitsBundleIDs(t *testing.T) {
	dir := tempDir(t)
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ flag, value string }{
		{"--uid", "4294967295"}, {"--uid", "4294967296"}, {"--uid", "4294967297"}, {"--gid", "0"}, {"--uid", "0"},
	} {
		out := filepath.Join(dir, "bundle-"+c.flag[2:]+"-"+c.value)
		res := runWarden(t, nil, "bundle", c.flag, c.value, "--policy", examplePath("inspector"), "--workspace", ws, "--out", out)
		expectFailure(t, res, c.flag+" "+c.value, "1 to 4294967294")
		assertAbsent(t, out)
	}
	out := filepath.Join(dir, "bundle-ok")
	expectOK(t, runWarden(t, nil, "bundle", "--uid", "4294967294", "--gid", "3000001", "--policy", examplePath("inspector"), "--workspace", ws, "--out", out))
	var s specs.Spec
	readJSON(t, filepath.Join(out, "config.json"), &s)
	if s.Linux.UIDMappings[0].HostID != 4294967294 || s.Linux.GIDMappings[0].HostID != 3000001 {
		t.Errorf("mappings %+v %+v", s.Linux.UIDMappings, s.Linux.GIDMappings)
	}
}

// TestInputLimitsPolicyCheckAsRun: policy check refuses what every run
// refuses, with the run's message, and still accepts what runs.
func TestInputLimitsPolicyCheckAsRun(t *testing.T) {
	dir := tempDir(t)
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	r := newRoot(t)
	// A program the sandbox may run inside a folder it may write: refused
	// only once the whole spec is built.
	grant := filepath.Join(dir, "grant")
	if err := os.Mkdir(grant, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(grant, "prog"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, fs := range map[string]string{
		"write /":              `write = ["/"]`,
		"write /etc":           `write = ["/etc"]`,
		"write /proc":          `write = ["/proc"]`,
		"write /sys/fs/cgroup": `write = ["/sys/fs/cgroup"]`,
		"exec in a write":      "write = [\"" + grant + "\"]\n[exec]\nallow = [\"" + grant + "/prog\"]",
	} {
		t.Run(name, func(t *testing.T) {
			p := writeFile(t, dir, "p.toml", "name = \"t\"\n[fs]\n"+fs+"\n")
			check := runWarden(t, nil, "policy", "check", p)
			expectFailure(t, check, "p.toml: invalid: ")
			do := r.warden("do", "--policy", p, "--workspace", ws, "--", "true")
			expectFailure(t, do)
			runMsg := strings.TrimPrefix(strings.TrimSpace(do.Stderr), "warden: ")
			if !strings.Contains(check.Stderr, runMsg) {
				t.Errorf("policy check says %q, the run %q", check.Stderr, runMsg)
			}
		})
	}
	ok := writeFile(t, dir, "ok.toml", "name = \"t\"\n[fs]\nwrite = [\"$WORK_DIR\"]\nread = [\"/usr\"]\n")
	expectOK(t, runWarden(t, nil, "policy", "check", ok))
	expectOK(t, r.warden("do", "--policy", ok, "--workspace", ws, "--", "touch", "/workspace/made"))
	if _, err := os.Stat(filepath.Join(ws, "made")); err != nil {
		t.Errorf("the allowed write did not happen: %v", err)
	}
}

func TestInputLimitsCPUInf(t *testing.T) {
	dir := tempDir(t)
	for _, v := range []string{"inf", "+inf", "-inf", "nan"} {
		p := writeFile(t, dir, "cpu.toml", "name = \"t\"\n[limits]\ncpu = "+v+"\n")
		want := strings.TrimPrefix(v, "+") + " is out of range"
		expectFailure(t, runWarden(t, nil, "policy", "check", p), "limits.cpu", want)
	}
}
