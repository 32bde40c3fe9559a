package daemon

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/warden-sandbox/warden/runtime/agent"
	"github.com/warden-sandbox/warden/runtime/sandbox"
)

// The exec fast path (runtime/agent) must read what the daemon's encoder writes.
func TestParseReply(t *testing.T) {
	for _, c := range []struct {
		msg  reply
		want agent.FastReply
	}{
		{reply{Started: true}, agent.FastReply{}},
		{reply{V: 1}, agent.FastReply{}},
		{reply{Error: "no such session: x; create it <first>"}, agent.FastReply{HasError: true, Err: "no such session: x; create it <first>"}},
		{reply{Error: "no such session: x", Code: CodeNoSuchSession}, agent.FastReply{HasError: true, Err: "no such session: x", Code: "no_such_session"}},
		{reply{Error: "not run from a warm pool: this daemon keeps no pool", Code: CodeNotPooled},
			agent.FastReply{HasError: true, Err: "not run from a warm pool: this daemon keeps no pool", Code: "not_pooled"}},
		{reply{Result: &sandbox.ExecResult{ExitCode: 0, Duration: time.Millisecond}}, agent.FastReply{HasResult: true}},
		{reply{Result: &sandbox.ExecResult{ExitCode: 137, Signal: 9, OOM: true, Error: "killed: memory limit 64MiB exceeded"}},
			agent.FastReply{HasResult: true, Exit: 137, ResultErr: "killed: memory limit 64MiB exceeded"}},
		{reply{Result: &sandbox.ExecResult{ExitCode: 127, Error: "nope: \"x\" \u2028 \U0001F600 \x01"}},
			agent.FastReply{HasResult: true, Exit: 127, ResultErr: "nope: \"x\" \u2028 \U0001F600 \x01"}},
	} {
		msg, err := json.Marshal(c.msg)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := agent.ParseFastReply(msg)
		if !ok || got != c.want {
			t.Errorf("%s: got %+v ok=%v, want %+v", msg, got, ok, c.want)
		}
	}
	for _, bad := range []string{``, `{`, `{"result":{"exit":1}`, `{"result":{"exit":}}`, `{"error":1}`, `{"result":{"exit":256}}`,
		`{"result":{"exit":-1}}`, `{"error":"x"}trailing`, `[]`, `{"error":"\q"}`, `{"result":{"exit":12345}}`} {
		if got, ok := agent.ParseFastReply([]byte(bad)); ok {
			t.Errorf("%s: accepted as %+v", bad, got)
		}
	}
}

func FuzzParseReply(f *testing.F) {
	f.Add([]byte(`{"result":{"exit":3,"duration":5,"error":"x"}}`))
	f.Add([]byte(`{"error":"\ud83d\ude00"}`))
	f.Fuzz(func(t *testing.T, msg []byte) {
		got, ok := agent.ParseFastReply(msg)
		var r reply
		// The daemon's encoder writes valid UTF-8 only; Go's decoder
		// replaces invalid bytes where the C code keeps them.
		if !ok || !utf8.Valid(msg) || json.Unmarshal(msg, &r) != nil {
			return
		}
		if strings.ContainsRune(r.Error, 0) || (r.Result != nil && strings.ContainsRune(r.Result.Error, 0)) {
			return // C strings end there; the daemon's messages hold none
		}
		if r.Error != got.Err && !(r.Error == "" && got.Err == "") {
			t.Fatalf("%q: error %q, Go %q", msg, got.Err, r.Error)
		}
		if r.Result != nil && (got.Exit != r.Result.ExitCode || got.ResultErr != r.Result.Error) {
			t.Fatalf("%q: result %+v, Go %+v", msg, got, *r.Result)
		}
	})
}
