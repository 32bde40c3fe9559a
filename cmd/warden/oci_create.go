package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
	"github.com/warden-sandbox/warden/runtime/oci"
)

var createFlags = []cli.Flag{
	&cli.StringFlag{Name: "bundle", Aliases: []string{"b"}, Usage: "the bundle `DIR` (holding config.json)", Value: "."},
	&cli.StringFlag{Name: "pid-file", Usage: "write the container's init pid to `FILE`"},
	&cli.StringFlag{Name: "console-socket", Usage: "unix socket `PATH` that receives the terminal's master side"},
	&cli.BoolFlag{Name: "no-pivot", Usage: "do not use pivot_root (for a root on a ramdisk)"},
	&cli.BoolFlag{Name: "no-new-keyring", Usage: "do not create a new session keyring"},
	&cli.IntFlag{Name: "preserve-fds", Usage: "pass `N` more file descriptors (3 and on) to the container"},
}

func createOptions(cliContext *cli.Context, id string) (oci.CreateOptions, error) {
	fds, err := preserveFDs(cliContext)
	return oci.CreateOptions{
		ID: id, Bundle: cliContext.String("bundle"), PidFile: cliContext.String("pid-file"),
		ConsoleSocket: cliContext.String("console-socket"), NoPivot: cliContext.Bool("no-pivot"),
		NoNewKeyring: cliContext.Bool("no-new-keyring"), PreserveFDs: fds,
		Detach: cliContext.Bool("detach"),
	}, err
}

// preserveFDs is --preserve-fds: a count, so never negative.
func preserveFDs(cliContext *cli.Context) (int, error) {
	n := cliContext.Int("preserve-fds")
	if n < 0 {
		return 0, fmt.Errorf("--preserve-fds %d: give the number of extra file descriptors to pass, 0 or more", n)
	}
	return n, nil
}

var createCommand = &cli.Command{
	Name:      "create",
	Usage:     "OCI: create a container from a bundle; its process waits for start",
	ArgsUsage: "CONTAINER-ID",
	Flags:     createFlags,
	Action: onContainer(func(cliContext *cli.Context, o *oci.Runtime, id string) error {
		opts, err := createOptions(cliContext, id)
		if err != nil {
			return err
		}
		_, err = o.Create(opts, false)
		return err
	}),
}

var runCommand = &cli.Command{
	Name:      "run",
	Usage:     "OCI: create and start a container from a bundle, and wait for it unless detached",
	ArgsUsage: "CONTAINER-ID",
	Flags:     append([]cli.Flag{&cli.BoolFlag{Name: "detach", Aliases: []string{"d"}, Usage: "do not wait for the container"}}, createFlags...),
	Action: onContainer(func(cliContext *cli.Context, o *oci.Runtime, id string) error {
		opts, err := createOptions(cliContext, id)
		if err != nil {
			return err
		}
		status, err := o.Create(opts, true)
		if err != nil {
			return err
		}
		return statusError(status)
	}),
}

var startCommand = &cli.Command{
	Name:      "start",
	Usage:     "OCI: start a created container's process",
	ArgsUsage: "CONTAINER-ID",
	Action: onContainer(func(cliContext *cli.Context, o *oci.Runtime, id string) error {
		return o.Start(id)
	}),
}
