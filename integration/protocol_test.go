package integration

import (
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// rawCall sends one message on a new connection to the root's daemon,
// with fds attached, and returns the daemon's replies until it closes.
func (r *wardenRoot) rawCall(msg string, fds ...int) []map[string]any {
	r.t.Helper()
	conn, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: filepath.Join(r.root, "warden.sock"), Net: "unixpacket"})
	if err != nil {
		r.t.Fatal(err)
	}
	defer conn.Close()
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := conn.WriteMsgUnix([]byte(msg), oob, nil); err != nil {
		r.t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(cliTimeout))
	var replies []map[string]any
	buf := make([]byte, 1<<20)
	for {
		n, _, _, _, err := conn.ReadMsgUnix(buf, make([]byte, 128))
		if err == io.EOF || err == nil && n == 0 {
			return replies
		}
		if err != nil {
			r.t.Fatalf("%s: %v", msg, err)
		}
		var m map[string]any
		if err := json.Unmarshal(buf[:n], &m); err != nil {
			r.t.Fatalf("reply %q: %v", buf[:n], err)
		}
		replies = append(replies, m)
		if _, ok := m["started"]; !ok {
			return replies // the last one
		}
	}
}

// TestProtocolVersion: a real daemon tells its protocol version on ping,
// serves requests without a version (older clients) as version 1, and
// refuses an unknown version with unsupported_version before it does
// anything; bad requests get invalid_input.
func TestProtocolVersion(t *testing.T) {
	r := newRoot(t)
	ws := tempDir(t)
	id := r.create("proto", r.policy(resultPolicy), ws)

	for _, msg := range []string{`{"op":"ping"}`, `{"v":1,"op":"ping"}`} {
		if got := r.rawCall(msg); len(got) != 1 || got[0]["v"] != float64(1) || len(got[0]) != 1 {
			t.Errorf("%s: replies %v, want [{v: 1}]", msg, got)
		}
	}
	if got := r.rawCall(`{"op":"list"}`); len(got) != 1 || !strings.Contains(jsonText(got[0]), id) {
		t.Errorf("list without a version: %v", got)
	}

	devNull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	stdio := []int{int(devNull.Fd()), int(devNull.Fd()), int(devNull.Fd())}
	touch := `"exec":{"argv":["touch","ran-%s"]}`
	for _, c := range []struct{ name, msg, code, text string }{
		{"v2", `{"v":2,"op":"list"}`, "unsupported_version", "protocol version 2 is not spoken here: this warden daemon speaks version 1"},
		{"v2 exec", `{"v":2,"op":"exec","id":"` + id + `",` + strings.Replace(touch, "%s", "v2", 1) + `}`, "unsupported_version", "protocol version 2"},
		{"v-1", `{"v":-1,"op":"ping"}`, "unsupported_version", "protocol version -1"},
		{"unknown op", `{"v":1,"op":"frobnicate"}`, "invalid_input", `unknown operation "frobnicate"`},
		{"not json", `op=ping`, "invalid_input", "bad request: malformed message"},
		{"wrong type", `{"v":"1","op":"ping"}`, "invalid_input", "bad request: malformed message"},
		{"no session", `{"v":1,"op":"remove","id":"` + id + `-gone"}`, "no_such_session", "no such session: " + id + "-gone"},
	} {
		got := r.rawCall(c.msg, stdio...)
		if len(got) != 1 || got[0]["code"] != c.code || !strings.HasPrefix(jsonString(got[0]["error"]), c.text) {
			t.Errorf("%s: replies %v, want code %s and %q", c.name, got, c.code, c.text)
		}
	}
	if _, err := os.Stat(filepath.Join(ws, "ran-v2")); err == nil {
		t.Error("an exec of an unknown version ran")
	}
	// An exec without a version, as clients before versions sent it.
	got := r.rawCall(`{"op":"exec","id":"`+id+`",`+strings.Replace(touch, "%s", "v0", 1)+`}`, stdio...)
	if len(got) != 1 || jsonText(got[0]["result"]) != `{"duration":`+jsonText(got[0]["result"].(map[string]any)["duration"])+`,"exit":0}` {
		t.Errorf("exec without a version: %v", got)
	}
	if _, err := os.Stat(filepath.Join(ws, "ran-v0")); err != nil {
		t.Errorf("exec without a version did not run: %v", err)
	}
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func jsonString(v any) string {
	s, _ := v.(string)
	return s
}
