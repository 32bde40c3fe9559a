package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/runtime/sandbox"
)

var (
	wardenBinary string // the binary under test
	runcBinary   string // the reference OCI runtime
	runcRoot     string // runc's private state root
)

func TestMain(m *testing.M) {
	// The Go API benchmarks create containers from this process, and
	// libcontainer re-executes it as their init.
	if sandbox.IsInit() {
		sandbox.Init()
	}
	os.Exit(setup(m))
}

func setup(m *testing.M) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "integration tests run real containers and need root: run `sudo make integration`")
		return 1
	}
	dir, err := os.MkdirTemp("", "warden-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	wardenBinary = os.Getenv("WARDEN_BINARY")
	if wardenBinary == "" {
		wardenBinary = filepath.Join(dir, "warden")
		build := exec.Command("go", "build", "-tags", "seccomp netgo osusergo urfave_cli_no_docs", "-o", wardenBinary, "../cmd/warden")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building warden:", err)
			return 1
		}
	}
	runcBinary = os.Getenv("WARDEN_RUNC")
	if runcBinary == "" {
		runcBinary, err = exec.LookPath("runc")
		if err != nil {
			fmt.Fprintln(os.Stderr, "no runc: run `make deps` (installs runc v1.5.2 into bin/tools) or set WARDEN_RUNC")
			return 1
		}
	}
	runcRoot = filepath.Join(dir, "runc-state")
	return m.Run()
}

// tempDir is a t.TempDir the sandbox's unprivileged host user can traverse.
func tempDir(t testing.TB) string {
	t.Helper()
	d := t.TempDir()
	for p := d; p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

type sandboxRun struct {
	Policy   string   // policy TOML text
	SkillDir string   // host dir for $SKILL_DIR (optional)
	WorkDir  string   // host dir for $WORK_DIR (optional; temp dir if empty)
	DataDir  string   // host dir for $DATA_DIR (optional)
	Argv     []string // command inside the sandbox
	Env      []string // caller environment
}

type sandboxResult struct {
	Stdout, Stderr string
	Exit           int
}

// runSandbox builds a bundle with the warden binary and runs it under runc;
// it fails the test on harness errors.
func runSandbox(t *testing.T, r sandboxRun) sandboxResult {
	t.Helper()
	dir := tempDir(t)
	policyFile := filepath.Join(dir, "policy.toml")
	if err := os.WriteFile(policyFile, []byte(r.Policy), 0o644); err != nil {
		t.Fatal(err)
	}
	if r.WorkDir == "" {
		r.WorkDir = tempDir(t)
	}
	if r.SkillDir == "" {
		r.SkillDir = dir
	}
	bundle := filepath.Join(dir, "bundle")
	args := []string{"bundle", "--policy", policyFile, "--workspace", r.WorkDir, "--skill-dir", r.SkillDir, "--out", bundle}
	if r.DataDir != "" {
		args = append(args, "--data-dir", r.DataDir)
	}
	args = append(args, "--")
	args = append(args, r.Argv...)
	res := runWarden(t, r.Env, args...)
	if res.Exit != 0 {
		t.Fatalf("warden bundle failed (exit %d): %s", res.Exit, res.Stderr)
	}
	id := "wt-" + randomHex(6)
	t.Cleanup(func() {
		exec.Command(runcBinary, "--root", runcRoot, "delete", "--force", id).Run()
	})
	return run(t, nil, runcBinary, "--root", runcRoot, "run", "--bundle", bundle, id)
}

// runWarden runs the warden binary with an exact environment.
func runWarden(t *testing.T, env []string, args ...string) sandboxResult {
	t.Helper()
	return run(t, env, wardenBinary, args...)
}

// cliTimeout bounds every call, so a hang fails the test instead of the
// whole run.
const cliTimeout = 60 * time.Second

func run(t *testing.T, env []string, name string, args ...string) sandboxResult {
	t.Helper()
	return runTimeout(t, cliTimeout, env, name, args...)
}

// runTimeout is run for a call that may take longer than cliTimeout.
func runTimeout(t *testing.T, timeout time.Duration, env []string, name string, args ...string) sandboxResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	// A sandboxed process may hold the output pipes (warden passes them
	// on): after the kill, stop waiting for them.
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = env
	if env == nil {
		cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/root"}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %s: no answer within %s (stdout %q, stderr %q)", name, strings.Join(args, " "), timeout, stdout.String(), stderr.String())
	}
	res := sandboxResult{Stdout: stdout.String(), Stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		res.Exit = ee.ExitCode()
	case err != nil:
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return res
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
