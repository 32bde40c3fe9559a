package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// hostPty opens a terminal pair on the host: a caller's terminal.
func hostPty(t *testing.T) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { master.Close() })
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slave.Close() })
	return master, slave
}

// TestCallerTerminalRestored: a command given the caller's terminal as
// its stdin (no -t) may change its settings while it runs, and they are
// back as they were once it ends: echo is on again, not raw. The same
// through a session and through do.
func TestCallerTerminalRestored(t *testing.T) {
	r := newRoot(t)
	policy := r.policy("name = \"tty\"\n[exec]\nallow = [\"python3\"]\n")
	id := r.create("tty", policy, tempDir(t))
	script := `import termios
a = termios.tcgetattr(0)
a[3] &= ~(termios.ECHO | termios.ICANON)
termios.tcsetattr(0, termios.TCSANOW, a)
print("echo off:", termios.tcgetattr(0)[3] & termios.ECHO == 0)`
	for _, args := range [][]string{
		{"exec", "--session", id, "--", "python3", "-c", script},
		{"do", "--policy", policy, "--", "python3", "-c", script},
	} {
		_, slave := hostPty(t)
		before, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
		if err != nil || before.Lflag&unix.ECHO == 0 {
			t.Fatalf("a new terminal: %v, echo %v", err, before.Lflag&unix.ECHO)
		}
		var out, errOut bytes.Buffer
		cmd := r.command(args...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, &out, &errOut
		if err := cmd.Run(); err != nil || out.String() != "echo off: True\n" {
			t.Fatalf("%s: %v, stdout %q, stderr %q; want the command to change its terminal", args[0], err, out.String(), errOut.String())
		}
		after, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
		if err != nil || after.Lflag != before.Lflag || after.Iflag != before.Iflag || after.Oflag != before.Oflag {
			t.Errorf("%s: the caller's terminal after the command: lflag %#x (was %#x), err %v", args[0], after.Lflag, before.Lflag, err)
		}
	}
}

// onCallerTerminal runs cmd on a new terminal of the host's as its
// controlling terminal, stdin, stdout and stderr, as from a user's shell,
// and returns every byte that reached that terminal.
func onCallerTerminal(t *testing.T, cmd *exec.Cmd) (string, error) {
	t.Helper()
	master, slave := hostPty(t)
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
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		cmd.Process.Kill()
		t.Fatalf("%s did not end", strings.Join(cmd.Args, " "))
	}
	select {
	case <-copied:
	case <-time.After(10 * time.Second):
		t.Errorf("%s: the caller's terminal was still held open 10 s after it ended", strings.Join(cmd.Args, " "))
	}
	return out.String(), err
}

// A command that, between text and colours, writes the caller's
// clipboard (OSC 52), asks for the cursor position (DSR 6), sets and asks
// for the window title, asks for the background colour and for a setting
// (DECRQSS).
const (
	escapesScript = `printf 'plain \033[1;31mred\033[0m|\033]52;c;b3duZWQ=\007|\033[6n|\033]2;from-sandbox\007|\033[21t|\033]11;?\007|\033P$qm\033\\|end\n'`
	escapesPassed = "plain \x1b[1;31mred\x1b[0m|||\x1b]2;from-sandbox\x07||||end"
)

// checkEscapes: the text, the colours and the title set reached the
// caller's terminal; nothing that makes it answer or write its clipboard.
func checkEscapes(t *testing.T, how, out string) {
	t.Helper()
	if !strings.Contains(out, escapesPassed) {
		t.Errorf("%s: the caller's terminal got %q, want it to contain %q", how, out, escapesPassed)
	}
	for _, bad := range []string{"\x1b]52", "b3duZWQ", "\x1b[6n", "\x1b[21t", "\x1b]11;?", "\x1bP"} {
		if strings.Contains(out, bad) {
			t.Errorf("%s: %q reached the caller's terminal: %q", how, bad, out)
		}
	}
}

// TestTerminalEscapesFiltered: what a command writes to its terminal
// reaches the caller's through warden's filter, through `exec -t` and
// through the OCI face's attached terminal (run with terminal true and no
// console socket).
func TestTerminalEscapesFiltered(t *testing.T) {
	r := newRoot(t)
	id := r.create("esc", r.policy("name = \"esc\"\n[exec]\nallow = [\"sh\"]\n"), tempDir(t))
	out, err := onCallerTerminal(t, r.command("exec", "-t", "--session", id, "--", "sh", "-c", escapesScript))
	if err != nil {
		t.Fatalf("exec -t: %v; terminal %q", err, out)
	}
	checkEscapes(t, "exec -t", out)
	// The terminal's master side reaches the caller before the command's
	// end does, however quickly the command ends: a short command, many
	// times (a race here once lost the whole output, 1 run in 20).
	for i := range 25 {
		out, err := onCallerTerminal(t, r.command("exec", "-t", "--session", id, "--", "sh", "-c", "printf ok"))
		if err != nil || !strings.Contains(out, "ok") {
			t.Fatalf("exec -t, run %d: %v; the caller's terminal got %q, want %q", i, err, out, "ok")
		}
	}

	o := newOCIEnv(t)
	cid := "oci-" + randomHex(4)
	bundle := busyboxBundle(t, cid, func(s *specs.Spec) {
		s.Process.Terminal = true
		s.Process.Args = []string{"sh", "-c", escapesScript}
	})
	cmd := exec.Command(wardenBinary, "--root", o.root, "run", "--bundle", bundle, cid)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/root"}
	if out, err = onCallerTerminal(t, cmd); err != nil {
		t.Fatalf("run: %v; terminal %q", err, out)
	}
	checkEscapes(t, "run", out)
}

// callerTerminal is a command running on a terminal of the host's as a
// user's shell would run it, for tests that interact with it.
type callerTerminal struct {
	t      *testing.T
	cmd    *exec.Cmd
	master *os.File
	mu     sync.Mutex
	out    bytes.Buffer
	done   chan error
}

// startOnCallerTerminal starts cmd on a new terminal of the given window
// size, as its controlling terminal, stdin, stdout and stderr.
func startOnCallerTerminal(t *testing.T, cmd *exec.Cmd, size *unix.Winsize) *callerTerminal {
	t.Helper()
	master, slave := hostPty(t)
	if err := unix.IoctlSetWinsize(int(slave.Fd()), unix.TIOCSWINSZ, size); err != nil {
		t.Fatal(err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	c := &callerTerminal{t: t, cmd: cmd, master: master, done: make(chan error, 1)}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			c.mu.Lock()
			c.out.Write(buf[:n])
			c.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	go func() { c.done <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	return c
}

func (c *callerTerminal) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}

// waitFor waits until the terminal has shown text.
func (c *callerTerminal) waitFor(text string) {
	c.t.Helper()
	for deadline := time.Now().Add(cliTimeout); !strings.Contains(c.output(), text); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: the terminal never showed %q; it shows %q", strings.Join(c.cmd.Args, " "), text, c.output())
		}
	}
}

// wait waits for the command's end.
func (c *callerTerminal) wait() error {
	c.t.Helper()
	select {
	case err := <-c.done:
		return err
	case <-time.After(cliTimeout):
		c.t.Fatalf("%s did not end; the terminal shows %q", strings.Join(c.cmd.Args, " "), c.output())
		return nil
	}
}
