package main

import (
	"errors"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/warden-sandbox/warden/runtime/oci"
)

// relayHookCommand is what the gVisor engine puts in front of a
// container's host hooks (oci.RelayHook); nobody types it.
var relayHookCommand = &cli.Command{
	Name:            oci.RelayHookCommand,
	Usage:           "OCI: run a container's hook with the caller's bundle in its state (the gVisor engine's)",
	ArgsUsage:       "BUNDLE PATH ARG0 [ARG...]",
	Hidden:          true,
	SkipFlagParsing: true, // the hook's arguments are its own
	Action: func(cliContext *cli.Context) error {
		args := cliContext.Args().Slice()
		if len(args) < 3 {
			return errors.New("relay-hook: give BUNDLE PATH ARG0 [ARG...]; the gVisor engine writes this command into a container's hooks, nobody types it")
		}
		return oci.RelayHook(args[0], args[1], args[2:], os.Stdin)
	},
}
