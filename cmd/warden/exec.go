package main

import (
	"io"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/containerd/console"
	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/runtime/daemon"
	"github.com/warden-sandbox/warden/runtime/sandbox"
	"github.com/warden-sandbox/warden/runtime/termfilter"
)

var execCommand = &cli.Command{
	Name:      "exec",
	Usage:     "run a command in a session's sandbox (--session), or in an OCI container",
	ArgsUsage: "--session ID -- COMMAND [ARG...] | CONTAINER-ID [COMMAND [ARG...]]",
	Description: `With --session: run a command in a session's sandbox with the caller's own
stdin, stdout and stderr. The exit status is the command's own; 126 when it
cannot run, 127 when it is not found or not allowed, 128+N when killed by
signal N (a timeout or the memory limit says so on stderr). With --policy, a
missing session is created; an existing one must have the same policy and
folders (--workspace, --skill-dir, --data-dir, also when given alone), or
nothing runs. Folders are compared as folders, not as paths: any path to the
folder the session has mounted will do; a symlink that leads elsewhere since
the session was made will not. --result FILE|fd:N writes one JSON object
saying how the call ended, with a typed error when warden itself failed
(docs/cli.md, the result channel).

Without --session: the OCI face (runc's exec), as engines call it: run the
process described by --process FILE, or COMMAND with the container's
config.json process as the base, in the running container CONTAINER-ID.`,
	Flags: append([]cli.Flag{
		&cli.StringFlag{Name: "session", Aliases: []string{"s"}, Usage: "session `ID`"},
		&cli.DurationFlag{Name: "timeout", Usage: "kill the command's process tree after `DURATION` (at most the policy's limits.timeout)"},
		envFlag,
		cwdFlag,
		&cli.BoolFlag{Name: "tty", Aliases: []string{"t"}, Usage: "run the command on a new terminal (interactive)"},
		&cli.StringSliceFlag{Name: "policy", Aliases: []string{"p"}, Usage: "policy `FILE` to create the session with when it does not exist"},
		engineFlag,
		resultFlag,
	}, append(varFlags, ociExecFlags...)...),
	Action: func(cliContext *cli.Context) error {
		if !cliContext.IsSet("session") {
			return ociExec(cliContext)
		}
		return withResult(sessionExec)(cliContext)
	},
}

// sessionExec runs a command in a session: how it ended, or why warden
// failed (the command line's mistakes as invalid input).
func sessionExec(cliContext *cli.Context) (*sandbox.ExecResult, error) {
	if err := onlySessionFlags(cliContext); err != nil {
		return nil, inputError(err)
	}
	if err := checkArgs(cliContext, 1, -1, "a command after --"); err != nil {
		return nil, inputError(err)
	}
	if err := checkExecInput(cliContext); err != nil {
		return nil, inputError(err)
	}
	session, err := execSession(cliContext)
	if err != nil {
		return nil, inputError(err)
	}
	o := sandbox.ExecOptions{
		Argv:      cliContext.Args().Slice(),
		Env:       cliContext.StringSlice("env"),
		CallerEnv: os.Environ(),
		Cwd:       cliContext.String("cwd"),
		Timeout:   cliContext.Duration("timeout"),
		Tty:       cliContext.Bool("tty"),
		Stdin:     os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
	}
	var term *terminal
	if o.Tty {
		if term, err = newTerminal(); err != nil {
			return nil, err
		}
		defer term.restore()
		o.Rows, o.Cols = term.size()
		o.OnTerminal = term.attach
		o.Resize = term.resize
		o.Signals = notify(unix.SIGTERM, unix.SIGHUP)
	} else {
		o.Signals = notify(unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT)
	}
	res, err := client(cliContext).Exec(session, o)
	if term != nil {
		term.wait()
		term.restore()
	}
	if err != nil {
		return nil, err
	}
	return &res, nil
}

// execSession is the session of an exec: with --policy, the session to
// make when it is missing; with folder flags alone, the folders the
// existing session must have. Either way the daemon refuses to run the
// command in a session that differs from it.
func execSession(cliContext *cli.Context) (sandbox.SessionConfig, error) {
	id := cliContext.String("session")
	if cliContext.IsSet("policy") {
		return sessionConfig(cliContext, id)
	}
	cfg := sandbox.SessionConfig{ID: id}
	if !cliContext.IsSet("workspace") && !cliContext.IsSet("skill-dir") && !cliContext.IsSet("data-dir") {
		return cfg, nil
	}
	err := folderFlags(cliContext, &cfg.Vars)
	return cfg, err
}

// notify relays the given signals of this process, for as long as it runs.
func notify(sigs ...os.Signal) <-chan unix.Signal {
	in := make(chan os.Signal, 4)
	out := make(chan unix.Signal, 4)
	signal.Notify(in, sigs...)
	go func() {
		for s := range in {
			out <- s.(unix.Signal)
		}
	}()
	return out
}

// terminal puts the caller's terminal in raw mode and copies between it
// and the sandbox's terminal; the output goes through termfilter, so the
// command cannot make the caller's terminal answer or write its clipboard.
type terminal struct {
	con    console.Console
	once   sync.Once
	done   chan struct{}
	resize chan sandbox.WindowSize // sizes for a master side that is not a terminal
}

func newTerminal() (*terminal, error) {
	con, err := console.ConsoleFromFile(os.Stdin)
	if err != nil {
		return nil, errNotTerminal
	}
	if err := con.SetRaw(); err != nil {
		return nil, err
	}
	return &terminal{con: con, done: make(chan struct{}), resize: make(chan sandbox.WindowSize, 1)}, nil
}

var errNotTerminal = &exitError{code: exitWarden, err: &daemon.Error{Code: daemon.CodeInvalidInput, Message: "--tty needs a terminal on stdin; drop -t when piping"}}

func (t *terminal) size() (rows, cols uint16) {
	ws, err := t.con.Size()
	if err != nil {
		return 24, 80
	}
	return ws.Height, ws.Width
}

func (t *terminal) attach(master *os.File) {
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, unix.SIGWINCH)
	go func() {
		for range winch {
			rows, cols := t.size()
			// A gVisor sandbox's terminal is relayed by its agent: the
			// master side here is a socket, and the size goes to the agent.
			if unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}) != nil {
				select {
				case <-t.resize: // only the latest size matters
				default:
				}
				t.resize <- sandbox.WindowSize{Rows: rows, Cols: cols}
			}
		}
	}()
	go io.Copy(master, os.Stdin)
	go func() {
		termfilter.Copy(os.Stdout, master)
		close(t.done)
	}()
}

// wait lets the last output drain: the master side reads until the
// sandbox's terminal has no writer left. The kernel hands a terminal's
// output over in a worker of its own, which a loaded machine may run late:
// the bound is generous, and reached only if something in the sandbox
// still holds the terminal.
func (t *terminal) wait() {
	select {
	case <-t.done:
	case <-time.After(5 * time.Second):
	}
}

func (t *terminal) restore() {
	t.once.Do(func() { t.con.Reset() })
}
