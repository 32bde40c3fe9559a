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

// gvisorKeeperCommand is what the gVisor engine leaves on the host for a
// pod's container (oci.KeepGVisor), a detached exec (oci.KeepGVisorExec)
// and its guard (oci.GuardGVisorExec); nobody types it.
var gvisorKeeperCommand = &cli.Command{
	Name:      oci.GVisorKeeperCommand,
	Usage:     "OCI: stand for a process in gVisor on the host (warden create and exec start it)",
	ArgsUsage: "CONTAINER-ID",
	Hidden:    true,
	Flags: []cli.Flag{
		&cli.StringFlag{Name: "exec", Usage: "keep the exec of the process `FILE`"},
		&cli.StringFlag{Name: "console-socket", Usage: "the exec's terminal goes to `PATH`"},
		&cli.StringFlag{Name: "guard", Usage: "kill `PID` (in gVisor) unless stdin says done"},
	},
	Action: onContainer(func(cliContext *cli.Context, o *oci.Runtime, id string) error {
		// Its stdio is the container's: warden's messages go to --log only.
		if logFile == nil {
			logrus.SetOutput(io.Discard)
		}
		if pid := cliContext.String("guard"); pid != "" {
			return o.GuardGVisorExec(id, pid, os.Stdin)
		}
		// fd 3 is warden's, which learns there whether the keeper is ready.
		if _, err := unix.FcntlInt(3, unix.F_GETFD, 0); err != nil {
			return errors.New("gvisor-keeper: warden create and exec start it, nobody types it")
		}
		// Not for what the keeper starts: warden reads it to its end.
		unix.CloseOnExec(3)
		ready := os.NewFile(3, "ready")
		if file := cliContext.String("exec"); file != "" {
			return statusError(o.KeepGVisorExec(id, file, cliContext.String("console-socket"), ready))
		}
		return statusError(o.KeepGVisor(id, ready))
	}),
}
