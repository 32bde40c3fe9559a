package policies

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// Merge is the union of several skills active at once: a path gets the
// widest access any input gives it, exec/network/env allow what any input
// allows, limits take the larger value. env.set values are combined; one
// variable set to two values is an error.
func Merge(ps ...*Policy) (*Policy, error) {
	return compose("merge", ps, true)
}

// Intersect applies ceilings (an agent's, the operator's) to a policy:
// Intersect(p, ceiling...). A path gets the narrowest access any input
// gives it, exec/network/env allow only what every input allows, limits
// take the smaller value. Exec entries compare as strings: "curl" and
// "/usr/bin/curl" are different entries. env.set values are combined as in
// Merge, since a ceiling fixing a value must keep it.
//
// What a ceiling leaves out (Omitted: a section, a limit) is no ceiling
// there: it cuts nothing, rather than taking the section's empty meaning
// (no paths, no hosts) or the default limit. What p leaves out keeps its
// meaning: p is what runs. With nothing omitted the order does not matter.
func Intersect(ps ...*Policy) (*Policy, error) {
	return compose("intersect", ps, false)
}

func compose(op string, ps []*Policy, union bool) (*Policy, error) {
	if len(ps) == 0 {
		return nil, fmt.Errorf("%s: no policies", op)
	}
	for _, p := range ps {
		if p == nil {
			return nil, fmt.Errorf("%s: nil policy", op)
		}
	}
	out := &Policy{}
	var err error
	if out.Name, out.Description, err = composeNames(ps); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	out.FS = composeFS(cutting(ps, union, func(o Omitted) bool { return o.FS }), union)
	out.Exec = composeExec(cutting(ps, union, func(o Omitted) bool { return o.Exec }), union)
	if out.Network.Allow, err = composeNetwork(cutting(ps, union, func(o Omitted) bool { return o.Network }), union); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if out.Env, err = composeEnv(ps, cutting(ps, union, func(o Omitted) bool { return o.Env }), union); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	out.Limits = composeLimits(ps, union)
	// Merged or cut, a sandbox keeps the strongest isolation asked for.
	for _, p := range ps {
		out.Sandbox.Engine = Strongest(out.Sandbox.Engine, p.Sandbox.Engine)
	}
	out.Commands = composeCommands(cutting(ps, union, func(o Omitted) bool { return o.Commands }), union)
	out.Omitted = composeOmitted(ps)
	return out, nil
}

// cutting returns the inputs that decide one section: all of them in a
// union; in an intersection the policy and the ceilings that have the
// section.
func cutting(ps []*Policy, union bool, omitted func(Omitted) bool) []*Policy {
	if union {
		return ps
	}
	out := ps[:1:1]
	for _, p := range ps[1:] {
		if !omitted(p.Omitted) {
			out = append(out, p)
		}
	}
	return out
}

// composeOmitted: the result leaves out what every input leaves out.
func composeOmitted(ps []*Policy) Omitted {
	o := ps[0].Omitted
	for _, p := range ps[1:] {
		q := p.Omitted
		o = Omitted{
			FS: o.FS && q.FS, Exec: o.Exec && q.Exec, Network: o.Network && q.Network, Env: o.Env && q.Env, Commands: o.Commands && q.Commands,
			Memory: o.Memory && q.Memory, Pids: o.Pids && q.Pids, CPU: o.CPU && q.CPU, Timeout: o.Timeout && q.Timeout, Idle: o.Idle && q.Idle,
		}
	}
	return o
}

// composeNames joins the distinct name parts, sorted, with "+", so the
// result does not depend on argument order and merging a policy with itself
// keeps its name. Descriptions are joined in name order.
func composeNames(ps []*Policy) (string, string, error) {
	var parts []string
	descs := map[string][]string{}
	for _, p := range ps {
		parts = append(parts, strings.Split(p.Name, "+")...)
		if p.Description != "" && !slices.Contains(descs[p.Name], p.Description) {
			descs[p.Name] = append(descs[p.Name], p.Description)
		}
	}
	sort.Strings(parts)
	name := strings.Join(slices.Compact(parts), "+")
	if len(name) > maxNameLen {
		return "", "", fmt.Errorf("combined name is longer than %d characters", maxNameLen)
	}
	var d []string
	for _, n := range slices.Sorted(maps.Keys(descs)) {
		sort.Strings(descs[n])
		for _, s := range descs[n] {
			if !slices.Contains(d, s) {
				d = append(d, s)
			}
		}
	}
	return name, strings.Join(d, "; "), nil
}

// composeFS evaluates every input at every rule path ("point") and keeps
// the minimal rules that reproduce the combined verdicts. Any other path
// gets the verdict of its longest point-prefix in every input, so the
// result is exact everywhere.
func composeFS(ps []*Policy, union bool) FS {
	var points []string
	denied := map[string]bool{}
	for _, p := range ps {
		points = append(points, p.points()...)
		maps.Copy(denied, p.denied())
	}
	verdict := func(pt string) Access {
		v := ps[0].AccessAt(pt)
		for _, p := range ps[1:] {
			a := p.AccessAt(pt)
			if union && a > v || !union && a < v {
				v = a
			}
		}
		return v
	}
	return fsFromRules(minimalRules(points, verdict, denied))
}

func composeExec(ps []*Policy, union bool) Exec {
	// Running what the sandbox wrote: any skill's opt-in in a union,
	// every side's in an intersection.
	workspace := !union
	for _, p := range ps {
		if union {
			workspace = workspace || p.Exec.Workspace
		} else {
			workspace = workspace && p.Exec.Workspace
		}
	}
	var lists [][]string
	for _, p := range ps {
		if p.Exec.All {
			if union {
				return Exec{All: true, Workspace: workspace}
			}
			continue // All ∩ X = X
		}
		lists = append(lists, p.Exec.Allow)
	}
	if len(lists) == 0 {
		return Exec{All: true, Workspace: workspace}
	}
	return Exec{Allow: combineSets(lists, union), Workspace: workspace}
}

// combineSets returns the sorted union or intersection of string sets,
// nil when empty.
func combineSets(lists [][]string, union bool) []string {
	count := map[string]int{}
	for _, l := range lists {
		for _, s := range slices.Compact(sorted(l)) {
			count[s]++
		}
	}
	var out []string
	for s, n := range count {
		if union || n == len(lists) {
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

func composeNetwork(ps []*Policy, union bool) ([]string, error) {
	var acc []HostPattern
	for i, p := range ps {
		var hs []HostPattern
		for _, s := range p.Network.Allow {
			h, err := ParseHostPattern(s)
			if err != nil {
				return nil, fmt.Errorf("policy %s: network.allow: %w", p.Name, err)
			}
			hs = append(hs, h)
		}
		switch {
		case i == 0 || union:
			acc = append(acc, hs...)
		default:
			var next []HostPattern
			for _, a := range acc {
				for _, b := range hs {
					if r, ok := intersectPatterns(a, b); ok {
						next = append(next, r)
					}
				}
			}
			acc = next
		}
	}
	// Drop patterns another one covers, so equal permissions give equal
	// lists (A ∩ A yields A's patterns and their pairwise overlaps).
	var out []string
	for i, h := range acc {
		covered := slices.ContainsFunc(acc, func(o HostPattern) bool {
			r, ok := intersectPatterns(h, o)
			return o != h && ok && r == h
		})
		if !covered && !slices.Contains(acc[:i], h) {
			out = append(out, h.String())
		}
	}
	sort.Strings(out)
	return out, nil
}

// composeEnv combines the allow lists of allowing and the set values of
// every input.
func composeEnv(ps, allowing []*Policy, union bool) (Env, error) {
	var env Env
	var lists [][]string
	for _, p := range allowing {
		lists = append(lists, p.Env.Allow)
	}
	for _, p := range ps {
		for k, v := range p.Env.Set {
			if old, ok := env.Set[k]; ok && old != v {
				return Env{}, fmt.Errorf("env.set.%s is %q in one policy and %q in another; make them agree", k, old, v)
			}
			if env.Set == nil {
				env.Set = map[string]string{}
			}
			env.Set[k] = v
		}
	}
	// A variable both passed through and set would be ambiguous; the set
	// value is what the sandbox gets, so it leaves the allow list.
	for _, k := range combineSets(lists, union) {
		if _, set := env.Set[k]; !set {
			env.Allow = append(env.Allow, k)
		}
	}
	return env, nil
}

// composeLimits: a zero limit of a policy is the default; a ceiling's
// zero or omitted limit is no ceiling.
func composeLimits(ps []*Policy, union bool) Limits {
	l := ps[0].Limits.WithDefaults()
	for _, p := range ps[1:] {
		if union {
			o := p.Limits.WithDefaults()
			l.Memory, l.Pids, l.CPU = max(l.Memory, o.Memory), max(l.Pids, o.Pids), max(l.CPU, o.CPU)
			l.Timeout, l.Idle = max(l.Timeout, o.Timeout), max(l.Idle, o.Idle)
			continue
		}
		o, om := p.Limits, p.Omitted
		l.Memory = lower(l.Memory, o.Memory, om.Memory)
		l.Pids = lower(l.Pids, o.Pids, om.Pids)
		l.CPU = lower(l.CPU, o.CPU, om.CPU)
		l.Timeout = lower(l.Timeout, o.Timeout, om.Timeout)
		l.Idle = lower(l.Idle, o.Idle, om.Idle)
	}
	return l
}

// lower applies one ceiling to one limit.
func lower[T cmp.Ordered](v, ceiling T, omitted bool) T {
	var zero T
	if omitted || ceiling == zero {
		return v
	}
	return min(v, ceiling)
}
