package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/warden-sandbox/warden/spec"
)

var bundleCommand = &cli.Command{
	Name:  "bundle",
	Usage: "write an OCI bundle (config.json and rootfs skeleton) for a policy, runnable by any OCI runtime",
	Description: `The bundle's root is read-only and built from this host's system directories;
run it as root with an OCI runtime, for example: runc run --bundle DIR ID`,
	ArgsUsage: "[-- COMMAND [ARG...]]",
	Flags: append([]cli.Flag{
		&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "bundle `DIR` to create (must be absent or empty)", Required: true},
		&cli.BoolFlag{Name: "tty", Aliases: []string{"t"}, Usage: "give the process a terminal"},
		&cli.UintFlag{Name: "uid", Usage: "unprivileged host `UID` the sandbox's root maps to", Value: uint(spec.DefaultIdentity.UID)},
		&cli.UintFlag{Name: "gid", Usage: "unprivileged host `GID` the sandbox's root maps to", Value: uint(spec.DefaultIdentity.GID)},
		&cli.StringFlag{Name: "cgroups-path", Usage: "cgroup `PATH` for the container (default: the runtime's choice)"},
	}, sandboxFlags...),
	Action: func(cliContext *cli.Context) error {
		out, err := filepath.Abs(cliContext.String("out"))
		if err != nil {
			return err
		}
		o, err := sandboxOptions(cliContext, cliContext.StringSlice("policy"), out)
		if err != nil {
			return err
		}
		o.Terminal = cliContext.Bool("tty")
		o.CgroupsPath = cliContext.String("cgroups-path")
		if o.Identity.UID, err = hostID(cliContext, "uid"); err != nil {
			return err
		}
		if o.Identity.GID, err = hostID(cliContext, "gid"); err != nil {
			return err
		}
		b, err := spec.Generate(o)
		if err != nil {
			return err
		}
		printWarnings(cliContext, b)
		if err := spec.WriteBundle(out, b); err != nil {
			return err
		}
		fmt.Fprintf(cliContext.App.Writer, "wrote bundle %s for policy %q\n", out, o.Policy.Name)
		return nil
	},
}

// sandboxOptions turns the sandbox flags and the command after "--" into
// spec options.
func sandboxOptions(cliContext *cli.Context, files []string, bundleDir string) (spec.Options, error) {
	p, vars, err := loadSandboxPolicy(cliContext, files)
	if err != nil {
		return spec.Options{}, err
	}
	host, err := spec.DetectHost()
	if err != nil {
		return spec.Options{}, err
	}
	return spec.Options{
		Policy:    p,
		Vars:      vars,
		Host:      host,
		BundleDir: bundleDir,
		Args:      cliContext.Args().Slice(),
		CallerEnv: os.Environ(),
	}, nil
}

// hostID reads --uid or --gid, the host id the sandbox's root maps to: not
// 0 (host root), and below 4294967295, which the kernel takes as no id
// ((uid_t)-1) and cannot map.
func hostID(cliContext *cli.Context, flag string) (uint32, error) {
	const highest = math.MaxUint32 - 1
	v := cliContext.Uint(flag)
	if v < 1 || v > highest {
		return 0, fmt.Errorf("--%s %d: out of range; give an unprivileged host id from 1 to %d", flag, v, highest)
	}
	return uint32(v), nil
}

func printWarnings(cliContext *cli.Context, b *spec.Bundle) {
	for _, w := range b.Warnings {
		fmt.Fprintf(cliContext.App.ErrWriter, "warden: warning: %s\n", w)
	}
}
