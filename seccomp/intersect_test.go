package seccomp

import (
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// allowedFor reports how the profile treats name: "any" (allowed for any
// arguments), "some" (allowed under conditions) or "none".
func allowedFor(p *specs.LinuxSeccomp, name string) (string, [][]specs.LinuxSeccompArg) {
	var conds [][]specs.LinuxSeccompArg
	for _, r := range p.Syscalls {
		if r.Action != specs.ActAllow || !slices.Contains(r.Names, name) {
			continue
		}
		if len(r.Args) == 0 {
			return "any", nil
		}
		conds = append(conds, r.Args)
	}
	if conds != nil {
		return "some", conds
	}
	return "none", nil
}

func TestIntersect(t *testing.T) {
	w := Default()
	ns := uint64(0x7E020000)
	for _, tc := range []struct {
		name    string
		other   *specs.LinuxSeccomp
		syscall string
		want    string
	}{
		{"allowed by both", &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Syscalls: []specs.LinuxSyscall{{Names: []string{"read"}, Action: specs.ActAllow}}}, "read", "any"},
		{"missing from an allow-list", &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Syscalls: []specs.LinuxSyscall{{Names: []string{"read"}, Action: specs.ActAllow}}}, "write", "none"},
		{"refused outright", &specs.LinuxSeccomp{DefaultAction: specs.ActAllow, Syscalls: []specs.LinuxSyscall{{Names: []string{"write"}, Action: specs.ActErrno}}}, "write", "none"},
		{"refused for some arguments", &specs.LinuxSeccomp{DefaultAction: specs.ActAllow, Syscalls: []specs.LinuxSyscall{{Names: []string{"write"}, Action: specs.ActErrno, Args: []specs.LinuxSeccompArg{{Index: 0, Value: 1, Op: specs.OpEqualTo}}}}}, "write", "none"},
		{"default allow", &specs.LinuxSeccomp{DefaultAction: specs.ActAllow}, "write", "any"},
		{"allowed for some arguments", &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Syscalls: []specs.LinuxSyscall{{Names: []string{"write"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 0, Value: 1, Op: specs.OpEqualTo}}}}}, "write", "some"},
		{"refused by warden stays refused", &specs.LinuxSeccomp{DefaultAction: specs.ActAllow}, "memfd_create", "none"},
		{"both conditional", &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Syscalls: []specs.LinuxSyscall{{Names: []string{"clone"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 0, Value: ns, Op: specs.OpMaskedEqual}}}}}, "clone", "some"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := allowedFor(Intersect(w, tc.other), tc.syscall)
			if got != tc.want {
				t.Fatalf("%s: %s, want %s", tc.syscall, got, tc.want)
			}
		})
	}
}

// Two "none of these bits" tests on clone's flags merge into one that
// refuses both sets of namespace flags.
func TestIntersectMergesMasks(t *testing.T) {
	other := &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Syscalls: []specs.LinuxSyscall{{
		Names: []string{"clone"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 0, Value: 0x80, Op: specs.OpMaskedEqual}},
	}}}
	_, conds := allowedFor(Intersect(Default(), other), "clone")
	if len(conds) != 1 || len(conds[0]) != 1 {
		t.Fatalf("clone conditions %+v, want one merged comparison", conds)
	}
	if c := conds[0][0]; c.Value&0x80 == 0 || c.Value&cloneNewUser == 0 || c.ValueTwo != 0 {
		t.Fatalf("merged mask %#x lacks one side's bits", c.Value)
	}
}
