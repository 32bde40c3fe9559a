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
					args, ok := andArgs(r.Args, cs)
					if !ok {
						// Not expressible with one comparison per
						// argument: this allowance is left out (denied).
						continue
					}
					out.Syscalls = append(out.Syscalls, specs.LinuxSyscall{
						Names: []string{name}, Action: specs.ActAllow, Args: args,
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

// andArgs joins two conjunctions of argument comparisons into one with at
// most one comparison per argument: libcontainer adds a rule's comparisons
// on the same argument as separate rules, so "a and b" on one argument
// would become "a or b". Comparisons it cannot join exactly make ok false
// (the caller then denies). Exact joins: identical comparisons; two "no
// bit of mask set" tests (one test with both masks); an equality with any
// other comparison (the equality if the value passes the other, else
// nothing can match: ok false, which denies exactly that).
func andArgs(a, b []specs.LinuxSeccompArg) (out []specs.LinuxSeccompArg, ok bool) {
	for _, y := range append(slices.Clone(a), b...) {
		i := slices.IndexFunc(out, func(x specs.LinuxSeccompArg) bool { return x.Index == y.Index })
		if i < 0 {
			out = append(out, y)
			continue
		}
		x := out[i]
		switch {
		case x == y:
		case x.Op == specs.OpMaskedEqual && y.Op == specs.OpMaskedEqual && x.ValueTwo == 0 && y.ValueTwo == 0:
			out[i].Value |= y.Value
		case x.Op == specs.OpEqualTo && Holds(y, x.Value):
		case y.Op == specs.OpEqualTo && Holds(x, y.Value):
			out[i] = y
		default:
			return nil, false
		}
	}
	return out, true
}

// Holds reports whether the value v passes comparison c.
func Holds(c specs.LinuxSeccompArg, v uint64) bool {
	switch c.Op {
	case specs.OpEqualTo:
		return v == c.Value
	case specs.OpNotEqual:
		return v != c.Value
	case specs.OpLessThan:
		return v < c.Value
	case specs.OpLessEqual:
		return v <= c.Value
	case specs.OpGreaterThan:
		return v > c.Value
	case specs.OpGreaterEqual:
		return v >= c.Value
	case specs.OpMaskedEqual:
		return v&c.Value == c.ValueTwo
	}
	return false
}
