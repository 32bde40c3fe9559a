package protocol

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/runtime/internal/wire"
)

// A listening socket that ends with a request in its backlog (a daemon
// killed while a child it was starting still held a copy) resets the
// client; Call sends the request again, to the daemon that serves next.
func TestCallResendsUnheard(t *testing.T) {
	root := t.TempDir()
	sock := SocketPath(root)
	dying := listen(t, sock)
	next := listen(t, filepath.Join(root, "next.sock"))
	served := make(chan string, 1)
	go func() {
		// Once the client's connection waits in the backlog, the new
		// socket takes the path and the old listener ends unread.
		for deadline := time.Now().Add(5 * time.Second); backlog(t, sock) == 0 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		if err := os.Rename(filepath.Join(root, "next.sock"), sock); err != nil {
			served <- err.Error()
			return
		}
		dying.Close()
		conn, err := next.AcceptUnix()
		if err != nil {
			served <- err.Error()
			return
		}
		defer conn.Close()
		var req Request
		if _, err := wire.Receive(conn, &req); err != nil {
			served <- err.Error()
			return
		}
		wire.Send(conn, Reply{V: Version})
		served <- req.Op
	}()
	d := &Dialer{Root: root, Binary: "/bin/false"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := d.Call(ctx, Request{Op: "ping"}); err != nil {
		t.Fatalf("Call across a listener that ended unread: %v", err)
	}
	if op := <-served; op != "ping" {
		t.Fatalf("the next daemon got %q, not the ping", op)
	}
}

// A daemon that read the request and ended without a reply is not asked
// again: it may have done what was asked.
func TestCallHeardNotResent(t *testing.T) {
	root := t.TempDir()
	ln := listen(t, SocketPath(root))
	reads := make(chan int, 1)
	go func() {
		n := 0
		defer func() { reads <- n }()
		for {
			ln.SetDeadline(time.Now().Add(300 * time.Millisecond))
			conn, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			var req Request
			wire.Receive(conn, &req)
			n++
			conn.Close()
		}
	}()
	_, err := (&Dialer{Root: root, Binary: "/bin/false"}).Call(context.Background(), Request{Op: "ping"})
	if err == nil || CodeOf(err) != CodeDaemonUnavailable {
		t.Fatalf("Call to a daemon that closed without a reply: %v, want a daemon_unavailable error", err)
	}
	if n := <-reads; n != 1 {
		t.Fatalf("the daemon read the request %d times, want once", n)
	}
}

func listen(t *testing.T, path string) *net.UnixListener {
	t.Helper()
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	t.Cleanup(func() { ln.Close() })
	return ln
}

// backlog is how many connections wait to be accepted on the listening
// socket at path: /proc/net/unix lists each under the listener's name
// beside the listener itself.
func backlog(t *testing.T, path string) int {
	data, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		t.Error(err)
		return 0
	}
	n := -1
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasSuffix(line, " "+path) {
			n++
		}
	}
	return n
}
