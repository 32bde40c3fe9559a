package main

import (
	"encoding/json"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/warden-sandbox/warden/runtime/sandbox"
)

var checkCommand = &cli.Command{
	Name:  "check",
	Usage: "check that this host can run warden: kernel, namespaces, cgroups, seccomp, landlock",
	Flags: []cli.Flag{
		&cli.StringFlag{Name: "format", Usage: "output `FORMAT`: text or json", Value: "text"},
	},
	Action: func(cliContext *cli.Context) error {
		if err := checkArgs(cliContext, 0, 0, "no arguments"); err != nil {
			return err
		}
		format := cliContext.String("format")
		if format != "text" && format != "json" {
			return fmt.Errorf("--format %q: use text or json", format)
		}
		checks := sandbox.CheckHost()
		failed := 0
		for _, c := range checks {
			if c.Required && !c.OK {
				failed++
			}
		}
		w := cliContext.App.Writer
		if format == "json" {
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			if err := enc.Encode(checks); err != nil {
				return err
			}
		} else {
			for _, c := range checks {
				status := "ok"
				switch {
				case !c.OK && c.Required:
					status = "FAIL"
				case !c.OK:
					status = "warn"
				}
				fmt.Fprintf(w, "%-4s  %-16s %s\n", status, c.Name, c.Detail)
				if !c.OK && c.Fix != "" {
					fmt.Fprintf(w, "      %-16s fix: %s\n", "", c.Fix)
				}
			}
		}
		if failed > 0 {
			return &exitError{code: exitWarden, err: fmt.Errorf("this host cannot run warden: %d required check(s) failed", failed)}
		}
		return nil
	},
}
