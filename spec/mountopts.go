package spec

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Under a policy a config's mount entry may only describe a new mount.
// runc turns some options into verbs on what is already there: "remount"
// becomes MS_REMOUNT, which changes the flags of the mount already at the
// destination (a read-only grant made writable, noexec dropped) or, for a
// kernel file system type, reconfigures the superblock behind it (a host
// tmpfs made read-only). An option not on these lists is refused rather
// than passed on, so a verb added to runc later is refused too.

// describingOptions are the flags and propagation types that describe the
// new mount alone (runc applies them to the mount it has just made);
// Tighten then forces its own (ro, nosuid, noexec...) over them.
var describingOptions = []string{
	"", "defaults", "acl", "nomand", "ro", "rw", "nosuid", "suid", "nodev", "dev", "noexec", "exec",
	"sync", "async", "dirsync", "noatime", "atime", "relatime", "norelatime",
	"strictatime", "nostrictatime", "nodiratime", "diratime", "lazytime", "nolazytime",
	"iversion", "noiversion", "silent", "loud", "nosymfollow", "symfollow",
	"private", "rprivate", "slave", "rslave", "unbindable", "runbindable", "shared", "rshared",
	"rro", "rrw", "rnosuid", "rsuid", "rnodev", "rdev", "rnoexec", "rexec",
	"rnodiratime", "rdiratime", "rrelatime", "rnorelatime", "rnoatime", "ratime",
	"rstrictatime", "rnostrictatime", "rnosymfollow", "rsymfollow",
}

// typeOptions are the further options each mount type accepts: flags of
// its own, and the file system's data keys (written "size=").
var typeOptions = map[string][]string{
	"bind":    {"bind", "rbind", "idmap", "ridmap"},
	"tmpfs":   {"tmpcopyup", "size=", "mode=", "uid=", "gid=", "nr_inodes=", "nr_blocks=", "inode32", "inode64", "huge=", "noswap"},
	"devpts":  {"newinstance", "ptmxmode=", "mode=", "uid=", "gid=", "max="},
	"proc":    {"hidepid=", "subset=", "gid="},
	"mqueue":  {},
	"sysfs":   {},
	"cgroup":  {},
	"cgroup2": {},
}

// checkMountOptions refuses a mount entry with an option that is not a
// description of the new mount for its type. Each comma-separated part
// counts (runc passes an unknown option to the kernel as data, split
// there on commas).
func (t *tightener) checkMountOptions(m specs.Mount) error {
	typ := m.Type
	if isBind(m) {
		typ = "bind"
	}
	extra, known := typeOptions[typ]
	if !known {
		return nil // kernelMount refuses the type itself
	}
	// A mount's own id mappings (runc id-maps a bind that has them, with
	// or without a user namespace) would let the container own host files:
	// a setuid-root file made in a write grant, root-only files read in a
	// read grant. idmap alone takes the container's own user namespace.
	if len(m.UIDMappings) > 0 || len(m.GIDMappings) > 0 {
		return fmt.Errorf("%w: mounts: %s: uidMappings/gidMappings of its own would let the container own host files; not allowed under policy %s; remove them (idmap alone uses the container's user namespace)", ErrInvalid, m.Destination, t.p.Name)
	}
	userns := slices.ContainsFunc(t.s.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == specs.UserNamespace })
	for _, opt := range m.Options {
		for _, part := range strings.Split(opt, ",") {
			if key, _, data := strings.Cut(part, "="); data {
				part = key + "="
			}
			if part == "remount" {
				return fmt.Errorf("%w: mounts: %s: option \"remount\" changes the mount already there (or its file system) instead of making a new one; it is not allowed under policy %s; remove it", ErrInvalid, m.Destination, t.p.Name)
			}
			if (part == "idmap" || part == "ridmap") && !userns {
				return fmt.Errorf("%w: mounts: %s: option %q without a user namespace of the container's is not allowed under policy %s; remove it or give the container a user namespace", ErrInvalid, m.Destination, part, t.p.Name)
			}
			if slices.Contains(describingOptions, part) || slices.Contains(extra, part) {
				continue
			}
			return fmt.Errorf("%w: mounts: %s: option %q is not accepted for a %s mount under policy %s (accepted: %s); remove it", ErrInvalid, m.Destination, opt, typ, t.p.Name, acceptedOptions(typ))
		}
	}
	return nil
}

func acceptedOptions(typ string) string {
	const flags = "the flags ro, nosuid, nodev, noexec and the atime and propagation flags"
	if len(typeOptions[typ]) == 0 {
		return flags
	}
	return strings.Join(typeOptions[typ], ", ") + " and " + flags
}

// checkDestinations refuses a mount at the container's root and two
// mounts at one destination: a later mount at the same place hides the
// earlier one, whose source could then no longer be checked after the
// start (see the bind pins in the runtime).
//
// One shape is taken apart instead: a tmpfs followed by a bind at the
// same destination, as containerd's CRI plugin writes /dev/shm for a pod
// (its default tmpfs, then the pod's shm folder). The tmpfs, hidden at
// once and with no source to check, is dropped.
func (t *tightener) checkDestinations() error {
	last := map[string]int{}
	for i, m := range t.s.Mounts {
		last[filepath.Clean("/"+m.Destination)] = i
	}
	kept := t.s.Mounts[:0:0]
	for i, m := range t.s.Mounts {
		j := last[filepath.Clean("/"+m.Destination)]
		if j != i && m.Type == "tmpfs" && !isBind(m) && isBind(t.s.Mounts[j]) {
			t.changef("mounts: %s: tmpfs dropped, hidden by the bind mounted there after it", m.Destination)
			continue
		}
		kept = append(kept, m)
	}
	t.s.Mounts = kept
	seen := map[string]bool{}
	for _, m := range t.s.Mounts {
		dest := filepath.Clean("/" + m.Destination)
		if dest == "/" {
			return fmt.Errorf("%w: mounts: a mount at the container's root (%q) is not allowed under policy %s; use root.path for the root file system", ErrInvalid, m.Destination, t.p.Name)
		}
		if seen[dest] {
			return fmt.Errorf("%w: mounts: %s is the destination of two mounts; under policy %s each destination is mounted once (the later would hide the earlier); remove one", ErrInvalid, dest, t.p.Name)
		}
		seen[dest] = true
	}
	return nil
}
