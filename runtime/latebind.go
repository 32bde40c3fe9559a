package runtime

import (
	"errors"
	"fmt"
	"os"
	goruntime "runtime"
	"slices"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// The main goroutine keeps the main thread: setns below runs on threads
// that die with their goroutine, and the runtime must never hand the main
// thread (whose namespaces are the process's) to one of them.
func init() {
	goruntime.LockOSThread()
}

// bindLate mounts a claimed session's folders into a running pooled
// container, exactly as a cold start would have mounted them: each source
// is cloned in the host's namespace (open_tree), given the mount's flags
// and id mapping (mount_setattr), then moved onto its destination from a
// thread that has entered the container's mount namespace (move_mount).
// Destinations resolve inside the container's root, as runc resolves
// them, so a symlink in a workspace cannot lead a mount out of it.
func bindLate(mntns int, mounts []specs.Mount) error {
	if len(mounts) == 0 {
		return nil
	}
	var trees []int
	usernses := idmapUsernses{}
	defer func() {
		for _, fd := range trees {
			unix.Close(fd)
		}
		usernses.close()
	}()
	for _, m := range mounts {
		fd, err := cloneMount(m, usernses)
		if err != nil {
			return fmt.Errorf("late mount %s: %w", m.Destination, err)
		}
		trees = append(trees, fd)
	}
	done := make(chan error, 1)
	go func() {
		// Never unlocked: the thread leaves the process with this
		// goroutine instead of going back to the scheduler while it is
		// still in the container's namespace.
		goruntime.LockOSThread()
		done <- moveMounts(mntns, mounts, trees)
	}()
	return <-done
}

// moveMounts runs on a locked thread it may leave in another namespace.
func moveMounts(ns int, mounts []specs.Mount, trees []int) error {
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("late mount: unshare: %w", err)
	}
	if err := unix.Setns(ns, unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("late mount: enter the container: %w", err)
	}
	root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("late mount: the container's root: %w", err)
	}
	defer unix.Close(root)
	for i, m := range mounts {
		target, err := unix.Openat2(root, m.Destination, &unix.OpenHow{
			Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err != nil {
			return fmt.Errorf("late mount %s: mountpoint: %w", m.Destination, err)
		}
		err = unix.MoveMount(trees[i], "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
		unix.Close(target)
		if err != nil {
			return fmt.Errorf("late mount %s: %w", m.Destination, err)
		}
	}
	return nil
}

// cloneMount makes a detached copy of a bind mount's source with the
// mount's options applied.
func cloneMount(m specs.Mount, usernses idmapUsernses) (int, error) {
	if m.Type != "bind" {
		return -1, fmt.Errorf("only bind mounts are bound late, not %q", m.Type)
	}
	recursive := slices.Contains(m.Options, "rbind")
	flags := uint(unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC)
	setFlags := uint(unix.AT_EMPTY_PATH)
	if recursive {
		flags |= unix.AT_RECURSIVE
		setFlags |= unix.AT_RECURSIVE
	}
	// The source held no symlink when it was checked; one there now was
	// swapped in since (see bindcheck.go), and is refused.
	src, err := openSource(m.Source)
	if err != nil {
		return -1, err
	}
	fd, err := unix.OpenTree(src, "", flags|unix.AT_EMPTY_PATH)
	unix.Close(src)
	if err != nil {
		return -1, err
	}
	attr := unix.MountAttr{Propagation: unix.MS_SLAVE}
	for _, o := range m.Options {
		switch o {
		// The clone is recursive with rbind, so the recursive forms
		// mean the same here.
		case "ro", "rro":
			attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
		case "nosuid", "rnosuid":
			attr.Attr_set |= unix.MOUNT_ATTR_NOSUID
		case "nodev", "rnodev":
			attr.Attr_set |= unix.MOUNT_ATTR_NODEV
		case "noexec", "rnoexec":
			attr.Attr_set |= unix.MOUNT_ATTR_NOEXEC
		case "rw", "bind", "rbind":
		default:
			unix.Close(fd)
			return -1, fmt.Errorf("mount option %q is not supported for a late mount", o)
		}
	}
	if len(m.UIDMappings) > 0 || len(m.GIDMappings) > 0 {
		userns, err := usernses.get(m.UIDMappings, m.GIDMappings)
		if err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("id mapping: %w", err)
		}
		attr.Attr_set |= unix.MOUNT_ATTR_IDMAP
		attr.Userns_fd = uint64(userns.Fd())
	}
	if err := unix.MountSetattr(fd, "", setFlags, &attr); err != nil {
		unix.Close(fd)
		if attr.Attr_set&unix.MOUNT_ATTR_IDMAP != 0 && errors.Is(err, unix.EINVAL) {
			return -1, fmt.Errorf("%s (or a mount inside it) cannot be id-mapped, which a writable grant needs; grant a folder on ext4, xfs, btrfs or tmpfs with no other mounts inside it", m.Source)
		}
		return -1, fmt.Errorf("mount_setattr: %w", err)
	}
	return fd, nil
}

// idmapUsernses are the user namespaces one bindLate's idmapped mounts
// need, one per mapping (a session's folders usually share an owner, so
// one). None outlives the call: each sandbox has a uid of its own, so a
// mapping is rarely needed again, and the mounts keep the namespace.
type idmapUsernses map[string]*os.File

// get returns a user namespace with the given mappings: a mount idmapped
// with it shows files the way the cold path's idmapped mount does (the
// mapping's container ids are ids on disk, its host ids those the sandbox
// sees as its own).
func (u idmapUsernses) get(uids, gids []specs.LinuxIDMapping) (*os.File, error) {
	key := fmt.Sprint(uids, gids)
	if f, ok := u[key]; ok {
		return f, nil
	}
	f, err := newUserns(uids, gids)
	if err != nil {
		return nil, err
	}
	u[key] = f
	return f, nil
}

func (u idmapUsernses) close() {
	for _, f := range u {
		f.Close()
	}
}

// newUserns starts a process in a new user namespace with the mappings,
// stopped by ptrace before it runs any code of its own, keeps a handle on
// the namespace and kills the process.
func newUserns(uids, gids []specs.LinuxIDMapping) (*os.File, error) {
	goruntime.LockOSThread() // the tracer is this thread
	defer goruntime.UnlockOSThread()
	conv := func(in []specs.LinuxIDMapping) []syscall.SysProcIDMap {
		var out []syscall.SysProcIDMap
		for _, m := range in {
			out = append(out, syscall.SysProcIDMap{ContainerID: int(m.ContainerID), HostID: int(m.HostID), Size: int(m.Size)})
		}
		return out
	}
	p, err := os.StartProcess("/proc/self/exe", []string{"warden-userns"}, &os.ProcAttr{Sys: &syscall.SysProcAttr{
		Cloneflags: unix.CLONE_NEWUSER, UidMappings: conv(uids), GidMappings: conv(gids),
		Ptrace: true, Pdeathsig: syscall.SIGKILL,
	}})
	if err != nil {
		return nil, err
	}
	f, openErr := os.Open(fmt.Sprintf("/proc/%d/ns/user", p.Pid))
	p.Kill()
	p.Wait()
	if openErr != nil {
		return nil, errors.Join(errors.New("user namespace"), openErr)
	}
	return f, nil
}
