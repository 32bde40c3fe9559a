package oci

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/opencontainers/runc/libcontainer"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/runtime/sandbox"
	"github.com/warden-sandbox/warden/spec"
)

// nsFile names the /proc/PID/ns file of each namespace type a container
// may join by path.
var nsFile = map[specs.LinuxNamespaceType]string{
	specs.PIDNamespace: "pid", specs.NetworkNamespace: "net", specs.IPCNamespace: "ipc", specs.UTSNamespace: "uts",
	specs.CgroupNamespace: "cgroup", specs.UserNamespace: "user",
}

// namespaceOwner finds the live container of this root whose init is in
// the namespace at path; for a network namespace held by none, it also
// tells whether any process on the host is in it.
func (o *Runtime) namespaceOwner(typ specs.LinuxNamespaceType, path string) (spec.NamespaceOwner, error) {
	var owner spec.NamespaceOwner
	name := nsFile[typ]
	if name == "" {
		return owner, fmt.Errorf("%s namespaces cannot be joined", typ)
	}
	var want unix.Stat_t
	if err := unix.Stat(path, &want); err != nil {
		return owner, err
	}
	same := func(pid int) bool {
		var st unix.Stat_t
		return unix.Stat(filepath.Join("/proc", strconv.Itoa(pid), "ns", name), &st) == nil && st.Dev == want.Dev && st.Ino == want.Ino
	}
	entries, _ := os.ReadDir(o.stateDir())
	for _, e := range entries {
		c, err := libcontainer.Load(o.stateDir(), e.Name())
		if err != nil {
			continue
		}
		st, err := c.State()
		if err != nil || st.InitProcessPid <= 0 {
			continue
		}
		// Status checks the init's start time: a reused pid is not it.
		if status, err := c.Status(); err != nil || status == libcontainer.Stopped || !same(st.InitProcessPid) {
			continue
		}
		owner.Container = c.ID()
		rec, err := readRecord(c, o.stateDir())
		owner.ClosedNetwork = err == nil && rec != nil && !rec.Network
		return owner, nil
	}
	if typ == specs.NetworkNamespace {
		procs, err := os.ReadDir("/proc")
		if err != nil {
			return owner, err
		}
		for _, p := range procs {
			if pid, err := strconv.Atoi(p.Name()); err == nil && same(pid) {
				owner.InUse = true
				break
			}
		}
	}
	return owner, nil
}

// gvisorNamespaceOwner is namespaceOwner for a gVisor sub-container of
// the sandbox sandboxID (a pod's container): runsc runs it inside that
// sandbox, where the namespace paths only name what it shares with the
// pod's other containers; it joins no host namespace. So the paths may
// name only that sandbox's namespaces, whose network is gVisor's own:
// closed when the sandbox runs with --network=none (runscFlags).
func (o *Runtime) gvisorNamespaceOwner(sandboxID string) func(specs.LinuxNamespaceType, string) (spec.NamespaceOwner, error) {
	return func(typ specs.LinuxNamespaceType, path string) (spec.NamespaceOwner, error) {
		var owner spec.NamespaceOwner
		name := nsFile[typ]
		if name == "" {
			return owner, fmt.Errorf("%s namespaces cannot be joined", typ)
		}
		g, ok, err := o.loadGVisor(sandboxID)
		if !ok || err != nil || g.rec.Sandbox <= 0 || g.rec.Keeper != 0 {
			return owner, nil
		}
		if start, err := sandbox.ProcessStart(g.rec.Sandbox); err != nil || start != g.rec.SandboxStart {
			return owner, nil
		}
		var want, st unix.Stat_t
		if err := unix.Stat(path, &want); err != nil {
			return owner, err
		}
		if unix.Stat(filepath.Join("/proc", strconv.Itoa(g.rec.Sandbox), "ns", name), &st) != nil || st.Dev != want.Dev || st.Ino != want.Ino {
			return owner, nil
		}
		owner.Container = g.id
		owner.ClosedNetwork = g.rec.Policy != nil && !g.rec.Policy.Network
		return owner, nil
	}
}

// isContainer reports whether id is a container of this root (warden
// made its state folder).
func (o *Runtime) isContainer(id string) bool {
	if checkContainerID(id) != nil {
		return false
	}
	for _, dir := range []string{filepath.Join(o.stateDir(), id), o.gvisorDir(id)} {
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			return true
		}
	}
	return false
}

// joinsNetwork reports whether s joins a network namespace by path whose
// interfaces are not its own to remove: all but a CRI pod sandbox's
// fresh CNI namespace.
func joinsNetwork(s *specs.Spec) bool {
	for _, ns := range s.Linux.Namespaces {
		if ns.Type == specs.NetworkNamespace && ns.Path != "" {
			return !spec.CNISandboxNetns(s)
		}
	}
	return false
}
