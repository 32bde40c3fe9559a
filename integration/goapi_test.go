package integration

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/runtime/sandbox"
)

// TestGoAPI drives a session the way a framework linking warden does
// (sandbox.New, Create, Exec, Close), as in the package's example: stdio
// are the caller's files, the exit status and warden's reasons come back,
// a timeout or a cancelled context kills the command, and Close leaves the
// workspace and nothing else.
func TestGoAPI(t *testing.T) {
	dir := tempDir(t)
	ws := filepath.Join(dir, "ws")
	os.Mkdir(ws, 0o755)
	p, err := policies.Parse("api.toml", []byte(`name = "api"
[fs]
write = ["$WORK_DIR"]
[exec]
allow = ["sh", "wc", "cat", "sleep"]
[limits]
timeout = "20s"
`))
	if err != nil {
		t.Fatal(err)
	}
	rt := apiRuntime(t, filepath.Join(dir, "root"))
	id := "api-" + randomHex(4)
	s, err := rt.Create(sandbox.SessionConfig{ID: id, Policy: p, Vars: policies.Vars{WorkDir: ws}})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			s.Close()
		}
	}()
	if _, err := rt.Create(sandbox.SessionConfig{ID: id, Policy: p, Vars: policies.Vars{WorkDir: ws}}); !errors.Is(err, sandbox.ErrSessionExists) {
		t.Errorf("second create with the same id: %v", err)
	}

	// stdin and stdout are files of ours, passed as they are.
	inR, inW, _ := os.Pipe()
	outR, outW, _ := os.Pipe()
	go func() {
		io.WriteString(inW, "one two three\n")
		inW.Close()
	}()
	res, err := s.Exec(context.Background(), sandbox.ExecOptions{
		Argv: []string{"sh", "-c", "wc -w; echo made >/workspace/made; exit 3"}, Stdin: inR, Stdout: outW,
	})
	inR.Close()
	outW.Close()
	out, _ := io.ReadAll(outR)
	if err != nil || res.ExitCode != 3 || strings.TrimSpace(string(out)) != "3" {
		t.Fatalf("exec: %+v %v, stdout %q", res, err, out)
	}
	if data, err := os.ReadFile(filepath.Join(ws, "made")); err != nil || string(data) != "made\n" {
		t.Errorf("workspace file on the host: %q %v", data, err)
	}
	if res, err := s.Exec(context.Background(), sandbox.ExecOptions{Argv: []string{"python3"}}); err != nil || res.ExitCode != 127 || res.Error == "" {
		t.Errorf("unlisted binary: %+v %v", res, err)
	}

	start := time.Now()
	res, err = s.Exec(context.Background(), sandbox.ExecOptions{Argv: []string{"sleep", "30"}, Timeout: 300 * time.Millisecond})
	if err != nil || !res.TimedOut || res.ExitCode != 137 || time.Since(start) > 5*time.Second {
		t.Errorf("timeout: %+v %v after %s", res, err, time.Since(start))
	}
	if _, err := s.Exec(context.Background(), sandbox.ExecOptions{Argv: []string{"true"}, Timeout: time.Hour}); !errors.Is(err, sandbox.ErrTimeoutTooLong) {
		t.Errorf("timeout above the policy's: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start = time.Now()
	res, err = s.Exec(ctx, sandbox.ExecOptions{Argv: []string{"sleep", "30"}})
	if err != nil || res.Signal != 9 || time.Since(start) > 5*time.Second {
		t.Errorf("cancelled context: %+v %v after %s", res, err, time.Since(start))
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	if _, err := os.Stat(filepath.Join(ws, "made")); err != nil {
		t.Errorf("Close touched the workspace: %v", err)
	}
	if procs := cgroupProcesses(id); len(procs) != 0 {
		t.Errorf("processes left in the session's cgroup: %v", procs)
	}
	if _, err := os.Stat(filepath.Join(dir, "root", "sessions", id)); !os.IsNotExist(err) {
		t.Errorf("session state left: %v", err)
	}
}

// TestGoAPIZeroLimits: a policy built in Go without limits gets the
// defaults, field by field, as a file without [limits] does; a limit out
// of range is refused as the policy's fault, naming the field.
func TestGoAPIZeroLimits(t *testing.T) {
	dir := tempDir(t)
	ws := filepath.Join(dir, "ws")
	os.Mkdir(ws, 0o755)
	rt := apiRuntime(t, filepath.Join(dir, "root"))
	p := &policies.Policy{
		Name:   "literal",
		FS:     policies.FS{Write: []string{"$WORK_DIR"}},
		Exec:   policies.Exec{Allow: []string{"sh", "cat"}},
		Limits: policies.Limits{Pids: 64},
	}
	s, err := rt.Create(sandbox.SessionConfig{ID: "lit-" + randomHex(4), Policy: p, Vars: policies.Vars{WorkDir: ws}})
	if err != nil {
		t.Fatalf("a policy struct with only pids set: %v", err)
	}
	defer s.Close()
	want := policies.DefaultLimits
	want.Pids = 64
	if s.Limits != want || s.Policy().Limits != want {
		t.Errorf("session limits %+v, policy's %+v; want %+v", s.Limits, s.Policy().Limits, want)
	}
	if p.Limits != (policies.Limits{Pids: 64}) {
		t.Errorf("Create changed the caller's policy: %+v", p.Limits)
	}
	out, _ := os.CreateTemp(dir, "out")
	defer out.Close()
	res, err := s.Exec(context.Background(), sandbox.ExecOptions{Argv: []string{"sh", "-c", "cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max; echo ok"}, Stdout: out})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %+v %v", res, err)
	}
	if data, _ := os.ReadFile(out.Name()); !strings.HasSuffix(string(data), "ok\n") {
		t.Errorf("output %q", data)
	}

	bad := &policies.Policy{Name: "bad", Exec: policies.Exec{All: true}, Limits: policies.Limits{Pids: -1}}
	_, err = rt.Create(sandbox.SessionConfig{ID: "bad-" + randomHex(4), Policy: bad, Vars: policies.Vars{WorkDir: ws}})
	if err == nil || strings.Contains(err.Error(), "warden bug") || !strings.Contains(err.Error(), "pids") {
		t.Errorf("negative pids: %v", err)
	}
}

// apiRuntime is a runtime of this process's own (the Go API) on root.
// Its sessions' cgroups are under one of the root's, which the runtime
// keeps for its next session: the test removes it once its sessions are
// closed, as an in-process user of the API does when done with the root.
func apiRuntime(tb testing.TB, root string) *sandbox.Runtime {
	tb.Helper()
	rt, err := sandbox.New(root, wardenBinary)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(rt.RemoveRootCgroups)
	return rt
}
