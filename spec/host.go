package spec

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/spec/hostfs"
)

// Host is the machine whose system directories the sandbox's root is built
// from. Tests point Root at a fake tree so generated specs do not depend on
// what the build machine has installed.
type Host struct {
	Root string // "/" on a real host
	// RlimitHard are the caller's hard limits by type ("RLIMIT_NOFILE"):
	// a sandbox's rlimits never exceed them (without CAP_SYS_RESOURCE
	// the start would fail). A type not listed is not capped.
	RlimitHard map[string]uint64
	// mounts, where DetectHost set it, reads the host's mount table once
	// for all the rules of a generation (it was read once per rule).
	mounts func() []*mountinfo.Info
	// ids, where DetectHost set it, keeps the identities of the host
	// folders every grant is checked against, for one generation.
	ids *idCache
}

// idCache holds host folders' identities (Host.id) and those of their
// parents (Host.fileIDs) for the time of one generation.
type idCache struct {
	mu     sync.Mutex
	id     map[string]idOf
	chains map[string][]hostfs.FileID
}

type idOf struct {
	id hostfs.FileID
	ok bool
}

// DetectHost describes the machine warden runs on.
func DetectHost() (Host, error) {
	h := Host{Root: "/", RlimitHard: map[string]uint64{}}
	for _, r := range sandboxRlimits {
		var rl unix.Rlimit
		if err := unix.Getrlimit(rlimitResource[r.Type], &rl); err != nil {
			return Host{}, fmt.Errorf("read %s: %w", r.Type, err)
		}
		h.RlimitHard[r.Type] = rl.Max
	}
	h.ids = &idCache{id: map[string]idOf{}, chains: map[string][]hostfs.FileID{}}
	h.mounts = sync.OnceValue(func() []*mountinfo.Info {
		mounts, _ := mountinfo.GetMounts(nil)
		return mounts
	})
	return h, nil
}

// id is the identity of the host folder p (hostfs.StatID).
func (h Host) id(p string) (hostfs.FileID, bool) {
	got := remember(h.ids, func(c *idCache) map[string]idOf { return c.id }, p, func() idOf {
		id, ok := hostfs.StatID(h.path(p))
		return idOf{id, ok}
	})
	return got.id, got.ok
}

// fileIDs are the identities of the host folder p and its parents
// (hostfs.FileIDs).
func (h Host) fileIDs(p string) []hostfs.FileID {
	return remember(h.ids, func(c *idCache) map[string][]hostfs.FileID { return c.chains }, p, func() []hostfs.FileID {
		return hostfs.FileIDs(h.path(p))
	})
}

// remember is read's answer for p, from c's map (of) when c holds one,
// else read's, which c then keeps; without c, read's.
func remember[V any](c *idCache, of func(*idCache) map[string]V, p string, read func() V) V {
	if c == nil {
		return read()
	}
	c.mu.Lock()
	v, ok := of(c)[p]
	c.mu.Unlock()
	if !ok {
		v = read()
		c.mu.Lock()
		of(c)[p] = v
		c.mu.Unlock()
	}
	return v
}

// mountsUnder lists the host's mounts strictly under dir
// (hostfs.MountsUnder).
func (h Host) mountsUnder(dir string) []*mountinfo.Info {
	if h.mounts == nil {
		return hostfs.MountsUnder(dir)
	}
	var out []*mountinfo.Info
	for _, m := range h.mounts() {
		if rel, ok := hostfs.Under(m.Mountpoint, dir); ok && rel != "." {
			out = append(out, m)
		}
	}
	return out
}

// path maps an absolute path of the host to where it is under Root.
func (h Host) path(p string) string {
	return filepath.Join(h.Root, p)
}

func (h Host) lstat(p string) (fs.FileInfo, error) { return os.Lstat(h.path(p)) }

func (h Host) isDir(p string) bool {
	fi, err := os.Stat(h.path(p))
	return err == nil && fi.IsDir()
}

// readlink returns the target of a symlink, or "" when p is not one.
func (h Host) readlink(p string) string {
	fi, err := h.lstat(p)
	if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		return ""
	}
	target, err := os.Readlink(h.path(p))
	if err != nil {
		return ""
	}
	return target
}

// resolve follows symlinks inside Root and returns the host path (without
// Root) of the final file.
func (h Host) resolve(p string) (string, error) {
	for i := 0; i < 40; i++ {
		// Resolve the parent first so relative link targets are correct.
		dir, base := filepath.Split(p)
		if dir != "/" {
			rdir, err := h.resolve(filepath.Clean(dir))
			if err != nil {
				return "", err
			}
			p = filepath.Join(rdir, base)
		}
		fi, err := h.lstat(p)
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			return p, nil
		}
		target, err := os.Readlink(h.path(p))
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(p), target)
		}
		p = filepath.Clean(target)
	}
	return "", fmt.Errorf("%s: too many levels of symbolic links", p)
}

// binDirs are searched, in order, for an executable named without a path.
var binDirs = []string{"/usr/local/bin", "/usr/bin", "/bin", "/usr/local/sbin", "/usr/sbin", "/sbin"}

var errNotFound = errors.New("not found")

// lookExec finds an executable: a bare name in binDirs, an absolute path as
// given. It returns the path the sandbox will know it by and the host path of
// the file behind any symlinks.
func (h Host) lookExec(name string) (at, file string, err error) {
	candidates := []string{name}
	if !strings.HasPrefix(name, "/") {
		candidates = candidates[:0]
		for _, d := range binDirs {
			candidates = append(candidates, filepath.Join(d, name))
		}
	}
	for _, c := range candidates {
		real, err := h.resolve(c)
		if err != nil {
			continue
		}
		fi, err := os.Stat(h.path(real))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
			continue
		}
		// A name found through a symlinked directory (/bin -> usr/bin) is
		// placed where the directory really is.
		dir, err := h.resolve(filepath.Dir(c))
		if err != nil {
			continue
		}
		return filepath.Join(dir, filepath.Base(c)), real, nil
	}
	return "", "", errNotFound
}

func (h Host) readDir(p string) []string {
	entries, err := os.ReadDir(h.path(p))
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// fileOwner returns the numeric owner of a path.
func fileOwner(p string) (uid, gid uint32, err error) {
	fi, err := os.Stat(p)
	if err != nil {
		return 0, 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, fmt.Errorf("%s: no owner information", p)
	}
	return st.Uid, st.Gid, nil
}
