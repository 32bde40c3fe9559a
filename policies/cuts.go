package policies

import (
	"fmt"
	"slices"
	"strings"
)

// Cuts says, one line each, what a ceiling takes away from p: the paths
// whose access it lowers, the programs, hosts and variables it removes, the
// limits it lowers and the values it fixes. None: it cuts nothing.
func Cuts(p, ceiling *Policy) ([]string, error) {
	q, err := Intersect(p, ceiling)
	if err != nil {
		return nil, err
	}
	var out []string
	pts := append(p.points(), ceiling.points()...)
	slices.SortFunc(pts, comparePaths)
	for _, pt := range slices.Compact(pts) {
		if was, now := p.AccessAt(pt), q.AccessAt(pt); now < was {
			out = append(out, fmt.Sprintf("fs %s: %s -> %s", pt, was, now))
		}
	}
	switch {
	case p.Exec.All && !q.Exec.All && len(q.Exec.Allow) == 0:
		out = append(out, "exec: nothing may run (was every program)")
	case p.Exec.All && !q.Exec.All:
		out = append(out, fmt.Sprintf("exec: only %s (was every program)", strings.Join(q.Exec.Allow, ", ")))
	case !q.Exec.All:
		if gone := missing(p.Exec.Allow, q.Exec.Allow); len(gone) > 0 {
			out = append(out, "exec.allow: removes "+strings.Join(gone, ", "))
		}
	}
	if p.Exec.Workspace && !q.Exec.Workspace {
		out = append(out, "exec.workspace: off")
	}
	if gone := missing(p.Network.Allow, q.Network.Allow); len(gone) > 0 {
		line := "network.allow: removes " + strings.Join(gone, ", ")
		if narrower := missing(q.Network.Allow, p.Network.Allow); len(narrower) > 0 {
			line += "; keeps the narrower " + strings.Join(narrower, ", ")
		}
		out = append(out, line)
	}
	var gone []string
	for _, k := range p.Env.Allow {
		if !slices.Contains(q.Env.Allow, k) {
			if _, set := q.Env.Set[k]; set {
				out = append(out, fmt.Sprintf("env.set: fixes %s = %q", k, q.Env.Set[k]))
			} else {
				gone = append(gone, k)
			}
		}
	}
	if len(gone) > 0 {
		out = append(out, "env.allow: removes "+strings.Join(gone, ", "))
	}
	for _, k := range sorted(keys(q.Env.Set)) {
		if _, had := p.Env.Set[k]; !had && !slices.Contains(p.Env.Allow, k) {
			out = append(out, fmt.Sprintf("env.set: adds %s = %q", k, q.Env.Set[k]))
		}
	}
	for _, l := range []struct {
		key      string
		was, now []string
	}{{"deny", p.Commands.Deny, q.Commands.Deny}, {"ask", p.Commands.Ask, q.Commands.Ask}} {
		if added := missing(l.now, l.was); len(added) > 0 {
			out = append(out, fmt.Sprintf("commands.%s: adds %s", l.key, strings.Join(added, ", ")))
		}
	}
	if gone := missing(p.Commands.Allow, q.Commands.Allow); len(gone) > 0 {
		out = append(out, "commands.allow: removes "+strings.Join(gone, ", "))
	}
	if p.Commands.AskTimeout() != q.Commands.AskTimeout() {
		out = append(out, fmt.Sprintf("commands.timeout: %s -> %s", formatDuration(p.Commands.AskTimeout()), formatDuration(q.Commands.AskTimeout())))
	}
	was, now := p.Limits.WithDefaults(), q.Limits
	for _, l := range []struct {
		key      string
		was, now string
	}{
		{"memory", FormatSize(was.Memory), FormatSize(now.Memory)},
		{"pids", fmt.Sprint(was.Pids), fmt.Sprint(now.Pids)},
		{"cpu", formatCPU(was.CPU), formatCPU(now.CPU)},
		{"timeout", formatDuration(was.Timeout), formatDuration(now.Timeout)},
		{"idle", formatDuration(was.Idle), formatDuration(now.Idle)},
	} {
		if l.was != l.now {
			out = append(out, fmt.Sprintf("limits.%s: %s -> %s", l.key, l.was, l.now))
		}
	}
	return out, nil
}

// missing lists the entries of a that b lacks.
func missing(a, b []string) []string {
	var out []string
	for _, s := range a {
		if !slices.Contains(b, s) {
			out = append(out, s)
		}
	}
	return out
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
