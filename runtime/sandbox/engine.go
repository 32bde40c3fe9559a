package sandbox

import (
	"errors"
	"fmt"
	"os"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// An engine runs the containers sandboxes live in. Sessions, pooled
// containers, `warden do` and the Go API reach their containers only
// through one: libcontainer in this process (containerEngine, in
// engine_container.go) or runsc (gvisorEngine, engine_gvisor.go); an
// engine is an implementation of these two interfaces, not branches in
// the callers.
type engine interface {
	// start creates a container from a complete spec and starts its
	// init process (warden's agent), reachable at req.socket. Every bind
	// mount's source must be what the spec named when the container
	// started.
	start(req startRequest) (container, error)
	// load finds a container the engine started, running or not.
	load(id string) (container, error)
	// lateBinds reports whether folders can be bound into a running
	// container (pools, and the session folders of a cold start); an
	// engine that cannot starts every container with all its mounts.
	lateBinds() bool
}

// startRequest is one container to start.
type startRequest struct {
	id        string
	spec      *specs.Spec // its root at spec.Root.Path
	bundleDir string      // the sandbox's own files: binds from here are warden's
	socket    string      // where the host reaches the agent: a path in the sandbox's state folder
	log       *os.File    // the init's stdout and stderr
	egress    bool        // the policy has a network.allow list
}

// engines is every engine of a runtime; it loads a container from the
// engine that started it.
type engines struct {
	container, gvisor engine
}

func (e engines) load(id string) (container, error) {
	if c, err := e.gvisor.load(id); err == nil {
		return c, nil
	}
	return e.container.load(id)
}

// A container is a started sandbox's container, as its engine sees it.
type container interface {
	// init is the pid of the container's init process and its start
	// time, which tells it from a later process given the same pid.
	init() (pid int, start uint64, err error)
	status() (containerStatus, error)
	// pause stops every process of the container where it is (the cgroup
	// freezer) until resume; a paused container's status is paused.
	pause() error
	resume() error
	// processes lists the host pids of every process in the container,
	// its init's among them.
	processes() ([]int, error)
	// destroy kills every process of the container and removes the
	// engine's state of it.
	destroy() error
	// lateNamespace opens the mount namespace a claim binds the session's
	// folders in, and lateRoot is the folder there that stands for the
	// sandbox's root (see bindLate).
	lateNamespace() (*os.File, error)
	lateRoot() string
}

type containerStatus int

const (
	running containerStatus = iota
	stopped                 // its init has died
	paused
	creating
)

func (s containerStatus) String() string {
	switch s {
	case running:
		return "running"
	case stopped:
		return "stopped"
	case paused:
		return "paused"
	case creating:
		return "creating"
	}
	return fmt.Sprintf("status %d", int(s))
}

// mountNamespace opens a running container's mount namespace.
func mountNamespace(c container) (*os.File, error) {
	pid, start, err := c.init()
	if err != nil {
		return nil, err
	}
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/mnt", pid))
	if err != nil {
		return nil, err
	}
	// The pid could have died and been reused between init and Open: the
	// container must still be running with the same init.
	if pid2, start2, err := c.init(); err != nil || pid2 != pid || start2 != start {
		ns.Close()
		return nil, errors.New("sandbox init changed while attaching")
	}
	if s, err := c.status(); err != nil || s != running {
		ns.Close()
		return nil, fmt.Errorf("sandbox is not running (%v)", s)
	}
	return ns, nil
}
