package egress

import (
	"bufio"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// idleFor is how long ago data last moved on any of the connections, read
// off the kernel's TCP_INFO, so a copy needs no per-read bookkeeping to
// notice an idle pair.
func idleFor(conns ...*net.TCPConn) time.Duration {
	least := time.Duration(-1)
	for _, c := range conns {
		raw, err := c.SyscallConn()
		if err != nil {
			return 0
		}
		var info *unix.TCPInfo
		var ierr error
		if err := raw.Control(func(fd uintptr) {
			info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		}); err != nil || ierr != nil || info == nil {
			return 0
		}
		for _, ms := range []uint32{info.Last_data_recv, info.Last_data_sent} {
			if d := time.Duration(ms) * time.Millisecond; least < 0 || d < least {
				least = d
			}
		}
	}
	return least
}

// watchdog closes a pair of connections once nothing has moved on either
// for idle. Per-direction deadlines would not do: one direction may be
// quiet for hours while the other streams.
type watchdog struct {
	fired atomic.Bool
	stop  chan struct{}
	done  chan struct{}
}

func watch(idle time.Duration, a, b *net.TCPConn) *watchdog {
	w := &watchdog{stop: make(chan struct{}), done: make(chan struct{})}
	a.SetDeadline(time.Time{})
	b.SetDeadline(time.Time{})
	go func() {
		defer close(w.done)
		wait := idle
		for {
			t := time.NewTimer(wait)
			select {
			case <-w.stop:
				t.Stop()
				return
			case <-t.C:
			}
			quiet := idleFor(a, b)
			if quiet >= idle {
				w.fired.Store(true)
				a.Close()
				b.Close()
				return
			}
			wait = max(idle-quiet, idle/16, time.Millisecond)
		}
	}()
	return w
}

// end stops the watchdog and reports whether it closed the pair.
func (w *watchdog) end() bool {
	close(w.stop)
	<-w.done
	return w.fired.Load()
}

// copyBufs holds the buffers copies go through.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, copyBufSize); return &b }}

// copyBufSize: between loopback sockets on this project's kernels a copy
// through a 256 KiB buffer moved ~1.3x what splice (TCPConn.ReadFrom) did,
// and as much as a 1 MiB buffer.
const copyBufSize = 256 << 10

// copyConn moves n bytes (all until EOF when n < 0) from src to dst through
// a user-space buffer (see copyBufSize).
func copyConn(dst, src *net.TCPConn, n int64) (int64, error) {
	buf := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(buf)
	var r io.Reader = struct{ io.Reader }{src} // hide WriteTo: no splice
	if n >= 0 {
		r = io.LimitReader(r, n)
	}
	m, err := io.CopyBuffer(struct{ io.Writer }{dst}, r, *buf)
	if err == nil && n >= 0 && m < n {
		err = io.ErrUnexpectedEOF
	}
	return m, err
}

// pipe joins a client and an upstream connection both ways until both
// directions end, flushing what the readers already buffered first. out is
// what went upstream, in what came back; idle reports the watchdog ended it.
func pipe(client *net.TCPConn, clientBuf *bufio.Reader, up *net.TCPConn, upBuf *bufio.Reader, idle time.Duration) (out, in int64, idled bool) {
	w := watch(idle, client, up)
	var wg sync.WaitGroup
	one := func(dst, src *net.TCPConn, buf *bufio.Reader, n *int64) {
		defer wg.Done()
		if buf != nil && buf.Buffered() > 0 {
			b, _ := buf.Peek(buf.Buffered())
			k, err := dst.Write(b)
			*n += int64(k)
			if err != nil {
				client.Close()
				up.Close()
				return
			}
		}
		m, err := copyConn(dst, src, -1)
		*n += m
		if err != nil {
			// An error ends both directions.
			client.Close()
			up.Close()
			return
		}
		dst.CloseWrite()
	}
	wg.Add(2)
	go one(up, client, clientBuf, &out)
	one(client, up, upBuf, &in)
	wg.Wait()
	return out, in, w.end()
}
