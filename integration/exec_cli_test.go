package integration

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/console"
)

// goStarted tells from a run under GODEBUG=inittrace=1 whether the Go
// runtime started: it then traces its package initialisation on stderr.
func goStarted(stderr string) bool { return strings.Contains(stderr, "init internal/") }

// TestExecFastPathMatchesGo: `warden exec` answers the same whether the C
// fast path (before the Go runtime) or the Go CLI handles it: exit status,
// stdout and stderr, for successes, failures, flags in every spelling and
// errors from the daemon. The fast path must also really be taken.
func TestExecFastPathMatchesGo(t *testing.T) {
	r := newRoot(t)
	ws := tempDir(t)
	os.Mkdir(ws+"/sub", 0o777)
	id := r.create("fast", r.policy(sessionPolicy), ws)
	base := []string{"PATH=/usr/bin:/bin", "HOME=/root", "LANG=C.UTF-8", "SECRET=do-not-leak"}
	for _, c := range []struct {
		name  string
		args  []string
		stdin string
		fast  bool // the fast path takes this command line
	}{
		{"exit code", []string{"exec", "--session", id, "--", "sh", "-c", "echo out; echo err >&2; exit 3"}, "", true},
		{"no --", []string{"exec", "--session", id, "sh", "-c", "echo $#", "x", "y"}, "", true},
		{"-s and =", []string{"exec", "-s=" + id, "--", "sh", "-c", "pwd"}, "", true},
		{"--session=", []string{"exec", "--session=" + id, "--cwd", "sub", "--", "sh", "-c", "pwd"}, "", true},
		{"env", []string{"exec", "--session", id, "-e", "LANG=xx", "--", "sh", "-c", "echo $LANG $SECRET"}, "", true},
		{"caller env", []string{"exec", "--session", id, "--", "sh", "-c", "echo $LANG $SECRET"}, "", true},
		{"env refused", []string{"exec", "--session", id, "--env", "SECRET=x", "--", "true"}, "", true},
		{"stdin", []string{"exec", "--session", id, "--", "sh", "-c", "tr a-z A-Z; echo \"quote \\\" back \\\\ tab\t\""}, "hello\n", true},
		{"timeout", []string{"exec", "--session", id, "--timeout", "300ms", "--", "sleep", "5"}, "", true},
		{"timeout too long", []string{"exec", "--session", id, "--timeout=1h", "--", "true"}, "", true},
		{"not allowed", []string{"exec", "--session", id, "--", "python3", "-c", "1"}, "", true},
		{"unknown session", []string{"exec", "--session", id + "-nope", "--", "true"}, "", true},
		{"root flag twice", []string{"--root", r.root, "exec", "--session", id, "--", "true"}, "", true},
		{"bad duration", []string{"exec", "--session", id, "--timeout", "5", "--", "true"}, "", false},
		{"no command", []string{"exec", "--session", id, "--"}, "", false},
		{"unknown flag", []string{"exec", "--session", id, "--frobnicate", "--", "true"}, "", false},
		{"comma in env", []string{"exec", "--session", id, "-e", "LANG=a,b", "--", "sh", "-c", "echo $LANG"}, "", true},
		{"spaces in env", []string{"exec", "--session", id, "--env=LANG= a ", "--", "sh", "-c", "echo \"[$LANG]\""}, "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got [2]sandboxResult
			for i, mode := range []string{"on", "off"} {
				cmd := r.command(c.args...)
				cmd.Env = append(append([]string{}, base...), "WARDEN_FASTPATH="+mode, "GODEBUG=inittrace=1")
				cmd.Stdin = strings.NewReader(c.stdin)
				got[i] = runCmd(t, cmd)
				if i == 0 && goStarted(got[i].Stderr) == c.fast {
					t.Errorf("fast path taken: %v, want %v (stderr %q)", !goStarted(got[i].Stderr), c.fast, got[i].Stderr)
				}
				got[i].Stderr = withoutInitTrace(got[i].Stderr)
			}
			if got[0] != got[1] {
				t.Errorf("fast path and Go CLI differ:\nfast: %+v\ngo:   %+v", got[0], got[1])
			}
		})
	}
	// No daemon: the fast path steps aside and the Go CLI starts one.
	r.killDaemon(syscall.SIGKILL)
	cmd := r.command("exec", "--session", id, "--", "sh", "-c", "echo back")
	cmd.Env = append(cmd.Env, "GODEBUG=inittrace=1")
	res := runCmd(t, cmd)
	if res.Exit != 0 || res.Stdout != "back\n" || !goStarted(res.Stderr) {
		t.Fatalf("exec without a daemon: %+v", res)
	}
}

func withoutInitTrace(s string) string {
	var keep []string
	for _, line := range strings.SplitAfter(s, "\n") {
		if !strings.HasPrefix(line, "init ") {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "")
}

func runCmd(t *testing.T, cmd *exec.Cmd) sandboxResult {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(cliTimeout):
		cmd.Process.Kill()
		t.Fatalf("%s: no answer within %s", cmd.Args, cliTimeout)
	}
	res := sandboxResult{Stdout: stdout.String(), Stderr: stderr.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		res.Exit = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestExecTerminal: `exec -t` gives the command a terminal of its own in
// the sandbox, wired to the caller's: input reaches it, output comes back,
// the exit status is the command's; without a terminal -t is refused.
func TestExecTerminal(t *testing.T) {
	r := newRoot(t)
	id := r.create("tty", r.policy(`name = "tty"
[exec]
allow = ["sh", "tty", "stty"]
`), tempDir(t))

	master, slavePath, err := console.NewPty()
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	master.Resize(console.WinSize{Height: 33, Width: 101})
	slave, err := os.OpenFile(slavePath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	cmd := r.command("exec", "-t", "--session", id, "--", "sh")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	var out bytes.Buffer
	copied := make(chan struct{})
	go func() {
		io.Copy(&out, master) // ends with EIO when the last slave closes
		close(copied)
	}()
	io.WriteString(master, "tty; stty size; echo marker-$((6*7)); exit 7\n")
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		cmd.Process.Kill()
		t.Fatalf("exec -t did not end; output so far %q", out.String())
	}
	select {
	case <-copied:
	case <-time.After(2 * time.Second):
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Errorf("exit: %v, want status 7", err)
	}
	for _, want := range []string{"/dev/pts/", "33 101", "marker-42"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("terminal output lacks %q:\n%s", want, out.String())
		}
	}

	// Without a terminal on stdin, -t is a usage error.
	res := r.warden("exec", "-t", "--session", id, "--", "sh", "-c", "true")
	expectFailure(t, res, "--tty needs a terminal")
}
