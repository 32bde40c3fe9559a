package daemon

import (
	"testing"

	"github.com/warden-sandbox/warden/runtime/sandbox"
)

// TestCounters counts audit records as the stats op reports them: each
// command under one outcome, the durations of those that ran, every
// egress decision a summary stands for, and each ask that waited by how
// it ended.
func TestCounters(t *testing.T) {
	code := func(n int) *int { return &n }
	c := newCounters()
	for _, r := range []sandbox.AuditRecord{
		{Event: "exec", Exit: code(0), DurationMs: 3},
		{Event: "exec", Exit: code(1), DurationMs: 40},
		{Event: "exec", Exit: code(127), DurationMs: 1}, // the command's own 127
		{Event: "exec", Exit: code(127), Error: "not allowed", DurationMs: 1},
		{Event: "exec", Exit: code(137), Signal: 9, DurationMs: 2000},
		{Event: "exec", Exit: code(137), Signal: 9, TimedOut: true, DurationMs: 300},
		{Event: "exec", Exit: code(137), Signal: 9, OOM: true, DurationMs: 50},
		{Event: "exec", Error: "session is frozen"},
		{Event: "exec.start"},
		{Event: "net.allow", BytesOut: 10, BytesIn: 100},
		{Event: "net.allow", Count: 5, BytesOut: 50, BytesIn: 500},
		{Event: "net.deny"},
		{Event: "net.suppressed", Count: 7},
		{Event: "session.freeze"},
		{Event: "command", Decision: "allow", Rule: "commands.allow \"git status\""},
		{Event: "command", Decision: "deny", Rule: "commands.deny \"rm **\""},
		{Event: "command", Decision: "denied", Reason: "more than 32 commands of the session wait for approval"}, // never waited
		{Event: "command", Decision: "approved", Approval: "ap-1"},
		{Event: "command", Decision: "approved", Approval: "ap-2"},
		{Event: "command", Decision: "denied", Approval: "ap-3"},
		{Event: "command", Decision: "timeout", Approval: "ap-4"},
	} {
		c.observe(r)
	}
	st := c.snapshot()
	want := map[string]int64{"ok": 1, "failed": 2, "not_started": 1, "signal": 1, "timeout": 1, "oom": 1, "error": 1}
	if len(st.Commands) != len(Outcomes) {
		t.Errorf("commands %v: want every outcome of %v", st.Commands, Outcomes)
	}
	for k, v := range want {
		if st.Commands[k] != v {
			t.Errorf("commands[%s] = %d, want %d (all: %v)", k, st.Commands[k], v, st.Commands)
		}
	}
	h := st.ExecSeconds
	if h.Count != 7 || h.Sum < 2.394 || h.Sum > 2.396 {
		t.Errorf("histogram count %d sum %g, want 7 and 2.395", h.Count, h.Sum)
	}
	// 0.001, 0.001, 0.003 <= 5ms; 0.04, 0.05 <= 50ms; 0.3 <= 0.5; 2 <= 2.5
	for bound, n := range map[float64]uint64{0.002: 2, 0.005: 3, 0.05: 5, 0.25: 5, 0.5: 6, 2.5: 7, 300: 7} {
		for i, b := range h.Bounds {
			if b == bound && h.Counts[i] != n {
				t.Errorf("bucket le=%g: %d, want %d", b, h.Counts[i], n)
			}
		}
	}
	wantAsks := map[string]int64{"approved": 2, "denied": 1, "timeout": 1, "withdrawn": 0}
	if a := st.Approvals; a == nil || len(a.Answered) != len(wantAsks) {
		t.Errorf("approvals %+v, want %v", a, wantAsks)
	} else {
		for k, v := range wantAsks {
			if a.Answered[k] != v {
				t.Errorf("approvals answered[%s] = %d, want %d (all: %v)", k, a.Answered[k], v, a.Answered)
			}
		}
	}
	if e := st.Egress; e.Allowed != 6 || e.Denied != 8 || e.BytesOut != 60 || e.BytesIn != 600 {
		t.Errorf("egress %+v, want 6 allowed, 8 denied, 60 bytes out, 600 in", e)
	}
}
