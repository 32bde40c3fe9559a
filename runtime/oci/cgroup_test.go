package oci

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// A relative cgroupsPath is under the caller's own cgroup in each
// hierarchy (as libcontainer places it), an absolute one under the root.
func TestCgroupDirs(t *testing.T) {
	table := `25 24 0:22 / /sys/fs/cgroup rw - tmpfs tmpfs ro,mode=755
26 25 0:23 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
30 25 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
31 25 0:28 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
32 25 0:29 /outer /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids
33 25 0:30 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd
`
	self := "5:pids:/outer/caller\n4:memory:/caller\n3:cpu,cpuacct:/\n1:name=systemd:/user.slice\n0::/u\n"
	mounts, err := mountinfo.GetMountsFromReader(strings.NewReader(table), nil)
	if err != nil {
		t.Fatal(err)
	}
	dirs := func(places []cgroupPlace) []string {
		var out []string
		for _, p := range places {
			out = append(out, p.dir)
		}
		return out
	}
	rel := dirs(cgroupDirs(mounts, self, "victimcg"))
	for _, want := range []string{"/sys/fs/cgroup/memory/caller/victimcg", "/sys/fs/cgroup/cpu,cpuacct/victimcg", "/sys/fs/cgroup/pids/caller/victimcg", "/sys/fs/cgroup/systemd/user.slice/victimcg", "/sys/fs/cgroup/unified/victimcg", "/sys/fs/cgroup/unified/u/victimcg"} {
		if !slices.Contains(rel, want) {
			t.Errorf("relative: %s missing from %v", want, rel)
		}
	}
	// cgroup2: beside the caller's own cgroup, under its parent.
	beside := dirs(cgroupDirs(mounts, "0::/system.slice/containerd.service\n", "docker.service"))
	if !slices.Contains(beside, "/sys/fs/cgroup/unified/system.slice/docker.service") {
		t.Errorf("relative on cgroup2: the folder beside the caller's is missing from %v", beside)
	}
	abs := dirs(cgroupDirs(mounts, self, "/a/b"))
	if !slices.Contains(abs, "/sys/fs/cgroup/memory/a/b") || !slices.Contains(abs, "/sys/fs/cgroup/pids/a/b") || len(abs) != 5 {
		t.Errorf("absolute: %v", abs)
	}
}

// On this host: a cgroup beside the caller's own (the relative path's
// place) is refused; a new one, and the default (the id), pass.
func TestCheckNewCgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a cgroup")
	}
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	own := ""
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.SplitN(line, ":", 3); len(f) == 3 && (f[1] == "memory" || f[1] == "") && own == "" {
			own = filepath.Join("/sys/fs/cgroup", map[string]string{"memory": "memory", "": ""}[f[1]], f[2])
		}
	}
	if _, err := os.Stat(filepath.Join(own, "cgroup.procs")); err != nil {
		t.Skipf("no cgroup folder for this process (%s)", own)
	}
	name := "warden-victim-" + filepath.Base(t.TempDir())
	if err := os.Mkdir(filepath.Join(own, name), 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(filepath.Join(own, name))
	s := &specs.Spec{Linux: &specs.Linux{}}
	for path, ok := range map[string]bool{name: false, "x/../" + name: false, ".": false, "/": false, name + "-new": true, "": true, name + "/inner": true} {
		s.Linux.CgroupsPath = path
		err := checkNewCgroup("warden-new-"+name, s, "p")
		if ok != (err == nil) || err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("cgroupsPath %q: err %v, want ok %v", path, err, ok)
		}
	}
	// Once the cgroup holds a process (a container's, a service's), a new
	// cgroup inside it, at any depth, is refused.
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleep.Process.Kill(); sleep.Wait() }()
	if err := os.WriteFile(filepath.Join(own, name, "cgroup.procs"), []byte(strconv.Itoa(sleep.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.WriteFile(filepath.Join(own, "cgroup.procs"), []byte(strconv.Itoa(sleep.Process.Pid)), 0o644)
	for _, path := range []string{name + "/evil", name + "/a/b"} {
		s.Linux.CgroupsPath = path
		if err := checkNewCgroup("warden-new-"+name, s, "p"); err == nil || !strings.Contains(err.Error(), "holds processes") {
			t.Errorf("cgroupsPath %q inside a cgroup with a process: err %v, want a refusal", path, err)
		}
	}
}
