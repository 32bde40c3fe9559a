package oci

import (
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/containerd/console"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/runtime/termfilter"
)

// dialConsoleSocket connects to the caller's console socket; libcontainer
// sends the new terminal's master side over it (SCM_RIGHTS), which is the
// protocol containerd's shim and docker expect.
func dialConsoleSocket(path string) (*os.File, error) {
	conn, err := net.Dial("unix", path)
	if err != nil {
		return nil, fmt.Errorf("--console-socket %s: %w", path, err)
	}
	defer conn.Close()
	f, err := conn.(*net.UnixConn).File()
	if err != nil {
		return nil, fmt.Errorf("--console-socket %s: %w", path, err)
	}
	return f, nil
}

// hostTerminal connects an attached process's terminal to warden's own
// stdin and stdout, its output through termfilter. A terminal passed over
// --console-socket is the engine's to copy: warden never reads it.
type hostTerminal struct {
	socket *os.File
	master *os.File
	host   console.Console
	done   chan struct{}
}

// recvFile reads one file descriptor sent over a unix socket.
func recvFile(socket *os.File) (*os.File, error) {
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := unix.Recvmsg(int(socket.Fd()), buf, oob, 0)
	if err != nil {
		return nil, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, fmt.Errorf("terminal: expected one control message, got %d (%v)", len(msgs), err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return nil, fmt.Errorf("terminal: expected one descriptor (%v)", err)
	}
	return os.NewFile(uintptr(fds[0]), string(buf[:n])), nil
}

func (t *hostTerminal) attach() error {
	defer t.socket.Close()
	master, err := recvFile(t.socket)
	if err != nil {
		return err
	}
	t.master = master
	t.done = make(chan struct{})
	if c, err := console.ConsoleFromFile(os.Stdin); err == nil {
		if err := c.SetRaw(); err == nil {
			t.host = c
		}
	}
	t.resize()
	go io.Copy(master, os.Stdin)
	go func() {
		termfilter.Copy(os.Stdout, master)
		close(t.done)
	}()
	return nil
}

func (t *hostTerminal) resize() {
	if t.host == nil || t.master == nil {
		return
	}
	if ws, err := t.host.Size(); err == nil {
		unix.IoctlSetWinsize(int(t.master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: ws.Height, Col: ws.Width})
	}
}

// drain lets the last output through after the process exits.
func (t *hostTerminal) drain() {
	if t.done == nil {
		return
	}
	select {
	case <-t.done:
	case <-time.After(time.Second):
	}
}

func (t *hostTerminal) restore() {
	if t.host != nil {
		t.host.Reset()
	}
}

// newTerminal makes a terminal and sends its master side to the caller's
// console socket (SCM_RIGHTS, its name as the message, as runc does); it
// returns the replica side, for a process of the gVisor engine (runsc
// exec in the foreground does not use --console-socket itself).
func newTerminal(socketPath string) (*os.File, error) {
	master, replica, err := console.NewPty()
	if err != nil {
		return nil, fmt.Errorf("a terminal: %w", err)
	}
	defer master.Close()
	tty, err := os.OpenFile(replica, os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("a terminal: %w", err)
	}
	conn, err := net.Dial("unix", socketPath)
	if err == nil {
		_, _, err = conn.(*net.UnixConn).WriteMsgUnix([]byte(replica), unix.UnixRights(int(master.Fd())), nil)
		conn.Close()
	}
	if err != nil {
		tty.Close()
		return nil, fmt.Errorf("--console-socket %s: %w", socketPath, err)
	}
	return tty, nil
}
