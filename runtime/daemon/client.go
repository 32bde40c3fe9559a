package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/runtime/internal/protocol"
	"github.com/warden-sandbox/warden/runtime/internal/wire"
	"github.com/warden-sandbox/warden/runtime/sandbox"
	"github.com/warden-sandbox/warden/spec"
	"golang.org/x/sys/unix"
)

// Client talks to the daemon of a state root and starts one when none
// answers, so no set-up step is ever needed. The dialing is
// protocol.Dialer's, shared with runtime/client.
type Client struct {
	Root string
	// Binary is the warden binary to start the daemon from.
	Binary string
}

func (c *Client) dialer() *protocol.Dialer { return &protocol.Dialer{Root: c.Root, Binary: c.Binary} }

// call sends one request and returns the reply.
func (c *Client) call(req request) (reply, error) {
	return c.dialer().Call(context.Background(), req)
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

// Stats is what the daemon counted since it started (commands by outcome,
// their durations, egress decisions) and each session's cgroup use and
// running commands.
func (c *Client) Stats() (Stats, error) {
	r, err := c.call(request{Op: "stats"})
	if err == nil && r.Stats == nil {
		return Stats{}, &Error{Code: CodeInternal, Message: "the warden daemon answered the stats op without stats"}
	}
	if err != nil {
		return Stats{}, err
	}
	return *r.Stats, nil
}

// Approvals lists the commands waiting for a human.
func (c *Client) Approvals() ([]Approval, error) {
	r, err := c.call(request{Op: "approvals.ls"})
	return r.Approvals, err
}

// WaitApprovals returns the commands waiting for a human at the next
// change of the queue (an ask added, answered, timed out or withdrawn), or
// after 30 seconds without one: a watcher calls it in a loop.
func (c *Client) WaitApprovals() ([]Approval, error) {
	r, err := c.call(request{Op: "approvals.wait"})
	return r.Approvals, err
}

// Answer approves (allow) or denies a waiting command, with the
// answerer's reason (may be empty).
func (c *Client) Answer(id string, allow bool, reason string) error {
	return c.AnswerFor(id, allow, "", reason)
}

// AnswerFor answers as Answer does, for a user of the caller's that by
// names (warden serve: a dashboard login); the audit line names both the
// caller's uid and by.
func (c *Client) AnswerFor(id string, allow bool, by, reason string) error {
	op := "approvals.deny"
	if allow {
		op = "approvals.approve"
	}
	_, err := c.call(request{Op: op, ID: id, Reason: reason, By: by})
	return err
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
	req := request{V: ProtocolVersion, Op: "exec", ID: session.ID, Create: create, Exec: &e}
	// A request no daemon read is sent again (protocol.Unheard), for as
	// long as a client waits for a daemon to come up.
	deadline := time.Now().Add(protocol.ResendFor)
	for {
		res, unheard, err := c.execOnce(c.dialer(), o, req)
		if !unheard || time.Now().After(deadline) {
			return res, err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Do runs a one-shot command in a ready sandbox of the daemon's warm
// pools, which is discarded after (the do op); cfg names the sandbox's id,
// policy and folders, which a pool must match. It never starts a daemon.
// An error that is ErrNotPooled says that nothing ran: no daemon, no pool
// that serves cfg, or a daemon older than the op; the caller runs the
// command cold. o is as for Exec, without a terminal.
func (c *Client) Do(cfg sandbox.SessionConfig, o sandbox.ExecOptions) (sandbox.ExecResult, error) {
	if cfg.Policy == nil {
		return sandbox.ExecResult{}, &Error{Code: CodeInvalidInput, Message: fmt.Sprintf("%v: one-shot run %s: no policy", spec.ErrInvalid, cfg.ID)}
	}
	if err := sandbox.CheckExec(o.Argv, o.Env, o.Cwd, o.Timeout); err != nil {
		return sandbox.ExecResult{}, &Error{Code: CodeOf(err), Message: err.Error()}
	}
	create, err := createPart(cfg)
	if err != nil {
		return sandbox.ExecResult{}, &Error{Code: CodeInvalidInput, Message: err.Error()}
	}
	// A signal relayed to a daemon that then answers not_pooled reached
	// no command: it ends the call as if it had come before the request.
	// The relay ends with the call: a caller that runs the command cold
	// next reads its signals itself.
	var first atomic.Int32
	if in := o.Signals; in != nil {
		out, done := make(chan unix.Signal, 4), make(chan struct{})
		defer close(done)
		go func() {
			for {
				select {
				case <-done:
					return
				case s, ok := <-in:
					if !ok {
						return
					}
					first.CompareAndSwap(0, int32(s))
					select {
					case out <- s:
					case <-done:
						return
					}
				}
			}
		}()
		o.Signals = out
	}
	e := execRequest{Argv: o.Argv, Env: o.Env, CallerEnv: sandbox.UTF8Env(o.CallerEnv), Cwd: o.Cwd, Timeout: o.Timeout}
	req := request{V: ProtocolVersion, Op: "do", ID: cfg.ID, Create: create, Exec: &e}
	dialer := c.dialer()
	dialer.NoStart = true
	res, unheard, err := c.execOnce(dialer, o, req)
	if err == nil || !oneShotNotRun(err, unheard) {
		return res, err
	}
	if s := first.Load(); s != 0 {
		return sandbox.ExecResult{}, &SignalError{Signal: unix.Signal(s)}
	}
	return sandbox.ExecResult{}, &Error{Code: CodeNotPooled, Message: err.Error()}
}

// oneShotNotRun reports whether a do call's failure means that nothing ran,
// so the command is to run cold: no daemon, one that did not read the
// request or had no connection free, one older than the op or than the
// request's version, or not_pooled itself.
func oneShotNotRun(err error, unheard bool) bool {
	var e *Error
	if unheard || !errors.As(err, &e) {
		return unheard
	}
	switch e.Code {
	case CodeNotPooled, CodeUnsupportedVersion:
		return true
	case CodeDaemonUnavailable:
		// Not a connection that broke after the request was read.
		return !strings.HasPrefix(e.Message, "warden daemon: ")
	case CodeInvalidInput:
		return strings.Contains(e.Message, `unknown operation "do"`)
	}
	return false
}

// execOnce is one attempt of Exec (or Do); unheard says the daemon never
// read req.
func (c *Client) execOnce(dialer *protocol.Dialer, o sandbox.ExecOptions, req request) (_ sandbox.ExecResult, unheard bool, _ error) {
	conn, err := dialer.Connect(context.Background(), o.Signals)
	if err != nil {
		return sandbox.ExecResult{}, false, err
	}
	defer conn.Close()
	var fds []int
	if !req.Exec.Tty {
		for _, f := range []*os.File{o.Stdin, o.Stdout, o.Stderr} {
			if f == nil {
				null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
				if err != nil {
					return sandbox.ExecResult{}, false, err
				}
				defer null.Close()
				f = null
			}
			fds = append(fds, int(f.Fd()))
		}
	}
	if err := wire.Send(conn, req, fds...); err != nil {
		return sandbox.ExecResult{}, protocol.Unheard(err), protocol.SendError(err)
	}
	// A signal goes to the command. The first one, if it comes while the
	// daemon has not read the request, ends the wait instead: a daemon that
	// does not read would never pass it on. Once a signal was sent, what is
	// unread may be that signal (a double Ctrl-C): later ones follow it.
	gaveUp := make(chan unix.Signal, 1)
	var relayed atomic.Bool // a signal followed the request
	done := make(chan struct{})
	defer close(done) // the relay ends with the call, not with the next signal
	go func() {
		if o.Signals == nil {
			return
		}
		sent := false
		for {
			var s unix.Signal
			select {
			case <-done:
				return
			case sig, ok := <-o.Signals:
				if !ok {
					return
				}
				s = sig
			}
			if !sent && protocol.Unread(conn) {
				gaveUp <- s
				conn.Close()
				return
			}
			sent = true
			relayed.Store(true)
			if wire.Send(conn, control{Signal: int(s)}) != nil {
				return
			}
		}
	}()
	// A window size goes to a terminal the sandbox's agent relays; it
	// comes after the start, so after the request was read.
	if o.Resize != nil {
		go func() {
			for {
				select {
				case <-done:
					return
				case ws := <-o.Resize:
					if wire.Send(conn, control{Rows: ws.Rows, Cols: ws.Cols}) != nil {
						return
					}
				}
			}
		}()
	}
	for first := true; ; first = false {
		var r reply
		files, err := wire.Receive(conn, &r)
		if err != nil {
			wire.CloseAll(files)
			select {
			case s := <-gaveUp:
				return sandbox.ExecResult{}, false, &SignalError{Signal: s}
			default:
			}
			unheard := first && !relayed.Load() && protocol.Unheard(err)
			return sandbox.ExecResult{}, unheard, &Error{Code: CodeDaemonUnavailable, Message: fmt.Sprintf("warden daemon: %v", err)}
		}
		switch {
		case r.Error != "":
			wire.CloseAll(files)
			return sandbox.ExecResult{}, false, protocol.ReplyError(r)
		case r.Started && len(files) > 0 && o.OnTerminal != nil:
			o.OnTerminal(files[0])
		case r.Result != nil:
			wire.CloseAll(files)
			return *r.Result, false, nil
		default:
			wire.CloseAll(files)
		}
	}
}
