package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// HostCheck is one thing warden needs from the host, and whether it has it.
type HostCheck struct {
	Name     string `json:"name"`
	OK       bool   `json:"ok"`
	Required bool   `json:"required"`
	Detail   string `json:"detail"`
	Fix      string `json:"fix,omitempty"`
}

// CheckHost probes the kernel features and privileges warden's sandboxes
// rely on. Each failed check says how to fix it.
func CheckHost() []HostCheck {
	return []HostCheck{
		checkRoot(),
		checkKernel(),
		checkNamespaces(),
		checkUserNamespaces(),
		checkCgroups(),
		checkSeccomp(),
		checkLandlock(),
		checkNofile(),
		checkGVisor(),
	}
}

// checkGVisor finds runsc, which only policies with engine = "gvisor"
// need.
func checkGVisor() HostCheck {
	c := HostCheck{Name: "gvisor"}
	exe, _ := executable()
	bin, err := FindRunsc(exe)
	if err != nil {
		c.Detail = "runsc not found: engine \"gvisor\" is not available (engine \"container\" is)"
		c.Fix = "run `make deps` in warden's source folder, which builds the pinned runsc into bin/tools beside bin/warden; or put runsc on PATH, or set WARDEN_RUNSC"
		return c
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		c.Detail = fmt.Sprintf("%s does not run: %v", bin, err)
		c.Fix = "reinstall it with `make deps`"
		return c
	}
	version := strings.TrimPrefix(strings.SplitN(strings.TrimSpace(string(out)), "\n", 2)[0], "runsc version ")
	if version == "VERSION_MISSING" { // a build from the Go module, as make deps makes
		version = "(built from its Go module)"
	}
	c.OK = true
	c.Detail = fmt.Sprintf("runsc %s at %s, platform systrap (engine \"gvisor\" available)", version, bin)
	return c
}

func checkRoot() HostCheck {
	c := HostCheck{Name: "root", Required: true, OK: os.Geteuid() == 0}
	c.Detail = fmt.Sprintf("running as uid %d", os.Geteuid())
	if !c.OK {
		c.Fix = "run warden as root (it drops to an unprivileged uid inside every sandbox)"
	}
	return c
}

// Idmapped mounts (5.12) and the new mount API (5.2) set the floor.
func checkKernel() HostCheck {
	c := HostCheck{Name: "kernel", Required: true}
	release, major, minor, err := kernelRelease()
	if err != nil {
		c.Detail = err.Error()
		return c
	}
	c.OK = major > 5 || (major == 5 && minor >= 12)
	c.Detail = "linux " + release
	if !c.OK {
		c.Fix = "upgrade to Linux 5.12 or later (idmapped mounts)"
	}
	return c
}

func kernelRelease() (release string, major, minor int, err error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", 0, 0, err
	}
	release = unix.ByteSliceToString(u.Release[:])
	major, minor = parseRelease(release)
	return release, major, minor, nil
}

func parseRelease(r string) (major, minor int) {
	parts := strings.SplitN(r, ".", 3)
	if len(parts) < 2 {
		return 0, 0
	}
	major, _ = strconv.Atoi(parts[0])
	minor, _ = strconv.Atoi(strings.TrimLeftFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	return major, minor
}

func checkNamespaces() HostCheck {
	c := HostCheck{Name: "namespaces", Required: true, OK: true}
	var missing []string
	for _, ns := range []string{"mnt", "pid", "ipc", "uts", "net", "cgroup", "user"} {
		if _, err := os.Stat(filepath.Join("/proc/self/ns", ns)); err != nil {
			missing = append(missing, ns)
		}
	}
	if len(missing) > 0 {
		c.OK = false
		c.Detail = "missing: " + strings.Join(missing, " ")
		c.Fix = "use a kernel built with CONFIG_NAMESPACES and every namespace type"
		return c
	}
	c.Detail = "mnt pid ipc uts net cgroup user"
	return c
}

func checkUserNamespaces() HostCheck {
	c := HostCheck{Name: "user namespaces", Required: true}
	data, err := os.ReadFile("/proc/sys/user/max_user_namespaces")
	if err != nil {
		c.Detail = err.Error()
		c.Fix = "use a kernel with CONFIG_USER_NS"
		return c
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	c.OK = n > 0
	c.Detail = fmt.Sprintf("max_user_namespaces=%d", n)
	if !c.OK {
		c.Fix = "sysctl -w user.max_user_namespaces=10000"
	}
	return c
}

// checkCgroups finds the memory, pids and cpu controllers on cgroup v1 or v2.
func checkCgroups() HostCheck {
	c := HostCheck{Name: "cgroups", Required: true}
	want := []string{"memory", "pids", "cpu"}
	var missing []string
	if data, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		have := strings.Fields(string(data))
		for _, w := range want {
			if !contains(have, w) {
				missing = append(missing, w)
			}
		}
		c.Detail = "v2 (unified)"
	} else {
		for _, w := range want {
			if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", w)); err != nil {
				missing = append(missing, w)
			}
		}
		c.Detail = "v1 (cgroupfs)"
		if _, err := os.Stat("/sys/fs/cgroup/unified"); err == nil {
			c.Detail = "v1 hybrid (cgroupfs)"
		}
	}
	c.OK = len(missing) == 0
	if !c.OK {
		c.Detail += "; missing controllers: " + strings.Join(missing, " ")
		c.Fix = "mount the memory, pids and cpu cgroup controllers"
	} else {
		c.Detail += ": memory pids cpu"
	}
	return c
}

func checkSeccomp() HostCheck {
	c := HostCheck{Name: "seccomp", Required: true}
	data, err := os.ReadFile("/proc/sys/kernel/seccomp/actions_avail")
	if err != nil {
		c.Detail = "no seccomp filter support"
		c.Fix = "use a kernel built with CONFIG_SECCOMP_FILTER"
		return c
	}
	actions := strings.Fields(string(data))
	c.OK = contains(actions, "errno")
	c.Detail = "actions: " + strings.Join(actions, " ")
	return c
}

// Landlock is a second layer: warden runs without it, with one less wall.
func checkLandlock() HostCheck {
	c := HostCheck{Name: "landlock", Required: false}
	const createRulesetVersion = 1 // LANDLOCK_CREATE_RULESET_VERSION
	abi, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, createRulesetVersion)
	if errno != 0 {
		c.Detail = "unavailable: " + errno.Error()
		c.Fix = "boot with lsm=...,landlock (CONFIG_SECURITY_LANDLOCK) for a second layer of file and exec control"
		return c
	}
	c.OK = true
	c.Detail = fmt.Sprintf("ABI version %d", abi)
	return c
}

func checkNofile() HostCheck {
	c := HostCheck{Name: "open files", Required: false}
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		c.Detail = err.Error()
		return c
	}
	c.OK = rl.Max >= 4096
	c.Detail = fmt.Sprintf("RLIMIT_NOFILE hard limit %d (sandboxes get at most min(4096, this))", rl.Max)
	if !c.OK {
		c.Fix = "raise the hard open-files limit to at least 4096 (ulimit -Hn)"
	}
	return c
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
