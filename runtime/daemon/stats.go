package daemon

import (
	"maps"
	"sort"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/runtime/internal/protocol"
	"github.com/warden-sandbox/warden/runtime/sandbox"
)

// The stats op: what the daemon counted since it started, read from the
// records its audit log is given (so a count and its audit line cannot
// disagree), and what each session's cgroup uses now. warden serve turns
// them into its pages and Prometheus metrics.

type (
	// Stats is the stats op's reply.
	Stats = protocol.Stats
	// SessionStats is one session's part of Stats.
	SessionStats = protocol.SessionStats
	// RunningCommand is a command running in a session.
	RunningCommand = protocol.RunningCommand
)

// Outcomes are the outcomes Stats.Commands counts, every one present.
var Outcomes = []string{"ok", "failed", "signal", "timeout", "oom", "not_started", "error"}

// ApprovalOutcomes are how the asks Stats.Approvals counts stopped
// waiting (the decisions of their audit lines), every one present.
var ApprovalOutcomes = []string{"approved", "denied", "timeout", "withdrawn"}

// execBounds are the exec histogram's buckets, in seconds: from a warm
// session's fast exec (a few ms) to a command that runs for minutes.
var execBounds = []float64{0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}

type counters struct {
	mu       sync.Mutex
	since    time.Time
	commands map[string]int64
	buckets  []uint64 // per bound, not cumulative; one more for +Inf
	count    uint64
	sum      float64
	egress   protocol.EgressStats
	answered map[string]int64 // asks by how they stopped waiting
}

func newCounters() *counters {
	c := &counters{since: time.Now().UTC(), commands: map[string]int64{}, buckets: make([]uint64, len(execBounds)+1),
		answered: map[string]int64{}}
	for _, o := range Outcomes {
		c.commands[o] = 0
	}
	for _, o := range ApprovalOutcomes {
		c.answered[o] = 0
	}
	return c
}

// observe counts one audit record: a command's end, an ask's decision, or
// egress decisions.
func (c *counters) observe(r sandbox.AuditRecord) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch r.Event {
	case "exec":
		c.commands[outcome(r)]++
		if r.Exit != nil {
			sec := r.DurationMs / 1000
			i := sort.SearchFloat64s(execBounds, sec) // first bound >= sec
			c.buckets[i]++
			c.count++
			c.sum += sec
		}
	case "command":
		// Only an ask that waited has an approval id; a rule's own allow
		// or deny, or an ask refused before it could wait, has none.
		if _, ok := c.answered[r.Decision]; ok && r.Approval != "" {
			c.answered[r.Decision]++
		}
	case "net.allow":
		n := int64(max(r.Count, 1)) // a summary stands for Count decisions
		c.egress.Allowed += n
		c.egress.BytesOut += r.BytesOut
		c.egress.BytesIn += r.BytesIn
	case "net.deny":
		c.egress.Denied++
	case "net.suppressed": // denials over the audit budget, summed up
		c.egress.Denied += int64(r.Count)
	}
}

// outcome sorts a command's audit line into one of Outcomes.
func outcome(r sandbox.AuditRecord) string {
	switch {
	case r.Exit == nil:
		return "error"
	case r.OOM:
		return "oom"
	case r.TimedOut:
		return "timeout"
	case r.Signal != 0:
		return "signal"
	case r.Error != "" && (*r.Exit == 126 || *r.Exit == 127):
		return "not_started"
	case *r.Exit == 0:
		return "ok"
	}
	return "failed"
}

func (c *counters) snapshot() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := Stats{Since: c.since, Commands: maps.Clone(c.commands), Egress: c.egress,
		ExecSeconds: protocol.Histogram{Bounds: execBounds, Count: c.count, Sum: c.sum},
		Approvals:   &protocol.ApprovalStats{Answered: maps.Clone(c.answered)}}
	var cum uint64
	for i := range execBounds {
		cum += c.buckets[i]
		st.ExecSeconds.Counts = append(st.ExecSeconds.Counts, cum)
	}
	return st
}

// running is a command in flight, for the stats op.
type running struct {
	argv    []string
	cwd     string
	started time.Time
}

// stats is the stats op: the counts, and each session's cgroup use and
// running commands (the cgroups read outside the daemon's lock).
func (d *Daemon) stats() Stats {
	st := d.counters.snapshot()
	st.Approvals.Pending = len(d.Approvals())
	d.mu.Lock()
	var sessions []*daemonSession
	for _, s := range d.sessions {
		info := SessionStats{ID: s.ID}
		for _, r := range s.commands {
			info.Commands = append(info.Commands, RunningCommand{Argv: r.argv, Cwd: r.cwd, Started: r.started})
		}
		sort.Slice(info.Commands, func(i, j int) bool { return info.Commands[i].Started.Before(info.Commands[j].Started) })
		st.Sessions = append(st.Sessions, info)
		sessions = append(sessions, s)
	}
	d.mu.Unlock()
	for i, s := range sessions {
		mem, cpu, err := s.Usage()
		if err != nil {
			st.Sessions[i].UsageError = err.Error()
			continue
		}
		st.Sessions[i].MemoryBytes, st.Sessions[i].CPUNanos = &mem, &cpu
	}
	sort.Slice(st.Sessions, func(i, j int) bool { return st.Sessions[i].ID < st.Sessions[j].ID })
	return st
}
