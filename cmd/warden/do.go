package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/runtime/daemon"
	"github.com/warden-sandbox/warden/runtime/sandbox"
)

var doCommand = &cli.Command{
	Name:      "do",
	Usage:     "run one command in a fresh sandbox and tear it down",
	ArgsUsage: "-- COMMAND [ARG...]",
	Flags: append([]cli.Flag{
		&cli.DurationFlag{Name: "timeout", Usage: "kill the command after `DURATION` (at most the policy's limits.timeout)"},
		envFlag,
		cwdFlag,
		resultFlag,
		engineFlag,
	}, sandboxFlags...),
	Action: withResult(doRun),
}

// doRun runs the command in a fresh sandbox: how it ended, or why warden
// failed.
func doRun(cliContext *cli.Context) (*sandbox.ExecResult, error) {
	if err := checkArgs(cliContext, 1, -1, "a command after --"); err != nil {
		return nil, inputError(err)
	}
	if err := checkExecInput(cliContext); err != nil {
		return nil, inputError(err)
	}
	p, vars, err := loadSandboxPolicy(cliContext, cliContext.StringSlice("policy"))
	if err != nil {
		return nil, inputError(err)
	}
	cfg := sandbox.SessionConfig{ID: "do-" + randomID(), Policy: p, Vars: vars}
	o := execOptions(cliContext)
	if poolFirst(cliContext) {
		res, err := poolClient(cliContext).Do(cfg, o)
		if !errors.Is(err, daemon.ErrNotPooled) {
			if err != nil {
				return nil, err
			}
			return &res, nil
		}
	}
	rt, err := newRuntime(cliContext)
	if err != nil {
		return nil, err
	}
	// Before the sandbox: a command whose audit line cannot be
	// written does not run.
	if err := rt.OpenAudit(); err != nil {
		return nil, err
	}
	s, err := rt.Create(cfg)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	res, err := s.Exec(context.Background(), o)
	if err != nil {
		return nil, err
	}
	return &res, nil
}

// poolFirst says whether do asks the root's daemon for a warm sandbox
// before it makes one: when a daemon runs (none is started for a do) and
// the C fast path has not asked it already. That one (fastexec.c) takes a
// do with one --policy file, no --result and no --engine (nor a global
// one, nor WARDEN_ENGINE), and asks whenever it can; on the rare command
// lines it gives up on before asking (a root it does not take as written,
// text that is not UTF-8) the command runs cold, as without a pool.
func poolFirst(cliContext *cli.Context) bool {
	if !filepath.IsAbs(cliContext.String("root")) {
		return false // refused below, as before pools served do
	}
	if os.Getenv("WARDEN_FASTPATH") == "off" || os.Getenv("WARDEN_ENGINE") != "" || !onlyRootGlobal(os.Args[1:]) {
		return true
	}
	return len(cliContext.StringSlice("policy")) > 1 || cliContext.IsSet("result") || cliContext.IsSet("engine")
}

// onlyRootGlobal reports whether the global flags before the command name
// are --root alone, as the C fast path takes them.
func onlyRootGlobal(args []string) bool {
	for i := 0; i < len(args) && strings.HasPrefix(args[i], "-"); i++ {
		name, _, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if name != "root" {
			return false
		}
		if !hasValue {
			i++
		}
	}
	return true
}

// poolClient reaches the root's daemon for a one-shot run; it never
// starts one.
func poolClient(cliContext *cli.Context) *daemon.Client {
	return &daemon.Client{Root: cliContext.String("root")}
}

// execOptions are the command and its stdio: the caller's own descriptors.
func execOptions(cliContext *cli.Context) sandbox.ExecOptions {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT)
	forward := make(chan unix.Signal, 4)
	go func() {
		for sig := range signals {
			forward <- sig.(unix.Signal)
		}
	}()
	return sandbox.ExecOptions{
		Argv:      cliContext.Args().Slice(),
		Env:       cliContext.StringSlice("env"),
		CallerEnv: os.Environ(),
		Cwd:       cliContext.String("cwd"),
		Stdin:     os.Stdin,
		Stdout:    os.Stdout,
		Stderr:    os.Stderr,
		Timeout:   cliContext.Duration("timeout"),
		Signals:   forward,
	}
}

// resultError turns how a command ended into warden's exit status, with a
// line on stderr when warden has something to say (not found, timeout,
// memory limit).
func resultError(res sandbox.ExecResult) error {
	if res.ExitCode == 0 && res.Error == "" {
		return nil
	}
	var err error
	if res.Error != "" {
		err = fmt.Errorf("%s", res.Error)
	}
	return &exitError{code: res.ExitCode, err: err}
}

func newRuntime(cliContext *cli.Context) (*sandbox.Runtime, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("sandboxes need root: run warden as root (it drops to an unprivileged uid inside)")
	}
	return sandbox.New(cliContext.String("root"), "")
}

func randomID() string {
	var b [6]byte
	if _, err := randRead(b[:]); err != nil {
		return fmt.Sprint(os.Getpid())
	}
	return fmt.Sprintf("%x", b)
}
