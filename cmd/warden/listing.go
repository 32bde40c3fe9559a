package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/warden-sandbox/warden/runtime/daemon"
)

// listAction is the action of a listing command (session ls, pool status,
// approvals ls): no arguments, --format, the list the daemon gives ask,
// printed by print. A state root that does not exist lists nothing:
// listing makes neither a root nor a daemon (a mistyped --root would
// otherwise leave both behind).
func listAction[T any](ask func(*daemon.Client) ([]T, error), print func(w io.Writer, list []T, format string) error) cli.ActionFunc {
	return func(cliContext *cli.Context) error {
		if err := checkArgs(cliContext, 0, 0, "no arguments"); err != nil {
			return err
		}
		format, err := tableFormat(cliContext)
		if err != nil {
			return err
		}
		var list []T
		if c := client(cliContext); !errors.Is(statErr(c.Root), fs.ErrNotExist) {
			if list, err = ask(c); err != nil {
				return err
			}
		}
		return print(cliContext.App.Writer, list, format)
	}
}

// printList prints rows as indented JSON (an empty list as []) or as a
// table: header, then line's tab-separated cells of each row.
func printList[T any](w io.Writer, rows []T, format, header string, line func(T) string) error {
	if format == "json" {
		if rows == nil {
			rows = []T{}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, line(r))
	}
	return tw.Flush()
}
