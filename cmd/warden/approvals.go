package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/warden-sandbox/warden/runtime/daemon"
)

// Approvals: the commands a policy's commands.ask holds until a human
// answers (docs/cli.md, docs/policy.md).

var approvalsCommand = &cli.Command{
	Name:  "approvals",
	Usage: "list and answer the commands waiting for a human (commands.ask)",
	Subcommands: []*cli.Command{
		approvalsListCommand,
		approvalAnswerCommand("approve", true),
		approvalAnswerCommand("deny", false),
	},
}

var approvalsListCommand = &cli.Command{
	Name:    "ls",
	Aliases: []string{"list"},
	Usage:   "list waiting commands: id, session, policy, argv, cwd, parent command, waiting since",
	Flags:   []cli.Flag{tableFormatFlag},
	Action:  listAction((*daemon.Client).Approvals, printApprovals),
}

func printApprovals(w io.Writer, list []daemon.Approval, format string) error {
	now := time.Now()
	return printList(w, list, format, "ID\tSESSION\tPOLICY\tARGV\tCWD\tPARENT\tWAITING", func(a daemon.Approval) string {
		parent := a.Parent
		if parent == "" {
			parent = "-"
		}
		return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s", a.ID, a.Session, a.Policy, printable(strings.Join(a.Argv, " ")),
			printable(a.Cwd), printable(parent), now.Sub(a.Since).Round(time.Second))
	})
}

func approvalAnswerCommand(name string, allow bool) *cli.Command {
	usage := "let a waiting command run"
	if !allow {
		usage = "refuse a waiting command (it exits 126 and says so)"
	}
	return &cli.Command{
		Name:            name,
		Usage:           usage,
		ArgsUsage:       "ID",
		SkipFlagParsing: true, // see positional: ID --reason TEXT
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "reason", Usage: "why, for the audit log (and, for a deny, the command's caller)"},
		},
		Action: func(cliContext *cli.Context) error {
			args, err := positional(cliContext, 1, 1, "one approval id (warden approvals ls lists them)")
			if err != nil {
				return err
			}
			id := args[0]
			if err := client(cliContext).Answer(id, allow, cliContext.String("reason")); err != nil {
				return err
			}
			verb := "approved"
			if !allow {
				verb = "denied"
			}
			fmt.Fprintf(cliContext.App.Writer, "%s %s\n", id, verb)
			return nil
		},
	}
}

// printable shows an agent's text on one line, its control characters
// escaped, so a listing cannot be forged by an argv.
func printable(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			fmt.Fprintf(&b, "\\x%02x", r)
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}
