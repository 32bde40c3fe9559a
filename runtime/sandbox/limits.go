package sandbox

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/fscommon"
	"github.com/opencontainers/runc/libcontainer/configs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

type configsCapabilities = configs.Capabilities

var rlimitTypes = map[string]int{
	"RLIMIT_NOFILE": unix.RLIMIT_NOFILE, "RLIMIT_CORE": unix.RLIMIT_CORE, "RLIMIT_NPROC": unix.RLIMIT_NPROC,
	"RLIMIT_FSIZE": unix.RLIMIT_FSIZE, "RLIMIT_STACK": unix.RLIMIT_STACK, "RLIMIT_AS": unix.RLIMIT_AS,
	"RLIMIT_CPU": unix.RLIMIT_CPU, "RLIMIT_DATA": unix.RLIMIT_DATA, "RLIMIT_MEMLOCK": unix.RLIMIT_MEMLOCK,
	"RLIMIT_LOCKS": unix.RLIMIT_LOCKS, "RLIMIT_MSGQUEUE": unix.RLIMIT_MSGQUEUE, "RLIMIT_NICE": unix.RLIMIT_NICE,
	"RLIMIT_RTPRIO": unix.RLIMIT_RTPRIO, "RLIMIT_RTTIME": unix.RLIMIT_RTTIME, "RLIMIT_RSS": unix.RLIMIT_RSS,
	"RLIMIT_SIGPENDING": unix.RLIMIT_SIGPENDING,
}

func Rlimit(r specs.POSIXRlimit) (configs.Rlimit, error) {
	t, ok := rlimitTypes[r.Type]
	if !ok {
		return configs.Rlimit{}, fmt.Errorf("unsupported rlimit %s", r.Type)
	}
	return configs.Rlimit{Type: t, Hard: r.Hard, Soft: r.Soft}, nil
}

// oomKills reads how many processes the kernel's OOM killer has killed in
// the session's cgroup.
func (s *Session) oomKills() uint64 {
	path := s.rt.cgroupPath(s.ContainerID())
	if cgroups.IsCgroup2UnifiedMode() {
		n, _ := fscommon.GetValueByKey(filepath.Join(unifiedRoot, path), "memory.events", "oom_kill")
		return n
	}
	dir, err := v1Dir("memory", path)
	if err != nil {
		return 0
	}
	n, _ := fscommon.GetValueByKey(dir, "memory.oom_control", "oom_kill")
	return n
}

// unifiedRoot is where the cgroup v2 hierarchy is mounted.
const unifiedRoot = "/sys/fs/cgroup"

// v1Dir is the folder of the cgroup path in a cgroup v1 controller's
// hierarchy. The files are read directly (not through a cgroup library's
// statistics types): that library's package initialisation (protobuf)
// cost every warden process, a container's init included.
func v1Dir(controller, path string) (string, error) {
	mnt, err := cgroups.FindCgroupMountpoint("", controller)
	if err != nil {
		return "", fmt.Errorf("no %s cgroup controller: %w", controller, err)
	}
	return filepath.Join(mnt, path), nil
}

// Usage is what a session's cgroup uses: memory charged to it now (bytes)
// and CPU time its processes used so far (nanoseconds).
func (s *Session) Usage() (memory, cpu uint64, err error) {
	path := s.rt.cgroupPath(s.ContainerID())
	if cgroups.IsCgroup2UnifiedMode() {
		dir := filepath.Join(unifiedRoot, path)
		if memory, err = fscommon.GetCgroupParamUint(dir, "memory.current"); err != nil {
			return 0, 0, fmt.Errorf("cgroup %s: no memory statistics: %w", path, err)
		}
		usec, err := fscommon.GetValueByKey(dir, "cpu.stat", "usage_usec")
		if err != nil {
			return 0, 0, fmt.Errorf("cgroup %s: no cpu statistics: %w", path, err)
		}
		return memory, usec * 1000, nil
	}
	memDir, err := v1Dir("memory", path)
	if err != nil {
		return 0, 0, err
	}
	cpuDir, err := v1Dir("cpuacct", path)
	if err != nil {
		return 0, 0, err
	}
	if memory, err = fscommon.GetCgroupParamUint(memDir, "memory.usage_in_bytes"); err != nil {
		return 0, 0, fmt.Errorf("cgroup %s: no memory statistics: %w", path, err)
	}
	if cpu, err = fscommon.GetCgroupParamUint(cpuDir, "cpuacct.usage"); err != nil {
		return 0, 0, fmt.Errorf("cgroup %s: no cpuacct statistics: %w", path, err)
	}
	return memory, cpu, nil
}

// sawOOM reports whether the OOM killer struck since the last call.
func (s *Session) sawOOM() bool {
	n := s.oomKills()
	s.mu.Lock()
	defer s.mu.Unlock()
	if n > s.oomSeen {
		s.oomSeen = n
		return true
	}
	return false
}

func sleepBriefly() { time.Sleep(20 * time.Millisecond) }
