package oci

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/opencontainers/runc/libcontainer"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/runtime/sandbox"
)

// ParseSignal reads a signal by number (9) or name (KILL, SIGKILL).
func ParseSignal(s string) (unix.Signal, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 || n > 64 {
			return 0, fmt.Errorf("signal %d out of range 1-64", n)
		}
		return unix.Signal(n), nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	sig := unix.SignalNum(name)
	if sig == 0 {
		return 0, fmt.Errorf("unknown signal %q; use a number or a name such as TERM or SIGKILL", s)
	}
	return sig, nil
}

// Kill sends a signal to a container's init, or with all to each of its
// processes.
func (o *Runtime) Kill(id string, sig unix.Signal, all bool) error {
	if g, ok, err := o.loadGVisor(id); ok {
		if err != nil {
			return err
		}
		return g.kill(sig, all)
	}
	c, err := o.Load(id)
	if err != nil {
		return err
	}
	if all {
		pids, err := c.Processes()
		if err == nil {
			for _, pid := range pids {
				unix.Kill(pid, sig)
			}
			if sig == unix.SIGKILL {
				c.Resume()
			}
			return nil
		}
	}
	err = c.Signal(sig)
	if errors.Is(err, libcontainer.ErrNotRunning) && all {
		return nil
	}
	if errors.Is(err, libcontainer.ErrNotRunning) {
		return notRunning(id)
	}
	return err
}

// notRunning is kill's error for a container whose process has ended, in
// runc's words: containerd's shim takes an error holding "container not
// running" for a process that already finished, any other for a failed
// kill (and then fails to stop the pod).
func notRunning(id string) error {
	return fmt.Errorf("container not running: %s", id)
}

// Delete removes a stopped (or, with force, any) container.
func (o *Runtime) Delete(id string, force bool) error {
	if err := checkContainerID(id); err != nil {
		return err
	}
	if g, ok, err := o.loadGVisor(id); ok {
		if err != nil {
			if force { // a record cut short: the folder is warden's
				return os.RemoveAll(o.gvisorDir(id))
			}
			return err
		}
		return g.delete(force)
	}
	err := o.deleteContainer(id, force)
	if err == nil {
		o.releaseUserns(id)
		o.collectLeases()
	}
	return err
}

func (o *Runtime) deleteContainer(id string, force bool) error {
	c, err := libcontainer.Load(o.stateDir(), id)
	if err != nil {
		if errors.Is(err, libcontainer.ErrNotExist) {
			// An aborted create can leave a folder without state.
			dir := filepath.Join(o.stateDir(), id)
			if _, serr := os.Stat(dir); serr == nil {
				os.RemoveAll(dir)
				return nil
			}
			if force {
				return nil
			}
			return fmt.Errorf("container %s does not exist", id)
		}
		return err
	}
	if force {
		return sandbox.KillAndDestroy(c)
	}
	st, err := c.Status()
	if err != nil {
		return err
	}
	switch st {
	case libcontainer.Stopped:
		return c.Destroy()
	case libcontainer.Created:
		return sandbox.KillAndDestroy(c)
	}
	return fmt.Errorf("cannot delete container %s that is not stopped: %s (use --force)", id, st)
}

// Pause freezes a container.
func (o *Runtime) Pause(id string) error {
	if g, ok, err := o.loadGVisor(id); ok {
		if err != nil {
			return err
		}
		return g.call(io.Discard, "pause", id)
	}
	c, err := o.Load(id)
	if err != nil {
		return err
	}
	return c.Pause()
}

// Resume thaws a paused container.
func (o *Runtime) Resume(id string) error {
	if g, ok, err := o.loadGVisor(id); ok {
		if err != nil {
			return err
		}
		return g.call(io.Discard, "resume", id)
	}
	c, err := o.Load(id)
	if err != nil {
		return err
	}
	return c.Resume()
}
