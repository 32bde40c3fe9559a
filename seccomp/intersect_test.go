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

// libcontainer adds a rule's comparisons on one argument as separate
// rules (an OR): Intersect never emits two comparisons on one argument.
// What joins exactly is kept (an equality with a comparison it passes,
// conditions on different arguments); what does not is denied.
func TestIntersectOneComparisonPerArgument(t *testing.T) {
	allow := func(name string, args ...specs.LinuxSeccompArg) specs.LinuxSyscall {
		return specs.LinuxSyscall{Names: []string{name}, Action: specs.ActAllow, Args: args}
	}
	c := &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Syscalls: []specs.LinuxSyscall{
		// clone with flags >= 0 would re-allow CLONE_NEWUSER as an OR.
		allow("clone", specs.LinuxSeccompArg{Index: 0, Value: 0, Op: specs.OpGreaterEqual}),
		// socket family != AF_VSOCK: every warden family passes it.
		allow("socket", specs.LinuxSeccompArg{Index: 0, Value: 40, Op: specs.OpNotEqual}),
		// socketpair only with type SOCK_STREAM: another argument, ANDed.
		allow("socketpair", specs.LinuxSeccompArg{Index: 1, Value: 1, Op: specs.OpEqualTo}),
		// personality: two comparisons on one argument in the config itself.
		allow("personality", specs.LinuxSeccompArg{Index: 0, Value: 0x10, Op: specs.OpGreaterThan}, specs.LinuxSeccompArg{Index: 0, Value: 0x1000, Op: specs.OpLessThan}),
	}}
	out := Intersect(Default(), c)
	for _, r := range out.Syscalls {
		seen := map[uint]bool{}
		for _, a := range r.Args {
			if seen[a.Index] && r.Action == specs.ActAllow {
				t.Errorf("%v: two comparisons on argument %d: %+v", r.Names, a.Index, r.Args)
			}
			seen[a.Index] = true
		}
	}
	if got, conds := allowedFor(out, "clone"); got != "none" {
		t.Errorf("clone: %s %+v, want denied (the conditions do not join exactly)", got, conds)
	}
	if got, _ := allowedFor(out, "personality"); got != "none" {
		t.Errorf("personality: %s, want denied", got)
	}
	// The allowed half: joins that are exact keep the syscall.
	got, conds := allowedFor(out, "socket")
	if got != "some" || len(conds) != 4 {
		t.Fatalf("socket: %s %+v, want warden's four families", got, conds)
	}
	for _, cs := range conds {
		if len(cs) != 1 || cs[0].Op != specs.OpEqualTo || cs[0].Value == 40 {
			t.Errorf("socket condition %+v, want one equality on a warden family", cs)
		}
	}
	got, conds = allowedFor(out, "socketpair")
	if got != "some" || len(conds) != 4 || len(conds[0]) != 2 {
		t.Fatalf("socketpair: %s %+v, want family and type both required", got, conds)
	}
	// An equality the other side's comparison refuses matches nothing.
	eqOut := Intersect(Default(), &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Syscalls: []specs.LinuxSyscall{
		allow("socket", specs.LinuxSeccompArg{Index: 0, Value: afUnix, Op: specs.OpEqualTo}),
	}})
	if got, conds := allowedFor(eqOut, "socket"); got != "some" || len(conds) != 1 || conds[0][0].Value != afUnix {
		t.Errorf("socket limited to AF_UNIX by the config: %s %+v", got, conds)
	}
}
