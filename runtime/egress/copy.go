package egress

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// stream is a socket a copy splices from and to: a sandbox's side is TCP
// (a listener in its network namespace) or a unix stream socket (gVisor's,
// relayed by the sandbox's agent); an upstream is TCP.
type stream interface {
	net.Conn
	syscall.Conn
	CloseWrite() error
}

// idleFor is how long ago data last moved on any of the TCP connections
// among conns, read off the kernel's TCP_INFO, so a copy needs no per-read
// bookkeeping to notice an idle pair. Every pair has one (its upstream),
// and what moves on the other side moves on it too.
func idleFor(conns ...stream) time.Duration {
	least := time.Duration(-1)
	for _, s := range conns {
		c, ok := s.(*net.TCPConn)
		if !ok {
			continue
		}
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
	return max(least, 0)
}

// watchdog closes a pair of connections once nothing has moved on either
// for idle. Per-direction deadlines would not do: one direction may be
// quiet for hours while the other streams.
type watchdog struct {
	fired atomic.Bool
	stop  chan struct{}
	done  chan struct{}
}

func watch(idle time.Duration, a, b stream) *watchdog {
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

// A copy moves data socket to socket through a kernel pipe with splice(2):
// the pipe takes references to the pages the source socket received and
// the destination socket sends those pages, so the proxy never copies the
// bytes (a user-space copy costs two per byte; on loopback the proxy's CPU
// per byte fell ~15-25% with this and reno on the sandbox's side, and most
// of what is left is the kernel's work for the second TCP connection, not
// copying). A pipe is held only while data is in it, so an idle connection
// holds none, and at most pipeSize bytes wait in it per direction. 1 MiB
// (the default fs.pipe-max-size) rather than 256 KiB: one fill then takes
// what the upstream's 2 MiB receive buffer holds in fewer splices, and the
// upstream gets fewer, larger window updates; the proxy's CPU per 16 MiB
// transferred fell 10-20% (BenchmarkEgress, loopback).
const pipeSize = 1 << 20

// spipe is a pipe and how many bytes it holds.
type spipe struct {
	r, w int
	size int // what one fill asks for: the pipe's capacity
	held int
}

// idlePipes keeps empty pipes for the next copy, so a short exchange costs
// no pipe2, fcntl and close calls. The descriptors they hold are part of
// the reserve GlobalMaxConns leaves.
var idlePipes = make(chan *spipe, 32)

func getPipe() (*spipe, error) {
	select {
	case p := <-idlePipes:
		return p, nil
	default:
	}
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, fmt.Errorf("pipe for splice: %w", err)
	}
	p := &spipe{r: fds[0], w: fds[1], size: 64 << 10} // the default capacity
	// Fails without CAP_SYS_RESOURCE once the user's pipes are over
	// fs.pipe-user-pages-soft; the pipe then keeps what it has.
	if n, err := unix.FcntlInt(uintptr(p.w), unix.F_SETPIPE_SZ, pipeSize); err == nil {
		p.size = n
	} else if n, err := unix.FcntlInt(uintptr(p.w), unix.F_GETPIPE_SZ, 0); err == nil {
		p.size = n
	}
	return p, nil
}

// putPipe keeps an empty pipe for reuse and closes one that still holds
// data (a copy that failed) or finds the pool full.
func putPipe(p *spipe) {
	if p.held == 0 {
		select {
		case idlePipes <- p:
			return
		default:
		}
	}
	unix.Close(p.r)
	unix.Close(p.w)
}

// splice moves up to n bytes between a socket and a pipe, both
// non-blocking, so it never waits. It skips the runtime's bookkeeping for
// blocking calls (RawSyscall): a splice that moves much does the TCP work
// of both connections and runs longer than the scheduler's 20 µs tick, so
// the runtime handed the P to another thread on each call and sysmon kept
// polling every 20 µs; that was ~15% of the proxy's CPU on 2 vCPUs. The
// cost: a call (under a millisecond for pipeSize bytes) holds its P.
func splice(rfd, wfd, n int) (int64, error) {
	r, _, errno := unix.RawSyscall6(unix.SYS_SPLICE, uintptr(rfd), 0, uintptr(wfd), 0, uintptr(n), unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
	if errno != 0 {
		return 0, errno
	}
	return int64(r), nil
}

// copyConn moves n bytes (all until EOF when n < 0) from src to dst with
// splice(2), never reading past the n bytes (a kept-alive upstream's next
// response stays in its socket). It returns what reached dst. Waits go
// through the connections' poller, so Close and deadlines end a copy as
// they end a Read or Write.
func copyConn(dst, src stream, n int64) (int64, error) {
	rsrc, err := src.SyscallConn()
	if err != nil {
		return 0, err
	}
	rdst, err := dst.SyscallConn()
	if err != nil {
		return 0, err
	}
	var p *spipe
	defer func() {
		if p != nil {
			putPipe(p)
		}
	}()
	var moved int64
	for n < 0 || moved < n {
		// Fill: a pipe only once the source has data, given back if not.
		var got int
		var serr error
		err := rsrc.Read(func(fd uintptr) bool {
			if p == nil {
				if p, serr = getPipe(); serr != nil {
					return true
				}
			}
			want := p.size
			if n >= 0 {
				want = int(min(int64(want), n-moved))
			}
			for {
				k, err := splice(int(fd), p.w, want)
				switch err {
				case unix.EINTR:
					continue
				case unix.EAGAIN:
					putPipe(p) // empty: no data came
					p = nil
					return false
				}
				got, serr = int(k), err
				return true
			}
		})
		if err == nil {
			err = serr
		}
		if err != nil {
			return moved, err
		}
		if got == 0 {
			if n >= 0 {
				return moved, io.ErrUnexpectedEOF
			}
			return moved, nil
		}
		p.held = got
		// Drain: all of it, waiting while dst's send buffer is full.
		err = rdst.Write(func(fd uintptr) bool {
			for p.held > 0 {
				k, err := splice(p.r, int(fd), p.held)
				switch err {
				case nil:
					if k == 0 {
						serr = io.ErrShortWrite
						return true
					}
					p.held -= int(k)
					moved += k
				case unix.EINTR:
				case unix.EAGAIN:
					return false
				default:
					serr = err
					return true
				}
			}
			return true
		})
		if err == nil {
			err = serr
		}
		if err != nil {
			return moved, err
		}
		putPipe(p)
		p = nil
	}
	return moved, nil
}

// pipe joins a client and an upstream connection both ways until both
// directions end, flushing what the readers already buffered first. out is
// what went upstream, in what came back; idle reports the watchdog ended it.
func pipe(client stream, clientBuf *bufio.Reader, up *net.TCPConn, upBuf *bufio.Reader, idle time.Duration) (out, in int64, idled bool) {
	w := watch(idle, client, up)
	var wg sync.WaitGroup
	one := func(dst, src stream, buf *bufio.Reader, n *int64) {
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
