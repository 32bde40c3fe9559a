package integration

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// streamFrame is one frame of the stream socket (docs/protocol.md).
type streamFrame struct {
	kind    byte
	payload []byte
}

func writeFrame(t *testing.T, c net.Conn, kind byte, payload []byte) {
	t.Helper()
	hdr := make([]byte, 5)
	binary.BigEndian.PutUint32(hdr, uint32(len(payload)))
	hdr[4] = kind
	if _, err := c.Write(append(hdr, payload...)); err != nil {
		t.Fatal(err)
	}
}

// streamResult is what a stream connection gave back: the output frames
// joined, the last message, and whether the daemon then closed.
type streamResult struct {
	stdout, stderr []byte
	last           map[string]any
	closed         bool
}

func (r *wardenRoot) dialStream() net.Conn {
	r.t.Helper()
	c, err := net.Dial("unix", filepath.Join(r.root, "warden.stream.sock"))
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { c.Close() })
	return c
}

// streamCall sends frames on a new stream connection and reads until
// the last message (a result or an error) and the connection's end.
func (r *wardenRoot) streamCall(frames ...streamFrame) streamResult {
	r.t.Helper()
	c := r.dialStream()
	go func() {
		for _, f := range frames {
			hdr := make([]byte, 5)
			binary.BigEndian.PutUint32(hdr, uint32(len(f.payload)))
			hdr[4] = f.kind
			if _, err := c.Write(append(hdr, f.payload...)); err != nil {
				return // the daemon refused and closed: its reply says why
			}
		}
	}()
	return readStream(r.t, c)
}

func readStream(t *testing.T, c net.Conn) streamResult {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(cliTimeout))
	var res streamResult
	hdr := make([]byte, 5)
	for {
		if _, err := io.ReadFull(c, hdr); err != nil {
			if res.last == nil {
				t.Fatalf("the stream ended without a last message: %v", err)
			}
			res.closed = err == io.EOF
			return res
		}
		payload := make([]byte, binary.BigEndian.Uint32(hdr))
		if _, err := io.ReadFull(c, payload); err != nil {
			t.Fatal(err)
		}
		switch hdr[4] {
		case 1:
			res.stdout = append(res.stdout, payload...)
		case 2:
			res.stderr = append(res.stderr, payload...)
		case 3:
			if res.last != nil {
				t.Fatalf("a message after the last one: %s", payload)
			}
			if err := json.Unmarshal(payload, &res.last); err != nil {
				t.Fatalf("a message that is not JSON: %q", payload)
			}
		default:
			t.Fatalf("a frame of kind %d from the daemon", hdr[4])
		}
	}
}

func message(s string) streamFrame { return streamFrame{3, []byte(s)} }

// TestStreamSocket: the stream socket serves the same protocol as the
// packet one, with the command's stdio as frames: output byte-exact and
// apart, stdin from frames, exit codes, version refusal, no terminal; a
// frame that breaks the protocol gets invalid_input and the end, and the
// daemon goes on; closing the connection kills the command.
func TestStreamSocket(t *testing.T) {
	r := newRoot(t)
	ws := tempDir(t)
	id := r.create("stream", r.policy("name = \"stream\"\n[fs]\nwrite = [\"$WORK_DIR\"]\n[exec]\nallow = [\"sh\", \"cat\", \"sleep\", \"touch\"]\n"), ws)
	fi, err := os.Stat(filepath.Join(r.root, "warden.stream.sock"))
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the stream socket: %v, %v; want a socket of mode 0600", fi, err)
	}

	if got := r.streamCall(message(`{"v":1,"op":"ping"}`)); jsonText(got.last) != `{"v":1}` || !got.closed {
		t.Errorf("ping: %+v", got)
	}
	if got := r.streamCall(message(`{"v":2,"op":"ping"}`)); got.last["code"] != "unsupported_version" {
		t.Errorf("v2 ping: %v", got.last)
	}

	// 3 MiB through cat, in frames of varied sizes, then the end of stdin.
	input := make([]byte, 3<<20+17)
	rand.Read(input)
	frames := []streamFrame{message(`{"v":1,"op":"exec","id":"` + id + `","exec":{"argv":["cat"]}}`)}
	for rest, n := input, 1; len(rest) > 0; n = n*3 + 1 {
		n = min(n, len(rest), 1<<20)
		frames = append(frames, streamFrame{0, rest[:n]})
		rest = rest[n:]
	}
	frames = append(frames, streamFrame{0, nil})
	got := r.streamCall(frames...)
	res, _ := got.last["result"].(map[string]any)
	if !bytes.Equal(got.stdout, input) || len(got.stderr) != 0 || res == nil || res["exit"] != float64(0) {
		t.Errorf("cat of %d bytes: stdout %d bytes (equal %v), stderr %q, last %v", len(input), len(got.stdout), bytes.Equal(got.stdout, input), got.stderr, got.last)
	}

	got = r.streamCall(message(`{"v":1,"op":"exec","id":"` + id + `","exec":{"argv":["sh","-c","echo out; echo err >&2; exit 3"]}}`))
	res, _ = got.last["result"].(map[string]any)
	if string(got.stdout) != "out\n" || string(got.stderr) != "err\n" || res == nil || res["exit"] != float64(3) || !got.closed {
		t.Errorf("exit 3: stdout %q, stderr %q, last %v", got.stdout, got.stderr, got.last)
	}
	got = r.streamCall(message(`{"v":1,"op":"exec","id":"` + id + `","exec":{"argv":["sh"],"tty":true}}`))
	if got.last["code"] != "invalid_input" || !strings.Contains(jsonString(got.last["error"]), "packet socket") {
		t.Errorf("tty on the stream socket: %v", got.last)
	}

	big := make([]byte, 5)
	binary.BigEndian.PutUint32(big, 2<<20)
	big[4] = 3
	for _, c := range []struct {
		name string
		send []streamFrame
		raw  []byte
		text string
	}{
		{name: "unknown kind", send: []streamFrame{{7, []byte("x")}}, text: "kind 7"},
		{name: "output kind from a client", send: []streamFrame{{1, []byte("x")}}, text: "kind 1"},
		{name: "stdin before a request", send: []streamFrame{{0, []byte("x")}}, text: "stdin data before an exec request"},
		{name: "not json", send: []streamFrame{message("op=ping")}, text: "malformed message"},
		{name: "too large", raw: big, text: "a frame of 2097152 bytes"},
		{name: "bad frame during an exec", send: []streamFrame{message(`{"v":1,"op":"exec","id":"` + id + `","exec":{"argv":["sh","-c","sleep 3; touch /workspace/bad-frame-ran"]}}`), {9, nil}}, text: "kind 9"},
	} {
		var got streamResult
		if c.raw != nil {
			conn := r.dialStream()
			conn.Write(c.raw)
			got = readStream(t, conn)
		} else {
			got = r.streamCall(c.send...)
		}
		if got.last["code"] != "invalid_input" || !strings.Contains(jsonString(got.last["error"]), c.text) || !got.closed {
			t.Errorf("%s: %+v; want invalid_input saying %q, then the end", c.name, got, c.text)
		}
	}

	// Closing the connection kills the command, as on the packet socket.
	conn := r.dialStream()
	writeFrame(t, conn, 3, []byte(`{"v":1,"op":"exec","id":"`+id+`","exec":{"argv":["sh","-c","sleep 3; touch /workspace/closed-ran"]}}`))
	time.Sleep(300 * time.Millisecond)
	conn.Close()
	time.Sleep(4 * time.Second)
	for _, f := range []string{"closed-ran", "bad-frame-ran"} {
		if _, err := os.Stat(filepath.Join(ws, f)); err == nil {
			t.Errorf("%s: the command went on after its connection ended", f)
		}
	}
	if got := r.rawCall(`{"v":1,"op":"list"}`); !strings.Contains(jsonText(got), `"running":0`) {
		t.Errorf("commands still running: %v", got)
	}
	// The daemon served all that and still does.
	if got := r.streamCall(message(`{"v":1,"op":"ping"}`)); jsonText(got.last) != `{"v":1}` {
		t.Errorf("ping after the bad frames: %+v", got)
	}
}

// TestStreamSocketRemoved: the daemon makes its stream socket again when
// something removes it, and removes both sockets when it stops.
func TestStreamSocketRemoved(t *testing.T) {
	r := newRoot(t)
	r.create("restream", r.policy("name = \"restream\"\n"), tempDir(t)) // starts the daemon
	sock := filepath.Join(r.root, "warden.stream.sock")
	if err := os.Remove(sock); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stream socket was not made again within 3s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := r.streamCall(message(`{"v":1,"op":"ping"}`)); jsonText(got.last) != `{"v":1}` {
		t.Errorf("ping on the stream socket made again: %+v", got)
	}
	r.killDaemon(syscall.SIGTERM)
	for _, f := range []string{"warden.sock", "warden.stream.sock"} {
		if _, err := os.Lstat(filepath.Join(r.root, f)); err == nil {
			t.Errorf("%s is left after the daemon stopped", f)
		}
	}
}
