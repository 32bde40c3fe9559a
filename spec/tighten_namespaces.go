package spec

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

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
