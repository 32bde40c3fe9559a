package oci

import (
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/warden-sandbox/warden/policies"
	wseccomp "github.com/warden-sandbox/warden/seccomp"
)

func gvisorTestSpec() *specs.Spec {
	mem, pids := int64(64<<20), int64(32)
	return &specs.Spec{
		Process: &specs.Process{Args: []string{"sh"}, Rlimits: []specs.POSIXRlimit{{Type: "RLIMIT_NPROC", Hard: 1 << 20, Soft: 1 << 20}}},
		Linux: &specs.Linux{
			CgroupsPath: "/docker/x",
			Resources:   &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &mem}, Pids: &specs.LinuxPids{Limit: &pids}},
			Seccomp:     wseccomp.Default(),
		},
	}
}

// Under a policy the spec runsc gets holds the policy's pids inside
// gVisor, sizes the host cgroup for runsc's own processes and lets clone3
// through (runsc would turn its ENOSYS into EPERM); without one it is
// passed as it is.
func TestGVisorSpec(t *testing.T) {
	s := gvisorTestSpec()
	gvisorSpec(s, nil)
	if *s.Linux.Resources.Memory.Limit != 64<<20 || *s.Linux.Resources.Pids.Limit != 32 || len(s.Process.Rlimits) != 1 || s.Process.Rlimits[0].Hard != 1<<20 {
		t.Fatalf("without a policy the spec changed: %+v %+v", s.Linux.Resources, s.Process.Rlimits)
	}

	s = gvisorTestSpec()
	mem, pids := s.Linux.Resources.Memory.Limit, s.Linux.Resources.Pids.Limit
	gvisorSpec(s, &policyRecord{Policy: "p", Limits: policies.Limits{Memory: 64 << 20, Pids: 32}})
	if got := *s.Linux.Resources.Memory.Limit; got != 112<<20 {
		t.Errorf("host memory limit %d, want the policy's 64 MiB + 48 MiB for runsc", got)
	}
	if got := *s.Linux.Resources.Pids.Limit; got != 32+256 {
		t.Errorf("host pids limit %d, want the policy's 32 + 256 for runsc", got)
	}
	if *mem != 64<<20 || *pids != 32 {
		t.Errorf("the limits were changed in place, not in copies: %d %d", *mem, *pids)
	}
	var nproc []specs.POSIXRlimit
	for _, r := range s.Process.Rlimits {
		if r.Type == "RLIMIT_NPROC" {
			nproc = append(nproc, r)
		}
	}
	if len(nproc) != 1 || nproc[0].Hard != 32 || nproc[0].Soft != 32 {
		t.Errorf("RLIMIT_NPROC %+v, want one of 32 (the policy's pids, inside gVisor)", nproc)
	}
	allowed := false
	for _, r := range s.Linux.Seccomp.Syscalls {
		if !slices.Contains(r.Names, "clone3") {
			continue
		}
		if r.Action != specs.ActAllow || len(r.Args) > 0 {
			t.Errorf("clone3 still has a rule %+v", r)
		}
		allowed = true
	}
	if !allowed {
		t.Error("clone3 is not allowed")
	}
	// The rest of the profile stays: memfd_create is still refused.
	refused := false
	for _, r := range s.Linux.Seccomp.Syscalls {
		if slices.Contains(r.Names, "memfd_create") && r.Action == specs.ActErrno {
			refused = true
		}
	}
	if !refused {
		t.Error("memfd_create is no longer refused")
	}
}

// runsc's flags: a policy's seccomp profile applied, its closed network
// kept closed (loopback only), runsc's defaults otherwise.
func TestRunscFlags(t *testing.T) {
	for _, tc := range []struct {
		name      string
		rec       *policyRecord
		want, not []string
	}{
		{"no policy", nil, nil, []string{"--oci-seccomp", "--network=none"}},
		{"policy without network", &policyRecord{}, []string{"--oci-seccomp", "--network=none"}, nil},
		{"policy with network", &policyRecord{Network: true}, []string{"--oci-seccomp"}, []string{"--network=none"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			flags := runscFlags(tc.rec)
			if !slices.Contains(flags, "--sidecar-usage-policy=LEGACY_DEPRECATED_SLOW_EMBEDDED_FALLBACK") {
				t.Errorf("flags %v lack the sidecar policy", flags)
			}
			for _, w := range tc.want {
				if !slices.Contains(flags, w) {
					t.Errorf("flags %v lack %s", flags, w)
				}
			}
			for _, n := range tc.not {
				if slices.Contains(flags, n) {
					t.Errorf("flags %v have %s", flags, n)
				}
			}
		})
	}
}

// The engine is the stronger of the runtime's and the policy's: a flag
// turns container into gvisor, never the reverse.
func TestEngineFor(t *testing.T) {
	gv := &policies.Policy{Name: "g", Sandbox: policies.Sandbox{Engine: policies.EngineGVisor}}
	plain := &policies.Policy{Name: "p"}
	for _, tc := range []struct {
		runtime policies.Engine
		p       *policies.Policy
		want    policies.Engine
	}{
		{"", nil, policies.EngineContainer},
		{policies.EngineGVisor, nil, policies.EngineGVisor},
		{policies.EngineContainer, gv, policies.EngineGVisor},
		{"", gv, policies.EngineGVisor},
		{policies.EngineGVisor, plain, policies.EngineGVisor},
		{policies.EngineContainer, plain, policies.EngineContainer},
	} {
		o := &Runtime{Engine: tc.runtime}
		if got := o.engineFor(tc.p); got != tc.want {
			t.Errorf("runtime %q, policy %v: engine %q, want %q", tc.runtime, tc.p, got, tc.want)
		}
	}
}

// A sub-container is what runsc puts into another container's sandbox:
// its test, the CRI runtimes' annotations (containerd's first).
func TestSubcontainer(t *testing.T) {
	for _, c := range []struct {
		ann     map[string]string
		sub     bool
		sandbox string
	}{
		{nil, false, ""},
		{map[string]string{"io.kubernetes.cri.container-type": "sandbox", "io.kubernetes.cri.sandbox-id": "p"}, false, "p"},
		{map[string]string{"io.kubernetes.cri.container-type": "container", "io.kubernetes.cri.sandbox-id": "p"}, true, "p"},
		{map[string]string{"io.kubernetes.cri-o.ContainerType": "container", "io.kubernetes.cri-o.SandboxID": "q"}, true, "q"},
		// containerd's type decides, as in runsc.
		{map[string]string{"io.kubernetes.cri.container-type": "sandbox", "io.kubernetes.cri-o.ContainerType": "container"}, false, ""},
		{map[string]string{"io.kubernetes.cri.container-type": "other"}, false, ""},
	} {
		s := &specs.Spec{Annotations: c.ann}
		if got := subcontainer(s); got != c.sub {
			t.Errorf("%v: subcontainer %v, want %v", c.ann, got, c.sub)
		}
		if got := gvisorSandboxID(s); got != c.sandbox {
			t.Errorf("%v: sandbox %q, want %q", c.ann, got, c.sandbox)
		}
	}
}
