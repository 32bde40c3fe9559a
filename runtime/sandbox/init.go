package sandbox

import (
	// A container's init is handed to libcontainer there, before the
	// packages it does not use are initialized.
	"github.com/warden-sandbox/warden/runtime/sandbox/containerinit"
)

// IsInit reports whether this process was started by libcontainer as a
// container's init (`warden init`).
func IsInit() bool {
	return containerinit.IsInit()
}

// Init runs libcontainer's container setup and execs the container's
// process. It never returns.
func Init() {
	containerinit.Init()
}
