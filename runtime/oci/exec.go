package oci

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/utils"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"

	"github.com/warden-sandbox/warden/spec"
)

// ExecOptions are the flags of exec in its OCI form.
type ExecOptions struct {
	Process       *specs.Process
	Detach        bool
	PidFile       string
	ConsoleSocket string
	PreserveFDs   int
}

// BundleProcess is the process of the container's config.json, the base
// of an inline exec (`exec ID CMD...`).
func (o *Runtime) BundleProcess(id string) (*specs.Process, error) {
	if g, ok, err := o.loadGVisor(id); ok {
		if err != nil {
			return nil, err
		}
		s, err := LoadBundleSpec(g.rec.Bundle)
		if err != nil {
			return nil, err
		}
		return s.Process, nil
	}
	c, err := o.Load(id)
	if err != nil {
		return nil, err
	}
	bundle, ok := utils.SearchLabels(c.Config().Labels, "bundle")
	if !ok {
		return nil, fmt.Errorf("container %s: bundle not found in its state", id)
	}
	s, err := LoadBundleSpec(bundle)
	if err != nil {
		return nil, err
	}
	return s.Process, nil
}

// Exec runs a new process in a running container and returns its exit
// status (0 when detached).
func (o *Runtime) Exec(id string, opts ExecOptions) (int, error) {
	p := opts.Process
	if p == nil || len(p.Args) == 0 {
		return -1, errors.New("exec: the process has no args")
	}
	if p.Cwd == "" || !filepath.IsAbs(p.Cwd) {
		return -1, fmt.Errorf("exec: cwd %q must be an absolute path", p.Cwd)
	}
	if g, ok, err := o.loadGVisor(id); ok {
		if err != nil {
			return -1, err
		}
		return g.exec(p, opts)
	}
	c, err := o.Load(id)
	if err != nil {
		return -1, err
	}
	st, err := c.Status()
	if err != nil {
		return -1, err
	}
	if st == libcontainer.Stopped {
		return -1, fmt.Errorf("cannot exec in a stopped container %s", id)
	}
	if st == libcontainer.Paused {
		return -1, fmt.Errorf("cannot exec in a paused container %s; resume it first", id)
	}
	rec, err := readRecord(c, o.stateDir())
	if err != nil {
		return -1, err
	}
	if rec != nil && rec.FirstSeccomp && st == libcontainer.Created {
		// Its first process would load its filter with one of the
		// container's own beside it.
		return -1, fmt.Errorf("cannot exec in container %s before it starts: under policy %s its first process sets up its own seccomp filter; start it first", id, rec.Policy)
	}
	if rec != nil && c.Config().Seccomp == nil {
		// A policy always gives the container a profile; its first
		// process loads it apart (seccompexec.go), and a create that
		// died before putting it back into the state left none here.
		return -1, fmt.Errorf("container %s runs under policy %s but its state holds no seccomp profile (its create did not finish): delete it and create it again", id, rec.Policy)
	}
	if rec != nil {
		spec.TightenProcess(p, rec.CapAllow, func(format string, args ...any) {
			logrus.WithField("policy", rec.Policy).Debugf("exec: "+format, args...)
		})
	}
	r := &processRun{container: c, detach: opts.Detach, pidFile: opts.PidFile,
		consoleSocket: opts.ConsoleSocket, preserveFDs: opts.PreserveFDs}
	return r.run(p, true)
}
