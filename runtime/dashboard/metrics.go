package dashboard

import (
	"bytes"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/warden-sandbox/warden/runtime/daemon"
)

// metrics asks the daemon at each scrape and reports what it says, in
// Prometheus' text format (version 0.0.4): a daemon that cannot be asked
// fails the scrape (500) rather than report numbers nobody counted.
// Counts start again when the daemon restarts
// (warden_daemon_start_time_seconds says when), as Prometheus counters
// may. Written here rather than with Prometheus' client library: its
// package initialisation (a registry with process and Go collectors)
// cost every warden process, a container's init included, ~0.6 ms.
type metrics struct{ client *daemon.Client }

// A metric family: its samples are a histogram's series (suffix _bucket,
// _sum, _count) or one value each.
type family struct {
	name, typ, help string
	samples         []sample
}

type sample struct {
	suffix string
	labels []string // name, value, name, value...
	value  float64
}

func (f *family) add(value float64, labels ...string) {
	f.samples = append(f.samples, sample{labels: labels, value: value})
}

func (m metrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	families, err := m.collect()
	if err != nil {
		http.Error(w, "An error has occurred while serving metrics:\n\n"+err.Error(), http.StatusInternalServerError)
		return
	}
	var buf bytes.Buffer
	writeFamilies(&buf, families)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Write(buf.Bytes())
}

func (m metrics) collect() ([]*family, error) {
	sessions, err := m.client.Sessions()
	if err != nil {
		return nil, err
	}
	st, err := m.client.Stats()
	if err != nil {
		return nil, err
	}
	pools, err := m.client.Pools()
	if err != nil {
		return nil, err
	}
	gauge := func(name, help string) *family { return &family{name: name, typ: "gauge", help: help} }
	counter := func(name, help string) *family { return &family{name: name, typ: "counter", help: help} }
	var (
		up         = gauge("warden_daemon_up", "Whether the daemon answered this scrape.")
		start      = gauge("warden_daemon_start_time_seconds", "When the daemon whose counts these are started, in seconds since the epoch.")
		sessionsBy = gauge("warden_sessions", "Sessions of the state root's daemon, by state (running, frozen, stopped).")
		memory     = gauge("warden_session_memory_bytes", "Memory charged to a session's cgroup.")
		cpu        = counter("warden_session_cpu_seconds_total", "CPU time a session's processes used.")
		running    = gauge("warden_session_running_commands", "Commands running in a session.")
		commands   = counter("warden_commands_total", "Commands that ended since the daemon started, by outcome (ok, failed, signal, timeout, oom, not_started, error).")
		exec       = &family{name: "warden_exec_duration_seconds", typ: "histogram", help: "How long commands took, from the daemon's request to the sandbox to their end."}
		poolHits   = counter("warden_pool_hits_total", "Sessions that took a ready sandbox from a warm pool.")
		poolMisses = counter("warden_pool_misses_total", "Sessions of a pool's policy that found no ready sandbox and started cold.")
		poolReady  = gauge("warden_pool_ready", "Sandboxes ready in a warm pool.")
		egressConn = counter("warden_egress_connections_total", "Egress proxy decisions (connections, and plain HTTP requests) since the daemon started.")
		egressByte = counter("warden_egress_bytes_total", "Bytes through the egress proxy's allowed connections, out of the sandboxes and in to them.")
		asksWait   = gauge("warden_approvals_pending", "Commands a policy's commands.ask holds, waiting for an answer now.")
		asksDone   = counter("warden_approvals_answered_total", "Commands commands.ask held that stopped waiting since the daemon started, by outcome (approved, denied, timeout, withdrawn).")
	)
	up.add(1)
	start.add(float64(st.Since.UnixNano()) / 1e9)

	byState := map[string]int{"running": 0, "frozen": 0, "stopped": 0}
	policy := map[string]string{}
	for _, s := range sessions {
		byState[s.State]++
		policy[s.ID] = s.Policy
		running.add(float64(s.Running), "session", s.ID, "policy", s.Policy)
	}
	for state, n := range byState {
		sessionsBy.add(float64(n), "state", state)
	}
	for _, s := range st.Sessions {
		if p, ok := policy[s.ID]; ok && s.MemoryBytes != nil && s.CPUNanos != nil {
			memory.add(float64(*s.MemoryBytes), "session", s.ID, "policy", p)
			cpu.add(float64(*s.CPUNanos)/1e9, "session", s.ID, "policy", p)
		}
	}
	for outcome, n := range st.Commands {
		commands.add(float64(n), "outcome", outcome)
	}
	h := st.ExecSeconds
	for i, b := range h.Bounds {
		if i < len(h.Counts) { // cumulative, as the format wants
			exec.samples = append(exec.samples, sample{suffix: "_bucket", labels: []string{"le", formatFloat(b)}, value: float64(h.Counts[i])})
		}
	}
	exec.samples = append(exec.samples,
		sample{suffix: "_bucket", labels: []string{"le", "+Inf"}, value: float64(h.Count)},
		sample{suffix: "_sum", value: h.Sum},
		sample{suffix: "_count", value: float64(h.Count)})
	for _, p := range pools {
		poolHits.add(float64(p.Hits), "policy", p.Policy, "pool", p.Key)
		poolMisses.add(float64(p.Misses), "policy", p.Policy, "pool", p.Key)
		poolReady.add(float64(p.Ready), "policy", p.Policy, "pool", p.Key)
	}
	egressConn.add(float64(st.Egress.Allowed), "decision", "allowed")
	egressConn.add(float64(st.Egress.Denied), "decision", "denied")
	egressByte.add(float64(st.Egress.BytesOut), "direction", "out")
	egressByte.add(float64(st.Egress.BytesIn), "direction", "in")
	families := []*family{up, start, sessionsBy, memory, cpu, running, commands, exec, poolHits, poolMisses, poolReady, egressConn, egressByte}
	if a := st.Approvals; a != nil { // a daemon older than approvals counts none
		asksWait.add(float64(a.Pending))
		for outcome, n := range a.Answered {
			asksDone.add(float64(n), "outcome", outcome)
		}
		families = append(families, asksWait, asksDone)
	}
	return families, nil
}

// writeFamilies writes the families that have samples, sorted by name,
// their one-value samples sorted by labels (a histogram's keep their
// order), as Prometheus' own handler does.
func writeFamilies(buf *bytes.Buffer, families []*family) {
	families = slices.Clone(families)
	slices.SortFunc(families, func(a, b *family) int { return strings.Compare(a.name, b.name) })
	for _, f := range families {
		if len(f.samples) == 0 {
			continue
		}
		if f.typ != "histogram" {
			slices.SortStableFunc(f.samples, func(a, b sample) int { return slices.Compare(a.labels, b.labels) })
		}
		fmt.Fprintf(buf, "# HELP %s %s\n# TYPE %s %s\n", f.name, escapeHelp(f.help), f.name, f.typ)
		for _, s := range f.samples {
			buf.WriteString(f.name + s.suffix)
			if len(s.labels) > 0 {
				buf.WriteByte('{')
				for i := 0; i+1 < len(s.labels); i += 2 {
					if i > 0 {
						buf.WriteByte(',')
					}
					buf.WriteString(s.labels[i] + `="` + escapeLabel(s.labels[i+1]) + `"`)
				}
				buf.WriteByte('}')
			}
			buf.WriteString(" " + formatFloat(s.value) + "\n")
		}
	}
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

func escapeHelp(s string) string  { return helpEscaper.Replace(s) }
func escapeLabel(s string) string { return labelEscaper.Replace(s) }

// formatFloat writes a value as the text format does.
func formatFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	case math.IsNaN(f):
		return "NaN"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}
