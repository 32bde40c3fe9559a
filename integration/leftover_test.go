package integration

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// leftoverPolicy lets a command escape its process group and session:
// setsid, and python3 for what a shell cannot do.
const leftoverPolicy = `name = "leftover-test"
[fs]
read = ["$SKILL_DIR"]
write = ["$WORK_DIR"]
[exec]
allow = ["sh", "cat", "grep", "sleep", "setsid", "python3"]
[limits]
memory = "128MiB"
pids = 64
timeout = "30s"
`

// pipedExec starts `warden exec` with its stdout a pipe of its own (and
// stdin when given) and returns the pipe's read end; the caller waits.
func pipedExec(r *wardenRoot, id string, flags []string, stdin *os.File, argv ...string) (*exec.Cmd, *os.File) {
	r.t.Helper()
	rd, wr, err := os.Pipe()
	if err != nil {
		r.t.Fatal(err)
	}
	args := append(append([]string{"exec", "--session", id}, flags...), "--")
	cmd := r.command(append(args, argv...)...)
	cmd.Stdin, cmd.Stdout = stdin, wr
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	wr.Close()
	r.t.Cleanup(func() { rd.Close() })
	return cmd, rd
}

// readToEOF reads rd until EOF and fails the test when that takes longer
// than within: some process still holds the pipe's write end.
func readToEOF(t *testing.T, rd *os.File, within time.Duration, what string) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(rd)
		got <- string(b)
	}()
	select {
	case s := <-got:
		return s
	case <-time.After(within):
		t.Errorf("%s: the caller's pipe saw no EOF within %s: a process left in the sandbox holds it", what, within)
		return ""
	}
}

// waitExit waits for a `warden exec` and returns its exit code.
func waitExit(t *testing.T, cmd *exec.Cmd, within time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
		return cmd.ProcessState.ExitCode()
	case <-time.After(within):
		cmd.Process.Kill()
		t.Fatalf("warden exec did not return within %s", within)
		return -1
	}
}

// TestLeftoverHoldingStdout: a process that escapes its command (setsid,
// or merely run in the background) and keeps the caller's stdout is
// killed when the command ends, so the caller sees EOF at once; one whose
// stdio is redirected, a background server, lives on.
func TestLeftoverHoldingStdout(t *testing.T) {
	r := newRoot(t)
	id := r.create("leftover", r.policy(leftoverPolicy), tempDir(t))

	start := time.Now()
	cmd, out := pipedExec(r, id, nil, nil, "sh", "-c", "setsid sleep 30 & sleep 29 & echo started")
	if got := readToEOF(t, out, 5*time.Second, "setsid escapee"); got != "started\n" && got != "" {
		t.Errorf("stdout %q, want started", got)
	}
	if code := waitExit(t, cmd, 5*time.Second); code != 0 {
		t.Errorf("exit %d, want 0", code)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the command and its pipe took %s", took)
	}
	if n := sleeps(r, id); n != "0" {
		t.Errorf("%s sleeps holding the caller's stdout survived their command", n)
	}

	// The allowed half: redirected, both stay (a new session and a plain
	// background process alike), across later commands. The command ends
	// once both have redirected: a process that still holds the caller's
	// stdout when its command ends is a leftover, however soon it would
	// have let go.
	cmd, out = pipedExec(r, id, nil, nil, "sh", "-c",
		"setsid sh -c 'echo up; exec sleep 31' </dev/null >/workspace/l1 2>&1 & "+
			"sh -c 'echo up; exec sleep 32' </dev/null >/workspace/l2 2>&1 & "+
			"until grep -q up /workspace/l1 2>/dev/null && grep -q up /workspace/l2 2>/dev/null; do sleep 0.05; done; echo started")
	if got := readToEOF(t, out, 5*time.Second, "redirected servers"); got != "started\n" {
		t.Errorf("stdout %q, want started", got)
	}
	if code := waitExit(t, cmd, 5*time.Second); code != 0 {
		t.Errorf("exit %d, want 0", code)
	}
	r.expectAlive(id)
	if n := sleeps(r, id); n != "2" {
		t.Errorf("%s sleeps left after the command that started two redirected ones, want 2", n)
	}
}

// TestLeftoverTimeout: on a timeout the caller returns at the timeout,
// its pipe closed, though a process escaped the command's process group.
func TestLeftoverTimeout(t *testing.T) {
	r := newRoot(t)
	id := r.create("leftover-timeout", r.policy(leftoverPolicy), tempDir(t))
	start := time.Now()
	cmd, out := pipedExec(r, id, []string{"--timeout", "1s"}, nil, "sh", "-c", "setsid sleep 30 & sleep 30")
	readToEOF(t, out, 10*time.Second, "timeout with an escapee")
	if code := waitExit(t, cmd, 10*time.Second); code != 137 {
		t.Errorf("exit %d, want 137", code)
	}
	// well before the 30 s the sleeps would take
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("timeout 1s: the caller's pipe closed after %s", took)
	}
	if n := sleeps(r, id); n != "0" {
		t.Errorf("%s sleeps survived the timeout", n)
	}
}

// TestLeftoverStdinTheft: a process left behind with the caller's stdin
// must not read what the caller writes after its command ended (a user's
// next keystrokes on a terminal).
func TestLeftoverStdinTheft(t *testing.T) {
	r := newRoot(t)
	ws := tempDir(t)
	id := r.create("leftover-stdin", r.policy(leftoverPolicy), ws)
	in, feed, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer feed.Close()
	cmd, out := pipedExec(r, id, nil, in, "sh", "-c",
		"exec 3<&0; setsid sh -c 'sleep 1; cat <&3 >>/workspace/stolen' </dev/null >/dev/null 2>&1 & echo started")
	in.Close()
	readToEOF(t, out, 5*time.Second, "stdin thief")
	if code := waitExit(t, cmd, 5*time.Second); code != 0 {
		t.Errorf("exit %d, want 0", code)
	}
	// Written after the command ended: no reader is left (EPIPE) or none
	// that may pass it on.
	feed.Write([]byte("hunter2\n"))
	feed.Close()
	time.Sleep(2 * time.Second)
	if data, _ := os.ReadFile(filepath.Join(ws, "stolen")); strings.Contains(string(data), "hunter2") {
		t.Errorf("a process left in the sandbox read the caller's stdin after its command ended: %q", data)
	}
	if n := sleeps(r, id); n != "0" {
		t.Errorf("%s sleeps of the thief survived", n)
	}
}

// TestLeftoverHidden: a leftover that makes itself non-dumpable, which
// hides its descriptors from the agent, is killed as if it held them; a
// non-dumpable process of a command that still runs is left alone.
func TestLeftoverHidden(t *testing.T) {
	r := newRoot(t)
	ws := tempDir(t)
	id := r.create("leftover-hidden", r.policy(leftoverPolicy), ws)
	os.WriteFile(filepath.Join(ws, "hide.py"), []byte(`import ctypes, os, sys, time
if os.fork():
    sys.exit(0)
if sys.argv[1] == "escape":
    os.setsid()
else:
    fd = os.open("/dev/null", os.O_RDWR)
    for i in range(3):
        os.dup2(fd, i)
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
time.sleep(float(sys.argv[2]))
open("/workspace/done-" + sys.argv[1], "w").close()
`), 0o644)

	// a command that runs while the other ends, with a hidden process in
	// its session
	// (it waits, at most 15 s, for its hidden process to finish)
	slow, slowOut := pipedExec(r, id, nil, nil, "sh", "-c",
		"python3 /workspace/hide.py stay 2 & i=0; while [ $i -lt 150 ] && [ ! -e /workspace/done-stay ]; do sleep 0.1; i=$((i+1)); done; echo slow")
	time.Sleep(500 * time.Millisecond)
	cmd, out := pipedExec(r, id, nil, nil, "python3", "/workspace/hide.py", "escape", "3")
	readToEOF(t, out, 5*time.Second, "non-dumpable escapee")
	waitExit(t, cmd, 5*time.Second)
	if got := readToEOF(t, slowOut, 20*time.Second, "the running command"); got != "slow\n" {
		t.Errorf("the command that ran meanwhile printed %q, want slow", got)
	}
	if code := waitExit(t, slow, 5*time.Second); code != 0 {
		t.Errorf("the command that ran meanwhile: exit %d, want 0", code)
	}
	if _, err := os.Stat(filepath.Join(ws, "done-stay")); err != nil {
		t.Errorf("the hidden process of a command still running was killed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(ws, "done-escape")); err == nil {
		t.Errorf("a hidden process holding the caller's stdout survived its command")
	}
}

// TestLeftoverConcurrent: a command's end kills only what holds its own
// caller's descriptors, not another running command or its processes.
func TestLeftoverConcurrent(t *testing.T) {
	r := newRoot(t)
	id := r.create("leftover-concurrent", r.policy(leftoverPolicy), tempDir(t))
	other, otherOut := pipedExec(r, id, nil, nil, "sh", "-c", "sleep 3 & sleep 3; wait; echo other")
	time.Sleep(300 * time.Millisecond)
	cmd, out := pipedExec(r, id, nil, nil, "sh", "-c", "setsid sleep 30 & echo started")
	readToEOF(t, out, 5*time.Second, "escapee beside a running command")
	waitExit(t, cmd, 5*time.Second)
	if got := readToEOF(t, otherOut, 10*time.Second, "the running command"); got != "other\n" {
		t.Errorf("the other command printed %q, want other", got)
	}
	if code := waitExit(t, other, 5*time.Second); code != 0 {
		t.Errorf("the other command: exit %d, want 0", code)
	}
	if n := sleeps(r, id); n != "0" {
		t.Errorf("%s sleeps left, want 0", n)
	}
}
