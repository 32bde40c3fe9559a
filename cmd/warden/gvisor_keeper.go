package main

import (
	"errors"
	"io"
	"os"

	"github.com/sirupsen/logrus"
	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/runtime/oci"
)

// gvisorKeeperCommand is the host process create leaves for a gVisor
// sub-container (oci.KeepGVisor); nobody types it.
var gvisorKeeperCommand = &cli.Command{
	Name:      oci.GVisorKeeperCommand,
	Usage:     "OCI: stand for a gVisor sub-container's process on the host (create starts it)",
	ArgsUsage: "CONTAINER-ID",
	Hidden:    true,
	Action: onContainer(func(cliContext *cli.Context, o *oci.Runtime, id string) error {
		// fd 3 is create's: it learns there whether the keeper listens.
		if _, err := unix.FcntlInt(3, unix.F_GETFD, 0); err != nil {
			return errors.New("gvisor-keeper: warden create starts it, nobody types it")
		}
		ready := os.NewFile(3, "ready")
		// Its stdio is the container's: warden's messages go to --log only.
		if logFile == nil {
			logrus.SetOutput(io.Discard)
		}
		return statusError(o.KeepGVisor(id, ready))
	}),
}
