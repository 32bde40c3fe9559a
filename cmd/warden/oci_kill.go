package main

import (
	"github.com/urfave/cli/v2"
	"github.com/warden-sandbox/warden/runtime/oci"
)

var killCommand = &cli.Command{
	Name:      "kill",
	Usage:     "OCI: send a signal (default TERM; a number or a name) to a container's init",
	ArgsUsage: "CONTAINER-ID [SIGNAL]",
	Flags:     []cli.Flag{&cli.BoolFlag{Name: "all", Aliases: []string{"a"}, Usage: "send it to every process of the container"}},
	Action: func(cliContext *cli.Context) error {
		id, err := containerArg(cliContext, 1, 2, "a container id and a signal")
		if err != nil {
			return err
		}
		name := cliContext.Args().Get(1)
		if name == "" {
			name = "TERM"
		}
		sig, err := oci.ParseSignal(name)
		if err != nil {
			return err
		}
		o, err := ociRuntime(cliContext)
		if err != nil {
			return err
		}
		return o.Kill(id, sig, cliContext.Bool("all"))
	},
}

var deleteCommand = &cli.Command{
	Name:      "delete",
	Usage:     "OCI: remove a stopped container (with --force, any container)",
	ArgsUsage: "CONTAINER-ID",
	Flags:     []cli.Flag{&cli.BoolFlag{Name: "force", Aliases: []string{"f"}, Usage: "kill the container's processes first"}},
	Action: onContainer(func(cliContext *cli.Context, o *oci.Runtime, id string) error {
		return o.Delete(id, cliContext.Bool("force"))
	}),
}

var pauseCommand = &cli.Command{
	Name:      "pause",
	Usage:     "OCI: freeze every process of a container",
	ArgsUsage: "CONTAINER-ID",
	Action: onContainer(func(cliContext *cli.Context, o *oci.Runtime, id string) error {
		return o.Pause(id)
	}),
}

var resumeCommand = &cli.Command{
	Name:      "resume",
	Usage:     "OCI: thaw a paused container",
	ArgsUsage: "CONTAINER-ID",
	Action: onContainer(func(cliContext *cli.Context, o *oci.Runtime, id string) error {
		return o.Resume(id)
	}),
}
