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

// Intersect applies ceilings (an agent's, the operator's): a path gets the
// narrowest access any input gives it, exec/network/env allow only what
// every input allows, limits take the smaller value. Exec entries compare as
// strings: "curl" and "/usr/bin/curl" are different entries. env.set values
// are combined as in Merge, since a ceiling fixing a value must keep it.
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
	out.FS = composeFS(ps, union)
	out.Exec = composeExec(ps, union)
	if out.Network.Allow, err = composeNetwork(ps, union); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if out.Env, err = composeEnv(ps, union); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	out.Limits = composeLimits(ps, union)
	return out, nil
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

func composeEnv(ps []*Policy, union bool) (Env, error) {
	var env Env
	var lists [][]string
	for _, p := range ps {
		lists = append(lists, p.Env.Allow)
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

func composeLimits(ps []*Policy, union bool) Limits {
	l := ps[0].Limits
	for _, p := range ps[1:] {
		o := p.Limits
		l.Memory = pick(union, l.Memory, o.Memory)
		l.Pids = pick(union, l.Pids, o.Pids)
		l.CPU = pick(union, l.CPU, o.CPU)
		l.Timeout = pick(union, l.Timeout, o.Timeout)
		l.Idle = pick(union, l.Idle, o.Idle)
	}
	return l
}

func pick[T cmp.Ordered](union bool, a, b T) T {
	if union {
		return max(a, b)
	}
	return min(a, b)
}
