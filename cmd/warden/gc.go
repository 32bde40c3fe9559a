package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

var gcCommand = &cli.Command{
	Name:  "gc",
	Usage: "remove every orphan (containers, cgroups, mounts, state) and print what was removed",
	Action: func(cliContext *cli.Context) error {
		if err := checkArgs(cliContext, 0, 0, "no arguments"); err != nil {
			return err
		}
		removed, err := client(cliContext).GC()
		for _, item := range removed {
			fmt.Fprintf(cliContext.App.Writer, "removed %s\n", item)
		}
		if err != nil {
			return err
		}
		if len(removed) == 0 {
			fmt.Fprintln(cliContext.App.Writer, "nothing to remove")
		}
		return nil
	},
}
