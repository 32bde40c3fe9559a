package dashboard

import (
	"cmp"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/warden-sandbox/warden/runtime/daemon"
)

// The metrics are built at each scrape from what the daemon says and
// written with Prometheus' exposition-format library, not its client
// library: that one's package initialization (a default registry and its
// collectors) ran in every warden command and took ~1.4 ms of each
// (`warden --version`, `warden run`).

// metricDesc is one metric family: its name, help, type and label names.
type metricDesc struct {
	name, help string
	typ        dto.MetricType
	labels     []string
}

var (
	gauge, counter = dto.MetricType_GAUGE, dto.MetricType_COUNTER

	descSessions   = metricDesc{"warden_sessions", "Sessions of the state root's daemon, by state (running, frozen, stopped).", gauge, []string{"state"}}
	descMemory     = metricDesc{"warden_session_memory_bytes", "Memory charged to a session's cgroup.", gauge, []string{"session", "policy"}}
	descCPU        = metricDesc{"warden_session_cpu_seconds_total", "CPU time a session's processes used.", counter, []string{"session", "policy"}}
	descRunning    = metricDesc{"warden_session_running_commands", "Commands running in a session.", gauge, []string{"session", "policy"}}
	descCommands   = metricDesc{"warden_commands_total", "Commands that ended since the daemon started, by outcome (ok, failed, signal, timeout, oom, not_started, error).", counter, []string{"outcome"}}
	descExec       = metricDesc{"warden_exec_duration_seconds", "How long commands took, from the daemon's request to the sandbox to their end.", dto.MetricType_HISTOGRAM, nil}
	descPoolHits   = metricDesc{"warden_pool_hits_total", "Sessions that took a ready sandbox from a warm pool.", counter, []string{"policy", "pool"}}
	descPoolMisses = metricDesc{"warden_pool_misses_total", "Sessions of a pool's policy that found no ready sandbox and started cold.", counter, []string{"policy", "pool"}}
	descPoolReady  = metricDesc{"warden_pool_ready", "Sandboxes ready in a warm pool.", gauge, []string{"policy", "pool"}}
	descEgressConn = metricDesc{"warden_egress_connections_total", "Egress proxy decisions (connections, and plain HTTP requests) since the daemon started.", counter, []string{"decision"}}
	descEgressByte = metricDesc{"warden_egress_bytes_total", "Bytes through the egress proxy's allowed connections, out of the sandboxes and in to them.", counter, []string{"direction"}}
	descAsksWait   = metricDesc{"warden_approvals_pending", "Commands a policy's commands.ask holds, waiting for an answer now.", gauge, nil}
	descAsksDone   = metricDesc{"warden_approvals_answered_total", "Commands commands.ask held that stopped waiting since the daemon started, by outcome (approved, denied, timeout, withdrawn).", counter, []string{"outcome"}}
	descStart      = metricDesc{"warden_daemon_start_time_seconds", "When the daemon whose counts these are started, in seconds since the epoch.", gauge, nil}
	descUp         = metricDesc{"warden_daemon_up", "Whether the daemon answered this scrape.", gauge, nil}
)

// scrape is the metric families of one scrape, by name.
type scrape map[string]*dto.MetricFamily

// sample adds a gauge's or counter's value with the label values of d's
// label names, in order.
func (s scrape) sample(d metricDesc, value float64, labelValues ...string) {
	m := &dto.Metric{Label: labelPairs(d.labels, labelValues)}
	if d.typ == dto.MetricType_COUNTER {
		m.Counter = &dto.Counter{Value: &value}
	} else {
		m.Gauge = &dto.Gauge{Value: &value}
	}
	s.add(d, m)
}

func (s scrape) add(d metricDesc, m *dto.Metric) {
	f := s[d.name]
	if f == nil {
		f = &dto.MetricFamily{Name: &d.name, Help: &d.help, Type: &d.typ}
		s[d.name] = f
	}
	f.Metric = append(f.Metric, m)
}

func labelPairs(names, values []string) []*dto.LabelPair {
	if len(names) != len(values) {
		panic(fmt.Sprintf("metric labels %v given values %v", names, values))
	}
	pairs := make([]*dto.LabelPair, len(names))
	for i := range names {
		pairs[i] = &dto.LabelPair{Name: &names[i], Value: &values[i]}
	}
	// By name, as Prometheus' client library writes them.
	slices.SortFunc(pairs, func(a, b *dto.LabelPair) int { return strings.Compare(a.GetName(), b.GetName()) })
	return pairs
}

// sorted is the families by name, each one's series by label values, as
// Prometheus' own registry gathers them.
func (s scrape) sorted() []*dto.MetricFamily {
	out := make([]*dto.MetricFamily, 0, len(s))
	for _, f := range s {
		slices.SortFunc(f.Metric, func(a, b *dto.Metric) int {
			for i := range min(len(a.Label), len(b.Label)) {
				if c := strings.Compare(a.Label[i].GetValue(), b.Label[i].GetValue()); c != 0 {
					return c
				}
			}
			return cmp.Compare(len(a.Label), len(b.Label))
		})
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out
}

// metrics asks the daemon at each scrape and reports what it says: a
// daemon that cannot be asked fails the scrape (HTTP 500) rather than
// report numbers nobody counted. Counts start again when the daemon
// restarts (warden_daemon_start_time_seconds says when), as Prometheus
// counters may.
func metrics(client *daemon.Client) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, err := collect(client)
		if err != nil {
			http.Error(w, "warden: the daemon did not answer this scrape: "+err.Error(), http.StatusInternalServerError)
			return
		}
		s.write(w, r)
	}
}

// write encodes the scrape in the format the request accepts (the text
// format unless it asks for another Prometheus format), gzipped for a
// scraper that accepts it, as Prometheus does.
func (s scrape) write(w http.ResponseWriter, r *http.Request) {
	format := expfmt.NegotiateAccept(r.Header, expfmt.DefaultAcceptedFormats()...)
	w.Header().Set("Content-Type", string(format))
	var out io.Writer = w
	if acceptsGzip(r.Header) {
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Add("Vary", "Accept-Encoding")
		z := gzip.NewWriter(w)
		defer z.Close()
		out = z
	}
	enc := expfmt.NewEncoder(out, format)
	for _, f := range s.sorted() {
		if err := enc.Encode(f); err != nil {
			return // the scraper went away
		}
	}
	if c, ok := enc.(expfmt.Closer); ok {
		c.Close()
	}
}

// acceptsGzip: the request's Accept-Encoding names gzip with a quality
// above zero.
func acceptsGzip(h http.Header) bool {
	for _, v := range h.Values("Accept-Encoding") {
		for _, part := range strings.Split(v, ",") {
			coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
			if !strings.EqualFold(strings.TrimSpace(coding), "gzip") {
				continue
			}
			q, ok := strings.CutPrefix(strings.ReplaceAll(params, " ", ""), "q=")
			if !ok {
				return true
			}
			if f, err := strconv.ParseFloat(q, 64); err == nil && f > 0 {
				return true
			}
		}
	}
	return false
}

func collect(client *daemon.Client) (scrape, error) {
	sessions, err := client.Sessions()
	if err != nil {
		return nil, err
	}
	st, err := client.Stats()
	if err != nil {
		return nil, err
	}
	pools, err := client.Pools()
	if err != nil {
		return nil, err
	}
	s := scrape{}
	s.sample(descUp, 1)
	s.sample(descStart, float64(st.Since.UnixNano())/1e9)

	byState := map[string]int{"running": 0, "frozen": 0, "stopped": 0}
	policy := map[string]string{}
	for _, se := range sessions {
		byState[se.State]++
		policy[se.ID] = se.Policy
		s.sample(descRunning, float64(se.Running), se.ID, se.Policy)
	}
	for state, n := range byState {
		s.sample(descSessions, float64(n), state)
	}
	for _, se := range st.Sessions {
		if p, ok := policy[se.ID]; ok && se.MemoryBytes != nil && se.CPUNanos != nil {
			s.sample(descMemory, float64(*se.MemoryBytes), se.ID, p)
			s.sample(descCPU, float64(*se.CPUNanos)/1e9, se.ID, p)
		}
	}
	for outcome, n := range st.Commands {
		s.sample(descCommands, float64(n), outcome)
	}
	h := st.ExecSeconds
	hist := &dto.Histogram{SampleCount: &h.Count, SampleSum: &h.Sum}
	for i := range min(len(h.Bounds), len(h.Counts)) { // counts are cumulative
		hist.Bucket = append(hist.Bucket, &dto.Bucket{UpperBound: &h.Bounds[i], CumulativeCount: &h.Counts[i]})
	}
	s.add(descExec, &dto.Metric{Histogram: hist})
	for _, p := range pools {
		s.sample(descPoolHits, float64(p.Hits), p.Policy, p.Key)
		s.sample(descPoolMisses, float64(p.Misses), p.Policy, p.Key)
		s.sample(descPoolReady, float64(p.Ready), p.Policy, p.Key)
	}
	s.sample(descEgressConn, float64(st.Egress.Allowed), "allowed")
	s.sample(descEgressConn, float64(st.Egress.Denied), "denied")
	s.sample(descEgressByte, float64(st.Egress.BytesOut), "out")
	s.sample(descEgressByte, float64(st.Egress.BytesIn), "in")
	if a := st.Approvals; a != nil { // a daemon older than approvals counts none
		s.sample(descAsksWait, float64(a.Pending))
		for outcome, n := range a.Answered {
			s.sample(descAsksDone, float64(n), outcome)
		}
	}
	return s, nil
}
