package protocol

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/runtime/internal/wire"
)

// Dialer reaches the daemon of a state root and starts one when none
// answers, so no set-up step is ever needed.
type Dialer struct {
	Root string
	// Binary is the warden binary to start the daemon from.
	Binary string
	// NoStart leaves a root without a daemon as it is: dialing it fails.
	NoStart bool
}

// dial connects to the daemon, starting it if needed. A signal on signals,
// or the end of ctx, ends the wait.
func (c *Dialer) dial(ctx context.Context, signals <-chan unix.Signal) (*net.UnixConn, error) {
	sock := SocketPath(c.Root)
	conn, err := wire.DialPacket(sock)
	if err == nil || c.NoStart {
		return conn, err
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
		case <-ctx.Done():
			return nil, ctx.Err()
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
func (c *Dialer) startDaemon() (*startedDaemon, error) {
	if err := CheckRoot(c.Root); err != nil {
		return nil, err
	}
	if !filepath.IsAbs(c.Root) {
		return nil, fmt.Errorf("state root %q must be an absolute path", c.Root)
	}
	if err := CheckTraversable(c.Root); err != nil {
		return nil, err
	}
	if err := MakeStateDir(c.Root); err != nil {
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

// Connect is dial with its failures typed: a root that cannot hold a
// daemon is the caller's input, anything else the daemon's absence. A
// SignalError and ctx's own error come back as they are.
func (c *Dialer) Connect(ctx context.Context, signals <-chan unix.Signal) (*net.UnixConn, error) {
	conn, err := c.dial(ctx, signals)
	if err == nil {
		return conn, nil
	}
	var se *SignalError
	if errors.As(err, &se) || ctx.Err() != nil {
		return nil, err
	}
	code := CodeOf(err)
	if code == CodeInternal {
		code = CodeDaemonUnavailable
	}
	return nil, &Error{Code: code, Message: err.Error()}
}

// Call sends one request and returns the reply; the end of ctx abandons
// the wait. A request no daemon read (see Unheard) is sent again, to the
// daemon that serves the root next.
func (c *Dialer) Call(ctx context.Context, req Request) (Reply, error) {
	req.V = Version
	deadline := time.Now().Add(ResendFor)
	for {
		r, unheard, err := c.call(ctx, req)
		if !unheard || time.Now().After(deadline) {
			return r, err
		}
		select {
		case <-ctx.Done():
			return Reply{}, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// call is one attempt of Call; unheard says the daemon never read req.
func (c *Dialer) call(ctx context.Context, req Request) (r Reply, unheard bool, err error) {
	conn, err := c.Connect(ctx, nil)
	if err != nil {
		return Reply{}, false, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	if err := wire.Send(conn, req); err != nil {
		if ctx.Err() != nil {
			return Reply{}, false, ctx.Err()
		}
		return Reply{}, Unheard(err), SendError(err)
	}
	files, err := wire.Receive(conn, &r)
	wire.CloseAll(files)
	if err != nil {
		if ctx.Err() != nil {
			return Reply{}, false, ctx.Err()
		}
		return Reply{}, Unheard(err), &Error{Code: CodeDaemonUnavailable, Message: fmt.Sprintf("warden daemon: %v", err)}
	}
	if r.Error != "" {
		return r, false, ReplyError(r)
	}
	return r, false, nil
}

// ResendFor bounds how long a client sends a request again that no daemon
// read: as long as it waits for a daemon to come up.
const ResendFor = 10 * time.Second

// Unheard reports whether err, from sending a request or from reading its
// first reply, says that no daemon read the request, so that sending it
// again cannot run anything twice. A unix socket closed with a message
// still queued resets its peer: a daemon killed with the request unread,
// or a listening socket that outlived its daemon for a moment (a child it
// was starting held a copy until its exec) and took the connection into
// its backlog.
func Unheard(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// ReplyError is the typed error of an error reply; a daemon that gives no
// code (one older than codes) gives an internal one.
func ReplyError(r Reply) error {
	code := r.Code
	if code == "" {
		code = CodeInternal
	}
	return &Error{Code: code, Message: r.Error}
}

// SendError types a request the client could not send: too large for a
// message is the caller's input, anything else a daemon gone away.
func SendError(err error) error {
	code := CodeDaemonUnavailable
	if errors.Is(err, wire.ErrMessageTooLarge) || errors.Is(err, wire.ErrTooManyFDs) {
		code = CodeInvalidInput
	}
	return &Error{Code: code, Message: err.Error()}
}

// Unread reports whether the peer has not yet read all that was sent on
// conn: a unix socket's output queue holds a message until its reader
// takes it.
func Unread(conn *net.UnixConn) bool {
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

// CheckRoot refuses a state root warden must not take over: an empty one
// (the current folder) and the host's root folder, where warden's state
// would mix with the host's own files.
func CheckRoot(root string) error {
	if root == "" {
		return fmt.Errorf("--root (or WARDEN_ROOT) is empty; name a folder for warden's state, or leave it out for %s", DefaultRoot)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return fmt.Errorf("--root %s: %w", root, err)
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	if abs == "/" {
		return fmt.Errorf("--root %s is the host's root folder; name a folder for warden's state, or leave it out for %s", root, DefaultRoot)
	}
	return nil
}

// MakeStateDir creates dir and whatever is missing above it, each new
// folder 0711 whatever the umask: the sandbox's unprivileged host user
// must traverse them to reach its bundle, but can list nothing; the files
// in them are root's alone. A folder that exists keeps its mode: warden
// changes no folder it did not create (CheckTraversable says when one is
// in the way).
func MakeStateDir(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := MakeStateDir(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o711); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil
		}
		return err
	}
	return os.Chmod(dir, 0o711)
}

// CheckTraversable makes sure the sandbox's unprivileged host user can
// pass through dir and every folder above it that exists (MakeStateDir
// creates the others traversable); a 0700 folder (mktemp -d) would make
// every container start fail with a bare EACCES.
func CheckTraversable(dir string) error {
	for {
		fi, err := os.Stat(dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return fmt.Errorf("state root: %w", err)
		case fi.Mode().Perm()&0o001 == 0:
			return fmt.Errorf("state root: %s is not searchable by other users (mode %04o) and the sandbox's unprivileged user must pass through it; run `chmod o+x %s` or choose another --root", dir, fi.Mode().Perm(), dir)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return nil
		}
		dir = parent
	}
}
