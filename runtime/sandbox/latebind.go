package sandbox

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/spec"
)

// bindLate mounts a claimed session's folders into a running pooled
// container, exactly as a cold start would have mounted them: each source
// is cloned in the host's namespace (open_tree), given the mount's flags
// and id mapping (mount_setattr), then moved onto its destination from a
// thread that has entered the container's mount namespace (move_mount).
// Destinations resolve inside root, the folder of that namespace that
// stands for the sandbox's root ("/" for a container), as runc resolves
// them, so a symlink in a workspace cannot lead a mount out of it.
func bindLate(mntns int, root string, mounts []specs.Mount) error {
	if len(mounts) == 0 {
		return nil
	}
	var trees []int
	defer func() {
		for _, fd := range trees {
			unix.Close(fd)
		}
	}()
	for _, m := range mounts {
		fd, err := cloneMount(m)
		if err != nil {
			return fmt.Errorf("late mount %s: %w", m.Destination, err)
		}
		trees = append(trees, fd)
	}
	return OnOwnThread(func() error { return moveMounts(mntns, root, mounts, trees) })
}

// moveMounts runs on a locked thread it may leave in another namespace.
func moveMounts(ns int, rootPath string, mounts []specs.Mount, trees []int) error {
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("late mount: unshare: %w", err)
	}
	if err := unix.Setns(ns, unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("late mount: enter the container: %w", err)
	}
	root, err := unix.Open(rootPath, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
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
func cloneMount(m specs.Mount) (int, error) {
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
		userns, err := idmapUsernses.get(m.UIDMappings, m.GIDMappings)
		if err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("id mapping: %w", err)
		}
		defer userns.Close()
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

// idmapUsernses holds the user namespaces idmapped late mounts need, one
// per mapping (folder owner -> a sandbox's uid). Making one takes a
// process (a few ms), too slow for a claim: a pooled sandbox's are made
// when it starts (prewarm), for the owners of the folders recent claims
// bound. Each sandbox has a uid of its own, so the cache is bounded and
// drops its oldest entries; a mount made with a namespace keeps it alive.
var idmapUsernses = &usernsCache{m: map[string]usernsEntry{}}

const (
	usernsCacheSize = 64 // namespaces kept open
	recentOwners    = 2  // folder owners a pooled sandbox is prepared for
)

type usernsCache struct {
	mu     sync.Mutex
	m      map[string]usernsEntry
	order  []string    // keys, oldest first
	owners [][2]uint32 // uid, gid of the folders recent late mounts bound, newest first
}

type usernsEntry struct {
	f    *os.File
	host uint32 // the sandbox's uid it maps to
}

// forget drops the namespaces that map to a sandbox's host uid: its
// folders are bound (a sandbox is claimed once) or it is gone.
func (c *usernsCache) forget(uid uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.order = slices.DeleteFunc(c.order, func(k string) bool {
		if c.m[k].host != uid {
			return false
		}
		c.m[k].f.Close()
		delete(c.m, k)
		return true
	})
}

// get returns a user namespace with the given mappings: a mount idmapped
// with it shows files the way the cold path's idmapped mount does (the
// mapping's container ids are ids on disk, its host ids those the sandbox
// sees as its own).
func (c *usernsCache) get(uids, gids []specs.LinuxIDMapping) (*os.File, error) {
	if len(uids) == 1 && len(gids) == 1 {
		c.noteOwner(uint32(uids[0].ContainerID), uint32(gids[0].ContainerID))
	}
	return c.make(uids, gids)
}

// make returns a descriptor of its own (the caller closes it) for the
// namespace with the mappings, made if the cache has none: an eviction
// never closes one a caller still uses.
func (c *usernsCache) make(uids, gids []specs.LinuxIDMapping) (*os.File, error) {
	key := fmt.Sprint(uids, gids)
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok {
		f, err := newUserns(uids, gids)
		if err != nil {
			return nil, err
		}
		e = usernsEntry{f: f}
		if len(uids) > 0 {
			e.host = uids[0].HostID
		}
		c.m[key] = e
		c.order = append(c.order, key)
		for len(c.order) > usernsCacheSize {
			oldest := c.order[0]
			c.order = c.order[1:]
			c.m[oldest].f.Close()
			delete(c.m, oldest)
		}
	}
	f := e.f
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

func (c *usernsCache) noteOwner(uid, gid uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o := [2]uint32{uid, gid}
	c.owners = append([][2]uint32{o}, slices.DeleteFunc(c.owners, func(x [2]uint32) bool { return x == o })...)
	if len(c.owners) > recentOwners {
		c.owners = c.owners[:recentOwners]
	}
}

// prewarm makes the namespaces a claim of a sandbox running as id will
// need if its folders belong to a recent owner.
func (c *usernsCache) prewarm(id spec.Identity) {
	c.mu.Lock()
	owners := slices.Clone(c.owners)
	c.mu.Unlock()
	for _, o := range owners {
		f, err := c.make([]specs.LinuxIDMapping{{ContainerID: o[0], HostID: id.UID, Size: 1}},
			[]specs.LinuxIDMapping{{ContainerID: o[1], HostID: id.GID, Size: 1}})
		if err == nil {
			f.Close()
		}
	}
}

// NewUserns returns a handle on a new user namespace with the mappings,
// for idmapped mounts (MOUNT_ATTR_IDMAP): no process stays in it.
func NewUserns(uids, gids []specs.LinuxIDMapping) (*os.File, error) { return newUserns(uids, gids) }
