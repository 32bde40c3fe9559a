package integration

import (
	"bytes"
	"fmt"
	"os"
	"testing"

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
