// Command warden runs AI-agent skills in sandboxes built from their policies.
package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/warden-sandbox/warden/runtime/daemon"
	"github.com/warden-sandbox/warden/runtime/sandbox"
)

// Set at build time with -ldflags "-X main.version=... -X main.commit=...".
var (
	version = "0.1.0-dev"
	commit  = "unknown"
)

// Exit codes, decided here and nowhere else.
const (
	exitWarden     = 125 // warden itself failed
	exitCannotRun  = 126 // the command exists but cannot run
	exitNotAllowed = 127 // not found, or not allowed to run
)

// exitError carries a status other than exitWarden up to main: a command's
// own code, or a check that found the host lacking.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

func newApp() *cli.App {
	cli.VersionPrinter = func(cliContext *cli.Context) {
		fmt.Fprintf(cliContext.App.Writer, "warden version %s\ncommit: %s\nspec: %s\n", version, commit, specVersion())
	}
	app := &cli.App{
		Name:                 "warden",
		Usage:                "run AI-agent skills in sandboxes built from their policies",
		Version:              version,
		EnableBashCompletion: true,
		// A repeatable flag's value is one value, commas and all
		// (--env LIST=a,b), as in runc.
		DisableSliceFlagSeparator: true,
		HideHelpCommand:           true,
		Flags: append([]cli.Flag{
			&cli.BoolFlag{Name: "debug", Usage: "log debug messages"},
			&cli.StringFlag{Name: "root", Usage: "state `DIR` for sessions and containers", Value: sandbox.DefaultRoot, EnvVars: []string{"WARDEN_ROOT"}},
		}, ociGlobalFlags...),
		Before: before,
		Commands: []*cli.Command{
			policyCommand,
			bundleCommand,
			seccompCommand,
			checkCommand,
			doCommand,
			sessionCommand,
			approvalsCommand,
			poolCommand,
			execCommand,
			logsCommand,
			serveCommand,
			gcCommand,
			daemonCommand,
			createCommand,
			runCommand,
			startCommand,
			stateCommand,
			relayHookCommand,
			gvisorKeeperCommand,
			killCommand,
			deleteCommand,
			psCommand,
			listCommand,
			pauseCommand,
			resumeCommand,
			updateCommand,
			featuresCommand,
			specCommand,
			installCommand,
		},
		// Usage errors (unknown flags, missing arguments) are warden's own
		// failure: one line on stderr, exit 125.
		OnUsageError: func(cliContext *cli.Context, err error, _ bool) error {
			return usageError(err, cliContext.App.Flags, "warden")
		},
		CommandNotFound: func(cliContext *cli.Context, name string) {
			fmt.Fprintf(cliContext.App.ErrWriter, "warden: unknown command %q; see 'warden --help'\n", name)
			os.Exit(exitWarden)
		},
		ExitErrHandler: func(*cli.Context, error) {}, // main decides
	}
	oneLineUsageErrors(app.Commands)
	return app
}

// oneLineUsageErrors makes every command report a usage error as one line
// on stderr (exit 125) instead of printing its help to stdout: a bad flag
// through OnUsageError, a missing required flag through Before, because the
// CLI library prints a command's help before any hook of it runs when it
// checks required flags itself.
func oneLineUsageErrors(cmds []*cli.Command) {
	required := map[*cli.Command][]string{}
	var walk func([]*cli.Command)
	walk = func(cmds []*cli.Command) {
		for _, c := range cmds {
			for _, f := range c.Flags {
				if r, ok := f.(cli.RequiredFlag); ok && r.IsRequired() {
					required[c] = append(required[c], f.Names()[0])
				}
			}
			walk(c.Subcommands)
		}
	}
	walk(cmds)
	var set func([]*cli.Command)
	set = func(cmds []*cli.Command) {
		for _, c := range cmds {
			c.OnUsageError = func(cliContext *cli.Context, err error, _ bool) error {
				return usageError(err, cliContext.Command.Flags, "warden "+commandName(cliContext))
			}
			for _, f := range c.Flags {
				notRequired(f)
			}
			if names := required[c]; len(names) > 0 {
				before := c.Before
				c.Before = func(cliContext *cli.Context) error {
					for _, name := range names {
						if !cliContext.IsSet(name) {
							return fmt.Errorf("--%s is required; see 'warden %s --help'", name, commandName(cliContext))
						}
					}
					if before != nil {
						return before(cliContext)
					}
					return nil
				}
			}
			set(c.Subcommands)
		}
	}
	set(cmds)
}

// notRequired clears the Required field of the flag types warden uses; the
// check moves to the command's Before (see oneLineUsageErrors).
func notRequired(f cli.Flag) {
	switch f := f.(type) {
	case *cli.StringFlag:
		f.Required = false
	case *cli.StringSliceFlag:
		f.Required = false
	case *cli.BoolFlag:
		f.Required = false
	case *cli.IntFlag:
		f.Required = false
	case *cli.UintFlag:
		f.Required = false
	case *cli.DurationFlag:
		f.Required = false
	}
}

// before checks the global flags before any command touches the host.
func before(cliContext *cli.Context) error {
	if err := sandbox.CheckRoot(cliContext.String("root")); err != nil {
		return err
	}
	return setupLogging(cliContext)
}

func main() {
	// Off the main thread (see init): a goroutine pinned there makes each
	// of its waits a hand-off between threads, ~3 ms of a `warden run`.
	code := make(chan int)
	go func() {
		err := newApp().Run(os.Args)
		logError(err)
		code <- exitCode(err)
	}()
	os.Exit(<-code)
}

// exitCode prints err (if any) and maps it to warden's exit status.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var se *daemon.SignalError
	var ee *exitError
	switch {
	case errors.As(err, &se):
		fmt.Fprintf(os.Stderr, "warden: %v\n", err)
	case errors.As(err, &ee):
		if ee.err != nil {
			fmt.Fprintf(os.Stderr, "warden: %v\n", ee.err)
		}
	default:
		fmt.Fprintf(os.Stderr, "warden: %v\n", err)
	}
	return exitStatus(err)
}

// exitStatus is warden's exit status for err.
func exitStatus(err error) int {
	if err == nil {
		return 0
	}
	var se *daemon.SignalError
	if errors.As(err, &se) { // as if the signal had ended warden: nothing ran
		return 128 + int(se.Signal)
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return exitWarden
}

var randRead = rand.Read
