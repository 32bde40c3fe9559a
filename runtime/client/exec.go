package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/runtime/internal/protocol"
	"github.com/warden-sandbox/warden/runtime/internal/wire"
)

// Cmd is a command to run in a session.
type Cmd struct {
	// Argv is the program and its arguments; the program must be in the
	// policy's exec.allow. Command is the other way to name it.
	Argv []string
	// Command is a command string, run as `sh -c Command`: a policy that
	// lists any program lets its shell run (policies.CommandShell), and
	// the shell can start only the listed programs.
	Command string
	// Stdin, Stdout and Stderr are the command's stdio; nil is /dev/null.
	// An *os.File is passed to the command as it is, so its data never
	// passes through this process or the daemon; any other reader or
	// writer is copied through a pipe. As with os/exec, Exec waits until
	// the copying ends: what the command left unread of Stdin is not
	// read, but a Read of Stdin that blocks is waited for (unless ctx
	// ends).
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Env sets variables, NAME=VALUE; each name must be in the policy's
	// env.allow. Of this process's own environment, the names env.allow
	// lists pass too, as with the warden CLI.
	Env []string
	// Cwd is the working folder: relative to the workspace, a host path
	// inside a granted folder, or absolute in the sandbox.
	Cwd string
	// Timeout ends the command with SIGKILL; zero is the policy's
	// limits.timeout, and more than that is refused.
	Timeout time.Duration
}

// argv is the command line cmd names.
func (cmd Cmd) argv() ([]string, error) {
	switch {
	case len(cmd.Argv) > 0 && cmd.Command != "":
		return nil, invalid("Cmd has both Argv and Command; give one")
	case cmd.Command != "":
		return []string{policies.CommandShell, "-c", cmd.Command}, nil
	case len(cmd.Argv) == 0:
		return nil, invalid("Cmd has no command; set Argv or Command")
	}
	return cmd.Argv, nil
}

// check refuses what the sandbox would not get exactly as given: JSON
// would carry U+FFFD in place of text that is not UTF-8, which can name
// another file.
func (cmd Cmd) check(argv []string) error {
	for i, a := range argv {
		if !utf8.ValidString(a) {
			return invalid("Cmd argument %d is not valid UTF-8; warden passes arguments as UTF-8 text", i+1)
		}
	}
	for _, kv := range cmd.Env {
		if !utf8.ValidString(kv) {
			return invalid("Cmd.Env is not valid UTF-8; warden passes variables as UTF-8 text")
		}
	}
	if !utf8.ValidString(cmd.Cwd) {
		return invalid("Cmd.Cwd is not valid UTF-8; warden passes folders as UTF-8 text")
	}
	if cmd.Timeout < 0 || cmd.Timeout > 0 && cmd.Timeout < policies.MinTimeout {
		return invalid("Cmd.Timeout %s: use at least %s (zero is the policy's limits.timeout)", cmd.Timeout, policies.MinTimeout)
	}
	return nil
}

// Exec runs cmd in the session and waits for it. The error is warden's
// failure (an *Error: the session is gone, the policy refuses an Env
// name, ...); how the command ended, a refused program too (exit 127,
// ResultCode CodeCommandNotFound), is the Result. When ctx ends first the
// command is killed, Exec returns once its output is copied, and the
// error is ctx's.
func (s *Session) Exec(ctx context.Context, cmd Cmd) (Result, error) {
	req, st, err := s.prepare("exec", cmd)
	if err != nil {
		return Result{}, err
	}
	defer func() { st.finish(ctx.Err() == nil) }()
	return s.send(ctx, req, st)
}

// Do runs cmd once in a sandbox of o's policy and folders, which is
// discarded after, as `warden do` does: a ready sandbox of the daemon's
// warm pools when one matches o (the do op), else a session made for the
// call and removed after it, whatever the command did. o.ID names the run
// (empty: a new "do-" id); o.Policy is required. The result and errors
// are Exec's.
func (c *Client) Do(ctx context.Context, o SessionOptions, cmd Cmd) (Result, error) {
	if o.Policy == nil {
		return Result{}, invalid("Do: SessionOptions.Policy is required: a one-shot run makes its own sandbox")
	}
	s, err := c.newSession(o, "do-")
	if err != nil {
		return Result{}, err
	}
	req, st, err := s.prepare("do", cmd)
	if err != nil {
		return Result{}, err
	}
	defer func() { st.finish(ctx.Err() == nil) }()
	res, err := s.send(ctx, req, st)
	if !notPooled(err) {
		return res, err
	}
	// Nothing ran, and the descriptors are still ours to send again. The
	// session is made for this run (one of that id already there is
	// someone else's, never joined nor removed) and goes even when ctx
	// has ended.
	_, err = c.call(ctx, protocol.Request{Op: "create", ID: s.ID, Create: s.create})
	if errors.Is(err, ErrSessionExists) {
		return Result{}, err
	}
	// Also when the create failed: a create that ctx cut short may have
	// made the session all the same.
	defer s.Remove(context.WithoutCancel(ctx))
	if err != nil {
		return Result{}, err
	}
	req.Op = "exec"
	return s.send(ctx, req, st)
}

// notPooled reports whether a do request's error says that nothing ran
// because no pool served it, or because the daemon is older than the op.
func notPooled(err error) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	return e.Code == CodeNotPooled || e.Code == CodeInvalidInput && strings.Contains(e.Message, `unknown operation "do"`)
}

// prepare checks cmd and makes the request of op and its stdio.
func (s *Session) prepare(op string, cmd Cmd) (protocol.Request, *stdio, error) {
	argv, err := cmd.argv()
	if err != nil {
		return protocol.Request{}, nil, err
	}
	if err := cmd.check(argv); err != nil {
		return protocol.Request{}, nil, err
	}
	s.mu.Lock()
	create := s.create
	s.mu.Unlock()
	req := protocol.Request{V: protocol.Version, Op: op, ID: s.ID, Create: create, Exec: &protocol.ExecRequest{
		Argv: argv, Env: cmd.Env, CallerEnv: protocol.UTF8Env(os.Environ()), Cwd: cmd.Cwd, Timeout: cmd.Timeout}}
	st, err := openStdio(cmd)
	if err != nil {
		return protocol.Request{}, nil, err
	}
	return req, st, nil
}

// send sends req with st's descriptors and waits for its result. A
// request no daemon read is sent again (see protocol.Unheard), for as
// long as a client waits for a daemon to come up. Until a daemon has
// answered, the descriptors stay ours to send again (finish closes them
// in the end).
func (s *Session) send(ctx context.Context, req protocol.Request, st *stdio) (Result, error) {
	// Marshalled before connecting: the daemon reads it as soon as it
	// takes the connection, without waiting for it.
	data, err := json.Marshal(req)
	if err != nil {
		return Result{}, err
	}
	deadline := time.Now().Add(protocol.ResendFor)
	for {
		res, unheard, err := s.execOnce(ctx, data, st)
		if !unheard || time.Now().After(deadline) {
			return res, err
		}
		select {
		case <-ctx.Done():
			return Result{}, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// execOnce is one attempt of Exec; unheard says the daemon never read req.
func (s *Session) execOnce(ctx context.Context, req []byte, st *stdio) (_ Result, unheard bool, _ error) {
	conn, err := s.c.dialer().Connect(ctx, nil)
	if err != nil {
		return Result{}, false, err
	}
	// Closing the connection kills the command (protocol.md): the end of
	// ctx wakes the wait below, which returns and closes it.
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	if err := wire.SendData(conn, req, st.fds...); err != nil {
		if ctx.Err() != nil {
			return Result{}, false, ctx.Err()
		}
		return Result{}, protocol.Unheard(err), protocol.SendError(err)
	}
	for first := true; ; first = false {
		var r protocol.Reply
		files, err := wire.Receive(conn, &r)
		wire.CloseAll(files)
		if first && err == nil && r.Error == "" {
			// The daemon holds them now. A refusal ran nothing: a do
			// refused for want of a pool sends them again.
			st.passed()
		}
		switch {
		case err != nil && ctx.Err() != nil:
			conn.Close()
			return Result{}, false, ctx.Err()
		case err != nil:
			return Result{}, first && protocol.Unheard(err), &Error{Code: CodeDaemonUnavailable, Message: fmt.Sprintf("warden daemon: %v", err)}
		case r.Error != "":
			return Result{}, false, protocol.ReplyError(r)
		case r.Result != nil:
			return *r.Result, false, nil
		}
	}
}

// Output runs cmd and returns its standard output. A command that did not
// exit 0 gives an *ExitError, with the standard error when cmd.Stderr is
// nil.
func (s *Session) Output(ctx context.Context, cmd Cmd) ([]byte, error) {
	if cmd.Stdout != nil {
		return nil, invalid("Output: Cmd.Stdout is already set")
	}
	var out, errOut bytes.Buffer
	cmd.Stdout = &out
	captured := cmd.Stderr == nil
	if captured {
		cmd.Stderr = &errOut
	}
	res, err := s.Exec(ctx, cmd)
	if err == nil {
		err = exitError(res)
	}
	if ee, ok := err.(*ExitError); ok && captured {
		ee.Stderr = errOut.Bytes()
	}
	return out.Bytes(), err
}

// CombinedOutput runs cmd and returns its standard output and error, in
// the order it wrote them. A command that did not exit 0 gives an
// *ExitError.
func (s *Session) CombinedOutput(ctx context.Context, cmd Cmd) ([]byte, error) {
	if cmd.Stdout != nil || cmd.Stderr != nil {
		return nil, invalid("CombinedOutput: Cmd.Stdout or Cmd.Stderr is already set")
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	res, err := s.Exec(ctx, cmd)
	if err == nil {
		err = exitError(res)
	}
	return out.Bytes(), err
}

// Shell runs a command string (sh -c command), as an agent's shell tool
// does, and returns its combined output; see CombinedOutput.
func (s *Session) Shell(ctx context.Context, command string) ([]byte, error) {
	return s.CombinedOutput(ctx, Cmd{Command: command})
}

// exitError is nil for a command that exited 0.
func exitError(res Result) error {
	if res.ExitCode == 0 && res.Error == "" {
		return nil
	}
	return &ExitError{Result: res}
}

// stdio is a command's three descriptors and the copying of those that
// are not files.
type stdio struct {
	fds  []int
	far  []*os.File // passed to the daemon; closed once sent
	inW  *os.File   // the stdin pipe's end we write
	in   sync.WaitGroup
	outs sync.WaitGroup
}

func openStdio(cmd Cmd) (*stdio, error) {
	st := &stdio{}
	fail := func(err error) (*stdio, error) {
		st.finish(true)
		return nil, err
	}
	if f, ok := cmd.Stdin.(*os.File); ok && f != nil {
		st.fds = append(st.fds, int(f.Fd()))
	} else if cmd.Stdin == nil {
		if err := st.devNull(); err != nil {
			return fail(err)
		}
	} else {
		r, w, err := os.Pipe()
		if err != nil {
			return fail(err)
		}
		st.far, st.inW = append(st.far, r), w
		st.fds = append(st.fds, int(r.Fd()))
		st.in.Add(1)
		go func() {
			defer st.in.Done()
			io.Copy(w, cmd.Stdin)
			w.Close()
		}()
	}
	var shared *os.File // stdout's pipe, when stderr is the same writer
	for i, wr := range []io.Writer{cmd.Stdout, cmd.Stderr} {
		if f, ok := wr.(*os.File); ok && f != nil {
			st.fds = append(st.fds, int(f.Fd()))
			continue
		}
		if wr == nil {
			if err := st.devNull(); err != nil {
				return fail(err)
			}
			continue
		}
		if i == 1 && shared != nil && same(cmd.Stdout, cmd.Stderr) {
			st.fds = append(st.fds, int(shared.Fd()))
			continue
		}
		r, w, err := os.Pipe()
		if err != nil {
			return fail(err)
		}
		st.far = append(st.far, w)
		st.fds = append(st.fds, int(w.Fd()))
		shared = w
		st.outs.Add(1)
		go func() {
			defer st.outs.Done()
			io.Copy(wr, r)
			r.Close()
		}()
	}
	return st, nil
}

// devNull adds /dev/null as the next descriptor: one opened once for
// every call (the daemon gets its own copy of what is passed).
func (st *stdio) devNull() error {
	null, err := sharedDevNull()
	if err != nil {
		return err
	}
	st.fds = append(st.fds, int(null.Fd()))
	return nil
}

var devNullFile struct {
	sync.Mutex
	f *os.File
}

// sharedDevNull opens /dev/null on first use; a failure (out of
// descriptors) is tried again by the next call.
func sharedDevNull() (*os.File, error) {
	devNullFile.Lock()
	defer devNullFile.Unlock()
	if devNullFile.f == nil {
		f, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
		if err != nil {
			return nil, err
		}
		devNullFile.f = f
	}
	return devNullFile.f, nil
}

// passed closes our copies of the descriptors the daemon now holds, so
// the output pipes end when the command and what it started are gone.
func (st *stdio) passed() {
	for _, f := range st.far {
		f.Close()
	}
	st.far = nil
}

// finish stops feeding stdin (a command that ended reads no more) and
// waits until the output is copied and, with waitIn, until the copy of
// stdin has stopped too: it stops at once unless it waits on a Read of
// Stdin, which a cancelled Exec does not wait for.
func (st *stdio) finish(waitIn bool) {
	st.passed()
	if st.inW != nil {
		st.inW.Close()
	}
	st.outs.Wait()
	if waitIn {
		st.in.Wait()
	}
}

// same reports whether two writers are one, without comparing values of
// a type that cannot be compared.
func same(a, b io.Writer) bool {
	return reflect.TypeOf(a) == reflect.TypeOf(b) && reflect.TypeOf(a).Comparable() && a == b
}
