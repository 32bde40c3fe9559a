package oci

import (
	"cmp"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

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
	if !runscAllows(s.Linux.Seccomp, "clone3", [6]uint64{}) {
		t.Error("clone3 is not allowed")
	}
	// The rest of the profile decides as before: memfd_create is still
	// refused, read still allowed.
	if runscAllows(s.Linux.Seccomp, "memfd_create", [6]uint64{}) {
		t.Error("memfd_create is no longer refused")
	}
	if !runscAllows(s.Linux.Seccomp, "read", [6]uint64{}) {
		t.Error("read is refused")
	}
}

// The profile runsc gets decides every call as the whole profile does
// under runsc's rules, with the refusals that decide nothing left out.
func TestRunscSeccompDecidesTheSame(t *testing.T) {
	// A refusal ahead of an allow of the same call decides, and one behind
	// it, or with no allow at all, does not.
	ahead := &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Syscalls: []specs.LinuxSyscall{
		{Names: []string{"kill", "tkill"}, Action: specs.ActErrno, Args: []specs.LinuxSeccompArg{{Index: 1, Value: 9, Op: specs.OpEqualTo}}},
		{Names: []string{"kill"}, Action: specs.ActAllow},
		{Names: []string{"kill", "mount"}, Action: specs.ActErrno},
	}}
	if lean := runscRules(ahead); namesIn(lean) != 2+1 {
		t.Errorf("runsc's profile of %+v is %+v: want the refusal of kill ahead of its allow, the allow, and clone3", ahead.Syscalls, lean.Syscalls)
	}
	// A refusal and allow rules for the bits where a call differs from it
	// are one allow, when the bits cover the refusal's mask, and not when
	// one bit is missing.
	perBit := func(bits int) *specs.LinuxSeccomp {
		p := &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Syscalls: []specs.LinuxSyscall{
			{Names: []string{"ioctl"}, Action: specs.ActErrno, Args: []specs.LinuxSeccompArg{{Index: 1, Value: 0xffffffff, ValueTwo: unix.TIOCSTI, Op: specs.OpMaskedEqual}}},
		}}
		for i := range bits {
			bit := uint64(1) << i
			p.Syscalls = append(p.Syscalls, specs.LinuxSyscall{Names: []string{"ioctl"}, Action: specs.ActAllow,
				Args: []specs.LinuxSeccompArg{{Index: 1, Value: bit, ValueTwo: ^uint64(unix.TIOCSTI) & bit, Op: specs.OpMaskedEqual}}})
		}
		return p
	}
	covering, short := perBit(32), perBit(31)
	if lean := runscRules(covering); namesIn(lean) != 1+1+1 || len(lean.Syscalls[1].Args) != 0 {
		t.Errorf("runsc's profile of the refusal and its 32 complements is %+v: want the refusal, one allow, clone3", lean.Syscalls)
	}
	if lean := runscRules(short); namesIn(lean) != 1+31+1 {
		t.Errorf("runsc's profile of the refusal and 31 of its complements is %+v: want it whole", lean.Syscalls)
	}
	ioctls := 0
	for _, r := range runscRules(wseccomp.Default()).Syscalls {
		if slices.Contains(r.Names, "ioctl") {
			ioctls++
		}
	}
	if ioctls != 2 {
		t.Errorf("runsc's profile has %d ioctl rules: want TIOCSTI's refusal and one allow", ioctls)
	}
	// Rules runscInverted keeps, in order: a refusal under a condition
	// ahead of an allow of the same call, an allow under a condition with
	// nothing after it (refused after it), one after an unconditional
	// allow (dead), another action, and libseccomp's name of a syscall
	// gVisor names otherwise.
	errno := uint(1)
	invertible := &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, DefaultErrnoRet: &errno, Syscalls: []specs.LinuxSyscall{
		{Names: []string{"read", "write", "getpid"}, Action: specs.ActAllow},
		{Names: []string{"kill"}, Action: specs.ActErrno, Args: []specs.LinuxSeccompArg{{Index: 1, Value: 9, Op: specs.OpEqualTo}}},
		{Names: []string{"kill", "personality"}, Action: specs.ActAllow},
		{Names: []string{"personality", "socket"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 0, Value: 2, Op: specs.OpEqualTo}}},
		{Names: []string{"mount"}, Action: specs.ActKillProcess},
		{Names: []string{"_sysctl"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 0, Value: 1, Op: specs.OpEqualTo}}},
	}}
	if lean := runscSeccomp(invertible); lean.DefaultAction != specs.ActAllow || namesIn(lean) > 400 {
		t.Errorf("runsc's profile of %+v allows by default=%v, names %d: want it inverted", invertible.Syscalls, lean.DefaultAction == specs.ActAllow, namesIn(lean))
	}
	all, err := wseccomp.X86_64Syscalls()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		full *specs.LinuxSeccomp
	}{{"default", wseccomp.Default()}, {"refusal ahead", ahead}, {"complements", covering}, {"complements short of one", short}, {"inverted", invertible}} {
		full := tc.full
		// The whole profile, clone3 aside (runscSeccomp allows it, see
		// TestGVisorSpec).
		whole := *full
		whole.Syscalls = append(slices.Clone(full.Syscalls), specs.LinuxSyscall{Names: []string{"clone3"}, Action: specs.ActAllow})
		for i := range whole.Syscalls[:len(full.Syscalls)] {
			whole.Syscalls[i].Names = slices.DeleteFunc(slices.Clone(whole.Syscalls[i].Names), func(n string) bool { return n == "clone3" })
		}
		lean := runscSeccomp(full)
		if got, was := namesIn(lean), namesIn(&whole); tc.name == "default" && (got > was-300 || lean.DefaultAction != specs.ActAllow) {
			t.Errorf("the profile for runsc names %d syscall rules, the whole %d, and allows by default=%v: not the inverted one", got, was, lean.DefaultAction == specs.ActAllow)
		}
		calls := 0
		// Every x86-64 syscall, by runsc's name in runsc's profile.
		for _, name := range slices.Compact(slices.Sorted(slices.Values(append(uniqueNames(&whole), all...)))) {
			for _, args := range argsToTry(&whole, name) {
				calls++
				if a, b := runscAllows(lean, cmp.Or(runscNames[name], name), args), runscAllows(&whole, name, args); a != b {
					t.Errorf("%s: %s%v: runsc's profile allows=%v, the whole profile allows=%v", tc.name, name, args, a, b)
				}
			}
		}
		if tc.name == "default" && calls < 3000 {
			t.Errorf("only %d calls compared", calls)
		}
	}
	// A refusal ahead of an allow of the same call stays.
	lean := runscSeccomp(wseccomp.Default())
	if runscAllows(lean, "ioctl", [6]uint64{1: unix.TIOCSTI}) || !runscAllows(lean, "ioctl", [6]uint64{1: unix.TCGETS}) {
		t.Error("ioctl TIOCSTI is allowed, or TCGETS refused")
	}
}

// runscAllows is how runsc decides a call under profile s: the first rule
// that matches acts, every refusal is EPERM.
func runscAllows(s *specs.LinuxSeccomp, name string, args [6]uint64) bool {
	for _, r := range s.Syscalls {
		if slices.Contains(r.Names, name) && runscArgsMatch(r.Args, args) {
			return r.Action == specs.ActAllow
		}
	}
	return s.DefaultAction == specs.ActAllow
}

// runscArgsMatch: the comparisons of one rule all hold, or (runc's old
// way, which runsc keeps) any one holds when one argument is compared
// more than once.
func runscArgsMatch(conds []specs.LinuxSeccompArg, args [6]uint64) bool {
	seen := map[uint]bool{}
	or := false
	for _, c := range conds {
		or = or || seen[c.Index]
		seen[c.Index] = true
	}
	for _, c := range conds {
		if wseccomp.Holds(c, args[c.Index]) == or {
			return or
		}
	}
	return !or || len(conds) == 0
}

func namesIn(s *specs.LinuxSeccomp) int {
	n := 0
	for _, r := range s.Syscalls {
		n += len(r.Names)
	}
	return n
}

func uniqueNames(s *specs.LinuxSeccomp) []string {
	var names []string
	for _, r := range s.Syscalls {
		for _, n := range r.Names {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	return names
}

// argsToTry are argument vectors that reach each rule of name and its
// edges: none set, the values each rule compares (all of one rule's at
// once, and each alone), and every single bit and all bits of each
// argument any rule of name compares.
func argsToTry(s *specs.LinuxSeccomp, name string) [][6]uint64 {
	out := [][6]uint64{{}}
	used := map[uint]bool{}
	for _, r := range s.Syscalls {
		if !slices.Contains(r.Names, name) {
			continue
		}
		var all [6]uint64
		for _, c := range r.Args {
			used[c.Index] = true
			for _, v := range []uint64{c.Value, c.ValueTwo, c.Value | c.ValueTwo, c.Value + 1, c.Value - 1} {
				var one [6]uint64
				one[c.Index] = v
				out = append(out, one)
			}
			if c.Op == specs.OpMaskedEqual { // one bit of the mask away from a match
				for bit := uint64(1); bit != 0; bit <<= 1 {
					if c.Value&bit != 0 {
						var one [6]uint64
						one[c.Index] = c.ValueTwo ^ bit
						out = append(out, one)
					}
				}
			}
			all[c.Index] = c.ValueTwo
			if c.Op != specs.OpMaskedEqual {
				all[c.Index] = c.Value
			}
		}
		out = append(out, all)
	}
	for i := range used {
		for bit := 0; bit < 64; bit++ {
			var one [6]uint64
			one[i] = 1 << bit
			out = append(out, one)
		}
		var ones [6]uint64
		ones[i] = ^uint64(0)
		out = append(out, ones)
	}
	return out
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
