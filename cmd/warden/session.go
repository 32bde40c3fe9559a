package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/warden-sandbox/warden/runtime/daemon"
	"github.com/warden-sandbox/warden/runtime/sandbox"
)

var sessionCommand = &cli.Command{
	Name:  "session",
	Usage: "create, list, remove, freeze, thaw and kill sessions (one warm sandbox per conversation)",
	Subcommands: []*cli.Command{
		sessionCreateCommand,
		sessionListCommand,
		sessionRemoveCommand,
		sessionFreezeCommand,
		sessionThawCommand,
		sessionKillCommand,
	},
}

var sessionCreateCommand = &cli.Command{
	Name:  "create",
	Usage: "start a session's sandbox and print its id",
	Flags: append([]cli.Flag{
		&cli.StringFlag{Name: "id", Usage: "session `ID` (default: a random one)"},
		engineFlag,
	}, sandboxFlags...),
	Action: func(cliContext *cli.Context) error {
		if err := checkArgs(cliContext, 0, 0, "no arguments"); err != nil {
			return err
		}
		id := cliContext.String("id")
		if id == "" {
			id = "s-" + randomID()
		}
		cfg, err := sessionConfig(cliContext, id)
		if err != nil {
			return err
		}
		if err := client(cliContext).Create(cfg); err != nil {
			return err
		}
		fmt.Fprintln(cliContext.App.Writer, id)
		return nil
	},
}

// sessionConfig loads the --policy files and the path variables into the
// session id's config.
func sessionConfig(cliContext *cli.Context, id string) (sandbox.SessionConfig, error) {
	p, vars, err := loadSandboxPolicy(cliContext, cliContext.StringSlice("policy"))
	if err != nil {
		return sandbox.SessionConfig{}, err
	}
	return sandbox.SessionConfig{ID: id, Policy: p, Vars: vars}, nil
}

func statErr(path string) error {
	_, err := os.Stat(path)
	return err
}

func client(cliContext *cli.Context) *daemon.Client {
	root, _ := filepath.Abs(cliContext.String("root"))
	return &daemon.Client{Root: root}
}

var sessionListCommand = &cli.Command{
	Name:    "ls",
	Aliases: []string{"list"},
	Usage:   "list sessions: id, policy, workspace, state, age, idle, commands run",
	Flags:   []cli.Flag{tableFormatFlag},
	Action:  listAction((*daemon.Client).Sessions, printSessions),
}

func printSessions(w io.Writer, sessions []daemon.SessionInfo, format string) error {
	now := time.Now()
	return printList(w, sessions, format, "ID\tPOLICY\tWORKSPACE\tSTATE\tAGE\tIDLE\tEXECS\tRUNNING", func(s daemon.SessionInfo) string {
		return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d", s.ID, s.Policy, s.Workspace, s.State,
			now.Sub(s.Created).Round(time.Second), now.Sub(s.LastUsed).Round(time.Second), s.Execs, s.Running)
	})
}

var sessionRemoveCommand = &cli.Command{
	Name:            "rm",
	Aliases:         []string{"remove"},
	Usage:           "stop sessions and remove their state; workspaces are never touched",
	ArgsUsage:       "ID...",
	SkipFlagParsing: true, // see positional
	Flags: []cli.Flag{
		&cli.BoolFlag{Name: "force", Aliases: []string{"f"}, Usage: "kill commands still running"},
	},
	Action: func(cliContext *cli.Context) error {
		ids, err := positional(cliContext, 1, -1, "one or more session ids")
		if err != nil {
			return err
		}
		// A malformed id (a flag after --) names no session: say so before
		// a daemon is started for it.
		for _, id := range ids {
			if err := sandbox.CheckID(id); err != nil {
				return err
			}
		}
		c := client(cliContext)
		failed := 0
		for _, id := range ids {
			if err := c.Remove(id, cliContext.Bool("force")); err != nil {
				fmt.Fprintf(os.Stderr, "warden: %v\n", err)
				failed++
			}
		}
		if failed > 0 {
			return &exitError{code: exitWarden}
		}
		return nil
	},
}
