package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/spec/hostfs"
)

// Without Landlock (gVisor has none), exec.allow is held by what the
// sandbox can see: each exec-capable read-only system folder is shown
// through a read-only overlay whose upper layer whites out every program
// the list does not allow. A program that is not there cannot be run,
// read, mapped by the dynamic loader or copied; shared libraries stay.
//
// A view is made once per folder and set of hidden programs, under the
// root's views folder, and shared by every sandbox that needs the same
// one; a change of the host's programs (a new scan, see scanPrograms)
// gives a new view.
//
// Views are shared between processes (the daemon, `warden do`, Go
// programs on the same root), so their life is held by an flock on each
// view's folder: whoever makes or takes a view holds it exclusively until
// the bundle that names it is written (gvisor/config.json in the session's
// folder); whoever removes one holds it too, and looks at the bundles
// again once it does. A view named by a bundle is in use until that
// session's folder is gone. `warden gc`, the end of a gVisor session and
// a daemon's stop remove the views nothing uses.

func (rt *Runtime) viewsDir() string { return filepath.Join(rt.Root, "views") }

// viewHolds are the view locks a start holds until its bundle is written.
type viewHolds []*os.File

func (h viewHolds) release() {
	for _, f := range h {
		f.Close()
	}
}

// programViews points sp's exec-capable bind mounts of folders at views
// that hide the programs allowed does not list. The caller releases the
// holds once a file names the views (see viewsInUse).
func (rt *Runtime) programViews(sp *specs.Spec, allowed []string) (viewHolds, error) {
	keep := map[string]bool{}
	for _, p := range allowed {
		keep[p] = true
	}
	var holds viewHolds
	for i, m := range sp.Mounts {
		// Read-only system folders: a writable folder with exec rights
		// (exec.workspace) is the sandbox's own, and noexec ones run nothing.
		if m.Type != "bind" || slices.Contains(m.Options, "noexec") || !slices.Contains(m.Options, "ro") {
			continue
		}
		fi, err := os.Stat(m.Source)
		if err != nil || !fi.IsDir() {
			continue // a file: warden's own binary, the agent, which runs
		}
		var hide []string
		for _, rel := range rt.scanPrograms(m.Source) {
			if !keep[filepath.Join(m.Destination, rel)] {
				hide = append(hide, rel)
			}
		}
		if len(hide) == 0 {
			continue
		}
		view, hold, err := rt.programView(m.Source, hide)
		if err != nil {
			holds.release()
			return nil, fmt.Errorf("exec.allow: the view of %s: %w", m.Source, err)
		}
		holds = append(holds, hold)
		sp.Mounts[i].Source = view
	}
	return holds, nil
}

// programView is the mounted view of dir without the programs hide names
// (relative to dir), made if it does not exist yet, and the lock that
// keeps it from removal.
func (rt *Runtime) programView(dir string, hide []string) (string, *os.File, error) {
	// overlayfs takes its folders in a comma-separated option string.
	if strings.ContainsAny(dir, ",:\\") {
		return "", nil, fmt.Errorf("%s holds a comma, colon or backslash, which an overlay's options cannot name; engine \"gvisor\" cannot hide its programs", dir)
	}
	sum := sha256.Sum256([]byte(dir + "\x00" + strings.Join(hide, "\x00")))
	base := filepath.Join(rt.viewsDir(), hex.EncodeToString(sum[:12]))
	if err := MakeStateDir(rt.viewsDir()); err != nil {
		return "", nil, err
	}
	for {
		if err := os.Mkdir(base, 0o700); err != nil && !os.IsExist(err) {
			return "", nil, err
		}
		lock, err := lockView(base, true)
		if err != nil {
			return "", nil, err
		}
		if lock == nil {
			continue // removed while this waited: make it again
		}
		view, err := makeView(base, dir, hide)
		if err != nil {
			lock.Close()
			return "", nil, err
		}
		return view, lock, nil
	}
}

// lockView locks a view's folder exclusively, waiting for it or not; nil
// when it is held elsewhere (no wait) or was removed meanwhile.
func lockView(base string, wait bool) (*os.File, error) {
	f, err := holdDir(base, wait)
	if errors.Is(err, ErrHeld) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, errRemoved) {
		return nil, nil
	}
	return f, err
}

// makeView mounts base's view of dir unless it is mounted; base is locked.
func makeView(base, dir string, hide []string) (string, error) {
	view := filepath.Join(base, "view")
	if isMountpoint(view) {
		return view, nil
	}
	whiteouts := filepath.Join(base, "hidden")
	os.RemoveAll(whiteouts) // a half-made one of a start that failed: ours
	if err := os.Mkdir(whiteouts, 0o755); err != nil {
		return "", err
	}
	for _, rel := range hide {
		p := filepath.Join(whiteouts, rel)
		if _, in := hostfs.Under(p, whiteouts); !in {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", err
		}
		// A character device 0:0 is overlayfs's whiteout: the name does
		// not exist in the merged folder.
		if err := unix.Mknod(p, unix.S_IFCHR, 0); err != nil {
			return "", fmt.Errorf("whiteout %s: %w", rel, err)
		}
	}
	if err := os.MkdirAll(view, 0o755); err != nil {
		return "", err
	}
	opts := "lowerdir=" + whiteouts + ":" + dir
	if err := unix.Mount("overlay", view, "overlay", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return "", fmt.Errorf("mount an overlay on %s: %w", view, err)
	}
	return view, nil
}

// viewsInUse lists the mounts under the root that gVisor sandboxes need:
// the views their bundles name, and runsc's own (the empty network
// namespace its sandboxes join) while the root has any session at all,
// one being made by another process included.
func (rt *Runtime) viewsInUse() map[string]bool {
	used := map[string]bool{}
	var dirs []string
	for _, id := range rt.IDs() {
		dirs = append(dirs, rt.SessionDir(id))
	}
	for _, id := range rt.PooledIDs() { // a warm pool's sandboxes, waiting for a claim
		dirs = append(dirs, filepath.Join(rt.PoolDir(), id))
	}
	for _, dir := range dirs {
		data, err := os.ReadFile(filepath.Join(dir, "gvisor", "config.json"))
		if err != nil {
			continue
		}
		var sp specs.Spec
		if json.Unmarshal(data, &sp) != nil {
			continue
		}
		for _, m := range sp.Mounts {
			if _, in := hostfs.Under(m.Source, rt.viewsDir()); in {
				used[m.Source] = true
			}
		}
	}
	if len(dirs) > 0 {
		for _, m := range hostfs.MountsUnder(rt.runscDir()) {
			used[m.Mountpoint] = true
		}
	}
	return used
}

func (rt *Runtime) runscDir() string { return filepath.Join(rt.Root, "runsc") }

// ReleaseViews removes the views, and runsc's own mounts, that nothing
// uses any more; one another process holds is left to the next release
// or gc. It is called when a gVisor session ends and when a daemon stops.
func (rt *Runtime) ReleaseViews() {
	rt.removeViews()
	rt.releaseRunsc(rt.viewsInUse())
}

// releaseRunsc unmounts runsc's mounts under the root unless in use.
func (rt *Runtime) releaseRunsc(inUse map[string]bool) (removed []string, errs []error) {
	for _, m := range hostfs.MountsUnder(rt.runscDir()) {
		if inUse[m.Mountpoint] {
			continue
		}
		if err := unix.Unmount(m.Mountpoint, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m.Mountpoint, err))
			continue
		}
		removed = append(removed, "mount "+m.Mountpoint)
	}
	return removed, errs
}

// removeViews unmounts and removes each view that no bundle names, under
// its lock, and says which.
func (rt *Runtime) removeViews() (removed []string, errs []error) {
	views, _ := os.ReadDir(rt.viewsDir())
	for _, e := range views {
		base := filepath.Join(rt.viewsDir(), e.Name())
		if !onlyWardens(base, "hidden", "view") {
			continue
		}
		lock, err := lockView(base, false)
		if err != nil {
			errs = append(errs, err)
		}
		if lock == nil {
			continue // being made or taken: in use
		}
		view := filepath.Join(base, "view")
		// Read now that no start can be between taking it and naming it.
		if !rt.viewsInUse()[view] {
			if err := unix.Unmount(view, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
				errs = append(errs, fmt.Errorf("unmount %s: %w", view, err))
			} else if err := os.RemoveAll(base); err != nil {
				errs = append(errs, err)
			} else {
				removed = append(removed, "view "+base)
			}
		}
		lock.Close()
	}
	return removed, errs
}
