package daemon

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/runtime/agent"
	"github.com/warden-sandbox/warden/runtime/internal/protocol"
	"github.com/warden-sandbox/warden/runtime/internal/wire"
	"github.com/warden-sandbox/warden/runtime/sandbox"
)

var update = flag.Bool("update", false, "rewrite testdata/protocol from the types")

// protocolMessages is one of each message of the socket protocol, every
// field set: testdata/protocol/NAME.json holds its JSON.
func protocolMessages() map[string]any {
	vars := policies.Vars{SkillDir: "/skills/web", WorkDir: "/work/chat-7", DataDir: "/data/web", Home: "/root"}
	created := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	mem, cpu := uint64(1<<20), uint64(25_000_000)
	pool := &PoolRequest{Files: []string{"/skills/web/policy.toml"}, Vars: vars, Size: 2}
	pools := []PoolInfo{{Policy: "web", Files: []string{"/skills/web/policy.toml"}, PolicyHash: "sha256:ae67", Key: "k1",
		Size: 2, Ready: 1, Claimed: 1, Refilling: 1, Hits: 3, Misses: 1, Error: "last refill: out of memory"}}
	return map[string]any{
		"request-ping":        request{V: 1, Op: "ping"},
		"request-create":      request{V: 1, Op: "create", ID: "chat-7", Create: &createRequest{PolicyTOML: "name = \"web\"\n", Vars: vars}},
		"request-exec":        request{V: 1, Op: "exec", ID: "chat-7", Create: &createRequest{PolicyTOML: "name = \"web\"\n", Vars: vars}, Exec: &execRequest{Argv: []string{"sh", "-c", "echo hi"}, Env: []string{"LANG=C.UTF-8"}, CallerEnv: []string{"TZ=UTC"}, Cwd: "sub", Timeout: 5 * time.Second, Tty: true, Rows: 24, Cols: 80}},
		"request-do":          request{V: 1, Op: "do", ID: "do-3f2a9c1b7e04", Create: &createRequest{PolicyTOML: "name = \"web\"\n", Vars: vars}, Exec: &execRequest{Argv: []string{"sh", "-c", "echo hi"}, Env: []string{"LANG=C.UTF-8"}, CallerEnv: []string{"TZ=UTC"}, Cwd: "sub", Timeout: 5 * time.Second}},
		"request-list":        request{V: 1, Op: "list"},
		"request-remove":      request{V: 1, Op: "remove", ID: "chat-7", Force: true},
		"request-gc":          request{V: 1, Op: "gc"},
		"request-pool.fill":   request{V: 1, Op: "pool.fill", Pool: pool},
		"request-pool.status": request{V: 1, Op: "pool.status"},
		"request-pool.drain":  request{V: 1, Op: "pool.drain", Pool: &PoolRequest{Files: []string{"/skills/web/policy.toml"}}},
		"request-freeze":      request{V: 1, Op: "freeze", ID: "chat-7"},
		"request-thaw":        request{V: 1, Op: "thaw", ID: "chat-7"},
		"request-kill":        request{V: 1, Op: "kill", ID: "chat-7"},
		"request-freeze.all":  request{V: 1, Op: "freeze.all"},
		"request-thaw.all":    request{V: 1, Op: "thaw.all"},
		"reply-kill":          reply{Killed: 4},
		"request-stats":       request{V: 1, Op: "stats"},
		"reply-stats": reply{Stats: &Stats{Since: created, Commands: map[string]int64{"ok": 3, "failed": 1},
			ExecSeconds: protocol.Histogram{Bounds: []float64{0.01, 1}, Counts: []uint64{2, 3}, Count: 4, Sum: 7.5},
			Egress:      protocol.EgressStats{Allowed: 2, Denied: 1, BytesOut: 512, BytesIn: 4096},
			Approvals:   &protocol.ApprovalStats{Pending: 1, Answered: map[string]int64{"approved": 2, "denied": 1, "timeout": 0, "withdrawn": 0}},
			Sessions: []SessionStats{{ID: "chat-7", MemoryBytes: &mem, CPUNanos: &cpu, UsageError: "cgroup gone",
				Commands: []RunningCommand{{Argv: []string{"sleep", "60"}, Cwd: "/workspace", Started: created}}}}}},
		"request-approvals.ls":      request{V: 1, Op: "approvals.ls"},
		"request-approvals.wait":    request{V: 1, Op: "approvals.wait"},
		"request-approvals.approve": request{V: 1, Op: "approvals.approve", ID: "ap-3f2a91c04e", Reason: "reviewed the diff"},
		"request-approvals.deny":    request{V: 1, Op: "approvals.deny", ID: "ap-3f2a91c04e", Reason: "not on a Friday", By: "dashboard login 5c1e0a9f"},
		"reply-approvals": reply{Approvals: []Approval{{ID: "ap-3f2a91c04e", Session: "chat-7", Policy: "web", Argv: []string{"git", "push", "origin", "main"},
			Cwd: "/workspace/repo", Parent: "sh -c make release", Rule: "commands.ask \"git push **\"", Since: created, Timeout: 5 * time.Minute}}},
		"control":       control{Signal: 2},
		"reply-ping":    reply{V: 1},
		"reply-error":   reply{Error: "no such session: chat-7", Code: CodeNoSuchSession},
		"reply-started": reply{Started: true},
		"reply-result":  reply{Result: &sandbox.ExecResult{ExitCode: 137, Signal: 9, OOM: true, TimedOut: true, Duration: 1500 * time.Millisecond, Error: "killed: timeout 1.5s exceeded"}},
		"reply-list": reply{Sessions: []SessionInfo{{ID: "chat-7", Policy: "web", Workspace: "/work/chat-7", State: "running",
			Created: created, LastUsed: created.Add(time.Minute), Execs: 4, Running: 1, Pool: "k1"}}},
		"reply-gc":   reply{Removed: []string{"sessions/old-1", "containers/old-1"}},
		"reply-pool": reply{Pools: pools},
	}
}

// TestProtocolSchema holds the socket's messages to their JSON: a field
// renamed, retyped or dropped changes a golden file (go test -update
// rewrites them, and the diff is the protocol change to document in
// docs/protocol.md), and every golden file decodes, with no field left
// over, into its type and back to the same JSON.
func TestProtocolSchema(t *testing.T) {
	msgs := protocolMessages()
	for name, msg := range msgs {
		got, err := json.MarshalIndent(msg, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, '\n')
		path := filepath.Join("testdata", "protocol", name+".json")
		if *update {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (go test -update writes it)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: the protocol changed:\n got: %s\nwant: %s", name, got, want)
		}
		back := reflect.New(reflect.TypeOf(msg))
		if err := strictDecode(want, back.Interface()); err != nil {
			t.Errorf("%s: %v", name, err)
		} else if !reflect.DeepEqual(back.Elem().Interface(), msg) {
			t.Errorf("%s: decodes to %+v, want %+v", name, back.Elem().Interface(), msg)
		}
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "protocol", "*.json")) // stream-exec.txt: TestStreamFrames
	if len(files) != len(msgs) {
		t.Errorf("testdata/protocol has %d files for %d messages: remove the stale ones", len(files), len(msgs))
	}
	// Every op the daemon serves has its request.
	for _, op := range []string{"ping", "create", "exec", "do", "list", "remove", "gc", "pool.fill", "pool.status", "pool.drain", "freeze", "thaw", "kill", "freeze.all", "thaw.all", "stats", "approvals.ls", "approvals.wait", "approvals.approve", "approvals.deny"} {
		if _, ok := msgs["request-"+op]; !ok {
			t.Errorf("no golden request for op %s", op)
		}
	}
	if agent.FastProtocolVersion != ProtocolVersion {
		t.Errorf("the C fast path sends version %d, the daemon speaks %d", agent.FastProtocolVersion, ProtocolVersion)
	}
}

func strictDecode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// TestProtocolDoc keeps docs/protocol.md true: each of its JSON blocks is
// one message that decodes, with no field left over, into a request, a
// reply or a control message, and every error code is in its table.
func TestProtocolDoc(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "protocol.md"))
	if err != nil {
		t.Fatal(err)
	}
	var block *strings.Builder
	start, n := 0, 0
	sc := bufio.NewScanner(bytes.NewReader(data))
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		switch {
		case block == nil && strings.TrimSpace(text) == "```json":
			block, start = &strings.Builder{}, line
		case block != nil && strings.TrimSpace(text) == "```":
			n++
			msg := []byte(block.String())
			if strictDecode(msg, &request{}) != nil && strictDecode(msg, &reply{}) != nil && strictDecode(msg, &control{}) != nil {
				t.Errorf("docs/protocol.md:%d: not a request, reply or control message of the protocol:\n%s", start, msg)
			}
			block = nil
		case block != nil:
			block.WriteString(text + "\n")
		}
	}
	if n < 10 {
		t.Errorf("docs/protocol.md has %d JSON blocks; each message should have an example", n)
	}
	for _, c := range Codes {
		if !strings.Contains(string(data), "| `"+string(c)+"` |") {
			t.Errorf("docs/protocol.md does not list code %s in its table", c)
		}
	}
}

// streamExchange is an exec on the stream socket, frame by frame, as
// wire.WriteFrame puts it on the wire: a header's bytes in hex, then the
// payload (a message's JSON, or the data quoted).
func streamExchange(t *testing.T) string {
	var out strings.Builder
	frame := func(kind byte, payload []byte) {
		var buf bytes.Buffer
		c1, c2 := net.Pipe()
		go func() { wire.WriteFrame(c1, kind, payload); c1.Close() }()
		buf.ReadFrom(c2)
		hdr := buf.Bytes()[:wire.FrameHeader]
		for _, b := range hdr {
			fmt.Fprintf(&out, "%02x ", b)
		}
		if kind == wire.FrameMessage {
			fmt.Fprintf(&out, " %s\n", buf.Bytes()[wire.FrameHeader:])
		} else {
			fmt.Fprintf(&out, " %q\n", buf.Bytes()[wire.FrameHeader:])
		}
	}
	message := func(v any) {
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		frame(wire.FrameMessage, data)
	}
	out.WriteString("client → daemon\n")
	message(request{V: 1, Op: "exec", ID: "chat-7", Exec: &execRequest{Argv: []string{"cat", "-", "missing"}}})
	frame(wire.FrameStdin, []byte("hi\n"))
	frame(wire.FrameStdin, nil)
	out.WriteString("daemon → client\n")
	frame(wire.FrameStdout, []byte("hi\n"))
	frame(wire.FrameStderr, []byte("cat: missing: No such file or directory\n"))
	message(reply{Result: &sandbox.ExecResult{ExitCode: 1, Duration: 1843000}})
	return out.String()
}

// TestStreamFrames holds the stream socket's framing: the frames of an
// exec (testdata/protocol/stream-exec.txt) and the kinds' numbers, and
// docs/protocol.md shows the same exchange and table.
func TestStreamFrames(t *testing.T) {
	got := streamExchange(t)
	path := filepath.Join("testdata", "protocol", "stream-exec.txt")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if got != string(want) {
		t.Errorf("the stream framing changed:\n got:\n%s\nwant:\n%s", got, want)
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "protocol.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "```text\n"+got+"```") {
		t.Errorf("docs/protocol.md does not show the stream exchange as it is:\n%s", got)
	}
	for kind, name := range map[byte]string{wire.FrameStdin: "stdin", wire.FrameStdout: "stdout", wire.FrameStderr: "stderr", wire.FrameMessage: "message"} {
		if row := fmt.Sprintf("| `%d` | %s |", kind, name); !strings.Contains(string(doc), row) {
			t.Errorf("docs/protocol.md's frame table lacks %q", row)
		}
	}
}
