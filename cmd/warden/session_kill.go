package main

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/urfave/cli/v2"

	"github.com/warden-sandbox/warden/runtime/daemon"
	"github.com/warden-sandbox/warden/runtime/sandbox"
)

// The kill switch: session freeze, thaw and kill (docs/sessions.md).

var sessionFreezeCommand = &cli.Command{
	Name:      "freeze",
	Usage:     "stop every process of a session where it is; it runs no new command until thawed",
	ArgsUsage: "ID | --all",
	Flags: []cli.Flag{
		&cli.BoolFlag{Name: "all", Usage: "freeze every session of the state root, and print their ids"},
	},
	Action: func(cliContext *cli.Context) error { return switchSessions(cliContext, true) },
}

var sessionThawCommand = &cli.Command{
	Name:      "thaw",
	Usage:     "let a frozen session's processes go on",
	ArgsUsage: "ID | --all",
	Flags: []cli.Flag{
		&cli.BoolFlag{Name: "all", Usage: "thaw every frozen session of the state root, and print their ids"},
	},
	Action: func(cliContext *cli.Context) error { return switchSessions(cliContext, false) },
}

var sessionKillCommand = &cli.Command{
	Name:      "kill",
	Usage:     "kill every process of a session but its agent; the session runs new commands afterwards",
	ArgsUsage: "ID",
	Action: func(cliContext *cli.Context) error {
		if err := checkArgs(cliContext, 1, 1, "one session id"); err != nil {
			return err
		}
		id := cliContext.Args().First()
		if err := sandbox.CheckID(id); err != nil {
			return err
		}
		n, err := client(cliContext).Kill(id)
		if err != nil {
			return err
		}
		fmt.Fprintf(cliContext.App.Writer, "session %s: killed %d process(es)\n", id, n)
		return nil
	},
}

// switchSessions freezes (or thaws) the session named, or with --all
// every session, printing the ids of those --all changed.
func switchSessions(cliContext *cli.Context, freeze bool) error {
	if !cliContext.Bool("all") {
		if err := checkArgs(cliContext, 1, 1, "one session id, or --all"); err != nil {
			return err
		}
		id := cliContext.Args().First()
		if err := sandbox.CheckID(id); err != nil {
			return err
		}
		if freeze {
			return client(cliContext).Freeze(id)
		}
		return client(cliContext).Thaw(id)
	}
	if err := checkArgs(cliContext, 0, 0, "no session id with --all"); err != nil {
		return err
	}
	c := client(cliContext)
	// No state root, no sessions: nothing to start a daemon for.
	if errors.Is(statErr(c.Root), fs.ErrNotExist) {
		return nil
	}
	var changed []daemon.SessionInfo
	var err error
	if freeze {
		changed, err = c.FreezeAll()
	} else {
		changed, err = c.ThawAll()
	}
	for _, s := range changed {
		fmt.Fprintln(cliContext.App.Writer, s.ID)
	}
	return err
}
