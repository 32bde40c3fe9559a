package daemon

import (
	"net"
	"os"

	"github.com/warden-sandbox/warden/runtime/internal/wire"
	"github.com/warden-sandbox/warden/spec"
)

// peer is one client's connection, as the request handling sees it: the
// packet socket's, whose messages carry the command's descriptors, or the
// stream socket's, whose frames carry the command's stdio (stream.go).
// Everything else about a request is the same on both.
type peer interface {
	conn() *net.UnixConn
	close()
	// receive reads the next message (the request, then control messages)
	// and returns the descriptors that came with it.
	receive(v any) ([]*os.File, error)
	send(r reply, fds ...int) error
	// gone reports whether the client has closed and sent nothing more.
	gone() bool
	// stdio gives a command its stdin, stdout and stderr from what came
	// with the request; done, called once it has ended, lets its output
	// reach the client and releases them.
	stdio(tty bool, files []*os.File) (stdio [3]*os.File, done func(), err error)
}

// packetPeer is a client of the SOCK_SEQPACKET socket.
type packetPeer struct{ c *net.UnixConn }

func newPacketPeer(c *net.UnixConn) peer {
	wire.GrowBuffers(c)
	return packetPeer{c}
}

func (p packetPeer) conn() *net.UnixConn               { return p.c }
func (p packetPeer) close()                            { p.c.Close() }
func (p packetPeer) receive(v any) ([]*os.File, error) { return wire.Receive(p.c, v) }
func (p packetPeer) send(r reply, fds ...int) error    { return wire.Send(p.c, r, fds...) }
func (p packetPeer) gone() bool                        { return wire.PeerGone(p.c) }

// stdio is the request's own descriptors: the command writes straight to
// the client's pipes or files. Done closes the daemon's copies (the
// caller's close of them again does nothing) before the result goes out,
// so a client reading pipes finds their end with the result, not a
// wake-up later.
func (p packetPeer) stdio(tty bool, files []*os.File) ([3]*os.File, func(), error) {
	if tty {
		return [3]*os.File{}, func() {}, nil
	}
	if len(files) != 3 {
		return [3]*os.File{}, nil, kindf(spec.ErrInvalid, "want stdin, stdout and stderr descriptors, got %d", len(files))
	}
	return [3]*os.File{files[0], files[1], files[2]}, func() { wire.CloseAll(files) }, nil
}
