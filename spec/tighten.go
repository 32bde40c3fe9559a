package spec

import (
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/warden-sandbox/warden/policies"
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
	// UserNamespace is the user namespace a container whose config has
	// none gets; nil: none is added.
	UserNamespace *UserNamespace
}

// UserNamespace is a user namespace Tighten adds, so that the container's
// root is an unprivileged host user: a new one with the mappings, or the
// one at Path (its pod's), whose mappings the engine reads from it.
type UserNamespace struct {
	Path        string
	UIDMappings []specs.LinuxIDMapping
	GIDMappings []specs.LinuxIDMapping
	// HostSysfs: the container's network namespace belongs to the host's
	// user namespace (CNI made it), where the kernel refuses to mount a
	// sysfs: /sys becomes a read-only bind of the host's (recursive) instead.
	HostSysfs bool
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
// What "tighten" means for each part is documented in docs/oci.md;
// TestTighten* pin it down. One file per concern: tighten_*.go.
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
		t.userNamespace,
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
