package egress

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (a, b *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// copyConn moves exactly what it is asked for, leaves what follows in the
// source socket (a kept-alive upstream's next response), counts what
// reached the destination, says when the source ended early, and gives
// back or closes every pipe it took.
func TestCopyConn(t *testing.T) {
	pipesBefore, idleBefore := openPipes(t), len(idlePipes)
	payload := make([]byte, 3<<20+12345)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	for _, tc := range []struct {
		name  string
		limit int64 // < 0: until EOF
		send  []byte
		want  int64
		err   error
	}{
		{"until EOF", -1, payload, int64(len(payload)), nil},
		{"a length, more behind it", 1<<20 + 1, payload, 1<<20 + 1, nil},
		{"a length the source does not reach", int64(len(payload)) + 1, payload, int64(len(payload)), io.ErrUnexpectedEOF},
		{"nothing at all", -1, nil, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srcW, src := tcpPair(t)
			dst, dstR := tcpPair(t)
			go func() {
				srcW.Write(tc.send)
				srcW.CloseWrite()
			}()
			var got bytes.Buffer
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				io.Copy(&got, dstR)
			}()
			n, err := copyConn(dst, src, tc.limit)
			dst.CloseWrite()
			wg.Wait()
			if n != tc.want || !errors.Is(err, tc.err) || (tc.err == nil && err != nil) {
				t.Fatalf("copyConn = %d, %v; want %d, %v", n, err, tc.want, tc.err)
			}
			if !bytes.Equal(got.Bytes(), tc.send[:n]) {
				t.Fatalf("%d bytes arrived, not the %d sent first", got.Len(), n)
			}
			rest, _ := io.ReadAll(src)
			if want := tc.send[n:]; !bytes.Equal(rest, want) {
				t.Fatalf("%d bytes left in the source; want %d", len(rest), len(want))
			}
		})
	}
	// A destination that goes away mid-copy ends it with an error.
	srcW, src := tcpPair(t)
	dst, dstR := tcpPair(t)
	go srcW.Write(payload)
	dstR.SetLinger(0)
	dstR.Close()
	if _, err := copyConn(dst, src, -1); err == nil {
		t.Fatal("copy to a closed peer: no error")
	}
	srcW.Close()
	src.Close()
	dst.Close()
	checkIdlePipes(t)
	// More copies at once than the pool keeps pipes.
	var wg sync.WaitGroup
	for i := 0; i < cap(idlePipes)+8; i++ {
		srcW, src := tcpPair(t)
		dst, dstR := tcpPair(t)
		wg.Add(3)
		go func() { defer wg.Done(); srcW.Write(payload[:256<<10]); srcW.CloseWrite() }()
		go func() { defer wg.Done(); io.Copy(io.Discard, dstR) }()
		go func() { defer wg.Done(); copyConn(dst, src, -1); dst.CloseWrite() }()
	}
	wg.Wait()
	checkIdlePipes(t)
	// Every pipe still open is an empty one in the pool.
	if grown, idle := openPipes(t)-pipesBefore, len(idlePipes)-idleBefore; grown != 2*idle {
		t.Errorf("%d more pipe descriptors open after the copies, %d more idle pipes", grown, idle)
	}
}

// openPipes counts this process's pipe descriptors.
func openPipes(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "pipe:") {
			n++
		}
	}
	return n
}

// checkIdlePipes fails if a pipe in the pool holds data.
func checkIdlePipes(t *testing.T) {
	t.Helper()
	for range len(idlePipes) {
		p := <-idlePipes
		if n, err := unix.IoctlGetInt(p.r, unix.TIOCINQ); err != nil || n != 0 || p.held != 0 {
			t.Errorf("an idle pipe holds %d bytes (%d counted): %v", n, p.held, err)
		}
		idlePipes <- p
	}
}
