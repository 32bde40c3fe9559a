package daemon

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/runtime/internal/wire"
	"github.com/warden-sandbox/warden/spec"
)

// streamPeer is a client of the SOCK_STREAM socket (ROOT/warden.stream.sock),
// for those that cannot pass descriptors: messages and the command's stdio
// travel as frames (wire.ReadFrame; docs/protocol.md). For an exec the
// daemon makes the three pipes a packet client would have passed and
// relays them, so the sandbox runs the command exactly as it would with
// the client's own descriptors.
type streamPeer struct {
	c   *net.UnixConn
	rmu sync.Mutex // held by receive, and by close while it drains
	r   *bufio.Reader
	buf []byte

	wmu    sync.Mutex // frames from the output relays and replies go out whole
	broken bool       // a bad frame was answered: nothing more is sent

	// Set by stdio, then used only by receive: where stdin frames go;
	// nil once stdin has ended.
	inExec bool
	stdin  *os.File
}

// stdinWait bounds one wait to write stdin to a command that does not read
// it, so that a client gone meanwhile is noticed (its command is killed).
const stdinWait = 200 * time.Millisecond

// outputGrace is how long, once the command has ended, its output may
// take to reach its end: a process it left behind that holds stdout open
// does not keep the result from the client.
const outputGrace = 100 * time.Millisecond

// resultWait bounds how long, once the command has ended, a client may
// take to read the rest of its output and the result.
const resultWait = 30 * time.Second

// relayPipeSize is the capacity asked for the relayed pipes (the kernel's
// default is 64 KiB), so bulk output moves in large frames.
const relayPipeSize = 1 << 20

func newStreamPeer(c *net.UnixConn) peer {
	// A send buffer of the packet socket's size: a relay's frame goes out
	// while the client is still reading the one before, instead of each
	// write waiting for the client to read (the default is ~208 KiB).
	wire.GrowBuffers(c)
	return &streamPeer{c: c, r: bufio.NewReaderSize(c, 16<<10)}
}

func (s *streamPeer) conn() *net.UnixConn { return s.c }

// lingerWait bounds how long the daemon, done with a connection, reads on
// until the client closes it.
const lingerWait = time.Second

// close ends the connection the way that loses no reply: the daemon's
// side first, then, once the client has closed (or lingerWait passed),
// the rest. Closed at once with stdin frames still unread, the socket
// would reset the client, whose unread reply may be dropped with it.
func (s *streamPeer) close() {
	s.c.CloseWrite()
	s.c.SetReadDeadline(time.Now().Add(lingerWait))
	s.rmu.Lock() // a control loop's receive ends at the same end or deadline
	defer s.rmu.Unlock()
	s.r.WriteTo(io.Discard)
	s.c.Close()
}

// receive reads frames until a message; stdin frames met on the way feed
// the running command. A frame that breaks the protocol is answered
// with an invalid_input error and ends the connection.
func (s *streamPeer) receive(v any) ([]*os.File, error) {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	for {
		kind, payload, buf, err := wire.ReadFrame(s.r, s.buf)
		s.buf = buf
		if errors.Is(err, wire.ErrBadFrame) {
			return nil, s.refuse(err)
		}
		if err != nil {
			return nil, err
		}
		switch {
		case kind == wire.FrameMessage:
			if err := json.Unmarshal(payload, v); err != nil {
				return nil, s.refuse(fmt.Errorf("malformed message: %w", err))
			}
			return nil, nil
		case kind == wire.FrameStdin && s.inExec:
			if err := s.feed(payload); err != nil {
				return nil, err
			}
		case kind == wire.FrameStdin:
			return nil, s.refuse(fmt.Errorf("%w: stdin data before an exec request", wire.ErrBadFrame))
		default:
			return nil, s.refuse(fmt.Errorf("%w: kind %d is not one a client sends (0 stdin, 3 message)", wire.ErrBadFrame, kind))
		}
	}
}

// refuse answers a frame that breaks the protocol and closes the sending
// side: the client reads the error, then the end.
func (s *streamPeer) refuse(err error) error {
	data, _ := json.Marshal(reply{Error: "bad request: " + err.Error(), Code: CodeInvalidInput})
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if !s.broken {
		wire.WriteFrame(s.c, wire.FrameMessage, data)
		s.broken = true
		s.c.CloseWrite()
	}
	return err
}

// feed writes one stdin frame to the command; an empty one ends its
// stdin. What comes after the command closed its stdin is dropped, as a
// pipe's writer would see it go.
func (s *streamPeer) feed(p []byte) error {
	if s.stdin == nil {
		return nil
	}
	if len(p) == 0 {
		s.stdin.Close()
		s.stdin = nil
		return nil
	}
	for len(p) > 0 {
		s.stdin.SetWriteDeadline(time.Now().Add(stdinWait))
		n, err := s.stdin.Write(p)
		p = p[n:]
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			if s.hungUp() {
				return wire.ErrClosed
			}
		case err != nil:
			s.stdin.Close()
			s.stdin = nil
			return nil
		}
	}
	return nil
}

// hungUp reports whether the client has closed its side, whatever it
// sent before that is still unread.
func (s *streamPeer) hungUp() bool {
	raw, err := s.c.SyscallConn()
	if err != nil {
		return true
	}
	hung := false
	raw.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
		if n, _ := unix.Poll(fds, 0); n > 0 && fds[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR) != 0 {
			hung = true
		}
	})
	return hung
}

func (s *streamPeer) send(r reply, fds ...int) error {
	if len(fds) > 0 {
		return errors.New("the stream socket carries no descriptors")
	}
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return s.write(wire.FrameMessage, data)
}

func (s *streamPeer) write(kind byte, payload []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.broken {
		return wire.ErrClosed
	}
	return wire.WriteFrame(s.c, kind, payload)
}

func (s *streamPeer) gone() bool {
	return s.r.Buffered() == 0 && wire.PeerGone(s.c)
}

// stdio makes the command's three pipes and relays them: stdin frames to
// the first (receive), the other two to stdout and stderr frames.
func (s *streamPeer) stdio(tty bool, files []*os.File) ([3]*os.File, func(), error) {
	var none [3]*os.File
	if tty {
		return none, nil, kindf(spec.ErrInvalid, "a terminal (tty) needs the packet socket warden.sock, which passes it as a descriptor; the stream socket relays stdin, stdout and stderr only")
	}
	if len(files) > 0 {
		wire.CloseAll(files)
	}
	var ends [6]*os.File // stdin r, w; stdout r, w; stderr r, w
	for i := 0; i < 6; i += 2 {
		r, w, err := os.Pipe()
		if err != nil {
			wire.CloseAll(ends[:i])
			return none, nil, err
		}
		unix.FcntlInt(w.Fd(), unix.F_SETPIPE_SZ, relayPipeSize) // a smaller pipe still works
		ends[i], ends[i+1] = r, w
	}
	s.stdin, s.inExec = ends[1], true
	var relays sync.WaitGroup
	relays.Add(2)
	go s.relay(ends[2], wire.FrameStdout, &relays)
	go s.relay(ends[4], wire.FrameStderr, &relays)
	done := func() {
		// The sandbox holds its own copies; ours would keep the pipes open.
		ends[0].Close()
		ends[3].Close()
		ends[5].Close()
		grace := time.Now().Add(outputGrace)
		ends[2].SetReadDeadline(grace)
		ends[4].SetReadDeadline(grace)
		// A client that does not read what is left (and the result) in
		// this time is dropped, so its handler ends.
		s.c.SetWriteDeadline(time.Now().Add(resultWait))
		relays.Wait()
		ends[1].Close() // receive may still hold it: a closed file fails its write
		ends[2].Close()
		ends[4].Close()
	}
	return [3]*os.File{ends[0], ends[3], ends[5]}, done, nil
}

// relayBuffers hold output between its pipe and the client: taken only
// once output is there to read, so waiting commands hold none.
var relayBuffers = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// relay sends what the command writes to r as frames of kind. A client
// that stops reading is left to the control loop to notice; the output
// is drained meanwhile so the command never blocks on it.
func (s *streamPeer) relay(r *os.File, kind byte, wg *sync.WaitGroup) {
	defer wg.Done()
	raw, err := r.SyscallConn()
	if err != nil {
		return
	}
	failed := false
	for {
		var buf *[]byte
		var n int
		var rerr error
		err := raw.Read(func(fd uintptr) bool {
			buf = relayBuffers.Get().(*[]byte)
			n, rerr = unix.Read(int(fd), *buf)
			if rerr == unix.EAGAIN {
				relayBuffers.Put(buf)
				return false
			}
			return true
		})
		if n > 0 && !failed {
			failed = s.write(kind, (*buf)[:n]) != nil
		}
		if buf != nil && err == nil {
			relayBuffers.Put(buf)
		}
		if err != nil || rerr != nil || n <= 0 {
			return
		}
	}
}
