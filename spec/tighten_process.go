package spec

import (
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// process: no_new_privs always; capabilities limited to what both the
// container asks for and the operator allows.
func (t *tightener) process() error {
	TightenProcess(t.s.Process, t.o.Capabilities, t.changef)
	return nil
}

// TightenProcess applies the policy's rules for a process (the
// container's first or one run by exec): no_new_privs, and only the
// capabilities in allowed. changef, if not nil, hears what changed.
func TightenProcess(p *specs.Process, allowed []string, changef func(string, ...any)) {
	if changef == nil {
		changef = func(string, ...any) {}
	}
	if !p.NoNewPrivileges {
		p.NoNewPrivileges = true
		changef("process: noNewPrivileges set")
	}
	tightenScheduling(p, changef)
	if p.Capabilities == nil {
		// libcontainer leaves a process without a capabilities object
		// with the runtime's own (all of them): nil means none here.
		p.Capabilities = &specs.LinuxCapabilities{}
		changef("process: no capabilities given; every set made empty (not the runtime's own)")
	}
	keep := func(set string, caps []string) []string {
		out := []string{}
		for _, c := range caps {
			if slices.Contains(allowed, strings.ToUpper(c)) {
				out = append(out, c)
			} else {
				changef("process: capability %s dropped from the %s set (not in the runtime's --cap-allow)", c, set)
			}
		}
		return out
	}
	c := p.Capabilities
	c.Bounding = keep("bounding", c.Bounding)
	c.Effective = keep("effective", c.Effective)
	c.Permitted = keep("permitted", c.Permitted)
	c.Inheritable = keep("inheritable", c.Inheritable)
	c.Ambient = keep("ambient", c.Ambient)
}

// tightenScheduling takes away what would let a process run ahead of the
// host's: real-time or deadline scheduling, a negative nice, real-time I/O
// priority, a negative OOM score (the host's processes would be killed
// first), and rlimits that allow real-time priority or a negative nice.
func tightenScheduling(p *specs.Process, changef func(string, ...any)) {
	if sc := p.Scheduler; sc != nil {
		switch sc.Policy {
		case specs.SchedFIFO, specs.SchedRR, specs.SchedDeadline:
			p.Scheduler = nil
			changef("process: scheduler %s dropped (real-time)", sc.Policy)
		default:
			if sc.Nice < 0 {
				sc.Nice = 0
				changef("process: negative nice raised to 0")
			}
		}
	}
	if p.IOPriority != nil && p.IOPriority.Class == specs.IOPRIO_CLASS_RT {
		p.IOPriority = nil
		changef("process: real-time I/O priority dropped")
	}
	if p.OOMScoreAdj != nil && *p.OOMScoreAdj < 0 {
		zero := 0
		p.OOMScoreAdj = &zero
		changef("process: negative oomScoreAdj raised to 0")
	}
	// RLIMIT_RTPRIO 0: no real-time priority; RLIMIT_NICE 20: no nice
	// below 0 (the limit is 20 minus the lowest nice allowed), and not
	// above the runtime's own hard limit, which the container's init
	// could not raise it past.
	nice := uint64(20)
	var own unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NICE, &own) == nil {
		nice = min(nice, own.Max)
	}
	ceiling := map[string]uint64{"RLIMIT_RTPRIO": 0, "RLIMIT_RTTIME": 0, "RLIMIT_NICE": nice}
	// Pending signals and message queue bytes are counted per host user
	// (the container's root is often the host's): a container without
	// these limits inherits the runtime's and could take that user's
	// whole allowance. Added when absent, lowered when above.
	for _, typ := range []string{"RLIMIT_SIGPENDING", "RLIMIT_MSGQUEUE"} {
		i := slices.IndexFunc(sandboxRlimits, func(r specs.POSIXRlimit) bool { return r.Type == typ })
		max := sandboxRlimits[i].Hard
		if unix.Getrlimit(rlimitResource[typ], &own) == nil {
			max = min(max, own.Max)
		}
		ceiling[typ] = max
		if !slices.ContainsFunc(p.Rlimits, func(r specs.POSIXRlimit) bool { return r.Type == typ }) {
			p.Rlimits = append(p.Rlimits, specs.POSIXRlimit{Type: typ, Hard: max, Soft: max})
			changef("process: %s set to %d", typ, max)
		}
	}
	for i := range p.Rlimits {
		r := &p.Rlimits[i]
		max, ok := ceiling[r.Type]
		if !ok || r.Hard <= max && r.Soft <= max {
			continue
		}
		r.Hard, r.Soft = min(r.Hard, max), min(r.Soft, max)
		changef("process: %s lowered to %d", r.Type, max)
	}
}
