package egress

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// idleFor is how long ago data last moved on either connection, read off
// the kernel's TCP_INFO, so copying can stay in the kernel (splice) and
// still notice an idle pair.
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

// copyConn moves n bytes (all until EOF when n < 0) from src to dst with
// TCPConn.ReadFrom, which splices between sockets. It gives up when
// nothing has moved on the pair for idle.
func copyConn(dst, src *net.TCPConn, n int64, idle time.Duration) (int64, error) {
	var total int64
	wait := idle
	for n < 0 || total < n {
		deadline := time.Now().Add(wait)
		src.SetReadDeadline(deadline)
		dst.SetWriteDeadline(deadline)
		var m int64
		var err error
		if n < 0 {
			m, err = dst.ReadFrom(src)
		} else {
			m, err = dst.ReadFrom(&io.LimitedReader{R: src, N: n - total})
		}
		total += m
		if err == nil {
			if n >= 0 && total < n {
				return total, io.ErrUnexpectedEOF
			}
			return total, nil
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return total, err
		}
		quiet := idleFor(dst, src)
		if quiet >= idle {
			return total, errIdle
		}
		wait = idle - quiet
	}
	return total, nil
}

var errIdle = errors.New("idle timeout")

// pipe joins a client and an upstream connection both ways until both
// directions end, flushing what the readers already buffered first. out is
// what went upstream, in what came back.
func pipe(client *net.TCPConn, clientBuf *bufio.Reader, up *net.TCPConn, upBuf *bufio.Reader, idle time.Duration) (out, in int64) {
	var wg sync.WaitGroup
	one := func(dst, src *net.TCPConn, buf *bufio.Reader, n *int64) {
		defer wg.Done()
		if buf != nil && buf.Buffered() > 0 {
			b, _ := buf.Peek(buf.Buffered())
			w, err := dst.Write(b)
			*n += int64(w)
			if err != nil {
				client.Close()
				up.Close()
				return
			}
		}
		m, err := copyConn(dst, src, -1, idle)
		*n += m
		if err != nil {
			// An error or an idle pair ends both directions.
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
	return out, in
}
