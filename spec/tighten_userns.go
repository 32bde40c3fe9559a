package spec

import (
	"fmt"
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// userNamespace: a container whose config has no user namespace gets the
// one the runtime chose (TightenOptions.UserNamespace), so its root is an
// unprivileged host user. The files the engine made for this very
// container (hosts, resolv.conf, hostname, shm) are bound id-mapped, so
// they stay root's inside as they are on disk; a bind of a policy grant
// is not: what the container writes there belongs to its host uid. A
// sysfs cannot be mounted in a network namespace of the host's user
// namespace: there /sys becomes a read-only bind of the host's /sys and
// the mounts on it, as rootless runc has it (the container's root, an
// unprivileged host user, reads there what any host user may).
func (t *tightener) userNamespace() error {
	u := t.o.UserNamespace
	if u == nil || slices.ContainsFunc(t.s.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == specs.UserNamespace }) {
		return nil
	}
	t.s.Linux.Namespaces = append(t.s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace, Path: u.Path})
	if u.Path == "" {
		t.s.Linux.UIDMappings, t.s.Linux.GIDMappings = u.UIDMappings, u.GIDMappings
		t.changef("namespaces: own user namespace added (uids %v, gids %v)", u.UIDMappings, u.GIDMappings)
	} else {
		t.changef("namespaces: user namespace %s joined (its pod's)", u.Path)
	}
	t.pingGroupRange(u)
	for i := range t.s.Mounts {
		m := &t.s.Mounts[i]
		switch {
		case isBind(*m) && t.containerFile(m.Source):
			if slices.Contains(m.Options, "rbind") {
				m.Options = append(m.Options, "ridmap")
			} else {
				m.Options = append(m.Options, "idmap")
			}
			t.changef("mounts: %s id-mapped (the engine's file for this container)", m.Destination)
		case m.Type == "sysfs" && u.HostSysfs:
			// Recursive: the kernel refuses to bind a mount without the
			// mounts on it (cgroup, tracefs) into a user namespace.
			*m = specs.Mount{Destination: m.Destination, Type: "bind", Source: "/sys",
				Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec", "rro", "rnosuid", "rnodev", "rnoexec"}}
			t.changef("mounts: %s is a read-only bind of the host's /sys (the network namespace is the host user namespace's)", m.Destination)
		}
	}
	return nil
}

// pingGroupRange: the kernel takes net.ipv4.ping_group_range only within
// the groups the user namespace maps (docker 20.10 asks for 0-2147483647):
// the range is cut to the mapped groups, or dropped when none is in it.
func (t *tightener) pingGroupRange(u *UserNamespace) {
	const key = "net.ipv4.ping_group_range"
	v, ok := t.s.Linux.Sysctl[key]
	if !ok {
		return
	}
	gids := u.GIDMappings
	if len(gids) != 1 || gids[0].ContainerID != 0 || gids[0].Size == 0 {
		// Joined: the engine reads the mappings from the namespace.
		if u.Path == "" {
			delete(t.s.Linux.Sysctl, key)
		}
		return
	}
	last := uint64(gids[0].Size - 1)
	var lo, hi uint64
	if _, err := fmt.Sscanf(v, "%d %d", &lo, &hi); err != nil || lo > last {
		delete(t.s.Linux.Sysctl, key)
		t.changef("sysctl %s %q dropped (no group of the user namespace in it)", key, v)
		return
	}
	if hi > last {
		t.s.Linux.Sysctl[key] = fmt.Sprintf("%d %d", lo, last)
		t.changef("sysctl %s %q cut to the user namespace's groups", key, v)
	}
}
