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
	"github.com/warden-sandbox/warden/spec/hostfs"
)

// rootfs: the container's root is read-only; a private /tmp (noexec, half
// the memory limit) is added when the config has none.
func (t *tightener) rootfs() error {
	real, err := ContainerRoot(t.s.Root.Path, t.o.Bundle, t.p.Name)
	if err != nil {
		return err
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

// ContainerRoot is the root file system path of a container under
// policy (named for messages) with its symlinks resolved, or why it may
// not be one (ErrInvalid): Tighten's check of root.path, which a caller
// that works on the root while the spec is tightened makes first.
func ContainerRoot(path, bundle, policy string) (string, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", fmt.Errorf("%w: root.path %s: %v", ErrInvalid, path, err)
	}
	if real == "/" {
		return "", fmt.Errorf("%w: root.path %s is the host's own root; a container under policy %s needs its own root file system", ErrInvalid, path, policy)
	}
	if !ownRoot(real, bundle) {
		return "", fmt.Errorf("%w: root.path %s is a folder of the host's (neither inside the bundle nor an overlay mounted for the container, as an engine's snapshot is); under policy %s a container's root is its own, the host's folders only through [fs] grants; put the root file system in the bundle", ErrInvalid, path, policy)
	}
	return real, nil
}

// ownRoot reports whether a root file system (symlinks resolved) is the
// container's own: inside the bundle (runc's bundle/rootfs, containerd's),
// or the root of an overlay mounted for it (docker's overlay2/ID/merged).
// Anything else is a host folder, which would show the container what the
// policy never granted (root.path "/home", "/run/user/1000", another pod's
// volume).
func ownRoot(real, bundle string) bool {
	if bundle != "" {
		if bundle, err := filepath.EvalSymlinks(bundle); err == nil {
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
	return t.containerFile(src)
}

// containerFile reports whether a bind source is one of the files the
// engine made for this container, its pod or the container whose network
// or IPC namespace it joins.
func (t *tightener) containerFile(src string) bool {
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
