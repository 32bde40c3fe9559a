package oci

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	libseccomp "github.com/opencontainers/runc/libcontainer/seccomp"
	"github.com/opencontainers/runc/libcontainer/specconv"
	"github.com/opencontainers/runc/libcontainer/utils"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/moby/sys/mountinfo"
	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/runtime/sandbox"
	"github.com/warden-sandbox/warden/spec"
	"github.com/warden-sandbox/warden/spec/hostfs"
)

// Runtime is warden's runc-compatible face: containers whose config.json comes
// from an engine (containerd's shim, dockerd) or a user's bundle, each
// tightened by a warden policy when the runtime is configured with one.
// Their libcontainer state lives under Root/oci, apart from sessions.
type Runtime struct {
	Root string
	// Policy is applied to every container that does not choose one by
	// annotation; nil with no PolicyDir: containers run as configured.
	Policy *policies.Policy
	// PolicyFile is where Policy came from ($SKILL_DIR is its folder).
	PolicyFile string
	// PolicyDir holds the policies a container may choose by annotation
	// (AnnotationSelect), as NAME.toml.
	PolicyDir string
	// CapAllow lists the capabilities a container under a policy may keep.
	CapAllow []string
	// AllowUnconfined lets a container that selects no policy run as
	// configured when a PolicyDir is set but holds no default.toml;
	// without it such a container is refused (fail closed).
	AllowUnconfined bool
	// HookAllow are host programs a container's hooks may run under a
	// policy, besides docker's own.
	HookAllow []string
	// BindAllow are host path patterns (filepath.Match) a container under
	// a policy may bind read-only though its policy does not grant them.
	BindAllow []string
}

// DefaultPolicyName is the policy (DefaultPolicyName.toml in the policy
// directory) of a container that selects none, when the runtime has no
// --policy.
const DefaultPolicyName = "default"

// AnnotationSelect chooses a container's policy from the operator's policy
// directory by name.
const AnnotationSelect = spec.AnnotationPolicy

// checkContainerID accepts what runc accepts (every id an engine makes)
// but nothing that could leave the state root: no "/", ".", "..", NUL.
func checkContainerID(id string) error {
	if id == "" {
		return errors.New("container id cannot be empty")
	}
	if len(id) > 1024 || id == "." || id == ".." || strings.ContainsAny(id, "/\x00") || filepath.Base(id) != id {
		return fmt.Errorf("invalid container id %q", id)
	}
	return nil
}

func (o *Runtime) stateDir() string { return filepath.Join(o.Root, "oci") }

// policyRecord is what warden keeps beside libcontainer's state for a
// container under a policy: exec and update are held to it.
type policyRecord struct {
	Policy   string          `json:"policy"`
	Hash     string          `json:"hash"`
	Limits   policies.Limits `json:"limits"`
	Network  bool            `json:"network"` // the policy allows network
	CapAllow []string        `json:"capAllow"`
}

const recordFile = "warden.json"

func (o *Runtime) prepare() error {
	if !libseccomp.Enabled {
		return errors.New("this warden binary was built without seccomp support; build it with `make build` (go build -tags seccomp)")
	}
	if err := os.MkdirAll(o.stateDir(), 0o711); err != nil {
		return fmt.Errorf("state root: %w", err)
	}
	return nil
}

// Load returns an existing container.
func (o *Runtime) Load(id string) (*libcontainer.Container, error) {
	if err := checkContainerID(id); err != nil {
		return nil, err
	}
	c, err := libcontainer.Load(o.stateDir(), id)
	if errors.Is(err, libcontainer.ErrNotExist) {
		return nil, fmt.Errorf("container %s does not exist", id)
	}
	return c, err
}

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

var policyNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// choosePolicy decides which policy a container runs under: one it
// selects by annotation from the policy directory, else the runtime's.
func (o *Runtime) choosePolicy(s *specs.Spec) (*policies.Policy, string, error) {
	name, selected := s.Annotations[AnnotationSelect]
	if !selected {
		if o.Policy != nil || o.PolicyDir == "" {
			return o.Policy, o.PolicyFile, nil
		}
		// A policy directory without --policy: its default.toml, else
		// nothing runs unless the operator allows unconfined containers.
		file := filepath.Join(o.PolicyDir, DefaultPolicyName+".toml")
		p, err := policies.Load(file)
		switch {
		case err == nil:
			return p, file, nil
		case !errors.Is(err, fs.ErrNotExist):
			return nil, "", err
		case o.AllowUnconfined:
			return nil, "", nil
		}
		return nil, "", fmt.Errorf("no policy for this container: it selects none (annotation %s=NAME), the runtime has no --policy, and %s has no %s.toml; add that file, or configure --policy FILE, or --allow-unconfined to run such containers as configured", AnnotationSelect, o.PolicyDir, DefaultPolicyName)
	}
	if o.PolicyDir == "" {
		if o.Policy != nil && name == o.Policy.Name {
			return o.Policy, o.PolicyFile, nil
		}
		if o.Policy == nil && s.Annotations[spec.AnnotationPolicyHash] != "" {
			// A bundle warden generated carries its policy already applied.
			return nil, "", nil
		}
		return nil, "", fmt.Errorf("annotation %s=%q chooses a policy, but the runtime has no --policy-dir to choose from; configure one (runtimeArgs) or drop the annotation", AnnotationSelect, name)
	}
	if !policyNamePattern.MatchString(name) {
		return nil, "", fmt.Errorf("annotation %s=%q: not a policy name; use the name of a file NAME.toml in %s", AnnotationSelect, name, o.PolicyDir)
	}
	file := filepath.Join(o.PolicyDir, name+".toml")
	p, err := policies.Load(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", fmt.Errorf("annotation %s=%q: no policy %s in %s", AnnotationSelect, name, name+".toml", o.PolicyDir)
	} else if err != nil {
		return nil, "", err
	}
	return p, file, nil
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

// checkNewCgroup refuses a container under a policy whose cgroup exists
// already, or would be made inside a cgroup that holds processes:
// libcontainer would join the first and write the policy's limits over a
// host cgroup's (cgroupsPath "/system.slice") or another container's, and
// the second would charge the container to that cgroup's limits (a
// victim container's pids could no longer fork). A relative path (the
// default: the id) is under warden's own cgroup, as libcontainer places
// it, and warden's own cgroup and those above it are its parents to use.
func checkNewCgroup(id string, s *specs.Spec, policy string) error {
	inner := s.Linux.CgroupsPath
	if inner == "" {
		inner = id
	}
	if filepath.IsAbs(inner) {
		inner = filepath.Clean(inner)
	} else {
		// libcontainer's LexicallyCleanPath: no ".." above the start.
		inner, _ = filepath.Rel("/", filepath.Join("/", inner))
	}
	if inner == "/" {
		return fmt.Errorf("%w: linux.cgroupsPath %q is the root cgroup; a container under policy %s needs a cgroup of its own", spec.ErrInvalid, s.Linux.CgroupsPath, policy)
	}
	mounts, err := hostfs.Mounts(0)
	if err != nil {
		return err
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return err
	}
	for _, place := range cgroupDirs(mounts, string(self), inner) {
		if _, err := os.Stat(place.dir); err == nil {
			return fmt.Errorf("%w: linux.cgroupsPath %q: cgroup %s exists already; a container under policy %s gets a new cgroup of its own, so name one that does not exist", spec.ErrInvalid, s.Linux.CgroupsPath, place.dir, policy)
		}
		for up := filepath.Dir(place.dir); up != place.mount && strings.HasPrefix(up, place.mount+"/"); up = filepath.Dir(up) {
			if place.own != "" && (up == place.own || strings.HasPrefix(place.own, up+"/")) {
				break
			}
			data, err := os.ReadFile(filepath.Join(up, "cgroup.procs"))
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil || len(bytes.TrimSpace(data)) > 0 {
				return fmt.Errorf("%w: linux.cgroupsPath %q: cgroup %s holds processes (another container's or a host service's); a container under policy %s gets a cgroup of its own, never inside theirs: name a parent that holds none (as docker's /docker or containerd's /k8s.io)", spec.ErrInvalid, s.Linux.CgroupsPath, up, policy)
			}
		}
	}
	return nil
}

// cgroupPlace is where libcontainer would put a cgroup in one hierarchy:
// the folder, the hierarchy's mount point, and the caller's own cgroup
// folder in it ("" when the caller's cgroup there is not visible).
type cgroupPlace struct {
	dir, mount, own string
}

// cgroupDirs are the places libcontainer's cgroupfs driver may use for
// the cgroup path inner, in every mounted hierarchy: an absolute path
// from the hierarchy's root; a relative one from the caller's own cgroup
// there (self is /proc/self/cgroup), or, for a cgroup2 hierarchy (hybrid
// or not), from its root too.
func cgroupDirs(mounts []*mountinfo.Info, self, inner string) []cgroupPlace {
	own := map[string]string{} // controllers ("" for cgroup2) -> path
	for _, line := range strings.Split(self, "\n") {
		if f := strings.SplitN(line, ":", 3); len(f) == 3 {
			own[f[1]] = f[2]
		}
	}
	var places []cgroupPlace
	add := func(p cgroupPlace) {
		if !slices.ContainsFunc(places, func(q cgroupPlace) bool { return q.dir == p.dir }) {
			places = append(places, p)
		}
	}
	for _, m := range mounts {
		if m.FSType != "cgroup" && m.FSType != "cgroup2" {
			continue
		}
		root, mnt := m.Root, m.Mountpoint
		opts := strings.Split(m.VFSOptions, ",")
		// The caller's own cgroup in this hierarchy, as seen from its
		// mount (a hierarchy mounted from below its root, in a nested
		// container, shows it from there).
		ownDir := ""
		for ctrls, path := range own {
			if (ctrls == "") != (m.FSType == "cgroup2") || ctrls != "" && !allIn(strings.Split(ctrls, ","), opts) {
				continue
			}
			if rel, err := filepath.Rel(root, path); err == nil && !strings.HasPrefix(rel, "..") {
				ownDir = filepath.Join(mnt, rel)
			}
		}
		if filepath.IsAbs(inner) || m.FSType == "cgroup2" {
			add(cgroupPlace{filepath.Join(mnt, inner), mnt, ownDir})
		}
		if filepath.IsAbs(inner) || ownDir == "" {
			continue
		}
		add(cgroupPlace{filepath.Join(ownDir, inner), mnt, ownDir})
		// libcontainer's cgroup2 manager puts a relative path beside
		// the caller's cgroup, under its parent.
		if m.FSType == "cgroup2" && ownDir != mnt {
			add(cgroupPlace{filepath.Join(filepath.Dir(ownDir), inner), mnt, ownDir})
		}
	}
	return places
}

func allIn(want, have []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// tighten applies the container's policy to its spec.
func (o *Runtime) tighten(id, bundle string, s *specs.Spec) (*policyRecord, error) {
	p, file, err := o.choosePolicy(s)
	if err != nil || p == nil {
		return nil, err
	}
	if err := checkNewCgroup(id, s, p.Name); err != nil {
		return nil, err
	}
	home, _ := os.UserHomeDir()
	changes, err := spec.Tighten(s, p, spec.TightenOptions{
		Vars:           policies.Vars{SkillDir: filepath.Dir(file), Home: home},
		Capabilities:   o.CapAllow,
		ID:             id,
		Bundle:         bundle,
		BindAllow:      o.BindAllow,
		HookAllow:      o.HookAllow,
		NamespaceOwner: o.namespaceOwner,
		IsContainer:    o.isContainer,
	})
	if err != nil {
		return nil, err
	}
	for _, c := range changes {
		logrus.WithField("policy", p.Name).Debug(c)
	}
	lim := p.Limits
	lim.Memory, lim.Pids = *s.Linux.Resources.Memory.Limit, *s.Linux.Resources.Pids.Limit
	lim.CPU = float64(*s.Linux.Resources.CPU.Quota) / float64(*s.Linux.Resources.CPU.Period)
	return &policyRecord{Policy: p.Name, Hash: p.Hash(), Limits: lim, CapAllow: o.CapAllow, Network: len(p.Network.Allow) > 0}, nil
}

func readRecord(c *libcontainer.Container, stateDir string) (*policyRecord, error) {
	data, err := os.ReadFile(filepath.Join(stateDir, c.ID(), recordFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var r policyRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("container %s: %s: %w", c.ID(), recordFile, err)
	}
	return &r, nil
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
	rec, err := o.tighten(opts.ID, bundle, s)
	if err != nil {
		return -1, err
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
	if _, err := os.Stat(filepath.Join(o.stateDir(), opts.ID)); err == nil {
		return -1, fmt.Errorf("container %s already exists", opts.ID)
	}
	// Under a policy the bind sources were checked with their symlinks
	// resolved: pin them, and make sure the mounts show them (bindcheck.go).
	var pins []sandbox.PinnedBind
	if rec != nil {
		if pins, err = sandbox.PinBinds(s.Mounts, func(string) bool { return false }); err != nil {
			return -1, err
		}
	}
	c, err := libcontainer.Create(o.stateDir(), opts.ID, cfg)
	if err != nil {
		return -1, err
	}
	if rec != nil {
		data, _ := json.Marshal(rec)
		if err := os.WriteFile(filepath.Join(o.stateDir(), opts.ID, recordFile), data, 0o600); err != nil {
			c.Destroy()
			return -1, err
		}
	}
	detach := opts.Detach || !run
	r := &processRun{container: c, init: true, detach: detach, pidFile: opts.PidFile,
		consoleSocket: opts.ConsoleSocket, preserveFDs: opts.PreserveFDs, destroyOnExit: run}
	if rec != nil {
		r.afterStart = func(pid int) error {
			if err := sandbox.CheckBinds(pid, pins); err != nil {
				return err
			}
			if !rec.Network && !joinsNetwork(s) {
				// The engine's prestart hooks (docker's libnetwork) and CNI
				// may have put interfaces into the namespace: a policy
				// without network leaves only loopback, before the process
				// runs. A joined namespace is another container's (checked
				// closed by Tighten), never stripped.
				return isolateNetwork(pid)
			}
			return nil
		}
	}
	status, err := r.run(s.Process, run)
	if err != nil {
		c.Destroy()
	}
	return status, err
}

// Start runs a created container's process.
func (o *Runtime) Start(id string) error {
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
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
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
	return out, nil
}

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
		return fmt.Errorf("container %s is not running", id)
	}
	return err
}

// Delete removes a stopped (or, with force, any) container.
func (o *Runtime) Delete(id string, force bool) error {
	if err := checkContainerID(id); err != nil {
		return err
	}
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

// Processes lists the host pids of a container's processes.
func (o *Runtime) Processes(id string) ([]int, error) {
	c, err := o.Load(id)
	if err != nil {
		return nil, err
	}
	return c.Processes()
}

// Pause freezes a container.
func (o *Runtime) Pause(id string) error {
	c, err := o.Load(id)
	if err != nil {
		return err
	}
	return c.Pause()
}

// Resume thaws a paused container.
func (o *Runtime) Resume(id string) error {
	c, err := o.Load(id)
	if err != nil {
		return err
	}
	return c.Resume()
}

// Update changes a container's resources. Under a policy no limit can go
// above the policy's (the values are lowered to it).
func (o *Runtime) Update(id string, r *specs.LinuxResources) error {
	c, err := o.Load(id)
	if err != nil {
		return err
	}
	rec, err := readRecord(c, o.stateDir())
	if err != nil {
		return err
	}
	if rec != nil {
		spec.ClampResources(r, rec.Limits, func(format string, args ...any) {
			logrus.WithField("policy", rec.Policy).Debugf("update: "+format, args...)
		})
	}
	cfg := c.Config()
	res := cfg.Cgroups.Resources
	if m := r.Memory; m != nil {
		if m.Limit != nil {
			res.Memory = *m.Limit
		}
		if m.Reservation != nil {
			res.MemoryReservation = *m.Reservation
		}
		if m.Swap != nil {
			res.MemorySwap = *m.Swap
		}
	}
	if p := r.Pids; p != nil && p.Limit != nil {
		res.PidsLimit = p.Limit
	}
	if cpu := r.CPU; cpu != nil {
		if cpu.Shares != nil {
			res.CpuShares = *cpu.Shares
		}
		if cpu.Quota != nil && *cpu.Quota != 0 {
			res.CpuQuota = *cpu.Quota
		}
		if cpu.Period != nil && *cpu.Period != 0 {
			res.CpuPeriod = *cpu.Period
		}
		if cpu.Cpus != "" {
			res.CpusetCpus = cpu.Cpus
		}
		if cpu.Mems != "" {
			res.CpusetMems = cpu.Mems
		}
	}
	if b := r.BlockIO; b != nil && b.Weight != nil {
		res.BlkioWeight = *b.Weight
	}
	return c.Set(cfg)
}

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
	p := opts.Process
	if p == nil || len(p.Args) == 0 {
		return -1, errors.New("exec: the process has no args")
	}
	if p.Cwd == "" || !filepath.IsAbs(p.Cwd) {
		return -1, fmt.Errorf("exec: cwd %q must be an absolute path", p.Cwd)
	}
	rec, err := readRecord(c, o.stateDir())
	if err != nil {
		return -1, err
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

// inherited reports whether fd was inherited by warden rather than opened
// by it: Go opens every descriptor close-on-exec (the runtime's own too,
// such as the cgroup cpu files it watches from before main), and an
// inherited descriptor cannot be.
func inherited(fd int) bool {
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	return err == nil && flags&unix.FD_CLOEXEC == 0
}

// processRun starts one process in a container (its init or an exec) the
// way runc does: stdio inherited when detached, a terminal through the
// console socket, signals forwarded while attached.
type processRun struct {
	container     *libcontainer.Container
	init          bool
	detach        bool
	pidFile       string
	consoleSocket string
	preserveFDs   int
	destroyOnExit bool
	// afterStart runs once the init exists, before its process starts.
	afterStart func(pid int) error
}

func (r *processRun) run(sp *specs.Process, start bool) (int, error) {
	if r.detach && sp.Terminal && r.consoleSocket == "" {
		return -1, errors.New("cannot allocate a terminal for a detached process without --console-socket")
	}
	if (!r.detach || !sp.Terminal) && r.consoleSocket != "" {
		return -1, errors.New("--console-socket needs a detached process with terminal: true")
	}
	p, err := ociProcess(sp)
	if err != nil {
		return -1, err
	}
	p.Init = r.init
	p.LogLevel = strconv.Itoa(int(logrus.GetLevel()))
	for i := 0; i < r.preserveFDs; i++ {
		fd := 3 + i
		if !inherited(fd) {
			return -1, fmt.Errorf("--preserve-fds %d: fd %d was not open when warden started; pass it open, or lower the count", r.preserveFDs, fd)
		}
		p.ExtraFiles = append(p.ExtraFiles, os.NewFile(uintptr(fd), "preserved-fd-"+strconv.Itoa(fd)))
	}
	var term *hostTerminal
	var closeAfter []*os.File
	switch {
	case sp.Terminal && r.detach:
		sock, err := dialConsoleSocket(r.consoleSocket)
		if err != nil {
			return -1, err
		}
		p.ConsoleSocket = sock
		closeAfter = append(closeAfter, sock)
	case sp.Terminal:
		parent, child, err := utils.NewSockPair("console")
		if err != nil {
			return -1, err
		}
		p.ConsoleSocket = child
		closeAfter = append(closeAfter, child)
		term = &hostTerminal{socket: parent}
	default:
		p.Stdin, p.Stdout, p.Stderr = os.Stdin, os.Stdout, os.Stderr
	}
	var signals chan os.Signal
	if !r.detach {
		// The process is forked twice by libcontainer: as a subreaper
		// warden stays its parent and gets its exit status.
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			return -1, fmt.Errorf("set child subreaper: %w", err)
		}
		signals = make(chan os.Signal, 32)
		signal.Notify(signals)
		defer signal.Stop(signals)
	}
	if r.init {
		err = r.container.Start(p)
		if err == nil && r.afterStart != nil {
			if pid, perr := p.Pid(); perr != nil {
				err = perr
			} else {
				err = r.afterStart(pid)
			}
			if err != nil {
				p.Signal(unix.SIGKILL)
				p.Wait()
			}
		}
		if err == nil && start {
			err = r.container.Exec()
		}
	} else {
		err = r.container.Run(p)
	}
	for _, f := range closeAfter {
		f.Close()
	}
	if err != nil {
		return -1, err
	}
	if term != nil {
		if err := term.attach(); err != nil {
			p.Signal(unix.SIGKILL)
			p.Wait()
			return -1, err
		}
		defer term.restore()
	}
	if r.pidFile != "" {
		if err := writePidFile(r.pidFile, p); err != nil {
			p.Signal(unix.SIGKILL)
			p.Wait()
			return -1, err
		}
	}
	if r.detach {
		return 0, nil
	}
	status := forwardUntilExit(p, signals, term)
	if r.destroyOnExit {
		if err := r.container.Destroy(); err != nil {
			logrus.Warn(err)
		}
	}
	return status, nil
}

// forwardUntilExit passes signals to the process until it exits and
// returns its status: its code, or 128+N when killed by signal N.
func forwardUntilExit(p *libcontainer.Process, signals chan os.Signal, term *hostTerminal) int {
	done := make(chan *os.ProcessState, 1)
	go func() {
		ps, err := p.Wait()
		if err != nil {
			logrus.Debugf("wait: %v", err)
		}
		done <- ps
	}()
	for {
		select {
		case ps := <-done:
			if term != nil {
				term.drain()
			}
			if ps == nil {
				return 255
			}
			if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				return 128 + int(ws.Signal())
			}
			return ps.ExitCode()
		case sig := <-signals:
			switch sig {
			case unix.SIGCHLD, unix.SIGURG, unix.SIGPIPE:
				continue
			case unix.SIGWINCH:
				if term != nil {
					term.resize()
				}
				continue
			}
			p.Signal(sig)
		}
	}
}

func writePidFile(path string, p *libcontainer.Process) error {
	pid, err := p.Pid()
	if err != nil {
		return err
	}
	// A fresh temporary file, never one that exists (a symlink planted
	// there would be followed and its target truncated), renamed over the
	// pid file (which replaces a symlink there, never its target).
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = f.WriteString(strconv.Itoa(pid))
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// ociProcess converts a spec process the way runc does.
func ociProcess(p *specs.Process) (*libcontainer.Process, error) {
	lp := &libcontainer.Process{
		Args: p.Args, Env: p.Env, UID: int(p.User.UID), GID: int(p.User.GID), Cwd: p.Cwd,
		Label: p.SelinuxLabel, NoNewPrivileges: &p.NoNewPrivileges, AppArmorProfile: p.ApparmorProfile,
		Scheduler: p.Scheduler, IOPriority: p.IOPriority,
	}
	if p.ConsoleSize != nil {
		lp.ConsoleWidth, lp.ConsoleHeight = uint16(p.ConsoleSize.Width), uint16(p.ConsoleSize.Height)
	}
	if c := p.Capabilities; c != nil {
		lp.Capabilities = &configs.Capabilities{Bounding: c.Bounding, Effective: c.Effective,
			Inheritable: c.Inheritable, Permitted: c.Permitted, Ambient: c.Ambient}
	}
	for _, g := range p.User.AdditionalGids {
		lp.AdditionalGroups = append(lp.AdditionalGroups, int(g))
	}
	for _, r := range p.Rlimits {
		rl, err := sandbox.Rlimit(r)
		if err != nil {
			return nil, err
		}
		lp.Rlimits = append(lp.Rlimits, rl)
	}
	aff, err := configs.ConvertCPUAffinity(p.ExecCPUAffinity)
	if err != nil {
		return nil, err
	}
	lp.CPUAffinity = aff
	return lp, nil
}
