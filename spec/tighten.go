package spec

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/seccomp"
	"github.com/warden-sandbox/warden/spec/hostfs"
)

// AnnotationLimitPrefix starts the annotations a container may use to
// lower (never raise) its policy's limits: dev.warden.limits.memory,
// dev.warden.limits.pids, dev.warden.limits.cpu.
const AnnotationLimitPrefix = "dev.warden.limits."

// TightenOptions are the inputs of Tighten besides the spec and policy.
type TightenOptions struct {
	// Vars place the policy's path variables on the host; rules using a
	// variable left empty grant nothing.
	Vars policies.Vars
	// Capabilities the runtime's operator lets containers keep; a
	// container keeps the ones it asks for that are also listed here.
	Capabilities []string
	// SameNamespace reports whether a namespace path names one of the
	// runtime's own (the host's) namespaces, or an error when it cannot
	// tell; nil compares with /proc/self/ns.
	SameNamespace func(typ specs.LinuxNamespaceType, path string) (bool, error)
	// NamespaceOwner says who holds a namespace given by path (see
	// NamespaceOwner); nil: no container of the runtime's holds any.
	NamespaceOwner func(typ specs.LinuxNamespaceType, path string) (NamespaceOwner, error)
	// IsContainer reports whether id is a container in the runtime's own
	// state root; nil: none is.
	IsContainer func(id string) bool
	// Bundle is the container's bundle folder: a root.path inside it is
	// the container's own.
	Bundle string
	// ID is the container's id: the files an engine makes for it (docker's
	// hosts, resolv.conf...) live in a folder of that name.
	ID string
	// HookAllow are host programs (absolute paths) the operator lets a
	// container's hooks run, besides docker's own libnetwork-setkey.
	HookAllow []string
	// BindAllow are the operator's patterns (filepath.Match) of host paths
	// a container may bind read-only though the policy does not grant them.
	BindAllow []string
}

// NamespaceOwner is who holds a namespace a config joins by path.
type NamespaceOwner struct {
	// Container is the id of a live container in the runtime's own state
	// root whose init is in the namespace; "" when there is none.
	Container string
	// ClosedNetwork: that container's policy allows no network (its
	// network namespace was left only loopback).
	ClosedNetwork bool
	// InUse: some process on the host is in the namespace (asked for
	// network namespaces only).
	InUse bool
}

// Tighten applies a policy to an incoming OCI config (an engine's
// config.json): every step only removes permissions, never adds them. It
// returns what it changed, one line per change, for the runtime's log.
// What "tighten" means for each part is documented in README.md (the
// OCI runtime section); TestTighten* pin it down.
func Tighten(s *specs.Spec, p *policies.Policy, o TightenOptions) ([]string, error) {
	if s.Process == nil || s.Root == nil {
		return nil, fmt.Errorf("%w: config.json needs process and root", ErrInvalid)
	}
	if s.Linux == nil {
		s.Linux = &specs.Linux{}
	}
	if o.SameNamespace == nil {
		o.SameNamespace = sameAsOwnNamespace
	}
	lim, err := annotatedLimits(p.Limits, s.Annotations)
	if err != nil {
		return nil, err
	}
	t := &tightener{s: s, p: p, o: o, limits: lim}
	steps := []func() error{
		t.process,
		t.namespaces,
		t.rootfs,
		t.mounts,
		t.paths,
		t.devices,
		t.resources,
		t.seccomp,
		t.hooks,
		t.annotations,
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return t.changes, err
		}
	}
	return t.changes, nil
}

type tightener struct {
	s       *specs.Spec
	p       *policies.Policy
	o       TightenOptions
	limits  policies.Limits
	changes []string
	// netOwner is the container whose network namespace this one joins:
	// docker binds that one's hosts and resolv.conf (--network container:X).
	netOwner string
	// ipcOwner is the container whose IPC namespace this one joins
	// (docker --ipc container:X): its shm may be bound.
	ipcOwner string
}

func (t *tightener) changef(format string, args ...any) {
	t.changes = append(t.changes, fmt.Sprintf(format, args...))
}

// annotatedLimits lowers the policy's limits by the container's
// dev.warden.limits.* annotations; a value above the policy's is refused,
// so an annotation can never widen what the operator configured.
func annotatedLimits(l policies.Limits, ann map[string]string) (policies.Limits, error) {
	for k, v := range ann {
		name, ok := strings.CutPrefix(k, AnnotationLimitPrefix)
		if !ok {
			continue
		}
		q, err := policies.Parse(k, []byte(fmt.Sprintf("name = \"annotation\"\n[limits]\n%s = %s\n", tomlKey(name), tomlValue(name, v))))
		if err != nil {
			return l, fmt.Errorf("%w: annotation %s=%q: %v; valid keys are %smemory (\"128MiB\"), %spids (64), %scpu (0.5)",
				ErrInvalid, k, v, err, AnnotationLimitPrefix, AnnotationLimitPrefix, AnnotationLimitPrefix)
		}
		switch name {
		case "memory":
			if q.Limits.Memory > l.Memory {
				return l, fmt.Errorf("%w: annotation %s=%s is above the policy's %s; an annotation can only lower limits", ErrInvalid, k, v, policies.FormatSize(l.Memory))
			}
			l.Memory = q.Limits.Memory
		case "pids":
			if q.Limits.Pids > l.Pids {
				return l, fmt.Errorf("%w: annotation %s=%s is above the policy's %d; an annotation can only lower limits", ErrInvalid, k, v, l.Pids)
			}
			l.Pids = q.Limits.Pids
		case "cpu":
			if q.Limits.CPU > l.CPU {
				return l, fmt.Errorf("%w: annotation %s=%s is above the policy's %g; an annotation can only lower limits", ErrInvalid, k, v, l.CPU)
			}
			l.CPU = q.Limits.CPU
		default:
			return l, fmt.Errorf("%w: annotation %s: unknown limit; use %smemory, %spids or %scpu", ErrInvalid, k, AnnotationLimitPrefix, AnnotationLimitPrefix, AnnotationLimitPrefix)
		}
	}
	return l, nil
}

// tomlKey and tomlValue let the policy parser check an annotation's
// value with the same rules (units, bounds) as a policy file's.
func tomlKey(name string) string {
	if name == "memory" || name == "pids" || name == "cpu" {
		return name
	}
	return "unknown"
}

func tomlValue(name, v string) string {
	if name == "memory" {
		return fmt.Sprintf("%q", v)
	}
	for _, r := range v {
		if !strings.ContainsRune("0123456789.", r) {
			return `"bad"`
		}
	}
	if v == "" {
		return `"bad"`
	}
	return v
}

// process: no_new_privs always; capabilities limited to what both the
// container asks for and the operator allows.
func (t *tightener) process() error {
	TightenProcess(t.s.Process, t.o.Capabilities, t.changef)
	return nil
}

// TightenProcess applies the policy's rules for a process (the
// container's first or one run by exec): no_new_privs, and only the
// capabilities in allowed. changef, if not nil, hears what changed.
func TightenProcess(p *specs.Process, allowed []string, changef func(string, ...any)) {
	if changef == nil {
		changef = func(string, ...any) {}
	}
	if !p.NoNewPrivileges {
		p.NoNewPrivileges = true
		changef("process: noNewPrivileges set")
	}
	tightenScheduling(p, changef)
	if p.Capabilities == nil {
		// libcontainer leaves a process without a capabilities object
		// with the runtime's own (all of them): nil means none here.
		p.Capabilities = &specs.LinuxCapabilities{}
		changef("process: no capabilities given; every set made empty (not the runtime's own)")
	}
	keep := func(set string, caps []string) []string {
		out := []string{}
		for _, c := range caps {
			if slices.Contains(allowed, strings.ToUpper(c)) {
				out = append(out, c)
			} else {
				changef("process: capability %s dropped from the %s set (not in the runtime's --cap-allow)", c, set)
			}
		}
		return out
	}
	c := p.Capabilities
	c.Bounding = keep("bounding", c.Bounding)
	c.Effective = keep("effective", c.Effective)
	c.Permitted = keep("permitted", c.Permitted)
	c.Inheritable = keep("inheritable", c.Inheritable)
	c.Ambient = keep("ambient", c.Ambient)
}

// tightenScheduling takes away what would let a process run ahead of the
// host's: real-time or deadline scheduling, a negative nice, real-time I/O
// priority, a negative OOM score (the host's processes would be killed
// first), and rlimits that allow real-time priority or a negative nice.
func tightenScheduling(p *specs.Process, changef func(string, ...any)) {
	if sc := p.Scheduler; sc != nil {
		switch sc.Policy {
		case specs.SchedFIFO, specs.SchedRR, specs.SchedDeadline:
			p.Scheduler = nil
			changef("process: scheduler %s dropped (real-time)", sc.Policy)
		default:
			if sc.Nice < 0 {
				sc.Nice = 0
				changef("process: negative nice raised to 0")
			}
		}
	}
	if p.IOPriority != nil && p.IOPriority.Class == specs.IOPRIO_CLASS_RT {
		p.IOPriority = nil
		changef("process: real-time I/O priority dropped")
	}
	if p.OOMScoreAdj != nil && *p.OOMScoreAdj < 0 {
		zero := 0
		p.OOMScoreAdj = &zero
		changef("process: negative oomScoreAdj raised to 0")
	}
	// RLIMIT_RTPRIO 0: no real-time priority; RLIMIT_NICE 20: no nice
	// below 0 (the limit is 20 minus the lowest nice allowed), and not
	// above the runtime's own hard limit, which the container's init
	// could not raise it past.
	nice := uint64(20)
	var own unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NICE, &own) == nil {
		nice = min(nice, own.Max)
	}
	ceiling := map[string]uint64{"RLIMIT_RTPRIO": 0, "RLIMIT_RTTIME": 0, "RLIMIT_NICE": nice}
	// Pending signals and message queue bytes are counted per host user
	// (the container's root is often the host's): a container without
	// these limits inherits the runtime's and could take that user's
	// whole allowance. Added when absent, lowered when above.
	for _, typ := range []string{"RLIMIT_SIGPENDING", "RLIMIT_MSGQUEUE"} {
		i := slices.IndexFunc(sandboxRlimits, func(r specs.POSIXRlimit) bool { return r.Type == typ })
		max := sandboxRlimits[i].Hard
		if unix.Getrlimit(rlimitResource[typ], &own) == nil {
			max = min(max, own.Max)
		}
		ceiling[typ] = max
		if !slices.ContainsFunc(p.Rlimits, func(r specs.POSIXRlimit) bool { return r.Type == typ }) {
			p.Rlimits = append(p.Rlimits, specs.POSIXRlimit{Type: typ, Hard: max, Soft: max})
			changef("process: %s set to %d", typ, max)
		}
	}
	for i := range p.Rlimits {
		r := &p.Rlimits[i]
		max, ok := ceiling[r.Type]
		if !ok || r.Hard <= max && r.Soft <= max {
			continue
		}
		r.Hard, r.Soft = min(r.Hard, max), min(r.Soft, max)
		changef("process: %s lowered to %d", r.Type, max)
	}
}

// namespaces: the container gets its own mount, pid, ipc, uts, cgroup and
// network namespaces (a policy that allows network still never shares
// the host's: its ports, loopback services and interfaces); a namespace
// given by path must pass joinable. Host network
// devices moved into the container (linux.netDevices) are refused.
func (t *tightener) namespaces() error {
	need := []specs.LinuxNamespaceType{specs.MountNamespace, specs.PIDNamespace, specs.IPCNamespace, specs.UTSNamespace, specs.CgroupNamespace, specs.NetworkNamespace}
	if len(t.s.Linux.NetDevices) > 0 {
		names := make([]string, 0, len(t.s.Linux.NetDevices))
		for n := range t.s.Linux.NetDevices {
			names = append(names, n)
		}
		slices.Sort(names)
		return fmt.Errorf("%w: linux.netDevices: moving the host's network devices (%s) into a container is not allowed under policy %s; remove them and use the engine's network", ErrInvalid, strings.Join(names, ", "), t.p.Name)
	}
	for _, ns := range t.s.Linux.Namespaces {
		if ns.Path == "" {
			continue
		}
		if err := t.joinable(ns); err != nil {
			return fmt.Errorf("%w: linux.namespaces: %s namespace %s: %v", ErrInvalid, ns.Type, ns.Path, err)
		}
	}
	for _, typ := range need {
		if !slices.ContainsFunc(t.s.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == typ }) {
			t.s.Linux.Namespaces = append(t.s.Linux.Namespaces, specs.LinuxNamespace{Type: typ})
			t.changef("namespaces: own %s namespace added (the config shared the host's)", typ)
		}
	}
	return nil
}

// joinable checks a namespace a config joins by path. A mount or user
// namespace never: the container's root would be set up inside another
// process's mounts (which then runs the image's programs), or it would
// take that namespace's users. The others only when a container of the
// same runtime (state root) holds them, as a Kubernetes pod's or docker's
// --network container:X do, or, for a CRI pod sandbox, the fresh network
// namespace CNI made for it.
func (t *tightener) joinable(ns specs.LinuxNamespace) error {
	switch ns.Type {
	case specs.PIDNamespace, specs.IPCNamespace, specs.UTSNamespace, specs.NetworkNamespace,
		specs.CgroupNamespace, specs.UserNamespace: // a pod's (podman shares cgroup, Kubernetes user-namespaced pods user)
	case specs.MountNamespace:
		return fmt.Errorf("joining another process's mount namespace is not allowed under policy %s (the container would be set up inside it); remove the path so the container gets its own", t.p.Name)
	default:
		return fmt.Errorf("under policy %s only pid, ipc, uts, network, cgroup and user namespaces of this warden's containers may be joined by path; remove the path so the container gets its own", t.p.Name)
	}
	same, err := t.o.SameNamespace(ns.Type, ns.Path)
	if err != nil {
		return fmt.Errorf("%v; a container under policy %s may join only namespaces warden can inspect", err, t.p.Name)
	}
	if same {
		return fmt.Errorf("is the host's own; a container under policy %s gets its own (drop the host namespace option)", t.p.Name)
	}
	var owner NamespaceOwner
	if t.o.NamespaceOwner != nil {
		if owner, err = t.o.NamespaceOwner(ns.Type, ns.Path); err != nil {
			return fmt.Errorf("%v; a container under policy %s may join only namespaces warden can inspect", err, t.p.Name)
		}
	}
	if ns.Type == specs.NetworkNamespace && CNISandboxNetns(t.s) {
		if owner.Container != "" || owner.InUse {
			return fmt.Errorf("a pod sandbox's CNI network namespace must be a fresh one, but processes are in it already; under policy %s a sandbox joins only the namespace CNI made for it", t.p.Name)
		}
		return nil
	}
	if owner.Container == "" {
		return fmt.Errorf("is not held by a container of this warden (same --root); under policy %s a container joins only the namespaces of such containers (a pod's or --network container:X); remove the path", t.p.Name)
	}
	if ns.Type == specs.NetworkNamespace && len(t.p.Network.Allow) == 0 && !owner.ClosedNetwork {
		return fmt.Errorf("container %s's network is not closed, and policy %s allows no network; join a container under a policy without network, or remove the path", owner.Container, t.p.Name)
	}
	switch ns.Type {
	case specs.NetworkNamespace:
		t.netOwner = owner.Container
	case specs.IPCNamespace:
		t.ipcOwner = owner.Container
	}
	return nil
}

// CNISandboxNetns reports whether s is a Kubernetes pod sandbox
// (containerd CRI) joining a network namespace CNI made for it
// (/run/netns/cni-*): the only joined namespace whose interfaces the
// no-network cleanup may remove.
func CNISandboxNetns(s *specs.Spec) bool {
	if s.Annotations["io.kubernetes.cri.container-type"] != "sandbox" || s.Linux == nil {
		return false
	}
	for _, ns := range s.Linux.Namespaces {
		if ns.Type != specs.NetworkNamespace || ns.Path == "" {
			continue
		}
		p := filepath.Clean(ns.Path)
		if dir := filepath.Dir(p); (dir == "/run/netns" || dir == "/var/run/netns") && strings.HasPrefix(filepath.Base(p), "cni-") {
			fi, err := os.Lstat(p)
			return err == nil && fi.Mode()&fs.ModeSymlink == 0
		}
		return false
	}
	return false
}

// sameAsOwnNamespace compares a namespace file with this process's own.
func sameAsOwnNamespace(typ specs.LinuxNamespaceType, path string) (bool, error) {
	name := map[specs.LinuxNamespaceType]string{
		specs.PIDNamespace: "pid", specs.NetworkNamespace: "net", specs.MountNamespace: "mnt",
		specs.IPCNamespace: "ipc", specs.UTSNamespace: "uts", specs.UserNamespace: "user",
		specs.CgroupNamespace: "cgroup", specs.TimeNamespace: "time",
	}[typ]
	if name == "" {
		return false, fmt.Errorf("unknown namespace type")
	}
	var a, b unix.Stat_t
	if err := unix.Stat(path, &a); err != nil {
		return false, err
	}
	if err := unix.Stat("/proc/self/ns/"+name, &b); err != nil {
		// The host lacks this kind of namespace: nothing to share.
		return false, nil
	}
	return a.Dev == b.Dev && a.Ino == b.Ino, nil
}

// rootfs: the container's root is read-only; a private /tmp (noexec, half
// the memory limit) is added when the config has none.
func (t *tightener) rootfs() error {
	real, err := filepath.EvalSymlinks(t.s.Root.Path)
	if err != nil {
		return fmt.Errorf("%w: root.path %s: %v", ErrInvalid, t.s.Root.Path, err)
	}
	if real == "/" {
		return fmt.Errorf("%w: root.path %s is the host's own root; a container under policy %s needs its own root file system", ErrInvalid, t.s.Root.Path, t.p.Name)
	}
	if !t.ownRoot(real) {
		return fmt.Errorf("%w: root.path %s is a folder of the host's (neither inside the bundle nor an overlay mounted for the container, as an engine's snapshot is); under policy %s a container's root is its own, the host's folders only through [fs] grants; put the root file system in the bundle", ErrInvalid, t.s.Root.Path, t.p.Name)
	}
	// What was checked is what runc mounts: a link swapped in later
	// cannot redirect it.
	t.s.Root.Path = real
	if t.s.Linux.IntelRdt != nil {
		// A resctrl group may be the host's or another container's.
		t.s.Linux.IntelRdt = nil
		t.changef("linux.intelRdt dropped")
	}
	if !t.s.Root.Readonly {
		t.s.Root.Readonly = true
		t.changef("root: made read-only")
	}
	// Shared propagation would carry mounts made in the container (and
	// runc's own beneath the root) to the host.
	if pr := t.s.Linux.RootfsPropagation; pr == "shared" || pr == "rshared" {
		t.s.Linux.RootfsPropagation = "rslave"
		t.changef("root: propagation %s made rslave", pr)
	}
	if !slices.ContainsFunc(t.s.Mounts, func(m specs.Mount) bool { return filepath.Clean(m.Destination) == "/tmp" }) {
		t.s.Mounts = append(t.s.Mounts, specs.Mount{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs",
			Options: []string{"nosuid", "nodev", "noexec", "mode=1777", fmt.Sprintf("size=%dk", t.limits.Memory/2/1024)}})
		t.changef("mounts: private /tmp tmpfs added (noexec)")
	}
	return nil
}

// ownRoot reports whether a root file system (symlinks resolved) is the
// container's own: inside the bundle (runc's bundle/rootfs, containerd's),
// or the root of an overlay mounted for it (docker's overlay2/ID/merged).
// Anything else is a host folder, which would show the container what the
// policy never granted (root.path "/home", "/run/user/1000", another pod's
// volume).
func (t *tightener) ownRoot(real string) bool {
	if t.o.Bundle != "" {
		if bundle, err := filepath.EvalSymlinks(t.o.Bundle); err == nil {
			if _, ok := hostfs.Under(real, bundle); ok {
				return true
			}
		}
	}
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, real, unix.AT_SYMLINK_NOFOLLOW, 0, &st); err != nil {
		return false
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(real, &fs); err != nil {
		return false
	}
	return st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 && st.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0 && fs.Type == unix.OVERLAYFS_SUPER_MAGIC
}

// kernelFS are the mount types a container may have besides binds; the
// ones that expose the host's kernel state are read-only.
var kernelFS = map[string]bool{"proc": false, "tmpfs": false, "devpts": false, "mqueue": false, "sysfs": true, "cgroup": true, "cgroup2": true}

// mounts: a bind's host source is checked against the policy's fs rules:
// denied or not granted at all -> refused (except the few files the
// engine itself made for this container); write grant -> writable but
// noexec,nosuid,nodev down the whole tree; anything else -> read-only down
// the whole tree. Denied and read-only paths beneath a bind are masked or
// made read-only inside. Other file systems: only the kernel's virtual
// ones, procfs only at /proc and sysfs only at /sys, writable ones noexec,nosuid,nodev. Options
// that would undo these (rw, exec, suid, dev, shared...) are removed; an
// option that is a verb on an existing mount (remount) or unknown for the
// type is refused, and so are a mount at / and a destination used twice
// (mountopts.go).
func (t *tightener) mounts() error {
	exp, err := expandLenient(t.p, t.o.Vars)
	if err != nil {
		return err
	}
	rules := exp.Rules()
	for i := range t.s.Mounts {
		m := &t.s.Mounts[i]
		before := slices.Clone(m.Options)
		if err := t.checkMountOptions(*m); err != nil {
			return err
		}
		if isBind(*m) {
			if err := t.bind(m, exp, rules); err != nil {
				return err
			}
		} else if err := t.kernelMount(m); err != nil {
			return err
		}
		m.Options = removeOptions(m.Options, "shared", "rshared")
		if !slices.Equal(before, m.Options) {
			t.changef("mounts: %s options %v -> %v", m.Destination, before, m.Options)
		}
	}
	return t.checkDestinations()
}

func (t *tightener) kernelMount(m *specs.Mount) error {
	ro, ok := kernelFS[m.Type]
	if !ok {
		return fmt.Errorf("%w: mounts: %s of type %q is not allowed under policy %s; use a bind mount of a folder the policy grants", ErrInvalid, m.Destination, m.Type, t.p.Name)
	}
	if at := map[string]string{"proc": "/proc", "sysfs": "/sys"}[m.Type]; at != "" && filepath.Clean(m.Destination) != at {
		return fmt.Errorf("%w: mounts: a %s file system at %s is not allowed under policy %s: only the one at %s has its kernel files masked and read-only; remove the mount", ErrInvalid, m.Type, m.Destination, t.p.Name, at)
	}
	if ro {
		m.Options = forceOptions(m.Options, "ro")
	}
	switch {
	case m.Type == "proc":
		m.Options = forceOptions(m.Options, "nosuid", "nodev", "noexec")
	case !ro:
		m.Options = forceOptions(m.Options, "nosuid")
		// /dev and /dev/pts hold the device nodes a container needs.
		if m.Type != "devpts" && filepath.Clean(m.Destination) != "/dev" {
			m.Options = forceOptions(m.Options, "nodev")
		}
		if m.Type == "tmpfs" {
			m.Options = forceOptions(m.Options, "noexec")
		}
	}
	return nil
}

func isBind(m specs.Mount) bool {
	return m.Type == "bind" || slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind")
}

func (t *tightener) bind(m *specs.Mount, exp *policies.Policy, rules []policies.Rule) error {
	if !filepath.IsAbs(m.Source) {
		// The runtime resolves a relative source against the bundle
		// first; one left relative would be checked from elsewhere.
		return fmt.Errorf("%w: mounts: %s: relative source %s; give an absolute path", ErrInvalid, m.Destination, m.Source)
	}
	src, err := filepath.EvalSymlinks(m.Source)
	if err != nil {
		return fmt.Errorf("%w: mounts: %s: source %s: %v", ErrInvalid, m.Destination, m.Source, err)
	}
	// Mount what was checked: a symlink swapped after this check cannot
	// redirect the mount.
	m.Source = src
	access := exp.AccessAt(src)
	denied := access == policies.AccessNone && slices.ContainsFunc(exp.FS.Deny, func(d string) bool {
		_, ok := hostfs.Under(src, d)
		return ok
	})
	if denied {
		return fmt.Errorf("%w: mounts: %s: the policy %s denies %s; remove the mount", ErrInvalid, m.Destination, t.p.Name, src)
	}
	if access == policies.AccessNone && !t.engineFile(src) {
		return fmt.Errorf("%w: mounts: %s: the policy %s grants no access to %s; grant it in [fs] read or write, or remove the mount", ErrInvalid, m.Destination, t.p.Name, src)
	}
	var st unix.Stat_t
	if err := unix.Stat(src, &st); err != nil {
		return fmt.Errorf("%w: mounts: %s: source %s: %v", ErrInvalid, m.Destination, src, err)
	}
	if kind := st.Mode & unix.S_IFMT; (kind == unix.S_IFSOCK || kind == unix.S_IFCHR || kind == unix.S_IFBLK) && access != policies.AccessWrite {
		return fmt.Errorf("%w: mounts: %s: %s is a socket or device, which read-only does not protect; the policy %s must grant it for writing, or remove the mount", ErrInvalid, m.Destination, src, t.p.Name)
	}
	// Read-only and denied rules strictly below the source are applied
	// inside the container at the matching place.
	for _, r := range rules {
		rel, ok := hostfs.Under(r.Path, src)
		if !ok || rel == "." {
			continue
		}
		inside := filepath.Join(m.Destination, rel)
		switch r.Access {
		case policies.AccessNone:
			// runc masks only what exists: a denied path absent under a
			// writable bind is one the container could create.
			if _, err := os.Lstat(r.Path); errors.Is(err, fs.ErrNotExist) && access == policies.AccessWrite {
				return fmt.Errorf("%w: mounts: %s: the policy %s denies %s, which does not exist, under this writable bind: the container could create it; create it first or bind %s read-only", ErrInvalid, m.Destination, t.p.Name, r.Path, src)
			}
			if !slices.Contains(t.s.Linux.MaskedPaths, inside) {
				t.s.Linux.MaskedPaths = append(t.s.Linux.MaskedPaths, inside)
				t.changef("mounts: %s masked (the policy denies %s)", inside, r.Path)
			}
		case policies.AccessRead:
			if !slices.Contains(t.s.Linux.ReadonlyPaths, inside) {
				t.s.Linux.ReadonlyPaths = append(t.s.Linux.ReadonlyPaths, inside)
			}
		}
	}
	// The recursive forms (mount_setattr) cover the mounts beneath an
	// rbind's source too, which the plain ones leave alone.
	if access == policies.AccessWrite {
		m.Options = forceOptions(m.Options, "nosuid", "nodev", "noexec", "rnosuid", "rnodev", "rnoexec")
	} else {
		m.Options = forceOptions(m.Options, "ro", "rro", "nosuid", "nodev", "rnosuid", "rnodev")
	}
	return nil
}

// engineFiles are the files and folders an engine makes for one container
// in a folder named after it: docker's containers/ID/{hosts,hostname,
// resolv.conf,mounts/shm}, containerd CRI's sandboxes/ID/{...,shm}.
var engineFiles = []string{"hosts", "hostname", "resolv.conf", "shm", "mounts/shm"}

// dockerInit are where packages put the init docker binds for --init.
var dockerInit = []string{"/usr/bin/docker-init", "/usr/sbin/docker-init", "/usr/local/bin/docker-init", "/usr/libexec/docker/docker-init"}

// engineFile reports whether a bind source is one the engine made for this
// container (bound read-only even when the policy does not grant it), or
// one the operator's --bind-allow patterns list.
func (t *tightener) engineFile(src string) bool {
	// docker run --init binds the host's docker-init (tini).
	for _, p := range dockerInit {
		if real, err := filepath.EvalSymlinks(p); err == nil && real == src {
			return true
		}
	}
	for _, pat := range t.o.BindAllow {
		if ok, _ := filepath.Match(pat, src); ok {
			return true
		}
	}
	ids := []string{}
	for _, id := range []string{t.o.ID, t.netOwner} {
		if id != "" {
			ids = append(ids, id)
		}
	}
	// A Kubernetes container's files are its pod sandbox's: trusted only
	// for a CRI container whose sandbox this runtime runs (annotations
	// are the caller's to set, and must not widen the binds).
	sb := t.s.Annotations["io.kubernetes.cri.sandbox-id"]
	if sb != "" && t.s.Annotations["io.kubernetes.cri.container-type"] == "container" && t.o.IsContainer != nil && t.o.IsContainer(sb) {
		ids = append(ids, sb)
	} else {
		sb = "" // not trusted
	}
	fi, err := os.Stat(src)
	if err != nil {
		return false
	}
	if t.ipcOwner != "" {
		ids = append(ids, t.ipcOwner)
	}
	for _, id := range ids {
		if len(id) < 12 || strings.ContainsAny(id, "/.") {
			continue
		}
		for _, f := range engineFiles {
			if id == t.ipcOwner && id != t.o.ID && id != t.netOwner && id != sb && filepath.Base(f) != "shm" {
				continue // of an IPC namespace's owner, only its shm
			}
			dir := strings.TrimSuffix(src, "/"+f)
			// shm is a folder, the others regular files.
			if dir != src && filepath.Base(dir) == id && fi.IsDir() == (filepath.Base(f) == "shm") && (fi.IsDir() || fi.Mode().IsRegular()) {
				return true
			}
		}
	}
	return false
}

// expandLenient places the policy's fs rules on the host, leaving out
// rules whose variable has no value here (a container has no $WORK_DIR
// unless the operator sets one): such a rule names no host path, so
// leaving it out grants nothing.
func expandLenient(p *policies.Policy, v policies.Vars) (*policies.Policy, error) {
	vals := map[string]string{"$SKILL_DIR": v.SkillDir, "$WORK_DIR": v.WorkDir, "$DATA_DIR": v.DataDir, "$HOME": v.Home}
	keep := func(l []string) []string {
		var out []string
		for _, s := range l {
			name, _, _ := strings.Cut(s, "/")
			if val, isVar := vals[name]; isVar && val == "" {
				continue
			}
			out = append(out, s)
		}
		return out
	}
	q := *p
	q.FS = policies.FS{Read: keep(p.FS.Read), Write: keep(p.FS.Write), Deny: keep(p.FS.Deny)}
	return q.Expand(v)
}

// opposite lists, for each option Tighten sets, the ones that undo it;
// libcontainer applies options in order, so a later one would win.
var opposite = map[string][]string{
	"ro": {"rw"}, "rro": {"rrw"},
	"nosuid": {"suid"}, "rnosuid": {"rsuid"},
	"nodev": {"dev"}, "rnodev": {"rdev"},
	"noexec": {"exec"}, "rnoexec": {"rexec"},
}

// forceOptions removes each option's opposites and puts the option last.
func forceOptions(opts []string, set ...string) []string {
	for _, o := range set {
		opts = removeOptions(opts, append([]string{o}, opposite[o]...)...)
		opts = append(opts, o)
	}
	return opts
}

func removeOptions(opts []string, drop ...string) []string {
	return slices.DeleteFunc(slices.Clone(opts), func(o string) bool { return slices.Contains(drop, o) })
}

// containerMasked are masked and read-only in every container under a
// policy, on top of what the config asks for (a privileged config asks
// for none).
var containerMasked = append(slices.Clone(maskedPaths), "/sys/firmware", "/sys/devices/virtual/powercap", "/proc/sysrq-trigger", "/proc/slabinfo")

// containerReadonly: besides the usual read-only parts, the whole /proc
// is read-only, as in a session: no writing another process's memory
// through /proc/PID/mem (which ptrace's seccomp denial does not cover),
// no pressure triggers in /proc/pressure. The engine writes the
// config's sysctls before read-only paths are applied, so they still work.
var containerReadonly = append(slices.Clone(readonlyPaths), "/proc")

func (t *tightener) paths() error {
	for _, p := range containerMasked {
		if !slices.Contains(t.s.Linux.MaskedPaths, p) {
			t.s.Linux.MaskedPaths = append(t.s.Linux.MaskedPaths, p)
		}
	}
	for _, p := range containerReadonly {
		if !slices.Contains(t.s.Linux.ReadonlyPaths, p) {
			t.s.Linux.ReadonlyPaths = append(t.s.Linux.ReadonlyPaths, p)
		}
	}
	return nil
}

// standardDevices are the character devices (major, minor; -1 any) every
// container has; no other device node or device cgroup grant survives.
var standardDevices = [][2]int64{{1, 3}, {1, 5}, {1, 7}, {1, 8}, {1, 9}, {5, 0}, {5, 1}, {5, 2}, {136, -1}}

func isStandardDevice(typ string, major, minor *int64) bool {
	if typ != "c" || major == nil {
		return false
	}
	for _, d := range standardDevices {
		if *major == d[0] && (d[1] == -1 || minor != nil && *minor == d[1]) {
			return true
		}
	}
	return false
}

// devices: only the standard devices stay, directly under /dev, which
// must be the container's own tmpfs: runc makes device nodes where their
// path says, so one in a bind mount (or a /dev that is none) would be a
// node on the host, in a folder its users can reach.
func (t *tightener) devices() error {
	dev := -1
	for i, m := range t.s.Mounts {
		if filepath.Clean(m.Destination) == "/dev" {
			dev = i
		}
	}
	if dev == -1 || t.s.Mounts[dev].Type != "tmpfs" || isBind(t.s.Mounts[dev]) {
		return fmt.Errorf("%w: mounts: /dev must be a tmpfs of the container's own under policy %s (runc makes the device nodes there); add {\"destination\": \"/dev\", \"type\": \"tmpfs\", \"source\": \"tmpfs\"}", ErrInvalid, t.p.Name)
	}
	var devs []specs.LinuxDevice
	for _, d := range t.s.Linux.Devices {
		p := filepath.Clean(d.Path)
		inDev := strings.HasPrefix(p, "/dev/")
		std := isStandardDevice(d.Type, &d.Major, &d.Minor)
		if !inDev || std && filepath.Dir(p) != "/dev" {
			return fmt.Errorf("%w: linux.devices: %s is not directly under /dev; under policy %s a device node is made only in the container's own /dev (elsewhere it could be on the host); move it to /dev or remove it", ErrInvalid, d.Path, t.p.Name)
		}
		if std {
			devs = append(devs, d)
			continue
		}
		t.changef("devices: %s dropped", d.Path)
	}
	t.s.Linux.Devices = devs
	if t.s.Linux.Resources == nil {
		t.s.Linux.Resources = &specs.LinuxResources{}
	}
	// The device cgroup: everything denied, then the standard devices
	// (a privileged config asks for "all" instead, which goes).
	rules := []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}
	for _, r := range t.s.Linux.Resources.Devices {
		if r.Allow && !isStandardDevice(r.Type, r.Major, r.Minor) {
			t.changef("devices: cgroup grant %s %s dropped", r.Type, deviceNumber(r))
		}
	}
	for _, d := range standardDevices {
		major, minor := d[0], d[1]
		r := specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: &major, Access: "rwm"}
		if minor != -1 {
			r.Minor = &minor
		}
		rules = append(rules, r)
	}
	t.s.Linux.Resources.Devices = rules
	return nil
}

func deviceNumber(r specs.LinuxDeviceCgroup) string {
	f := func(p *int64) string {
		if p == nil {
			return "*"
		}
		return fmt.Sprint(*p)
	}
	return f(r.Major) + ":" + f(r.Minor)
}

// resources: memory, pids and cpu each become the smaller of the
// config's and the policy's; swap is off (memory+swap = memory).
func (t *tightener) resources() error {
	r := t.s.Linux.Resources
	ClampResources(r, t.limits, t.changef)
	return nil
}

// ClampResources lowers r to the limits (the policy's, after annotations):
// used at create and for every `update`, so no update can raise a limit
// above the policy.
func ClampResources(r *specs.LinuxResources, l policies.Limits, changef func(string, ...any)) {
	if changef == nil {
		changef = func(string, ...any) {}
	}
	if r.Memory == nil {
		r.Memory = &specs.LinuxMemory{}
	}
	mem := l.Memory
	if r.Memory.Limit != nil && *r.Memory.Limit > 0 && *r.Memory.Limit < mem {
		mem = *r.Memory.Limit
	} else if r.Memory.Limit == nil || *r.Memory.Limit <= 0 || *r.Memory.Limit > mem {
		changef("resources: memory limit %s (the policy's)", policies.FormatSize(mem))
	}
	r.Memory.Limit = &mem
	swap := mem
	r.Memory.Swap = &swap
	if r.Memory.Reservation != nil && *r.Memory.Reservation > mem {
		res := mem
		r.Memory.Reservation = &res
	}
	if r.Pids == nil {
		r.Pids = &specs.LinuxPids{}
	}
	pids := l.Pids
	if r.Pids.Limit != nil && *r.Pids.Limit > 0 && *r.Pids.Limit < pids {
		pids = *r.Pids.Limit
	} else {
		changef("resources: pids limit %d (the policy's)", pids)
	}
	r.Pids.Limit = &pids
	if r.CPU == nil {
		r.CPU = &specs.LinuxCPU{}
	}
	period := uint64(100_000)
	if r.CPU.Period != nil && *r.CPU.Period > 0 {
		period = *r.CPU.Period
	}
	quota := int64(l.CPU * float64(period))
	if r.CPU.Quota != nil && *r.CPU.Quota > 0 && *r.CPU.Quota < quota {
		quota = *r.CPU.Quota
	} else {
		changef("resources: cpu quota %d/%d (the policy's %g cores)", quota, period, l.CPU)
	}
	r.CPU.Period, r.CPU.Quota = &period, &quota
	// A burst lets unused quota pile up and be spent above the policy's
	// cores.
	if r.CPU.Burst != nil && *r.CPU.Burst > 0 {
		r.CPU.Burst = nil
		changef("resources: cpu burst dropped (it would run above the policy's quota)")
	}
	if r.CPU.RealtimeRuntime != nil || r.CPU.RealtimePeriod != nil {
		r.CPU.RealtimeRuntime, r.CPU.RealtimePeriod = nil, nil
		changef("resources: cpu real-time runtime and period dropped")
	}
	// cgroup v2 keys written after memory, pids and cpu would override
	// them ("memory.max": "max"): none are kept.
	if len(r.Unified) > 0 {
		r.Unified = nil
		changef("resources: unified (cgroup v2 files) dropped")
	}
	// Huge pages are not counted in the memory limit: none.
	for i := range r.HugepageLimits {
		if r.HugepageLimits[i].Limit != 0 {
			r.HugepageLimits[i].Limit = 0
			changef("resources: hugepage limit %s set to 0", r.HugepageLimits[i].Pagesize)
		}
	}
}

// seccomp: a syscall is allowed only when both warden's profile for the
// policy and the config's own profile allow it.
func (t *tightener) seccomp() error {
	w := seccomp.ForPolicy(t.p)
	if t.s.Linux.Seccomp != nil {
		w = seccomp.Intersect(w, t.s.Linux.Seccomp)
		t.changef("seccomp: the config's profile intersected with warden's")
	} else {
		t.changef("seccomp: warden's profile added")
	}
	t.s.Linux.Seccomp = w
	return nil
}

// dockerdPaths are where a Debian or Docker package puts dockerd; its
// prestart hook (Path /proc/PID/exe, args libnetwork-setkey ...) connects
// the container to docker's network.
var dockerdPaths = []string{"/usr/bin/dockerd", "/usr/sbin/dockerd", "/usr/local/bin/dockerd"}

// hooks run as root on the host (createRuntime, prestart, poststart,
// poststop) or with the runtime's rights in the container: under a policy
// only docker's libnetwork-setkey (for this very container) and the
// operator's --hook-allow programs may run; any other hook refuses the container. A hook's path is
// replaced by the program it was checked as (no /proc/PID/exe reuse).
func (t *tightener) hooks() error {
	h := t.s.Hooks
	if h == nil {
		return nil
	}
	for _, list := range []struct {
		name  string
		hooks []specs.Hook
	}{
		//lint:ignore SA1019 docker 20.10 still writes prestart hooks
		{"prestart", h.Prestart}, {"createRuntime", h.CreateRuntime}, {"createContainer", h.CreateContainer},
		{"startContainer", h.StartContainer}, {"poststart", h.Poststart}, {"poststop", h.Poststop},
	} {
		for i := range list.hooks {
			hk := &list.hooks[i]
			prog, err := t.hookProgram(list.name, *hk)
			if err != nil {
				return fmt.Errorf("%w: hooks.%s: %s: %v; under policy %s a hook runs only if the runtime's --hook-allow lists its program", ErrInvalid, list.name, hk.Path, err, t.p.Name)
			}
			hk.Path = prog
		}
	}
	return nil
}

// hookProgram returns the host program a hook runs, if it is allowed.
func (t *tightener) hookProgram(kind string, h specs.Hook) (string, error) {
	if !filepath.IsAbs(h.Path) {
		return "", fmt.Errorf("not an absolute path")
	}
	prog, err := filepath.EvalSymlinks(h.Path)
	if strings.HasPrefix(h.Path, "/proc/") {
		// /proc/PID/exe: the program that process runs.
		prog, err = os.Readlink(h.Path)
	}
	if err != nil {
		return "", err
	}
	if slices.Contains(t.o.HookAllow, prog) {
		return prog, nil
	}
	if (kind == "prestart" || kind == "createRuntime") && slices.Contains(dockerdPaths, prog) && len(h.Args) > 0 && h.Args[0] == "libnetwork-setkey" {
		if err := setkeyFor(h.Args, t.o.ID); err != nil {
			return "", err
		}
		return prog, nil
	}
	return "", fmt.Errorf("program %s is not allowed", prog)
}

// setkeyFor checks that docker's libnetwork-setkey hook connects the
// container being created (args: libnetwork-setkey [-flag=value...]
// CONTAINER-ID CONTROLLER-ID, read as dockerd reads them), not another
// container, whose network it would take.
func setkeyFor(args []string, id string) error {
	rest := args[1:]
	for len(rest) > 0 && strings.HasPrefix(rest[0], "-") {
		// A flag's value in the next argument would shift the ids.
		if !strings.Contains(rest[0], "=") {
			return fmt.Errorf("libnetwork-setkey flag %q: only -flag=value is accepted", rest[0])
		}
		rest = rest[1:]
	}
	if len(rest) != 2 || id == "" || rest[0] != id {
		return fmt.Errorf("libnetwork-setkey %s: it may only connect the container being created (%s)", strings.Join(args[1:], " "), id)
	}
	return nil
}

func (t *tightener) annotations() error {
	if t.s.Annotations == nil {
		t.s.Annotations = map[string]string{}
	}
	t.s.Annotations[AnnotationPolicy] = t.p.Name
	t.s.Annotations[AnnotationPolicyHash] = t.p.Hash()
	return nil
}
