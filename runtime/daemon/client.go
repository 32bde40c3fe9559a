package daemon

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/runtime/internal/wire"
	"github.com/warden-sandbox/warden/runtime/sandbox"
	"github.com/warden-sandbox/warden/spec"
	"golang.org/x/sys/unix"
)

// Client talks to the daemon of a state root and starts one when none
// answers, so no set-up step is ever needed.
type Client struct {
	Root string
	// Binary is the warden binary to start the daemon from.
	Binary string
}

// SignalError: the caller was told to stop (SIGINT, SIGTERM, SIGHUP)
// before the daemon had taken its request, so nothing was run.
type SignalError struct{ Signal unix.Signal }

func (e *SignalError) Error() string {
	return fmt.Sprintf("stopped by %s before the warden daemon took the request", unix.SignalName(e.Signal))
}

// dial connects to the daemon, starting it if needed. A signal on signals
// ends the wait.
func (c *Client) dial(signals <-chan unix.Signal) (*net.UnixConn, error) {
	sock := SocketPath(c.Root)
	conn, err := wire.DialPacket(sock)
	if err == nil {
		return conn, nil
	}
	d, err := c.startDaemon()
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(10 * time.Second)
	otherServes := false
	for {
		conn, err = wire.DialPacket(sock)
		if err == nil {
			return conn, nil
		}
		select {
		case exitErr := <-d.exited:
			if exitErr != nil && !strings.Contains(d.lastLine(), ErrDaemonRunning.Error()) {
				return nil, d.failure(exitErr)
			}
			// Another daemon holds the root: a racing client's, starting,
			// or one that is making its removed socket again. That one is
			// the one to wait for.
			d.exited, otherServes = nil, exitErr != nil
		default:
		}
		if time.Now().After(deadline) {
			if otherServes {
				return nil, fmt.Errorf("the warden daemon that holds %s does not answer on %s: %w", c.Root, sock, err)
			}
			return nil, fmt.Errorf("the warden daemon did not come up (see %s): %w", d.log, err)
		}
		select {
		case s := <-signals:
			return nil, &SignalError{s}
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// startedDaemon is a daemon this client started: how it ended, once it
// has, and where its output begins in daemon.log.
type startedDaemon struct {
	exited <-chan error
	log    string
	offset int64
}

// failure says why a daemon ended before serving: the last line it wrote
// (main's one-line error, such as a bad configuration file), else how it
// ended.
func (d *startedDaemon) failure(exitErr error) error {
	if last := d.lastLine(); last != "" {
		return fmt.Errorf("the warden daemon did not start: %s", last)
	}
	return fmt.Errorf("the warden daemon did not start (%v); see %s", exitErr, d.log)
}

// lastLine is the last line the daemon wrote, without main's prefix.
func (d *startedDaemon) lastLine() string {
	var out []byte
	if f, err := os.Open(d.log); err == nil {
		out, _ = io.ReadAll(io.NewSectionReader(f, d.offset, 64<<10))
		f.Close()
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.TrimPrefix(lines[len(lines)-1], "warden: ")
}

// startDaemon launches `warden daemon` in a session of its own, detached
// from the caller's terminal. A second one started by a racing client
// finds the lock taken and exits.
func (c *Client) startDaemon() (*startedDaemon, error) {
	if err := sandbox.CheckRoot(c.Root); err != nil {
		return nil, err
	}
	if !filepath.IsAbs(c.Root) {
		return nil, fmt.Errorf("state root %q must be an absolute path", c.Root)
	}
	if err := sandbox.CheckTraversable(c.Root); err != nil {
		return nil, err
	}
	if err := sandbox.MakeStateDir(c.Root); err != nil {
		return nil, err
	}
	d := &startedDaemon{log: filepath.Join(c.Root, "daemon.log")}
	logFile, err := os.OpenFile(d.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	if d.offset, err = logFile.Seek(0, io.SeekEnd); err != nil {
		return nil, err
	}
	bin := c.Binary
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	cmd := exec.Command(bin, "--root", c.Root, "daemon")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Dir = "/"
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the warden daemon: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }() // reaps it too
	d.exited = exited
	return d, nil
}

// call sends one request and returns the reply.
func (c *Client) call(req request) (reply, error) {
	conn, err := c.connect(nil)
	if err != nil {
		return reply{}, err
	}
	defer conn.Close()
	req.V = ProtocolVersion
	if err := wire.Send(conn, req); err != nil {
		return reply{}, sendError(err)
	}
	var r reply
	files, err := wire.Receive(conn, &r)
	wire.CloseAll(files)
	if err != nil {
		return reply{}, &Error{Code: CodeDaemonUnavailable, Message: fmt.Sprintf("warden daemon: %v", err)}
	}
	if r.Error != "" {
		return r, replyError(r)
	}
	return r, nil
}

// connect is dial with its failures typed: a root that cannot hold a
// daemon is the caller's input, anything else the daemon's absence.
func (c *Client) connect(signals <-chan unix.Signal) (*net.UnixConn, error) {
	conn, err := c.dial(signals)
	if err == nil {
		return conn, nil
	}
	var se *SignalError
	if errors.As(err, &se) {
		return nil, err
	}
	code := CodeOf(err)
	if code == CodeInternal {
		code = CodeDaemonUnavailable
	}
	return nil, &Error{Code: code, Message: err.Error()}
}

// replyError is the typed error of an error reply; a daemon that gives no
// code (one older than codes) gives an internal one.
func replyError(r reply) error {
	code := r.Code
	if code == "" {
		code = CodeInternal
	}
	return &Error{Code: code, Message: r.Error}
}

// sendError types a request the client could not send: too large for a
// message is the caller's input, anything else a daemon gone away.
func sendError(err error) error {
	code := CodeDaemonUnavailable
	if errors.Is(err, wire.ErrMessageTooLarge) || errors.Is(err, wire.ErrTooManyFDs) {
		code = CodeInvalidInput
	}
	return &Error{Code: code, Message: err.Error()}
}

// createPart is what a session config asks of the daemon: nil when it
// names neither a policy nor a folder.
func createPart(cfg sandbox.SessionConfig) (*createRequest, error) {
	if cfg.Policy == nil && cfg.Vars == (policies.Vars{}) {
		return nil, nil
	}
	create := &createRequest{Vars: cfg.Vars}
	if cfg.Policy != nil {
		text, err := cfg.Policy.TOML()
		if err != nil {
			return nil, err
		}
		create.PolicyTOML = string(text)
	}
	return create, nil
}

// Create makes the session cfg describes (cfg.Policy is required; the
// daemon gives it its own host identity).
func (c *Client) Create(cfg sandbox.SessionConfig) error {
	if cfg.Policy == nil {
		return &Error{Code: CodeInvalidInput, Message: fmt.Sprintf("%v: session %s: no policy to create it with", spec.ErrInvalid, cfg.ID)}
	}
	create, err := createPart(cfg)
	if err != nil {
		return &Error{Code: CodeInvalidInput, Message: err.Error()}
	}
	_, err = c.call(request{Op: "create", ID: cfg.ID, Create: create})
	return err
}

// Ping asks the daemon (started if none runs) for the protocol version
// it speaks.
func (c *Client) Ping() (int, error) {
	r, err := c.call(request{Op: "ping"})
	return r.V, err
}

// Sessions lists the root's sessions.
func (c *Client) Sessions() ([]SessionInfo, error) {
	r, err := c.call(request{Op: "list"})
	return r.Sessions, err
}

// Remove removes a session; force kills the commands it runs.
func (c *Client) Remove(id string, force bool) error {
	_, err := c.call(request{Op: "remove", ID: id, Force: force})
	return err
}

// Freeze stops every process of a session where it is; the session runs
// no new command until Thaw.
func (c *Client) Freeze(id string) error {
	_, err := c.call(request{Op: "freeze", ID: id})
	return err
}

// Thaw lets a frozen session's processes go on.
func (c *Client) Thaw(id string) error {
	_, err := c.call(request{Op: "thaw", ID: id})
	return err
}

// Kill kills every process of a session's sandbox but its agent, and
// says how many; the session goes on running new commands.
func (c *Client) Kill(id string) (int, error) {
	r, err := c.call(request{Op: "kill", ID: id})
	return r.Killed, err
}

// FreezeAll freezes every session of the root that is not frozen and
// lists those it froze.
func (c *Client) FreezeAll() ([]SessionInfo, error) {
	r, err := c.call(request{Op: "freeze.all"})
	return r.Sessions, err
}

// ThawAll thaws every frozen session of the root and lists those it
// thawed.
func (c *Client) ThawAll() ([]SessionInfo, error) {
	r, err := c.call(request{Op: "thaw.all"})
	return r.Sessions, err
}

// GC removes what no live session or pool owns, and says what.
func (c *Client) GC() ([]string, error) {
	r, err := c.call(request{Op: "gc"})
	return r.Removed, err
}

// FillPool keeps req.Size containers of a policy ready; the reply is
// every pool's state.
func (c *Client) FillPool(req PoolRequest) ([]PoolInfo, error) {
	r, err := c.call(request{Op: "pool.fill", Pool: &req})
	return r.Pools, err
}

// Pools is every pool's state.
func (c *Client) Pools() ([]PoolInfo, error) {
	r, err := c.call(request{Op: "pool.status"})
	return r.Pools, err
}

// DrainPool stops the ready containers of the pool of req.Files and
// forgets it; nil drains every pool.
func (c *Client) DrainPool(req *PoolRequest) ([]PoolInfo, error) {
	r, err := c.call(request{Op: "pool.drain", Pool: req})
	return r.Pools, err
}

// Exec runs a command in session.ID through the daemon. When session
// names a policy, the session is made if it does not exist; when it names
// a policy or folders, the daemon refuses a session that differs. o's
// stdio files are passed as they are (nil: /dev/null); with o.Tty,
// o.OnTerminal gets the terminal's master side. A first signal on
// o.Signals that comes before the daemon has read the request ends the
// call with a SignalError and runs nothing; later ones go to the command.
func (c *Client) Exec(session sandbox.SessionConfig, o sandbox.ExecOptions) (sandbox.ExecResult, error) {
	if err := sandbox.CheckExec(o.Argv, o.Env, o.Cwd, o.Timeout); err != nil {
		return sandbox.ExecResult{}, &Error{Code: CodeOf(err), Message: err.Error()}
	}
	create, err := createPart(session)
	if err != nil {
		return sandbox.ExecResult{}, &Error{Code: CodeInvalidInput, Message: err.Error()}
	}
	e := execRequest{Argv: o.Argv, Env: o.Env, CallerEnv: sandbox.UTF8Env(o.CallerEnv), Cwd: o.Cwd,
		Timeout: o.Timeout, Tty: o.Tty, Rows: o.Rows, Cols: o.Cols}
	conn, err := c.connect(o.Signals)
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	defer conn.Close()
	var fds []int
	if !e.Tty {
		for _, f := range []*os.File{o.Stdin, o.Stdout, o.Stderr} {
			if f == nil {
				null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
				if err != nil {
					return sandbox.ExecResult{}, err
				}
				defer null.Close()
				f = null
			}
			fds = append(fds, int(f.Fd()))
		}
	}
	if err := wire.Send(conn, request{V: ProtocolVersion, Op: "exec", ID: session.ID, Create: create, Exec: &e}, fds...); err != nil {
		return sandbox.ExecResult{}, sendError(err)
	}
	// A signal goes to the command. The first one, if it comes while the
	// daemon has not read the request, ends the wait instead: a daemon that
	// does not read would never pass it on. Once a signal was sent, what is
	// unread may be that signal (a double Ctrl-C): later ones follow it.
	gaveUp := make(chan unix.Signal, 1)
	go func() {
		if o.Signals == nil {
			return
		}
		sent := false
		for s := range o.Signals {
			if !sent && unread(conn) {
				gaveUp <- s
				conn.Close()
				return
			}
			sent = true
			if wire.Send(conn, control{Signal: int(s)}) != nil {
				return
			}
		}
	}()
	for {
		var r reply
		files, err := wire.Receive(conn, &r)
		if err != nil {
			wire.CloseAll(files)
			select {
			case s := <-gaveUp:
				return sandbox.ExecResult{}, &SignalError{s}
			default:
			}
			return sandbox.ExecResult{}, &Error{Code: CodeDaemonUnavailable, Message: fmt.Sprintf("warden daemon: %v", err)}
		}
		switch {
		case r.Error != "":
			wire.CloseAll(files)
			return sandbox.ExecResult{}, replyError(r)
		case r.Started && len(files) > 0 && o.OnTerminal != nil:
			o.OnTerminal(files[0])
		case r.Result != nil:
			wire.CloseAll(files)
			return *r.Result, nil
		default:
			wire.CloseAll(files)
		}
	}
}

// unread reports whether the peer has not yet read all that was sent on
// conn: a unix socket's output queue holds a message until its reader
// takes it.
func unread(conn *net.UnixConn) bool {
	raw, err := conn.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	raw.Control(func(fd uintptr) {
		n, _ = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ)
	})
	return n > 0
}
