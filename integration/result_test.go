package integration

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/runtime/daemon"
	"github.com/warden-sandbox/warden/runtime/sandbox"
	"github.com/warden-sandbox/warden/spec"
)

// callResult is what `--result` writes (docs/cli.md#the-result-channel).
type callResult struct {
	Exit       int      `json:"exit"`
	Signal     int      `json:"signal"`
	KilledBy   string   `json:"killedBy"`
	DurationMs *float64 `json:"durationMs"`
	Error      *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// readResult reads a result file strictly: one JSON object, one line,
// no field it does not know.
func readResult(t *testing.T, data []byte) callResult {
	t.Helper()
	if len(data) == 0 || data[len(data)-1] != '\n' || strings.Count(string(data), "\n") != 1 {
		t.Fatalf("result %q: want one JSON line", data)
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	var r callResult
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("result %q: %v", data, err)
	}
	return r
}

// withResult runs warden with --result FILE (a new file) put before the
// `--`, and returns the run and the result.
func (r *wardenRoot) withResult(env []string, args ...string) (sandboxResult, callResult) {
	r.t.Helper()
	file := filepath.Join(tempDir(r.t), "result.json")
	for i, a := range args {
		if a == "--" {
			args = append(append(append([]string{}, args[:i]...), "--result", file), args[i:]...)
			break
		}
	}
	res := r.wardenEnv(env, args...)
	data, err := os.ReadFile(file)
	if err != nil {
		r.t.Fatalf("%v: no result written: %v (exit %d, stderr %q)", args, err, res.Exit, res.Stderr)
	}
	return res, readResult(r.t, data)
}

const resultPolicy = `name = "result-test"
[fs]
write = ["$WORK_DIR"]
[exec]
allow = ["sh", "sleep", "python3", "touch"]
[env]
allow = ["LANG"]
[limits]
memory = "64MiB"
timeout = "30s"
`

// TestExecResult: `exec --result` says how every call ended, in one JSON
// object, with the command's output untouched: the command's own 125, 126
// and 127 carry no error, warden's failures (which exit with the same
// statuses) carry a typed one; signals, timeouts and the memory limit say
// so. The C fast path leaves such calls to the Go CLI.
func TestExecResult(t *testing.T) {
	r := newRoot(t)
	ws := tempDir(t)
	policy := r.policy(resultPolicy)
	id := r.create("result", policy, ws)
	env := []string{"PATH=/usr/bin:/bin", "GODEBUG=inittrace=1"}
	for _, c := range []struct {
		name     string
		flags    []string
		argv     []string
		exit     int
		signal   int
		killedBy string
		code     string // the error's; "" for none
		stdout   string
	}{
		{"success", nil, []string{"sh", "-c", "echo out; echo err >&2"}, 0, 0, "", "", "out\n"},
		{"own 3", nil, []string{"sh", "-c", "exit 3"}, 3, 0, "", "", ""},
		{"own 125", nil, []string{"sh", "-c", "echo mine; exit 125"}, 125, 0, "", "", "mine\n"},
		{"own 126", nil, []string{"sh", "-c", "exit 126"}, 126, 0, "", "", ""},
		{"own 127", nil, []string{"sh", "-c", "exit 127"}, 127, 0, "", "", ""},
		{"signal", nil, []string{"sh", "-c", "kill -TERM $$"}, 143, 15, "", "", ""},
		{"timeout", []string{"--timeout", "300ms"}, []string{"sleep", "5"}, 137, 9, "timeout", "", ""},
		{"memory", nil, []string{"python3", "-c", "b = bytearray(200 << 20)"}, 137, 9, "memory", "", ""},
		{"not allowed", nil, []string{"ls"}, 127, 0, "", "command_not_found", ""},
		{"not found", nil, []string{"/no/such/program"}, 127, 0, "", "command_not_found", ""},
		{"cannot run", []string{"--cwd", "missing"}, []string{"sh", "-c", "true"}, 126, 0, "", "command_cannot_run", ""},
		{"no such session", []string{"--session", id + "-gone"}, []string{"sh", "-c", "true"}, 125, 0, "", "no_such_session", ""},
		{"bad timeout", []string{"--timeout", "0s"}, []string{"sh", "-c", "true"}, 125, 0, "", "invalid_input", ""},
		{"timeout above policy", []string{"--timeout", "1h"}, []string{"sh", "-c", "true"}, 125, 0, "", "policy_refused", ""},
		{"env refused", []string{"--env", "SECRET=x"}, []string{"sh", "-c", "true"}, 125, 0, "", "policy_refused", ""},
		{"other policy", []string{"--policy", r.policy(strings.Replace(resultPolicy, "result-test", "other", 1)), "--workspace", ws},
			[]string{"sh", "-c", "true"}, 125, 0, "", "session_mismatch", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"exec", "--session", id}, c.flags...)
			args = append(append(args, "--"), c.argv...)
			res, got := r.withResult(env, args...)
			if !goStarted(res.Stderr) {
				t.Errorf("the C fast path took a call with --result")
			}
			stderr := withoutInitTrace(res.Stderr)
			if res.Exit != c.exit || got.Exit != c.exit {
				t.Errorf("exit %d, result's %d; want %d (stderr %q)", res.Exit, got.Exit, c.exit, stderr)
			}
			if got.Signal != c.signal || got.KilledBy != c.killedBy {
				t.Errorf("result %+v: want signal %d, killedBy %q", got, c.signal, c.killedBy)
			}
			if res.Stdout != c.stdout {
				t.Errorf("stdout %q, want %q: the command's own output, untouched", res.Stdout, c.stdout)
			}
			switch {
			case c.code == "" && got.Error != nil:
				t.Errorf("a command that ran: result has error %+v", *got.Error)
			case c.code != "" && got.Error == nil:
				t.Errorf("result has no error, want code %s (stderr %q)", c.code, stderr)
			case c.code != "":
				// The message is the line warden printed.
				if got.Error.Code != c.code || "warden: "+got.Error.Message+"\n" != stderr {
					t.Errorf("error %+v, stderr %q: want code %s and the printed message", *got.Error, stderr, c.code)
				}
			}
			ran := c.code == "" || c.code == "command_not_found" || c.code == "command_cannot_run"
			if ran && (got.DurationMs == nil || *got.DurationMs <= 0) || !ran && got.DurationMs != nil {
				t.Errorf("durationMs %v for a call that reached the sandbox: %v", got.DurationMs, ran)
			}
			if c.name == "timeout" && *got.DurationMs < 300 {
				t.Errorf("timeout after %vms, want at least 300", *got.DurationMs)
			}
		})
	}

	// A sandbox that died: sandbox_stopped, never the command's status.
	dead := r.create("result-dead", policy, tempDir(t))
	if err := syscall.Kill(r.agentPid(dead), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	res, got := r.withResult(nil, "exec", "--session", dead, "--", "sh", "-c", "true")
	if res.Exit != 125 || got.Error == nil || got.Error.Code != "sandbox_stopped" {
		t.Errorf("dead sandbox: exit %d, result %+v, stderr %q", res.Exit, got, res.Stderr)
	}
	r.warden("session", "rm", dead)
}

// TestExecResultDescriptor: --result fd:N writes to a descriptor the
// caller opened; neither the daemon the call starts nor the sandbox keeps
// it, so a pipe's reader sees its end as soon as warden exits.
func TestExecResultDescriptor(t *testing.T) {
	r := newRoot(t)
	ws := tempDir(t)
	policy := r.policy(resultPolicy)
	id := r.id("result-fd")
	// No daemon yet: this call starts it, with --policy.
	cmd := r.command("exec", "--session", id, "--policy", policy, "--workspace", ws, "--result", "fd:3", "--", "sh", "-c", "sleep 0.1; exit 127")
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.ExtraFiles = []*os.File{pw}
	read := make(chan []byte, 1)
	go func() {
		data, _ := io.ReadAll(pr)
		read <- data
	}()
	res := runCmd(t, cmd)
	pw.Close()
	var data []byte
	select {
	case data = <-read:
	case <-time.After(10 * time.Second):
		t.Fatalf("the result pipe was not closed after warden exited (exit %d, stderr %q): something kept fd 3", res.Exit, res.Stderr)
	}
	got := readResult(t, data)
	if res.Exit != 127 || got.Exit != 127 || got.Error != nil || got.DurationMs == nil {
		t.Errorf("exit %d, result %+v (stderr %q); want the command's own 127, no error", res.Exit, got, res.Stderr)
	}
}

// TestExecResultBadValues: a --result warden cannot use is refused in one
// line, exit 125, before anything runs; nothing is written or made.
func TestExecResultBadValues(t *testing.T) {
	r := newRoot(t)
	ws := tempDir(t)
	id := r.create("result-bad", r.policy(resultPolicy), ws)
	dir := tempDir(t)
	full := filepath.Join(dir, "full.json")
	os.WriteFile(full, []byte("keep me\n"), 0o644)
	os.Symlink(filepath.Join(dir, "target.json"), filepath.Join(dir, "link.json"))
	readOnly, err := os.Open(full)
	if err != nil {
		t.Fatal(err)
	}
	defer readOnly.Close()
	for _, c := range []struct{ value, want string }{
		{"-", "stdout is the command's own"},
		{"", "--result needs a FILE or fd:N"},
		{"fd:1", "descriptors 0, 1 and 2"},
		{"fd:0", "descriptors 0, 1 and 2"},
		{"fd:x", "descriptor number"},
		{"fd:-3", "descriptor number"},
		{"fd:03", "descriptor number"},
		{"fd:9", "descriptor 9 is not open"},
		{"fd:3", "open for reading only"},
		{full, "is not empty"},
		{dir, "is not a regular file"},
		{filepath.Join(dir, "link.json"), "is not a regular file"},
		{filepath.Join(dir, "no", "such", "dir.json"), "no such file or directory"},
	} {
		t.Run(c.value, func(t *testing.T) {
			cmd := r.command("exec", "--session", id, "--result", c.value, "--", "touch", "ran")
			cmd.ExtraFiles = []*os.File{readOnly}
			res := runCmd(t, cmd)
			expectFailure(t, res, "--result", c.want)
			if _, err := os.Stat(filepath.Join(ws, "ran")); err == nil {
				t.Fatal("the command ran")
			}
		})
	}
	if data, _ := os.ReadFile(full); string(data) != "keep me\n" {
		t.Errorf("a refused --result file changed: %q", data)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("a refused --result made files: %v", entries)
	}
	// An empty file (mktemp's) is taken; so is the OCI form's refusal.
	empty := filepath.Join(dir, "empty.json")
	os.WriteFile(empty, nil, 0o600)
	res := r.warden("exec", "--session", id, "--result", empty, "--", "sh", "-c", "exit 4")
	if data, _ := os.ReadFile(empty); res.Exit != 4 || readResult(t, data).Exit != 4 {
		t.Errorf("empty result file: exit %d, result %q", res.Exit, data)
	}
	expectFailure(t, r.warden("exec", "--result", filepath.Join(dir, "oci.json"), "some-container", "true"), "--result needs --session")
}

// TestDoResult: `do --result` as exec's: the command's own status without
// an error, warden's failures with one.
func TestDoResult(t *testing.T) {
	r := newRoot(t)
	ws := tempDir(t)
	policy := r.policy(resultPolicy)
	for _, c := range []struct {
		name string
		args []string
		exit int
		code string
	}{
		{"own 127", []string{"--policy", policy, "--workspace", ws, "--", "sh", "-c", "exit 127"}, 127, ""},
		{"not allowed", []string{"--policy", policy, "--workspace", ws, "--", "ls"}, 127, "command_not_found"},
		{"bad policy", []string{"--policy", r.policy("name = \"x\"\nbogus = 1\n"), "--workspace", ws, "--", "true"}, 125, "invalid_input"},
		{"timeout", []string{"--policy", policy, "--workspace", ws, "--timeout", "200ms", "--", "sleep", "5"}, 137, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, got := r.withResult(nil, append([]string{"do"}, c.args...)...)
			if res.Exit != c.exit || got.Exit != c.exit {
				t.Errorf("exit %d, result %+v; want %d (stderr %q)", res.Exit, got, c.exit, res.Stderr)
			}
			if (c.code == "") != (got.Error == nil) || got.Error != nil && got.Error.Code != c.code {
				t.Errorf("result %+v, want error code %q", got, c.code)
			}
			if c.name == "timeout" && got.KilledBy != "timeout" {
				t.Errorf("result %+v, want killedBy timeout", got)
			}
		})
	}
}

// TestClientTypedErrors: the daemon's error replies carry a code, and the
// Go client (daemon.Client) returns them as *daemon.Error that errors.Is
// matches against the sandbox's sentinel errors; the message is the
// daemon's text, unchanged.
func TestClientTypedErrors(t *testing.T) {
	r := newRoot(t)
	ws := tempDir(t)
	policyFile := r.policy(resultPolicy)
	id := r.create("typed", policyFile, ws)
	c := &daemon.Client{Root: r.root, Binary: wardenBinary}
	p, err := policies.Load(policyFile)
	if err != nil {
		t.Fatal(err)
	}

	if v, err := c.Ping(); err != nil || v != daemon.ProtocolVersion {
		t.Errorf("ping: version %d, %v; want %d", v, err, daemon.ProtocolVersion)
	}
	err = c.Remove(id+"-gone", false)
	var de *daemon.Error
	if !errors.As(err, &de) || de.Code != daemon.CodeNoSuchSession || !errors.Is(err, sandbox.ErrNoSession) ||
		errors.Is(err, sandbox.ErrSessionExists) || err.Error() != "no such session: "+id+"-gone" {
		t.Errorf("remove of a missing session: %#v", err)
	}
	err = c.Create(sandbox.SessionConfig{ID: id, Policy: p, Vars: policies.Vars{WorkDir: ws}})
	if daemon.CodeOf(err) != daemon.CodeSessionExists || !errors.Is(err, sandbox.ErrSessionExists) {
		t.Errorf("create of a taken id: %v (code %q)", err, daemon.CodeOf(err))
	}
	err = c.Create(sandbox.SessionConfig{ID: "bad id!", Policy: p})
	if daemon.CodeOf(err) != daemon.CodeInvalidInput || !errors.Is(err, spec.ErrInvalid) || !strings.HasPrefix(err.Error(), `session id "bad id!": use 1-64`) {
		t.Errorf("create with a bad id: %v (code %q)", err, daemon.CodeOf(err))
	}
	_, err = c.Exec(sandbox.SessionConfig{ID: id}, sandbox.ExecOptions{Argv: []string{"true"}, Timeout: time.Hour})
	if daemon.CodeOf(err) != daemon.CodePolicyRefused || !strings.Contains(err.Error(), sandbox.ErrTimeoutTooLong.Error()) {
		t.Errorf("timeout above the policy's: %v (code %q)", err, daemon.CodeOf(err))
	}
	// A session running a command is busy until --force.
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(sandbox.SessionConfig{ID: id}, sandbox.ExecOptions{Argv: []string{"sleep", "20"}})
		done <- err
	}()
	r.waitStarted(id, "sleep")
	if err := c.Remove(id, false); daemon.CodeOf(err) != daemon.CodeSessionBusy || !strings.Contains(err.Error(), "command(s) running; wait, or use --force") {
		t.Errorf("remove of a busy session: %v (code %q)", err, daemon.CodeOf(err))
	}
	if err := c.Remove(id, true); err != nil {
		t.Fatal(err)
	}
	if err := <-done; daemon.CodeOf(err) != daemon.CodeSandboxStopped && err != nil {
		t.Errorf("a command whose session was removed: %v (code %q)", err, daemon.CodeOf(err))
	}
}
