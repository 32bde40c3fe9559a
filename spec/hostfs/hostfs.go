// Package hostfs answers questions about the host's file systems that
// spec's checks and runtime's packages both ask: a file's identity, whether
// one path is inside another, and what is mounted where.
package hostfs

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// FileID is a file's identity (device and inode), the same at every path
// a bind mount gives it. A folder moved keeps it; one made in place of a
// removed one does not.
type FileID struct{ Dev, Ino uint64 }

// StatID is the identity of the file at p, symlinks followed.
func StatID(p string) (FileID, bool) {
	var st unix.Stat_t
	if p == "" || unix.Stat(p, &st) != nil {
		return FileID{}, false
	}
	return FileID{st.Dev, st.Ino}, true
}

// LstatID is the identity of the file at p itself, and its stat.
func LstatID(p string) (FileID, unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return FileID{}, st, err
	}
	return FileID{st.Dev, st.Ino}, st, nil
}

// FileIDs are the identities of the file p and each of its parents, p
// first; none when p itself cannot be found.
func FileIDs(p string) []FileID {
	var out []FileID
	for {
		id, ok := StatID(p)
		if !ok && len(out) == 0 {
			return nil
		}
		if ok {
			out = append(out, id)
		}
		if p == "/" || p == "." {
			return out
		}
		p = filepath.Dir(p)
	}
}

// Under reports whether the clean path p is dir or inside it, and p
// relative to dir.
func Under(p, dir string) (string, bool) {
	if p == dir {
		return ".", true
	}
	if rel, ok := strings.CutPrefix(p, strings.TrimSuffix(dir, "/")+"/"); ok {
		return rel, true
	}
	return "", false
}

// UnderAny reports whether p is one of dirs or inside one.
func UnderAny(p string, dirs ...string) bool {
	return slices.ContainsFunc(dirs, func(d string) bool { _, ok := Under(p, d); return ok })
}

// Mounts are the mounts process pid sees (0: this process), in mount
// order: a later one at a point covers an earlier one.
func Mounts(pid int) ([]*mountinfo.Info, error) {
	if pid == 0 {
		return mountinfo.GetMounts(nil)
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return mountinfo.GetMountsFromReader(f, nil)
}

// MountsUnder lists this process's mounts strictly beneath dir, in mount
// order.
func MountsUnder(dir string) []*mountinfo.Info {
	mounts, _ := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		rel, ok := Under(m.Mountpoint, dir)
		return !ok || rel == ".", false
	})
	return mounts
}

// PackagesFingerprint sums up what changes when packages come and go
// under dirs: the modification times of dpkgStatus, of each dir and of its
// first two levels of folders. Scans of the host's programs are kept while
// it holds.
func PackagesFingerprint(dpkgStatus string, dirs ...string) string {
	h := sha256.New()
	stamp := func(p string) {
		if fi, err := os.Lstat(p); err == nil {
			fmt.Fprintf(h, "%s %d\n", p, fi.ModTime().UnixNano())
		}
	}
	subdirs := func(dir string) []string {
		entries, _ := os.ReadDir(dir)
		var out []string
		for _, e := range entries {
			if e.IsDir() {
				out = append(out, filepath.Join(dir, e.Name()))
			}
		}
		return out
	}
	stamp(dpkgStatus)
	for _, dir := range dirs {
		stamp(dir)
		for _, a := range subdirs(dir) {
			stamp(a)
			for _, b := range subdirs(a) {
				stamp(b)
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}
