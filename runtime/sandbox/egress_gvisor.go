package sandbox

import (
	"fmt"
	"net"
	"os"
	"sync"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/runtime/internal/wire"
)

// spareUpstreams is how many upstreams a gVisor agent holds ready: a
// connection made in the sandbox takes one at once, and the host sends the
// next while it is served.
const spareUpstreams = 4

// egressUpstream passes the agent one end of a new unix stream socket, the
// other end of which this process keeps for the egress proxy.
type egressUpstream struct {
	Upstream uint64 `json:"upstream"`
}

// egressUsed is the agent's word that a connection made in the sandbox
// now flows through upstream Used.
type egressUsed struct {
	Used uint64 `json:"used"`
}

// agentEgress opens a gVisor sandbox's egress channel and returns the
// listener the session's proxy serves. gVisor's network stack is its own:
// no listener can be made in it from the host, and the sandbox may reach
// no host socket (--host-uds=create). Its agent listens on the proxy's
// address inside and relays each connection through an upstream this
// process made and passed in beforehand; the proxy gets the host's end
// once the agent reports it used, and checks it as any other connection.
func agentEgress(socket string) (net.Listener, error) {
	conn, err := wire.DialPacket(socket)
	if err != nil {
		return nil, fmt.Errorf("agent unreachable: %w", err)
	}
	if err := wire.Send(conn, execRequest{Egress: true}); err != nil {
		conn.Close()
		return nil, err
	}
	ln := &handoff{conns: make(chan net.Conn), done: make(chan struct{}), channel: conn}
	ready := map[uint64]net.Conn{}
	var next uint64
	give := func() error {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fds[1])
		f := os.NewFile(uintptr(fds[0]), "egress upstream")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			return err
		}
		next++
		if err := wire.Send(conn, egressUpstream{Upstream: next}, fds[1]); err != nil {
			c.Close()
			return err
		}
		ready[next] = c
		return nil
	}
	closeReady := func() {
		for _, c := range ready {
			c.Close()
		}
	}
	for range spareUpstreams {
		if err := give(); err != nil {
			closeReady()
			ln.Close()
			return nil, err
		}
	}
	go func() {
		defer ln.Close()
		defer closeReady()
		for {
			var m egressUsed
			files, err := wire.Receive(conn, &m)
			wire.CloseAll(files)
			if err != nil {
				logrus.Debugf("egress channel of %s: %v", socket, err)
				return
			}
			c := ready[m.Used]
			if c == nil {
				continue
			}
			delete(ready, m.Used)
			select {
			case ln.conns <- c:
			case <-ln.done:
				c.Close()
				return
			}
			if err := give(); err != nil {
				logrus.Debugf("egress channel of %s: %v", socket, err)
				return
			}
		}
	}()
	return ln, nil
}

// handoff is a listener whose connections another goroutine hands over;
// closing it closes the channel they come from.
type handoff struct {
	conns   chan net.Conn
	done    chan struct{}
	once    sync.Once
	channel *net.UnixConn
}

func (h *handoff) Accept() (net.Conn, error) {
	select {
	case c := <-h.conns:
		return c, nil
	case <-h.done:
		return nil, net.ErrClosed
	}
}

func (h *handoff) Close() error {
	h.once.Do(func() {
		close(h.done)
		h.channel.Close()
	})
	return nil
}

func (h *handoff) Addr() net.Addr { return &net.UnixAddr{Name: "agent egress channel", Net: "unix"} }
