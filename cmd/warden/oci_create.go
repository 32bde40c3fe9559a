package main

import (
	"github.com/urfave/cli/v2"

	"github.com/warden-sandbox/warden/runtime"
)

var createFlags = []cli.Flag{
	&cli.StringFlag{Name: "bundle", Aliases: []string{"b"}, Usage: "the bundle `DIR` (holding config.json)", Value: "."},
	&cli.StringFlag{Name: "pid-file", Usage: "write the container's init pid to `FILE`"},
	&cli.StringFlag{Name: "console-socket", Usage: "unix socket `PATH` that receives the terminal's master side"},
	&cli.BoolFlag{Name: "no-pivot", Usage: "do not use pivot_root (for a root on a ramdisk)"},
	&cli.BoolFlag{Name: "no-new-keyring", Usage: "do not create a new session keyring"},
	&cli.IntFlag{Name: "preserve-fds", Usage: "pass `N` more file descriptors (3 and on) to the container"},
}

func createOptions(cliContext *cli.Context, id string) runtime.CreateOptions {
	return runtime.CreateOptions{
		ID: id, Bundle: cliContext.String("bundle"), PidFile: cliContext.String("pid-file"),
		ConsoleSocket: cliContext.String("console-socket"), NoPivot: cliContext.Bool("no-pivot"),
		NoNewKeyring: cliContext.Bool("no-new-keyring"), PreserveFDs: cliContext.Int("preserve-fds"),
		Detach: cliContext.Bool("detach"),
	}
}

var createCommand = &cli.Command{
	Name:      "create",
	Usage:     "OCI: create a container from a bundle; its process waits for start",
	ArgsUsage: "CONTAINER-ID",
	Flags:     createFlags,
	Action: onContainer(func(cliContext *cli.Context, o *runtime.OCI, id string) error {
		_, err := o.Create(createOptions(cliContext, id), false)
		return err
	}),
}

var runCommand = &cli.Command{
	Name:      "run",
	Usage:     "OCI: create and start a container from a bundle, and wait for it unless detached",
	ArgsUsage: "CONTAINER-ID",
	Flags:     append([]cli.Flag{&cli.BoolFlag{Name: "detach", Aliases: []string{"d"}, Usage: "do not wait for the container"}}, createFlags...),
	Action: onContainer(func(cliContext *cli.Context, o *runtime.OCI, id string) error {
		status, err := o.Create(createOptions(cliContext, id), true)
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
	Action: onContainer(func(cliContext *cli.Context, o *runtime.OCI, id string) error {
		return o.Start(id)
	}),
}
