package sandbox

import (
	"os"
	goruntime "runtime"

	"github.com/opencontainers/runc/libcontainer"
	// The devices cgroup manager and the nsenter constructor must be in
	// every warden binary: libcontainer re-executes it as a container's init.
	_ "github.com/opencontainers/cgroups/devices"
	_ "github.com/opencontainers/runc/libcontainer/nsenter"
)

// IsInit reports whether this process was started by libcontainer as a
// container's init (`warden init`).
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
