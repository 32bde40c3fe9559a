package sandbox

import (
	"time"

	"fmt"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
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
	if cgroups.Mode() == cgroups.Unified {
		m, err := cgroup2.Load(path)
		if err != nil {
			return 0
		}
		st, err := m.Stat()
		if err != nil || st.MemoryEvents == nil {
			return 0
		}
		return st.MemoryEvents.OomKill
	}
	c, err := cgroup1.Load(cgroup1.StaticPath(path), cgroup1.WithHierarchy(memoryOnly))
	if err != nil {
		return 0
	}
	st, err := c.Stat(cgroup1.IgnoreNotExist)
	if err != nil || st.MemoryOomControl == nil {
		return 0
	}
	return st.MemoryOomControl.OomKill
}

// memoryOnly limits cgroup1 to the memory hierarchy: reading every
// controller's stats is slow and not needed here.
func memoryOnly() ([]cgroup1.Subsystem, error) {
	all, err := cgroup1.Default()
	if err != nil {
		return nil, err
	}
	for _, s := range all {
		if s.Name() == cgroup1.Memory {
			return []cgroup1.Subsystem{s}, nil
		}
	}
	return nil, fmt.Errorf("no memory cgroup controller")
}

// Usage is what a session's cgroup uses: memory charged to it now (bytes)
// and CPU time its processes used so far (nanoseconds).
func (s *Session) Usage() (memory, cpu uint64, err error) {
	path := s.rt.cgroupPath(s.ContainerID())
	if cgroups.Mode() == cgroups.Unified {
		m, err := cgroup2.Load(path)
		if err != nil {
			return 0, 0, err
		}
		st, err := m.Stat()
		if err != nil {
			return 0, 0, err
		}
		if st.Memory == nil || st.CPU == nil {
			return 0, 0, fmt.Errorf("cgroup %s: no memory or cpu statistics", path)
		}
		return st.Memory.Usage, st.CPU.UsageUsec * 1000, nil
	}
	c, err := cgroup1.Load(cgroup1.StaticPath(path), cgroup1.WithHierarchy(memoryAndCPU))
	if err != nil {
		return 0, 0, err
	}
	st, err := c.Stat(cgroup1.IgnoreNotExist)
	if err != nil {
		return 0, 0, err
	}
	if st.Memory == nil || st.Memory.Usage == nil || st.CPU == nil || st.CPU.Usage == nil {
		return 0, 0, fmt.Errorf("cgroup %s: no memory or cpuacct statistics", path)
	}
	return st.Memory.Usage.Usage, st.CPU.Usage.Total, nil
}

// memoryAndCPU limits cgroup1 to the memory and cpuacct hierarchies.
func memoryAndCPU() ([]cgroup1.Subsystem, error) {
	all, err := cgroup1.Default()
	if err != nil {
		return nil, err
	}
	var out []cgroup1.Subsystem
	for _, s := range all {
		if s.Name() == cgroup1.Memory || s.Name() == cgroup1.Cpuacct {
			out = append(out, s)
		}
	}
	if len(out) != 2 {
		return nil, fmt.Errorf("no memory or cpuacct cgroup controller")
	}
	return out, nil
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
