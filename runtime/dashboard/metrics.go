package dashboard

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warden-sandbox/warden/runtime/daemon"
)

// collector asks the daemon at each scrape and reports what it says: a
// daemon that cannot be asked fails the scrape rather than report
// numbers nobody counted. Counts start again when the daemon restarts
// (warden_daemon_start_time_seconds says when), as Prometheus counters
// may.
type collector struct{ client *daemon.Client }

var (
	descSessions   = prometheus.NewDesc("warden_sessions", "Sessions of the state root's daemon, by state (running, frozen, stopped).", []string{"state"}, nil)
	descMemory     = prometheus.NewDesc("warden_session_memory_bytes", "Memory charged to a session's cgroup.", []string{"session", "policy"}, nil)
	descCPU        = prometheus.NewDesc("warden_session_cpu_seconds_total", "CPU time a session's processes used.", []string{"session", "policy"}, nil)
	descRunning    = prometheus.NewDesc("warden_session_running_commands", "Commands running in a session.", []string{"session", "policy"}, nil)
	descCommands   = prometheus.NewDesc("warden_commands_total", "Commands that ended since the daemon started, by outcome (ok, failed, signal, timeout, oom, not_started, error).", []string{"outcome"}, nil)
	descExec       = prometheus.NewDesc("warden_exec_duration_seconds", "How long commands took, from the daemon's request to the sandbox to their end.", nil, nil)
	descPoolHits   = prometheus.NewDesc("warden_pool_hits_total", "Sessions that took a ready sandbox from a warm pool.", []string{"policy", "pool"}, nil)
	descPoolMisses = prometheus.NewDesc("warden_pool_misses_total", "Sessions of a pool's policy that found no ready sandbox and started cold.", []string{"policy", "pool"}, nil)
	descPoolReady  = prometheus.NewDesc("warden_pool_ready", "Sandboxes ready in a warm pool.", []string{"policy", "pool"}, nil)
	descEgressConn = prometheus.NewDesc("warden_egress_connections_total", "Egress proxy decisions (connections, and plain HTTP requests) since the daemon started.", []string{"decision"}, nil)
	descEgressByte = prometheus.NewDesc("warden_egress_bytes_total", "Bytes through the egress proxy's allowed connections, out of the sandboxes and in to them.", []string{"direction"}, nil)
	descAsksWait   = prometheus.NewDesc("warden_approvals_pending", "Commands a policy's commands.ask holds, waiting for an answer now.", nil, nil)
	descAsksDone   = prometheus.NewDesc("warden_approvals_answered_total", "Commands commands.ask held that stopped waiting since the daemon started, by outcome (approved, denied, timeout, withdrawn).", []string{"outcome"}, nil)
	descStart      = prometheus.NewDesc("warden_daemon_start_time_seconds", "When the daemon whose counts these are started, in seconds since the epoch.", nil, nil)
	descUp         = prometheus.NewDesc("warden_daemon_up", "Whether the daemon answered this scrape.", nil, nil)
)

// Describe sends nothing: the per-session and per-pool series come and
// go, so the collector is unchecked.
func (c *collector) Describe(chan<- *prometheus.Desc) {}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	fail := func(err error) { ch <- prometheus.NewInvalidMetric(descUp, err) }
	sessions, err := c.client.Sessions()
	if err != nil {
		fail(err)
		return
	}
	st, err := c.client.Stats()
	if err != nil {
		fail(err)
		return
	}
	pools, err := c.client.Pools()
	if err != nil {
		fail(err)
		return
	}
	gauge, counter := prometheus.GaugeValue, prometheus.CounterValue
	ch <- prometheus.MustNewConstMetric(descUp, gauge, 1)
	ch <- prometheus.MustNewConstMetric(descStart, gauge, float64(st.Since.UnixNano())/1e9)

	byState := map[string]int{"running": 0, "frozen": 0, "stopped": 0}
	policy := map[string]string{}
	for _, s := range sessions {
		byState[s.State]++
		policy[s.ID] = s.Policy
		ch <- prometheus.MustNewConstMetric(descRunning, gauge, float64(s.Running), s.ID, s.Policy)
	}
	for state, n := range byState {
		ch <- prometheus.MustNewConstMetric(descSessions, gauge, float64(n), state)
	}
	for _, s := range st.Sessions {
		if p, ok := policy[s.ID]; ok && s.MemoryBytes != nil && s.CPUNanos != nil {
			ch <- prometheus.MustNewConstMetric(descMemory, gauge, float64(*s.MemoryBytes), s.ID, p)
			ch <- prometheus.MustNewConstMetric(descCPU, counter, float64(*s.CPUNanos)/1e9, s.ID, p)
		}
	}
	for outcome, n := range st.Commands {
		ch <- prometheus.MustNewConstMetric(descCommands, counter, float64(n), outcome)
	}
	h := st.ExecSeconds
	buckets := map[float64]uint64{}
	for i, b := range h.Bounds {
		if i < len(h.Counts) {
			buckets[b] = h.Counts[i]
		}
	}
	ch <- prometheus.MustNewConstHistogram(descExec, h.Count, h.Sum, buckets)
	for _, p := range pools {
		ch <- prometheus.MustNewConstMetric(descPoolHits, counter, float64(p.Hits), p.Policy, p.Key)
		ch <- prometheus.MustNewConstMetric(descPoolMisses, counter, float64(p.Misses), p.Policy, p.Key)
		ch <- prometheus.MustNewConstMetric(descPoolReady, gauge, float64(p.Ready), p.Policy, p.Key)
	}
	ch <- prometheus.MustNewConstMetric(descEgressConn, counter, float64(st.Egress.Allowed), "allowed")
	ch <- prometheus.MustNewConstMetric(descEgressConn, counter, float64(st.Egress.Denied), "denied")
	ch <- prometheus.MustNewConstMetric(descEgressByte, counter, float64(st.Egress.BytesOut), "out")
	ch <- prometheus.MustNewConstMetric(descEgressByte, counter, float64(st.Egress.BytesIn), "in")
	if a := st.Approvals; a != nil { // a daemon older than approvals counts none
		ch <- prometheus.MustNewConstMetric(descAsksWait, gauge, float64(a.Pending))
		for outcome, n := range a.Answered {
			ch <- prometheus.MustNewConstMetric(descAsksDone, counter, float64(n), outcome)
		}
	}
}
