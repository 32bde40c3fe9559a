package containerinit

import (
	"os"
	goruntime "runtime"

	"github.com/opencontainers/runc/libcontainer"
	// The devices cgroup manager and the nsenter constructor must be in
	// every binary libcontainer re-executes as a container's init.
	_ "github.com/opencontainers/cgroups/devices"
	_ "github.com/opencontainers/runc/libcontainer/nsenter"
)

func init() {
	// libcontainer always passes its init pipe; without it this is some
	// other program's "init" command, left to the program.
	if _, ok := os.LookupEnv("_LIBCONTAINER_INITPIPE"); ok && IsInit() {
		Init()
	}
}

// IsInit reports whether this process was started by libcontainer as a
// container's init (`PROGRAM init`).
func IsInit() bool {
	return len(os.Args) > 1 && os.Args[1] == "init"
}

// Init runs libcontainer's container setup and execs the container's
// process. It never returns.
func Init() {
	goruntime.GOMAXPROCS(1)
	goruntime.LockOSThread()
	libcontainer.Init()
}
