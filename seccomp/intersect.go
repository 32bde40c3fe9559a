package seccomp

import (
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Intersect returns warden's profile w narrowed by another profile c (a
// container's own): a syscall stays allowed only where both allow it.
// Where c allows a syscall only for some arguments, those conditions are
// added to warden's (both must hold). Where c refuses a syscall only for
// some arguments and allows it otherwise, warden cannot express the
// difference and refuses it altogether. c's flags, listener and
// architectures are not carried over: warden's are kept.
func Intersect(w, c *specs.LinuxSeccomp) *specs.LinuxSeccomp {
	out := *w
	out.Syscalls = nil
	for _, r := range w.Syscalls {
		if r.Action != specs.ActAllow {
			out.Syscalls = append(out.Syscalls, r)
			continue
		}
		kept := r
		kept.Names = nil
		for _, name := range r.Names {
			allowed, conds := permits(c, name)
			switch {
			case !allowed:
			case conds == nil:
				kept.Names = append(kept.Names, name)
			default:
				for _, cs := range conds {
					out.Syscalls = append(out.Syscalls, specs.LinuxSyscall{
						Names: []string{name}, Action: specs.ActAllow, Args: andArgs(r.Args, cs),
					})
				}
			}
		}
		if len(kept.Names) > 0 {
			out.Syscalls = append(out.Syscalls, kept)
		}
	}
	return &out
}

func isAllow(a specs.LinuxSeccompAction) bool {
	return a == specs.ActAllow || a == specs.ActLog
}

// permits says whether profile c allows a syscall: not at all, for any
// arguments (conds nil), or only for the argument sets in conds (each
// set's comparisons all hold).
func permits(c *specs.LinuxSeccomp, name string) (allowed bool, conds [][]specs.LinuxSeccompArg) {
	var allows [][]specs.LinuxSeccompArg
	refusedSometimes := false
	for _, r := range c.Syscalls {
		if !slices.Contains(r.Names, name) {
			continue
		}
		if !isAllow(r.Action) {
			if len(r.Args) == 0 {
				return false, nil
			}
			refusedSometimes = true
			continue
		}
		if len(r.Args) == 0 {
			return true, nil
		}
		allows = append(allows, r.Args)
	}
	if isAllow(c.DefaultAction) {
		return !refusedSometimes, nil
	}
	if len(allows) == 0 {
		return false, nil
	}
	return true, allows
}

// andArgs joins two conjunctions of argument comparisons. Two "no bit of
// mask set" tests on one argument become one with both masks, which is
// the same condition and keeps one comparison per argument.
func andArgs(a, b []specs.LinuxSeccompArg) []specs.LinuxSeccompArg {
	out := slices.Clone(a)
	for _, y := range b {
		merged := false
		for i, x := range out {
			if x.Index == y.Index && x.Op == specs.OpMaskedEqual && y.Op == specs.OpMaskedEqual && x.ValueTwo == 0 && y.ValueTwo == 0 {
				out[i].Value |= y.Value
				merged = true
				break
			}
		}
		if !merged {
			out = append(out, y)
		}
	}
	return out
}
