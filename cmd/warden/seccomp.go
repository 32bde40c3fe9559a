package main

import (
	"encoding/json"

	"github.com/urfave/cli/v2"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/seccomp"
)

var seccompCommand = &cli.Command{
	Name:  "seccomp",
	Usage: "print the seccomp profile a policy gets, as OCI JSON (linux.seccomp)",
	Flags: []cli.Flag{
		&cli.StringFlag{Name: "policy", Aliases: []string{"p"}, Usage: "policy `FILE` (default: warden's default profile)"},
	},
	Action: func(cliContext *cli.Context) error {
		if err := checkArgs(cliContext, 0, 0, "no arguments"); err != nil {
			return err
		}
		profile := seccomp.Default()
		if f := cliContext.String("policy"); f != "" {
			p, err := policies.Load(f)
			if err != nil {
				return err
			}
			profile = seccomp.ForPolicy(p)
		}
		enc := json.NewEncoder(cliContext.App.Writer)
		enc.SetIndent("", "  ")
		return enc.Encode(profile)
	},
}
