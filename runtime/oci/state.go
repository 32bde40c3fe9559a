package oci

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/utils"
)

// ContainerState is the OCI state of a container, as `state` prints it.
type ContainerState struct {
	OCIVersion  string            `json:"ociVersion"`
	ID          string            `json:"id"`
	Pid         int               `json:"pid"`
	Status      string            `json:"status"`
	Bundle      string            `json:"bundle"`
	Rootfs      string            `json:"rootfs"`
	Created     time.Time         `json:"created"`
	Owner       string            `json:"owner"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Policy      string            `json:"wardenPolicy,omitempty"`
}

// State returns a container's state.
func (o *Runtime) State(id string) (*ContainerState, error) {
	if g, ok, err := o.loadGVisor(id); ok {
		if err != nil {
			return nil, err
		}
		return g.state()
	}
	c, err := o.Load(id)
	if err != nil {
		return nil, err
	}
	return o.state(c)
}

func (o *Runtime) state(c *libcontainer.Container) (*ContainerState, error) {
	st, err := c.Status()
	if err != nil {
		return nil, err
	}
	s, err := c.State()
	if err != nil {
		return nil, err
	}
	pid := s.BaseState.InitProcessPid
	if st == libcontainer.Stopped {
		pid = 0
	}
	bundle, ann := utils.Annotations(s.Config.Labels)
	cs := &ContainerState{
		OCIVersion: s.Config.Version, ID: s.ID, Pid: pid, Status: st.String(), Bundle: bundle,
		Rootfs: s.Config.Rootfs, Created: s.Created, Owner: "root", Annotations: ann,
	}
	if rec, _ := readRecord(c, o.stateDir()); rec != nil {
		cs.Policy = rec.Policy
	}
	return cs, nil
}

// List returns every container under the root.
func (o *Runtime) List() ([]*ContainerState, error) {
	entries, err := os.ReadDir(o.stateDir())
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	var out []*ContainerState
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		c, err := libcontainer.Load(o.stateDir(), e.Name())
		if err != nil {
			continue
		}
		if s, err := o.state(c); err == nil {
			out = append(out, s)
		}
	}
	gv, _ := os.ReadDir(filepath.Dir(o.gvisorDir("x")))
	for _, e := range gv {
		if g, ok, err := o.loadGVisor(e.Name()); ok && err == nil {
			if s, err := g.state(); err == nil {
				out = append(out, s)
			}
		}
	}
	return out, nil
}

// Processes lists the host pids of a container's processes.
func (o *Runtime) Processes(id string) ([]int, error) {
	if g, ok, err := o.loadGVisor(id); ok {
		if err != nil {
			return nil, err
		}
		return g.processes()
	}
	c, err := o.Load(id)
	if err != nil {
		return nil, err
	}
	return c.Processes()
}
