package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
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
// gives a new view. `warden gc` unmounts the views no sandbox uses.

func (rt *Runtime) viewsDir() string { return filepath.Join(rt.Root, "views") }

// programViews points sp's exec-capable bind mounts of folders at views
// that hide the programs allowed does not list.
func (rt *Runtime) programViews(sp *specs.Spec, allowed []string) error {
	keep := map[string]bool{}
	for _, p := range allowed {
		keep[p] = true
	}
	for i, m := range sp.Mounts {
		if m.Type != "bind" || slices.Contains(m.Options, "noexec") {
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
		view, err := rt.programView(m.Source, hide)
		if err != nil {
			return fmt.Errorf("exec.allow: the view of %s: %w", m.Source, err)
		}
		sp.Mounts[i].Source = view
	}
	return nil
}

// programView is the mounted view of dir without the programs hide names
// (relative to dir), made if it does not exist yet.
func (rt *Runtime) programView(dir string, hide []string) (string, error) {
	sum := sha256.Sum256([]byte(dir + "\x00" + strings.Join(hide, "\x00")))
	base := filepath.Join(rt.viewsDir(), hex.EncodeToString(sum[:12]))
	if err := MakeStateDir(rt.viewsDir()); err != nil {
		return "", err
	}
	if err := os.Mkdir(base, 0o700); err != nil && !os.IsExist(err) {
		return "", err
	}
	lock, err := os.OpenFile(base, os.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return "", err
	}
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

// viewsInUse lists the mounts under the root that live gVisor sandboxes
// need: the views the sandboxes of the root's sessions are
// started with (their runsc bundles name them): gc leaves them mounted,
// since removing a view's whiteouts under a running sandbox would show it
// the programs they hide.
func (rt *Runtime) viewsInUse() map[string]bool {
	used := map[string]bool{}
	for _, id := range rt.IDs() {
		data, err := os.ReadFile(filepath.Join(rt.SessionDir(id), "gvisor", "config.json"))
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
		// runsc's own: the empty network namespace its sandboxes join.
		for _, m := range hostfs.MountsUnder(filepath.Join(rt.Root, "runsc")) {
			used[m.Mountpoint] = true
		}
	}
	return used
}

// ReleaseViews unmounts and removes the views, and runsc's own mounts,
// that no session's sandbox uses any more, once one has ended. It waits
// for nothing: while a create, claim or gc is under way (their views not
// yet named by a bundle), it leaves them to the next release or gc.
func (rt *Runtime) ReleaseViews() {
	if !rt.gcMu.TryLock() {
		return
	}
	defer rt.gcMu.Unlock()
	inUse := rt.viewsInUse()
	mounts := append(hostfs.MountsUnder(rt.viewsDir()), hostfs.MountsUnder(filepath.Join(rt.Root, "runsc"))...)
	for _, m := range mounts {
		if !inUse[m.Mountpoint] {
			unix.Unmount(m.Mountpoint, unix.MNT_DETACH)
		}
	}
	rt.removeViews(inUse)
}

// removeViews removes the folders of the views that are neither in use
// nor mounted, and says which.
func (rt *Runtime) removeViews(inUse map[string]bool) (removed []string, errs []error) {
	views, _ := os.ReadDir(rt.viewsDir())
	for _, e := range views {
		dir := filepath.Join(rt.viewsDir(), e.Name())
		view := filepath.Join(dir, "view")
		if inUse[view] || isMountpoint(view) || !onlyWardens(dir, "hidden", "view") {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, "view "+dir)
	}
	return removed, errs
}
