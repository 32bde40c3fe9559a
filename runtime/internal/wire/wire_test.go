package wire

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func packetPair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "pair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.UnixConn)
	}
	a, b := conn(fds[0]), conn(fds[1])
	GrowBuffers(a)
	return a, b
}

// message stands for any of warden's messages.
type message struct {
	Argv   []string `json:"argv"`
	Cwd    string   `json:"cwd"`
	Signal int      `json:"signal,omitempty"`
}

func TestProtocolRoundTrip(t *testing.T) {
	a, b := packetPair(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	big := strings.Repeat("x", 200<<10)
	if err := Send(a, message{Argv: []string{"echo", big}, Cwd: "/w"}, int(w.Fd())); err != nil {
		t.Fatal(err)
	}
	var got message
	files, err := Receive(b, &got)
	if err != nil {
		t.Fatal(err)
	}
	defer CloseAll(files)
	if len(got.Argv) != 2 || got.Argv[1] != big || got.Cwd != "/w" || len(files) != 1 {
		t.Fatalf("got argv %d, cwd %q, %d files", len(got.Argv), got.Cwd, len(files))
	}
	// The passed descriptor is the pipe's write end, close-on-exec.
	if flags, _ := unix.FcntlInt(files[0].Fd(), unix.F_GETFD, 0); flags&unix.FD_CLOEXEC == 0 {
		t.Error("received descriptor is not close-on-exec")
	}
	files[0].WriteString("ok")
	buf := make([]byte, 2)
	if _, err := r.Read(buf); err != nil || string(buf) != "ok" {
		t.Fatalf("read %q through the passed descriptor: %v", buf, err)
	}
}

func TestProtocolRefusals(t *testing.T) {
	a, b := packetPair(t)
	if err := Send(a, message{Argv: []string{strings.Repeat("y", MaxMessage)}}); !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("oversized Send: %v", err)
	}
	// A peer that writes garbage or an oversized message gets an error,
	// and the connection stays usable for the next message.
	raw := func(data []byte) {
		if _, _, err := a.WriteMsgUnix(data, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	raw([]byte("{not json"))
	raw(make([]byte, MaxMessage+10))
	// One descriptor too many is named as such, not as a size.
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	fd := int(devnull.Fd())
	if _, _, err := a.WriteMsgUnix([]byte(`{}`), unix.UnixRights(fd, fd, fd, fd, fd), nil); err != nil {
		t.Fatal(err)
	}
	raw([]byte(`{"signal":9}`))
	var c message
	if _, err := Receive(b, &c); err == nil || !strings.Contains(err.Error(), "malformed") {
		t.Fatalf("garbage: %v", err)
	}
	if _, err := Receive(b, &c); !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("oversized: %v", err)
	}
	if _, err := Receive(b, &c); !errors.Is(err, ErrTooManyFDs) {
		t.Fatalf("five descriptors: %v", err)
	}
	if _, err := Receive(b, &c); err != nil || c.Signal != 9 {
		t.Fatalf("next message: %+v %v", c, err)
	}
	a.Close()
	if _, err := Receive(b, &c); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}

func TestFrames(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	big := []byte(strings.Repeat("y", MaxMessage))
	go func() {
		WriteFrame(a, FrameMessage, []byte(`{"op":"ping"}`))
		WriteFrame(a, FrameStdin, big)
		WriteFrame(a, FrameStdin, nil)
		a.Write([]byte{0, 0x10, 0, 1, FrameStdin}) // 1 MiB + 1: too large
	}()
	r := bufio.NewReader(b)
	var buf []byte
	for _, want := range []struct {
		kind byte
		size int
	}{{FrameMessage, 13}, {FrameStdin, MaxMessage}, {FrameStdin, 0}} {
		kind, payload, grown, err := ReadFrame(r, buf)
		buf = grown
		if err != nil || kind != want.kind || len(payload) != want.size {
			t.Fatalf("frame: kind %d, %d bytes, %v; want kind %d, %d bytes", kind, len(payload), err, want.kind, want.size)
		}
	}
	if _, _, _, err := ReadFrame(r, buf); !errors.Is(err, ErrBadFrame) || !strings.Contains(err.Error(), "1048577 bytes") {
		t.Errorf("a frame above the limit: %v; want ErrBadFrame", err)
	}
	if err := WriteFrame(a, FrameStdout, append(big, 'z')); !errors.Is(err, ErrMessageTooLarge) {
		t.Errorf("writing a frame above the limit: %v", err)
	}
	// The end between frames is the peer's close; within one, a cut.
	c, d := net.Pipe()
	go func() { c.Write([]byte{0, 0, 0, 9, FrameMessage, '{'}); c.Close() }()
	if _, _, _, err := ReadFrame(bufio.NewReader(d), nil); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a frame cut short: %v", err)
	}
	e, f := net.Pipe()
	e.Close()
	if _, _, _, err := ReadFrame(bufio.NewReader(f), nil); !errors.Is(err, ErrClosed) {
		t.Errorf("the end between frames: %v", err)
	}
}
