package main

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"github.com/warden-sandbox/warden/runtime/oci"
)

var stateCommand = &cli.Command{
	Name:      "state",
	Usage:     "OCI: print a container's state as JSON",
	ArgsUsage: "CONTAINER-ID",
	Action: onContainer(func(cliContext *cli.Context, o *oci.Runtime, id string) error {
		st, err := o.State(id)
		if err != nil {
			return err
		}
		data, err := json.MarshalIndent(st, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintln(cliContext.App.Writer, string(data))
		return nil
	}),
}

var listCommand = &cli.Command{
	Name:    "list",
	Aliases: []string{"ls"},
	Usage:   "OCI: list the containers under the state root",
	Flags: []cli.Flag{
		&cli.StringFlag{Name: "format", Aliases: []string{"f"}, Usage: "table or json", Value: "table"},
		&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "print the ids only"},
	},
	Action: func(cliContext *cli.Context) error {
		if err := checkArgs(cliContext, 0, 0, "no arguments"); err != nil {
			return err
		}
		o, err := ociRuntime(cliContext)
		if err != nil {
			return err
		}
		list, err := o.List()
		if err != nil {
			return err
		}
		w := cliContext.App.Writer
		if cliContext.Bool("quiet") {
			for _, c := range list {
				fmt.Fprintln(w, c.ID)
			}
			return nil
		}
		switch f := cliContext.String("format"); f {
		case "json":
			if list == nil {
				fmt.Fprintln(w, "[]")
				return nil
			}
			return json.NewEncoder(w).Encode(list)
		case "table":
			tw := tabwriter.NewWriter(w, 12, 1, 3, ' ', 0)
			fmt.Fprint(tw, "ID\tPID\tSTATUS\tBUNDLE\tCREATED\tPOLICY\n")
			for _, c := range list {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", c.ID, c.Pid, c.Status, c.Bundle, c.Created.Format(time.RFC3339Nano), c.Policy)
			}
			return tw.Flush()
		default:
			return fmt.Errorf("--format %q: use table or json", f)
		}
	},
}

var psCommand = &cli.Command{
	Name:      "ps",
	Usage:     "OCI: list a container's processes (json: host pids; table: ps output)",
	ArgsUsage: "CONTAINER-ID [PS-ARGS...]",
	Flags:     []cli.Flag{&cli.StringFlag{Name: "format", Aliases: []string{"f"}, Usage: "table or json", Value: "table"}},
	Action: func(cliContext *cli.Context) error {
		id, err := containerArg(cliContext, 1, -1, "a container id")
		if err != nil {
			return err
		}
		o, err := ociRuntime(cliContext)
		if err != nil {
			return err
		}
		pids, err := o.Processes(id)
		if err != nil {
			return err
		}
		w := cliContext.App.Writer
		switch f := cliContext.String("format"); f {
		case "json":
			if pids == nil {
				pids = []int{}
			}
			return json.NewEncoder(w).Encode(pids)
		case "table":
		default:
			return fmt.Errorf("--format %q: use table or json", f)
		}
		args := cliContext.Args().Slice()[1:]
		if len(args) == 0 {
			args = []string{"-ef"}
		}
		out, err := exec.Command("ps", args...).Output()
		if err != nil {
			return fmt.Errorf("ps: %w", err)
		}
		lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
		col := slices.Index(strings.Fields(lines[0]), "PID")
		if col < 0 {
			return fmt.Errorf("ps: no PID column in %q", lines[0])
		}
		fmt.Fprintln(w, lines[0])
		for _, l := range lines[1:] {
			f := strings.Fields(l)
			if len(f) <= col {
				continue
			}
			if pid, err := strconv.Atoi(f[col]); err == nil && slices.Contains(pids, pid) {
				fmt.Fprintln(w, l)
			}
		}
		return nil
	},
}
