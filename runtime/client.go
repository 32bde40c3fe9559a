package runtime

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Client talks to the daemon of a state root and starts one when none
// answers, so no set-up step is ever needed.
type Client struct {
	Root string
	// Binary is the warden binary to start the daemon from.
	Binary string
}

// dial connects to the daemon, starting it if needed.
func (c *Client) dial() (*net.UnixConn, error) {
	sock := SocketPath(c.Root)
	conn, err := dialPacket(sock)
	if err == nil {
		return conn, nil
	}
	if err := c.startDaemon(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err = dialPacket(sock)
		if err == nil {
			return conn, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the warden daemon did not come up (see %s): %w", filepath.Join(c.Root, "daemon.log"), err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startDaemon launches `warden daemon` in a session of its own, detached
// from the caller's terminal. A second one started by a racing client
// finds the lock taken and exits.
func (c *Client) startDaemon() error {
	if err := CheckRoot(c.Root); err != nil {
		return err
	}
	if !filepath.IsAbs(c.Root) {
		return fmt.Errorf("state root %q must be an absolute path", c.Root)
	}
	if err := checkTraversable(c.Root); err != nil {
		return err
	}
	if err := makeStateDir(c.Root); err != nil {
		return err
	}
	logFile, err := os.OpenFile(filepath.Join(c.Root, "daemon.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	bin := c.Binary
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return err
		}
	}
	cmd := exec.Command(bin, "--root", c.Root, "daemon")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Dir = "/"
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the warden daemon: %w", err)
	}
	go cmd.Wait() // reap it if it exits early (for example: lost the race)
	return nil
}

// Call sends one request and returns the reply.
func (c *Client) Call(req Request) (Reply, error) {
	conn, err := c.dial()
	if err != nil {
		return Reply{}, err
	}
	defer conn.Close()
	if err := send(conn, req); err != nil {
		return Reply{}, err
	}
	var r Reply
	files, err := receive(conn, &r)
	closeAll(files)
	if err != nil {
		return Reply{}, fmt.Errorf("warden daemon: %w", err)
	}
	if r.Error != "" {
		return r, errors.New(r.Error)
	}
	return r, nil
}

// Exec runs a command in a session through the daemon. The stdio files
// are passed as they are; with a terminal, onTerminal gets its master.
func (c *Client) Exec(id string, create *CreateRequest, e ExecRequest, stdio []*os.File, onTerminal func(*os.File), signals <-chan os.Signal) (ExecResult, error) {
	if err := CheckExec(e.Argv, e.Env, e.Cwd, e.Timeout); err != nil {
		return ExecResult{}, err
	}
	e.CallerEnv = utf8Env(e.CallerEnv)
	conn, err := c.dial()
	if err != nil {
		return ExecResult{}, err
	}
	defer conn.Close()
	var fds []int
	if !e.Tty {
		for _, f := range stdio {
			fds = append(fds, int(f.Fd()))
		}
	}
	if err := send(conn, Request{Op: "exec", ID: id, Create: create, Exec: &e}, fds...); err != nil {
		return ExecResult{}, err
	}
	go func() {
		for sig := range signals {
			if s, ok := sig.(unix.Signal); ok {
				if send(conn, Control{Signal: int(s)}) != nil {
					return
				}
			}
		}
	}()
	for {
		var r Reply
		files, err := receive(conn, &r)
		if err != nil {
			closeAll(files)
			return ExecResult{}, fmt.Errorf("warden daemon: %w", err)
		}
		switch {
		case r.Error != "":
			closeAll(files)
			return ExecResult{}, errors.New(r.Error)
		case r.Started && len(files) > 0 && onTerminal != nil:
			onTerminal(files[0])
		case r.Result != nil:
			closeAll(files)
			return *r.Result, nil
		default:
			closeAll(files)
		}
	}
}
