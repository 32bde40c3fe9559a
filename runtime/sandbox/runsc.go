package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/opencontainers/cgroups"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// What both gVisor faces (sessions and the OCI runtime) share about runsc:
// where it is, the flag every call needs, and the host cgroup around it.

// RunscSidecarFlag keeps this runsc build's embedded fallback, the only
// one a module build has (ENVIRONMENT: the sidecars cannot be built).
const RunscSidecarFlag = "--sidecar-usage-policy=LEGACY_DEPRECATED_SLOW_EMBEDDED_FALLBACK"

// gvisorPidsOverhead is what runsc's own threads and processes take of a
// sandbox's pids limit on the host, on top of the policy's.
const gvisorPidsOverhead = 256

// gvisorMemoryOverhead is what runsc's sentry and gofer hold of a
// sandbox's memory limit on the host (about 25 MiB idle), on top of the
// policy's.
const gvisorMemoryOverhead = 48 << 20

// FindRunsc finds runsc: $WARDEN_RUNSC, else runsc on PATH, else
// tools/runsc beside warden's binary (where `make deps` puts it).
func FindRunsc(binary string) (string, error) {
	if p := os.Getenv("WARDEN_RUNSC"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("runsc"); err == nil {
		return p, nil
	}
	beside := filepath.Join(filepath.Dir(binary), "tools", "runsc")
	if _, err := os.Stat(beside); err == nil {
		return beside, nil
	}
	return "", errors.New("engine gvisor needs runsc, which is not installed: run `make deps` in warden's source folder (it builds the pinned runsc into bin/tools), or put runsc on PATH, or set WARDEN_RUNSC")
}

// GVisorHostLimits raises linux's memory and pids limits (copies, when
// set) by what runsc's sentry and gofer take of the host cgroup beside
// the sandbox's own processes, whose pids are held to the limit inside
// gVisor (RLIMIT_NPROC).
func GVisorHostLimits(linux *specs.Linux) {
	if n := pidsLimit(linux); n > 0 {
		res := *linux.Resources
		limit := n + gvisorPidsOverhead
		res.Pids, linux.Resources = &specs.LinuxPids{Limit: &limit}, &res
	}
	if r := linux.Resources; r != nil && r.Memory != nil && r.Memory.Limit != nil && *r.Memory.Limit > 0 {
		res, mem := *r, *r.Memory
		limit := *r.Memory.Limit + gvisorMemoryOverhead
		mem.Limit = &limit
		if mem.Swap != nil && *mem.Swap > 0 {
			swap := *mem.Swap + gvisorMemoryOverhead
			mem.Swap = &swap
		}
		res.Memory, linux.Resources = &mem, &res
	}
}

// MakeCgroupParents makes the folders above the sandbox's cgroup in every
// hierarchy: runsc makes only the last one (and sets the limits only in a
// cgroup it made). A gc of another process removes the root's cgroup
// folders once they are empty, so runsc may still find one gone.
func MakeCgroupParents(path string) error {
	path = filepath.Dir(path)
	bases := []string{"/sys/fs/cgroup"}
	if !cgroups.IsCgroup2UnifiedMode() {
		bases, _ = filepath.Glob("/sys/fs/cgroup/*")
	}
	for _, b := range bases {
		if fi, err := os.Lstat(b); err != nil || !fi.IsDir() {
			continue // a link to a co-mounted hierarchy (cpu -> cpu,cpuacct)
		}
		var err error
		for try := 0; try < 5; try++ { // a parent removed between two of MkdirAll's steps
			if err = os.MkdirAll(filepath.Join(b, path), 0o755); err == nil {
				break
			}
		}
		if err != nil {
			return fmt.Errorf("cgroup: %w", err)
		}
		if filepath.Base(b) == "cpuset" {
			if err := inheritCpuset(b, path); err != nil {
				return err
			}
		}
	}
	return nil
}

// inheritCpuset gives each new folder of a v1 cpuset path its parent's
// CPUs and memory nodes (empty ones take no process), as runsc and runc
// do for the folders they make.
func inheritCpuset(base, path string) error {
	dir := base
	for _, part := range strings.Split(strings.Trim(path, "/"), "/") {
		parent := dir
		dir = filepath.Join(dir, part)
		for _, file := range []string{"cpuset.cpus", "cpuset.mems"} {
			cur, err := os.ReadFile(filepath.Join(dir, file))
			if err != nil {
				return fmt.Errorf("cgroup: %w", err)
			}
			if strings.TrimSpace(string(cur)) != "" {
				continue
			}
			val, err := os.ReadFile(filepath.Join(parent, file))
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, file), val, 0o644)
			}
			if err != nil {
				return fmt.Errorf("cgroup: %s: %w", filepath.Join(dir, file), err)
			}
		}
	}
	return nil
}
