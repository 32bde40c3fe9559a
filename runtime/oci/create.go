package oci

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/specconv"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sirupsen/logrus"
	"github.com/warden-sandbox/warden/policies"

	"github.com/warden-sandbox/warden/runtime/sandbox"
	"github.com/warden-sandbox/warden/spec"
)

// CreateOptions are the flags of create and run.
type CreateOptions struct {
	ID            string
	Bundle        string
	PidFile       string
	ConsoleSocket string
	NoPivot       bool
	NoNewKeyring  bool
	PreserveFDs   int
	Detach        bool // run -d; create always detaches
}

// LoadBundleSpec reads a bundle's config.json.
func LoadBundleSpec(bundle string) (*specs.Spec, error) {
	data, err := policies.ReadFile(filepath.Join(bundle, "config.json"), "config.json", policies.MaxSpecFile)
	if err != nil {
		return nil, err // names the file
	}
	var s specs.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("bundle %s: config.json: %w", bundle, err)
	}
	if s.Process == nil {
		return nil, fmt.Errorf("bundle %s: config.json has no process", bundle)
	}
	if len(s.Process.Args) == 0 {
		// As runc: libcontainer's init would panic on it.
		return nil, fmt.Errorf("bundle %s: config.json: process.args must not be empty; give the command to run", bundle)
	}
	if s.Root == nil || s.Root.Path == "" {
		return nil, fmt.Errorf("bundle %s: config.json has no root.path", bundle)
	}
	return &s, nil
}

// absoluteBindSources resolves relative bind sources against the bundle,
// as runc does (it runs from the bundle): the policy must check the
// folder that is mounted, not one relative to warden's own directory.
func absoluteBindSources(s *specs.Spec, bundle string) {
	for i := range s.Mounts {
		m := &s.Mounts[i]
		bind := m.Type == "bind" || slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind")
		if bind && m.Source != "" && !filepath.IsAbs(m.Source) {
			m.Source = filepath.Join(bundle, m.Source)
		}
	}
}

// Create makes a container from a bundle and starts its init, which waits
// for Start (create), or runs it to the end (run). It returns the exit
// status for a run that does not detach.
func (o *Runtime) Create(opts CreateOptions, run bool) (int, error) {
	if err := checkContainerID(opts.ID); err != nil {
		return -1, err
	}
	if err := o.prepare(); err != nil {
		return -1, err
	}
	bundle, err := filepath.Abs(opts.Bundle)
	if err != nil {
		return -1, err
	}
	s, err := LoadBundleSpec(bundle)
	if err != nil {
		return -1, err
	}
	if !filepath.IsAbs(s.Root.Path) {
		s.Root.Path = filepath.Join(bundle, s.Root.Path)
	}
	absoluteBindSources(s, bundle)
	p, file, err := o.choosePolicy(s)
	if err != nil {
		return -1, err
	}
	gvisor := o.engineFor(p) == policies.EngineGVisor
	if gvisor && s.Linux != nil && s.Linux.CgroupsPath == "" {
		// Where runsc puts it; named so the policy's checks see it.
		s.Linux.CgroupsPath = "/" + opts.ID
	}
	if o.exists(opts.ID) {
		return -1, fmt.Errorf("container %s already exists", opts.ID)
	}
	// Under a policy the container's root is an unprivileged host user
	// (userns.go); gVisor's engine runs the container in its own kernel.
	var userns *usernsSetup
	if p != nil && !gvisor {
		if userns, err = o.planUserns(opts.ID, s); err != nil {
			return -1, err
		}
	}
	status, err := o.create(opts, run, bundle, s, p, file, gvisor, userns)
	if err != nil && userns != nil {
		userns.undo()
	}
	return status, err
}

func (o *Runtime) create(opts CreateOptions, run bool, bundle string, s *specs.Spec, p *policies.Policy, file string, gvisor bool, userns *usernsSetup) (int, error) {
	var rec *policyRecord
	var err error
	if userns != nil {
		// Tightened for the user namespace on a copy: where the root
		// cannot be id-mapped (the kernel or its file system cannot), the
		// container runs as before, without one (install says so). The
		// root, once checked, is mounted while the spec is tightened
		// (~1.3 ms of each start, on another CPU).
		with := cloneSpec(s)
		root, err := spec.ContainerRoot(with.Root.Path, bundle, p.Name)
		if err != nil {
			return -1, err
		}
		idmapped := make(chan error, 1)
		go func() { idmapped <- o.idmapRoot(opts.ID, root, userns) }()
		rec, err = o.tighten(opts.ID, bundle, with, p, file, userns.UserNamespace, gvisor)
		mountErr := <-idmapped // undone by Create on an error
		switch {
		case err != nil:
			return -1, err
		case mountErr != nil:
			logrus.Warnf("container %s runs without a user namespace, its root is the host's: %v", opts.ID, mountErr)
			userns.undo()
			userns = nil
		case with.Root.Path != root:
			return -1, fmt.Errorf("%w: root.path %s was changed while the container was created (%s, then %s); create it again", spec.ErrInvalid, s.Root.Path, root, with.Root.Path)
		default:
			with.Root.Path = userns.root
			s = with
		}
	}
	if userns == nil {
		if rec, err = o.tighten(opts.ID, bundle, s, p, file, nil, gvisor); err != nil {
			return -1, err
		}
	}
	if gvisor {
		if s.Linux == nil {
			s.Linux = &specs.Linux{CgroupsPath: "/" + opts.ID}
		}
		return o.createGVisor(opts, run, bundle, s, rec)
	}
	// specconv resolves relative paths (hooks, rootfs) against the
	// working directory, as runc runs from the bundle.
	if err := os.Chdir(bundle); err != nil {
		return -1, err
	}
	cfg, err := specconv.CreateLibcontainerConfig(&specconv.CreateOpts{
		CgroupName: opts.ID, NoPivotRoot: opts.NoPivot, NoNewKeyring: opts.NoNewKeyring, Spec: s,
	})
	if err != nil {
		return -1, err
	}
	// Under a policy the bind sources were checked with their symlinks
	// resolved: pin them, and make sure the mounts show them (sandbox.PinBinds, CheckBinds).
	var pins []sandbox.PinnedBind
	if rec != nil {
		if pins, err = sandbox.PinBinds(s.Mounts, func(string) bool { return false }); err != nil {
			return -1, err
		}
	}
	var filter *initSeccomp
	if rec != nil {
		if filter = o.prepareInitSeccomp(opts.ID, s, cfg); filter != nil {
			defer filter.program.Close()
		}
	}
	c, err := libcontainer.Create(o.stateDir(), opts.ID, cfg)
	if err != nil {
		return -1, err
	}
	if rec != nil {
		rec.FirstSeccomp = filter != nil
		data, _ := json.Marshal(rec)
		if err := os.WriteFile(filepath.Join(o.stateDir(), opts.ID, recordFile), data, 0o600); err != nil {
			c.Destroy()
			return -1, err
		}
	}
	detach := opts.Detach || !run
	r := &processRun{container: c, init: true, detach: detach, pidFile: opts.PidFile,
		consoleSocket: opts.ConsoleSocket, preserveFDs: opts.PreserveFDs, destroyOnExit: run, seccomp: filter}
	if userns != nil {
		r.afterDestroy = userns.undo
	}
	if rec != nil {
		r.afterStart = func(pid int) error {
			// Independent checks and changes, made at once (~0.5 ms of
			// each start): the process runs only if all succeed.
			steps := []func() error{func() error { return sandbox.CheckBinds(pid, pins) }}
			if filter != nil {
				steps = append(steps, func() error {
					return filter.started(cfg, filepath.Join(o.stateDir(), opts.ID), pid, s.Process)
				})
			}
			if !rec.Network && !joinsNetwork(s) {
				// The engine's prestart hooks (docker's libnetwork) and CNI
				// may have put interfaces into the namespace: a policy
				// without network leaves only loopback, before the process
				// runs. A joined namespace is another container's (checked
				// closed by Tighten), never stripped.
				steps = append(steps, func() error { return isolateNetwork(pid) })
			}
			return together(steps...)
		}
	}
	status, err := r.run(s.Process, run)
	if err != nil {
		c.Destroy()
	}
	return status, err
}

// cloneSpec is a deep copy of s.
func cloneSpec(s *specs.Spec) *specs.Spec {
	data, err := json.Marshal(s)
	if err != nil {
		panic(err) // a spec read from JSON marshals
	}
	var out specs.Spec
	if err := json.Unmarshal(data, &out); err != nil {
		panic(err)
	}
	return &out
}

// exists reports whether a container id has state of either engine.
func (o *Runtime) exists(id string) bool {
	for _, dir := range []string{filepath.Join(o.stateDir(), id), o.gvisorDir(id)} {
		if _, err := os.Lstat(dir); err == nil {
			return true
		}
	}
	return false
}

// engineFor is the engine a container under policy p (nil: none) runs
// on: the stronger of the runtime's and the policy's.
func (o *Runtime) engineFor(p *policies.Policy) policies.Engine {
	e := o.Engine
	if p != nil {
		e = policies.Strongest(e, p.Sandbox.Engine)
	}
	return e.Or()
}

// Start runs a created container's process.
func (o *Runtime) Start(id string) error {
	if g, ok, err := o.loadGVisor(id); ok {
		if err != nil {
			return err
		}
		return g.start()
	}
	c, err := o.Load(id)
	if err != nil {
		return err
	}
	st, err := c.Status()
	if err != nil {
		return err
	}
	switch st {
	case libcontainer.Created:
		return c.Exec()
	case libcontainer.Stopped:
		return errors.New("cannot start a container that has stopped")
	case libcontainer.Running:
		return errors.New("cannot start an already running container")
	}
	return fmt.Errorf("cannot start a container in the %s state", st)
}

// together runs steps at once, the first on the caller's goroutine, and
// returns their errors joined once all have ended.
func together(steps ...func() error) error {
	errs := make([]error, len(steps))
	var wg sync.WaitGroup
	for i, step := range steps[1:] {
		wg.Go(func() { errs[i+1] = step() })
	}
	errs[0] = steps[0]()
	wg.Wait()
	return errors.Join(errs...)
}
