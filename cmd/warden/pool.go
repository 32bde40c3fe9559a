package main

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/urfave/cli/v2"
	"github.com/warden-sandbox/warden/runtime/daemon"
)

var poolCommand = &cli.Command{
	Name:  "pool",
	Usage: "keep sandboxes ready per policy, so a new session starts in milliseconds",
	Description: `A pool keeps containers started for a policy; 'session create' (and 'exec
--policy' for a new session) claims one, binds the session's workspace and
data folders into it and runs nothing else first. An empty pool means a cold
start, never an error. Sizes in the daemon's configuration file (see 'warden
daemon --help') are kept across restarts.`,
	Subcommands: []*cli.Command{
		poolFillCommand,
		poolStatusCommand,
		poolDrainCommand,
	},
}

var poolFillCommand = &cli.Command{
	Name:  "fill",
	Usage: "keep N containers ready for a policy (0 keeps the pool but empties it)",
	Flags: []cli.Flag{
		&cli.StringSliceFlag{Name: "policy", Aliases: []string{"p"}, Usage: "policy `FILE` (repeat to merge several skills)", Required: true},
		&cli.IntFlag{Name: "size", Aliases: []string{"n"}, Usage: "containers to keep ready", Required: true},
		&cli.StringFlag{Name: "skill-dir", Usage: "the skill's folder `DIR` ($SKILL_DIR; default: the policy file's folder)"},
	},
	Action: func(cliContext *cli.Context) error {
		if err := checkArgs(cliContext, 0, 0, "no arguments"); err != nil {
			return err
		}
		size := cliContext.Int("size")
		if size < 0 || size > daemon.MaxPoolSize {
			return fmt.Errorf("--size %d: use 0 to %d", size, daemon.MaxPoolSize)
		}
		req, err := poolRequest(cliContext)
		if err != nil {
			return err
		}
		req.Size = size
		pools, err := client(cliContext).FillPool(*req)
		if err != nil {
			return err
		}
		return printPools(cliContext.App.Writer, pools, "table")
	},
}

// poolRequest loads the --policy files (so a bad one fails here) and names
// them by absolute path: the daemon re-reads them to follow changes.
func poolRequest(cliContext *cli.Context) (*daemon.PoolRequest, error) {
	files := cliContext.StringSlice("policy")
	_, vars, err := loadSandboxPolicy(cliContext, files)
	if err != nil {
		return nil, err
	}
	req := &daemon.PoolRequest{Vars: vars}
	req.Vars.WorkDir, req.Vars.DataDir = "", ""
	for _, f := range files {
		abs, err := filepath.Abs(f)
		if err != nil {
			return nil, err
		}
		req.Files = append(req.Files, abs)
	}
	return req, nil
}

var poolStatusCommand = &cli.Command{
	Name:   "status",
	Usage:  "per pool: policy, ready, claimed, refilling, hits, misses",
	Flags:  []cli.Flag{tableFormatFlag},
	Action: listAction((*daemon.Client).Pools, printPools),
}

var poolDrainCommand = &cli.Command{
	Name:  "drain",
	Usage: "stop a pool's ready containers and forget the pool (all pools without --policy)",
	Flags: []cli.Flag{
		&cli.StringSliceFlag{Name: "policy", Aliases: []string{"p"}, Usage: "policy `FILE` of the pool (as given to fill)"},
	},
	Action: func(cliContext *cli.Context) error {
		if err := checkArgs(cliContext, 0, 0, "no arguments"); err != nil {
			return err
		}
		req := &daemon.PoolRequest{}
		for _, f := range cliContext.StringSlice("policy") {
			abs, err := filepath.Abs(f)
			if err != nil {
				return err
			}
			req.Files = append(req.Files, abs)
		}
		if len(req.Files) == 0 {
			req = nil
		}
		pools, err := client(cliContext).DrainPool(req)
		if err != nil {
			return err
		}
		return printPools(cliContext.App.Writer, pools, "table")
	},
}

func printPools(w io.Writer, pools []daemon.PoolInfo, format string) error {
	return printList(w, pools, format, "POLICY\tFILES\tSIZE\tREADY\tCLAIMED\tREFILLING\tHITS\tMISSES\tERROR", func(p daemon.PoolInfo) string {
		return fmt.Sprintf("%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s", p.Policy, filepath.Join(p.Files...), p.Size, p.Ready,
			p.Claimed, p.Refilling, p.Hits, p.Misses, p.Error)
	})
}
