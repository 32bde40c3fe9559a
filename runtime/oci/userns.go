package oci

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/moby/sys/mountinfo"

	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/runtime/sandbox"
	"github.com/warden-sandbox/warden/spec"
)

// A container under a policy whose config has no user namespace gets one:
// its root is a block of unprivileged host ids of its own (uid and gid 0
// -> the block's first, 65536 ids, as an image's users need), leased in
// ROOT/userns/FIRST (a file naming the container, made with O_EXCL and
// locked by the create that took it) so two containers of one state root
// never share ids, and freed when it is deleted. A lease left by a create
// that died before the container existed, or whose container's state was
// removed without a delete, is collected by the next delete (or when no
// block is free): unlocked, older than leaseGrace, naming no container. A container that joins a pod's or another container's
// namespaces joins that one's user namespace instead, with its ids. The
// image's root file system is mounted id-mapped (idRootDir), so its
// files are still root's inside and what the container writes there is
// root's on disk, as engines expect.
const (
	usernsFirst  = 3_145_728 // above the sessions' 3000000-3065536
	usernsSize   = 65_536
	usernsBlocks = 4_096
	leaseGrace   = 10 * time.Second
)

// UsernsRange is the host id range containers' user namespaces come from,
// for messages and docs.
var UsernsRange = fmt.Sprintf("%d-%d", usernsFirst, usernsFirst+usernsSize*usernsBlocks-1)

func (o *Runtime) usernsDir() string { return filepath.Join(o.Root, "userns") }

// idRootDir is where a container's id-mapped root is mounted: the
// container's root user opens it by path, so every folder above it must
// be searchable by others. Engines give warden private state roots
// (dockerd's is 0700): for those, a folder under warden's default root,
// named after the state root and the container.
func (o *Runtime) idRootDir(id string) string {
	if sandbox.CheckTraversable(o.Root) == nil {
		return filepath.Join(o.Root, "idroot", id)
	}
	sum := sha256.Sum256([]byte(filepath.Clean(o.Root)))
	return filepath.Join(sandbox.DefaultRoot, "idroot", hex.EncodeToString(sum[:6])+"-"+id)
}

// usernsSetup is what one create made for its container's user
// namespace, undone if the create fails.
type usernsSetup struct {
	*spec.UserNamespace
	lease string   // the id lease file it took, if any
	lock  *os.File // the lease, locked while this create runs
	root  string   // the id-mapped root it mounted, if any
}

// undo removes what the create made for its container's user namespace:
// when the create fails, and when a run's container is destroyed (the
// lease is known here; releaseUserns, for a later delete, reads every
// lease to find it).
func (u *usernsSetup) undo() {
	if u.root != "" {
		if err := unix.Unmount(u.root, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			logrus.Warnf("unmount %s: %v", u.root, err)
		}
		os.Remove(u.root)
		os.Remove(filepath.Dir(u.root)) // when empty
	}
	if u.lease != "" {
		os.Remove(u.lease)
	}
	if u.lock != nil {
		u.lock.Close()
	}
	u.root, u.lease, u.lock = "", "", nil
}

// planUserns chooses the user namespace a container under a policy gets
// (spec.TightenOptions.UserNamespace): nil when its config has one of its
// own, or when it joins namespaces of a container running without one
// (its processes could not mount what they need there).
func (o *Runtime) planUserns(id string, s *specs.Spec) (*usernsSetup, error) {
	if s.Linux == nil {
		return o.leaseUserns(id)
	}
	var join *usernsSetup
	hostNet := false
	for _, ns := range s.Linux.Namespaces {
		if ns.Type == specs.UserNamespace {
			return nil, nil
		}
		if ns.Path == "" {
			continue
		}
		if ns.Type == specs.NetworkNamespace {
			hostNet = ownedByHostUserns(ns.Path)
		}
		owner, err := o.namespaceOwner(ns.Type, ns.Path)
		if err != nil || owner.Container == "" {
			continue // Tighten refuses it, or a pod sandbox's CNI namespace
		}
		c, err := libcontainer.Load(o.stateDir(), owner.Container)
		if err != nil {
			continue
		}
		cfg := c.Config()
		st, err := c.State()
		if err != nil || !cfg.Namespaces.Contains(configs.NEWUSER) {
			logrus.Warnf("container %s joins a namespace of container %s, which has no user namespace: it runs without one", id, owner.Container)
			return nil, nil
		}
		path := fmt.Sprintf("/proc/%d/ns/user", st.InitProcessPid)
		if join != nil && !sameFile(join.Path, path) {
			logrus.Warnf("container %s joins namespaces of containers in different user namespaces: it runs without one", id)
			return nil, nil
		}
		join = &usernsSetup{UserNamespace: &spec.UserNamespace{Path: path, UIDMappings: specMappings(cfg.UIDMappings), GIDMappings: specMappings(cfg.GIDMappings)}}
	}
	if join == nil {
		var err error
		if join, err = o.leaseUserns(id); err != nil {
			return nil, err
		}
	}
	join.HostSysfs = hostNet
	return join, nil
}

// leaseUserns takes a free block of host ids for container id. When none
// is free, the leases nothing holds any more are collected first.
func (o *Runtime) leaseUserns(id string) (*usernsSetup, error) {
	if err := os.MkdirAll(o.usernsDir(), 0o700); err != nil {
		return nil, fmt.Errorf("state root: %w", err)
	}
	u, err := o.takeLease(id)
	if u == nil && err == nil && len(o.collectLeases()) > 0 {
		u, err = o.takeLease(id)
	}
	if u == nil && err == nil {
		return nil, fmt.Errorf("all %d blocks of user namespace ids (%s) are leased in %s by existing containers; delete containers to free them", usernsBlocks, UsernsRange, o.usernsDir())
	}
	return u, err
}

// takeLease returns nil, nil when every block is leased.
func (o *Runtime) takeLease(id string) (*usernsSetup, error) {
	start := rand.IntN(usernsBlocks) // another state root rarely picks the same
	for i := range usernsBlocks {
		first := uint32(usernsFirst + ((start+i)%usernsBlocks)*usernsSize)
		f, err := os.OpenFile(filepath.Join(o.usernsDir(), strconv.FormatUint(uint64(first), 10)), os.O_CREATE|os.O_EXCL|os.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err == nil {
			// Held until this process ends: a collector leaves a locked
			// lease alone (its create is running).
			if err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err == nil {
				_, err = f.WriteString(id)
			}
		}
		if err != nil {
			if f != nil {
				os.Remove(f.Name())
				f.Close()
			}
			return nil, fmt.Errorf("user namespace id lease: %w", err)
		}
		m := []specs.LinuxIDMapping{{ContainerID: 0, HostID: first, Size: usernsSize}}
		return &usernsSetup{UserNamespace: &spec.UserNamespace{UIDMappings: m, GIDMappings: m}, lease: f.Name(), lock: f}, nil
	}
	return nil, nil
}

// collectLeases frees the leases of containers that do not exist: not
// locked by a running create, older than leaseGrace (a create between
// making its lease and locking it), naming no container of this state
// root, and no create for that name running. Their id-mapped roots are
// unmounted. It returns the leases removed.
func (o *Runtime) collectLeases() []string {
	entries, err := os.ReadDir(o.usernsDir())
	if err != nil {
		return nil
	}
	type lease struct {
		path, id string
		f        *os.File
	}
	var stale []lease
	busy := map[string]bool{}
	defer func() {
		for _, l := range stale {
			l.f.Close()
		}
	}()
	for _, e := range entries {
		path := filepath.Join(o.usernsDir(), e.Name())
		f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		data, _ := io.ReadAll(io.LimitReader(f, 512))
		id := string(data)
		var st unix.Stat_t
		old := unix.Fstat(int(f.Fd()), &st) == nil && time.Since(time.Unix(st.Mtim.Unix())) > leaseGrace
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil || !old || checkContainerID(id) != nil || o.exists(id) {
			busy[id] = true
			f.Close()
			continue
		}
		stale = append(stale, lease{path, id, f})
	}
	var removed []string
	for _, l := range stale {
		if busy[l.id] {
			continue
		}
		o.unmountIDRoot(l.id)
		if os.Remove(l.path) == nil {
			removed = append(removed, l.path)
		}
	}
	if len(removed) > 0 {
		logrus.Infof("freed %d user namespace id leases of containers that no longer exist: %s", len(removed), strings.Join(removed, ", "))
	}
	return removed
}

// idmapRoot mounts the container's root file system (root, checked by
// spec.ContainerRoot) id-mapped with its user namespace's ids at
// idRootDir, which becomes u.root.
func (o *Runtime) idmapRoot(id, root string, u *usernsSetup) error {
	dir := o.idRootDir(id)
	if err := sandbox.MakeStateDir(filepath.Dir(dir)); err != nil {
		return fmt.Errorf("state root: %w", err)
	}
	if err := sandbox.CheckTraversable(filepath.Dir(dir)); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("state root: %w", err)
	}
	err := mountIDMapped(root, dir, u.UserNamespace)
	if err != nil {
		os.Remove(dir)
		return fmt.Errorf("root.path %s: an id-mapped mount for the container's user namespace: %w", root, err)
	}
	u.root = dir
	return nil
}

// mountIDMapped mounts src at dst id-mapped with u's ids. The kernel
// cannot id-map an overlay mount itself (an engine's snapshot, docker's
// merged folder): for one, a new overlay is mounted over id-mapped
// clones of the same layers (overlayfs takes id-mapped layers).
func mountIDMapped(src, dst string, u *spec.UserNamespace) error {
	ns, err := sandbox.NewUserns(u.UIDMappings, u.GIDMappings)
	if err != nil {
		return err
	}
	defer ns.Close()
	var fs unix.Statfs_t
	if err := unix.Statfs(src, &fs); err != nil {
		return err
	}
	var fd int
	if fs.Type == unix.OVERLAYFS_SUPER_MAGIC {
		fd, err = idmappedOverlay(src, int(ns.Fd()), u.UIDMappings[0].HostID, u.GIDMappings[0].HostID)
	} else {
		fd, err = idmappedClone(src, int(ns.Fd()))
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount: %w", err)
	}
	return nil
}

// idmappedClone returns a detached copy of the mount at path, id-mapped
// with the user namespace ns.
func idmappedClone(path string, ns int) (int, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return -1, fmt.Errorf("open_tree %s: %w", path, err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(ns), Propagation: unix.MS_PRIVATE}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.EINVAL) {
			return -1, fmt.Errorf("%s: its file system cannot be id-mapped (mount_setattr: %w)", path, err)
		}
		return -1, fmt.Errorf("mount_setattr %s: %w", path, err)
	}
	return fd, nil
}

// idmappedOverlay returns a detached overlay mount of the layers of the
// overlay mounted at path, each layer an id-mapped clone. The engine's
// mount stays as it is; both share the upper layer (index=off: only the
// container writes through its own). overlayfs works on its upper layer
// with its mounter's credentials: host uid 0 has no id on the id-mapped
// upper layer (EOVERFLOW, and the overlay turns read-only), so the mount
// is made from a thread whose file-system ids are the container root's
// (uid, gid) and which keeps its capabilities.
func idmappedOverlay(path string, ns int, uid, gid uint32) (int, error) {
	// On a thread of its own that ends with it: its ids are changed.
	fd := -1
	err := sandbox.OnOwnThread(func() error {
		if err := asContainerRoot(uid, gid); err != nil {
			return err
		}
		var err error
		fd, err = overlayOverClones(path, ns)
		return err
	})
	return fd, err
}

// asContainerRoot sets this thread's file-system ids and keeps its
// capabilities (setfsuid drops the file-system ones from the effective
// set).
func asContainerRoot(uid, gid uint32) error {
	unix.Setfsgid(int(gid))
	unix.Setfsuid(int(uid))
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	data[0].Effective, data[1].Effective = data[0].Permitted, data[1].Permitted
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

func overlayOverClones(path string, ns int) (int, error) {
	infos, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(path))
	if err != nil || len(infos) == 0 {
		return -1, fmt.Errorf("%s: not found in the mount table", path)
	}
	var lowers []string
	var upper, work string
	for _, o := range strings.Split(infos[len(infos)-1].VFSOptions, ",") {
		k, v, _ := strings.Cut(o, "=")
		switch k {
		case "lowerdir":
			lowers = append(lowers, strings.Split(v, ":")...)
		case "lowerdir+":
			lowers = append(lowers, v)
		case "upperdir":
			upper = v
		case "workdir":
			work = v
		}
	}
	// The layers as the engine named them: docker's are symlinks (l/ID).
	resolve := func(p string) (string, error) {
		if !filepath.IsAbs(p) || strings.Contains(p, `\`) {
			return "", fmt.Errorf("overlay %s: layer %q is not an absolute path warden can reopen", path, p)
		}
		return filepath.EvalSymlinks(p)
	}
	for i := range lowers {
		if lowers[i], err = resolve(lowers[i]); err != nil {
			return -1, err
		}
	}
	for _, p := range []*string{&upper, &work} {
		if *p != "" {
			if *p, err = resolve(*p); err != nil {
				return -1, err
			}
		}
	}

	if len(lowers) == 0 || (upper == "") != (work == "") || upper != "" && filepath.Dir(upper) != filepath.Dir(work) {
		return -1, fmt.Errorf("overlay %s: layers %q", path, infos[len(infos)-1].VFSOptions)
	}
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	clone := func(p string) (string, error) {
		fd, err := idmappedClone(p, ns)
		if err != nil {
			return "", err
		}
		fds = append(fds, fd)
		return fmt.Sprintf("/proc/self/fd/%d", fd), nil
	}
	ctx, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen overlay: %w", err)
	}
	fds = append(fds, ctx)
	for _, l := range lowers {
		at, err := clone(l)
		if err != nil {
			return -1, err
		}
		if err := unix.FsconfigSetString(ctx, "lowerdir+", at); err != nil {
			return -1, fmt.Errorf("overlay lowerdir %s: %w", l, err)
		}
	}
	if upper != "" {
		// upperdir and workdir must be on one mount: their parent's clone.
		at, err := clone(filepath.Dir(upper))
		if err != nil {
			return -1, err
		}
		if err := unix.FsconfigSetString(ctx, "upperdir", at+"/"+filepath.Base(upper)); err != nil {
			return -1, fmt.Errorf("overlay upperdir %s: %w", upper, err)
		}
		if err := unix.FsconfigSetString(ctx, "workdir", at+"/"+filepath.Base(work)); err != nil {
			return -1, fmt.Errorf("overlay workdir %s: %w", work, err)
		}
		if err := unix.FsconfigSetString(ctx, "index", "off"); err != nil {
			return -1, fmt.Errorf("overlay index=off: %w", err)
		}
	}
	if err := unix.FsconfigCreate(ctx); err != nil {
		return -1, fmt.Errorf("overlay over id-mapped layers: %w", err)
	}
	fd, err := unix.Fsmount(ctx, unix.FSMOUNT_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("fsmount overlay: %w", err)
	}
	return fd, nil
}

// releaseUserns undoes what planUserns and idmapRoot made for container
// id: the id-mapped root is unmounted and the id lease freed. Called once
// the container's processes are gone.
func (o *Runtime) releaseUserns(id string) {
	o.unmountIDRoot(id)
	entries, _ := os.ReadDir(o.usernsDir())
	for _, e := range entries {
		path := filepath.Join(o.usernsDir(), e.Name())
		if data, err := os.ReadFile(path); err == nil && string(data) == id {
			os.Remove(path)
		}
	}
}

func (o *Runtime) unmountIDRoot(id string) {
	dir := o.idRootDir(id)
	if err := unix.Unmount(dir, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		logrus.Warnf("container %s: unmount %s: %v", id, dir, err)
	}
	os.Remove(dir)
	os.Remove(filepath.Dir(dir)) // when empty
}

// ownedByHostUserns reports whether the namespace at path belongs to
// warden's own (the host's) user namespace.
func ownedByHostUserns(path string) bool {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	owner, err := unix.IoctlRetInt(fd, unix.NS_GET_USERNS)
	if err != nil {
		return false
	}
	defer unix.Close(owner)
	var a, b unix.Stat_t
	return unix.Fstat(owner, &a) == nil && unix.Stat("/proc/self/ns/user", &b) == nil && a.Dev == b.Dev && a.Ino == b.Ino
}

func sameFile(a, b string) bool {
	var x, y unix.Stat_t
	return unix.Stat(a, &x) == nil && unix.Stat(b, &y) == nil && x.Dev == y.Dev && x.Ino == y.Ino
}

func specMappings(in []configs.IDMap) []specs.LinuxIDMapping {
	out := make([]specs.LinuxIDMapping, 0, len(in))
	for _, m := range in {
		out = append(out, specs.LinuxIDMapping{ContainerID: uint32(m.ContainerID), HostID: uint32(m.HostID), Size: uint32(m.Size)})
	}
	return out
}

// CheckUserNamespaces tries, in a scratch folder made under dir, what a
// container under a policy needs for its user namespace: an overlay (an
// engine's snapshot) mounted again over id-mapped layers, writable as the
// container's root. It says why not when the host cannot.
func CheckUserNamespaces(dir string) error {
	scratch, err := os.MkdirTemp(dir, "warden-userns-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(scratch)
	os.Chmod(scratch, 0o755)
	for _, d := range []string{"lower", "layer/upper", "layer/work", "overlay", "mapped"} {
		if err := os.MkdirAll(filepath.Join(scratch, d), 0o755); err != nil {
			return err
		}
	}
	ovl := filepath.Join(scratch, "overlay")
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", filepath.Join(scratch, "lower"), filepath.Join(scratch, "layer/upper"), filepath.Join(scratch, "layer/work"))
	if err := unix.Mount("overlay", ovl, "overlay", 0, opts); err != nil {
		return fmt.Errorf("overlay: %w", err)
	}
	defer unix.Unmount(ovl, unix.MNT_DETACH)
	m := []specs.LinuxIDMapping{{ContainerID: 0, HostID: usernsFirst, Size: usernsSize}}
	mapped := filepath.Join(scratch, "mapped")
	if err := mountIDMapped(ovl, mapped, &spec.UserNamespace{UIDMappings: m, GIDMappings: m}); err != nil {
		return err
	}
	defer unix.Unmount(mapped, unix.MNT_DETACH)
	// Seen through the id-mapped overlay, the container's root (host
	// usernsFirst) owns the root-owned layers.
	var st unix.Stat_t
	if err := unix.Stat(mapped, &st); err != nil {
		return err
	}
	if st.Uid != usernsFirst {
		return fmt.Errorf("an id-mapped overlay shows its root-owned root as uid %d, not %d", st.Uid, usernsFirst)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(mapped, &fs); err != nil {
		return err
	}
	if fs.Flags&unix.ST_RDONLY != 0 {
		return errors.New("the overlay over id-mapped layers came up read-only")
	}
	return nil
}
