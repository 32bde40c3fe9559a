package oci

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/moby/sys/mountinfo"
	"github.com/warden-sandbox/warden/spec"
	"github.com/warden-sandbox/warden/spec/hostfs"
)

// checkNewCgroup refuses a container under a policy whose cgroup exists
// already, or would be made inside a cgroup that holds processes:
// libcontainer would join the first and write the policy's limits over a
// host cgroup's (cgroupsPath "/system.slice") or another container's, and
// the second would charge the container to that cgroup's limits (a
// victim container's pids could no longer fork). A relative path (the
// default: the id) is under warden's own cgroup, as libcontainer places
// it, and warden's own cgroup and those above it are its parents to use.
func checkNewCgroup(id string, s *specs.Spec, policy string) error {
	inner := s.Linux.CgroupsPath
	if inner == "" {
		inner = id
	}
	if filepath.IsAbs(inner) {
		inner = filepath.Clean(inner)
	} else {
		// libcontainer's LexicallyCleanPath: no ".." above the start.
		inner, _ = filepath.Rel("/", filepath.Join("/", inner))
	}
	if inner == "/" {
		return fmt.Errorf("%w: linux.cgroupsPath %q is the root cgroup; a container under policy %s needs a cgroup of its own", spec.ErrInvalid, s.Linux.CgroupsPath, policy)
	}
	mounts, err := hostfs.Mounts(0)
	if err != nil {
		return err
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return err
	}
	for _, place := range cgroupDirs(mounts, string(self), inner) {
		if _, err := os.Stat(place.dir); err == nil {
			return fmt.Errorf("%w: linux.cgroupsPath %q: cgroup %s exists already; a container under policy %s gets a new cgroup of its own, so name one that does not exist", spec.ErrInvalid, s.Linux.CgroupsPath, place.dir, policy)
		}
		for up := filepath.Dir(place.dir); up != place.mount && strings.HasPrefix(up, place.mount+"/"); up = filepath.Dir(up) {
			if place.own != "" && (up == place.own || strings.HasPrefix(place.own, up+"/")) {
				break
			}
			data, err := os.ReadFile(filepath.Join(up, "cgroup.procs"))
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil || len(bytes.TrimSpace(data)) > 0 {
				return fmt.Errorf("%w: linux.cgroupsPath %q: cgroup %s holds processes (another container's or a host service's); a container under policy %s gets a cgroup of its own, never inside theirs: name a parent that holds none (as docker's /docker or containerd's /k8s.io)", spec.ErrInvalid, s.Linux.CgroupsPath, up, policy)
			}
		}
	}
	return nil
}

// cgroupPlace is where libcontainer would put a cgroup in one hierarchy:
// the folder, the hierarchy's mount point, and the caller's own cgroup
// folder in it ("" when the caller's cgroup there is not visible).
type cgroupPlace struct {
	dir, mount, own string
}

// cgroupDirs are the places libcontainer's cgroupfs driver may use for
// the cgroup path inner, in every mounted hierarchy: an absolute path
// from the hierarchy's root; a relative one from the caller's own cgroup
// there (self is /proc/self/cgroup), or, for a cgroup2 hierarchy (hybrid
// or not), from its root too.
func cgroupDirs(mounts []*mountinfo.Info, self, inner string) []cgroupPlace {
	own := map[string]string{} // controllers ("" for cgroup2) -> path
	for _, line := range strings.Split(self, "\n") {
		if f := strings.SplitN(line, ":", 3); len(f) == 3 {
			own[f[1]] = f[2]
		}
	}
	var places []cgroupPlace
	add := func(p cgroupPlace) {
		if !slices.ContainsFunc(places, func(q cgroupPlace) bool { return q.dir == p.dir }) {
			places = append(places, p)
		}
	}
	for _, m := range mounts {
		if m.FSType != "cgroup" && m.FSType != "cgroup2" {
			continue
		}
		root, mnt := m.Root, m.Mountpoint
		opts := strings.Split(m.VFSOptions, ",")
		// The caller's own cgroup in this hierarchy, as seen from its
		// mount (a hierarchy mounted from below its root, in a nested
		// container, shows it from there).
		ownDir := ""
		for ctrls, path := range own {
			if (ctrls == "") != (m.FSType == "cgroup2") || ctrls != "" && !allIn(strings.Split(ctrls, ","), opts) {
				continue
			}
			if rel, err := filepath.Rel(root, path); err == nil && !strings.HasPrefix(rel, "..") {
				ownDir = filepath.Join(mnt, rel)
			}
		}
		if filepath.IsAbs(inner) || m.FSType == "cgroup2" {
			add(cgroupPlace{filepath.Join(mnt, inner), mnt, ownDir})
		}
		if filepath.IsAbs(inner) || ownDir == "" {
			continue
		}
		add(cgroupPlace{filepath.Join(ownDir, inner), mnt, ownDir})
		// libcontainer's cgroup2 manager puts a relative path beside
		// the caller's cgroup, under its parent.
		if m.FSType == "cgroup2" && ownDir != mnt {
			add(cgroupPlace{filepath.Join(filepath.Dir(ownDir), inner), mnt, ownDir})
		}
	}
	return places
}

func allIn(want, have []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}
