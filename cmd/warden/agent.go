package main

import (
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/warden-sandbox/warden/runtime"
)

// agentCommand is the PID 1 of every session's sandbox; warden starts it,
// people do not.
var agentCommand = &cli.Command{
	Name:   "agent",
	Usage:  "run as a sandbox's PID 1 (started by warden)",
	Hidden: true,
	Flags: []cli.Flag{
		&cli.StringFlag{Name: "exec-allow", Usage: "colon-separated `PATHS` that may be executed (default: all)"},
		&cli.StringFlag{Name: "writable", Usage: "colon-separated `PATHS` that may be written"},
		&cli.StringFlag{Name: "hidden-programs", Usage: "`FILE` listing programs that may not be read (one path a line)"},
		&cli.BoolFlag{Name: "pooled", Usage: "wait for the host's seal (a warm pool's claim) before running commands"},
	},
	Action: func(cliContext *cli.Context) error {
		cfg := runtime.AgentConfig{}
		if cliContext.IsSet("exec-allow") {
			cfg.ExecAllow = splitPaths(cliContext.String("exec-allow"))
			if cfg.ExecAllow == nil {
				cfg.ExecAllow = []string{}
			}
		}
		cfg.Writable = splitPaths(cliContext.String("writable"))
		if f := cliContext.String("hidden-programs"); f != "" {
			data, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			for _, line := range strings.Split(string(data), "\n") {
				if line != "" {
					cfg.HiddenPrograms = append(cfg.HiddenPrograms, line)
				}
			}
		}
		cfg.Pooled = cliContext.Bool("pooled")
		return runtime.RunAgent(cfg)
	},
}

func splitPaths(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ":")
}
