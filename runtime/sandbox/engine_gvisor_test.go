package sandbox

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/warden-sandbox/warden/spec"
)

// TestClaimSeccomp: a pooled gVisor agent's two filters together answer
// every call as the policy's filter does: the first lets the claim mount
// and unmount, the second gives those calls back the policy's rules (or
// its default) and allows the rest, which the first decides.
func TestClaimSeccomp(t *testing.T) {
	eperm := uint(1)
	enosys := uint(38)
	policy := &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, DefaultErrnoRet: &enosys, Architectures: []specs.Arch{specs.ArchX86_64},
		Syscalls: []specs.LinuxSyscall{
			{Names: []string{"read", "write"}, Action: specs.ActAllow},
			{Names: []string{"mount", "ptrace"}, Action: specs.ActErrno, ErrnoRet: &eperm},
		}}
	start, claim, err := claimSeccomp(policy)
	if err != nil {
		t.Fatal(err)
	}
	// action is what a filter answers for a call without arguments.
	action := func(f *specs.LinuxSeccomp, name string) string {
		for _, r := range f.Syscalls {
			if slices.Contains(r.Names, name) {
				return string(r.Action) + errnoText(r.ErrnoRet)
			}
		}
		return string(f.DefaultAction) + errnoText(f.DefaultErrnoRet)
	}
	// Stacked, the stricter answer wins; here every pair holds an allow.
	both := func(name string) string {
		a, b := action(start, name), action(claim, name)
		if a == string(specs.ActAllow) {
			return b
		}
		if b != string(specs.ActAllow) {
			t.Fatalf("%s: both filters refuse (%s, %s)", name, a, b)
		}
		return a
	}
	for _, name := range []string{"read", "write", "mount", "umount2", "ptrace", "open"} {
		if got, want := both(name), action(policy, name); got != want {
			t.Errorf("%s: the two filters answer %s, the policy %s", name, got, want)
		}
	}
	for _, name := range gvisorClaimCalls {
		if action(start, name) != string(specs.ActAllow) {
			t.Errorf("%s: the claim could not call it: %s", name, action(start, name))
		}
	}
	if policy.Syscalls[1].Names[0] != "mount" || len(policy.Syscalls) != 2 {
		t.Errorf("the policy's filter was changed: %+v", policy.Syscalls)
	}
	policy.Syscalls = append(policy.Syscalls, specs.LinuxSyscall{Names: []string{"umount2"}, Action: specs.ActAllow,
		Args: []specs.LinuxSeccompArg{{Index: 1, Value: 2, Op: specs.OpEqualTo}}})
	if _, _, err := claimSeccomp(policy); !errors.Is(err, spec.ErrInvalid) {
		t.Errorf("a conditional rule on umount2 was split: %v", err)
	}
}

func errnoText(e *uint) string {
	if e == nil {
		return ""
	}
	return fmt.Sprintf("/%d", *e)
}
