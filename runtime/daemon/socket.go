package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/warden-sandbox/warden/spec/hostfs"
	"golang.org/x/sys/unix"
)

// The daemon's hold on its root and its socket: one daemon per root, a
// socket that comes back when something removes it, and connections
// bounded so that a flood of them never takes the daemon's descriptors.

// firstMessageWait bounds how long a new connection may take to wire.Send its
// request; a client sends it as soon as it has connected. Only the first
// message: an exec's connection then stays open as long as its command.
const firstMessageWait = 5 * time.Second

// lockRoot takes the root's daemon lock: an flock on the root folder
// itself, which, unlike a lock file in it, no one can remove while the
// daemon runs. It is released when the daemon's process ends, however.
func lockRoot(root string) (*os.File, error) {
	f, err := os.OpenFile(root, os.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, ErrDaemonRunning
		}
		return nil, fmt.Errorf("lock the state root %s: %w", root, err)
	}
	return f, nil
}

// socket is one of the daemon's listening sockets: the packet one
// (descriptors passed) and the stream one (stdio framed) are watched,
// bounded and removed alike.
type socket struct {
	path    string
	network string // unixpacket or unix
	peer    func(*net.UnixConn) peer
	ln      *net.UnixListener // under Daemon.lnMu, with id
	id      hostfs.FileID     // the socket file ln listens on; see watchSocket
}

// listenSocket binds a socket at path, mode 0600. Until the chmod the
// mode is what the umask left, which gives no other user write (connect)
// permission unless the umask is unusual; checkPeer refuses other users
// whatever the mode. The process's umask is not changed: other goroutines
// create files meanwhile.
func listenSocket(network, path string) (*net.UnixListener, hostfs.FileID, error) {
	ln, err := net.ListenUnix(network, &net.UnixAddr{Name: path, Net: network})
	if err != nil {
		return nil, hostfs.FileID{}, err
	}
	// Removing the path is the daemon's decision (closeSocket): the path
	// may name a newer socket of the same daemon by then.
	ln.SetUnlinkOnClose(false)
	id, _, err := hostfs.LstatID(path)
	if err == nil {
		err = os.Chmod(path, 0o600)
	}
	if err != nil {
		ln.Close()
		return nil, hostfs.FileID{}, err
	}
	return ln, id, nil
}

// watchSocket makes a socket again whenever its path stops naming it
// (a tmp cleaner removed it, or someone replaced it), until ctx is done.
// inotify tells at once; the ticker covers a watch that could not be set.
func (d *Daemon) watchSocket(ctx context.Context) {
	changed := make(chan struct{}, 1)
	if fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK); err == nil {
		watch := os.NewFile(uintptr(fd), "inotify")
		defer watch.Close()
		if _, err := unix.InotifyAddWatch(fd, d.rt.Root, unix.IN_DELETE|unix.IN_MOVED_FROM|unix.IN_MOVED_TO|unix.IN_CREATE); err == nil {
			go func() {
				buf := make([]byte, 4096)
				for {
					if _, err := watch.Read(buf); err != nil {
						return // closed
					}
					select {
					case changed <- struct{}{}:
					default:
					}
				}
			}()
		}
	}
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	var lastWarning time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-changed:
		}
		for _, sock := range d.sockets {
			if err := d.checkSocket(ctx, sock); err != nil && time.Since(lastWarning) > time.Minute {
				logrus.Warnf("the daemon's socket: %v", err)
				lastWarning = time.Now()
			}
		}
	}
}

// checkSocket makes a socket again if its path no longer names it.
// Something else at the path that is not a socket is someone's file: it
// is left alone, and said so.
func (d *Daemon) checkSocket(ctx context.Context, sock *socket) error {
	path := sock.path
	id, st, err := hostfs.LstatID(path)
	d.lnMu.Lock()
	ours := err == nil && id == sock.id
	d.lnMu.Unlock()
	switch {
	case ours:
		return nil
	case err == nil && st.Mode&unix.S_IFMT != unix.S_IFSOCK:
		return fmt.Errorf("%s is not a socket any more; move that file away so clients reach the daemon", path)
	case err == nil:
		// A socket no daemon serves: this daemon holds the root's lock.
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	case !errors.Is(err, os.ErrNotExist):
		return err
	}
	ln, id, err := listenSocket(sock.network, path)
	if err != nil {
		return fmt.Errorf("make %s again: %w", path, err)
	}
	d.lnMu.Lock()
	old := sock.ln
	sock.ln, sock.id = ln, id
	d.lnMu.Unlock()
	go d.accept(ctx, ln, sock.peer)
	old.Close() // no one can reach it any more
	logrus.Warnf("the daemon's socket %s was removed; made it again", path)
	return nil
}

// closeSocket stops listening and removes the sockets whose paths still
// name them.
func (d *Daemon) closeSocket() {
	d.lnMu.Lock()
	defer d.lnMu.Unlock()
	for _, sock := range d.sockets {
		if sock.ln == nil {
			continue
		}
		sock.ln.Close()
		if id, _, err := hostfs.LstatID(sock.path); err == nil && id == sock.id {
			os.Remove(sock.path)
		}
	}
}

// accept serves one listener until it is closed. A failing accept (out of
// descriptors: EMFILE, ENFILE) backs off instead of spinning: the
// connection waiting in the backlog would fail it again at once.
func (d *Daemon) accept(ctx context.Context, ln *net.UnixListener, newPeer func(*net.UnixConn) peer) {
	var lastRefusal, lastFailure time.Time
	var backoff time.Duration
	for {
		conn, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), 500*time.Millisecond)
			if time.Since(lastFailure) > 10*time.Second {
				logrus.Warnf("the daemon cannot take connections: %v; retrying", err)
				lastFailure = time.Now()
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		p := newPeer(conn)
		if err := checkPeer(conn); err != nil {
			if time.Since(lastRefusal) > time.Second { // a flood of them logs one a second
				logrus.Warnf("refused a connection to the daemon's socket: %v", err)
				lastRefusal = time.Now()
			}
			// Said, so the client does not take the reset for a daemon that
			// died before reading (protocol.Unheard) and try again.
			p.send(reply{Error: "the warden daemon serves only its own user: " + err.Error(), Code: CodeDaemonUnavailable})
			conn.Close()
			continue
		}
		if !d.conns.admit(conn) {
			p.send(reply{Error: d.conns.busy(), Code: CodeDaemonUnavailable})
			conn.Close()
			continue
		}
		go d.handle(ctx, p)
	}
}

// connTable bounds the daemon's open connections well below its
// descriptor limit: a connection takes one descriptor, an exec's three
// more for the caller's stdio and one to the agent. A connection that has
// not sent its request yet is idle; when the table is full a new one
// evicts the oldest idle one, so idle connections, however many, never
// keep a client out.
type connTable struct {
	mu   sync.Mutex
	max  int
	open int
	idle map[*net.UnixConn]time.Time // accepted, request not read yet
}

func newConnTable() *connTable {
	limit := 1024
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) == nil {
		limit = int(min(lim.Cur/8, 4096))
	}
	return &connTable{max: max(limit, 16), idle: map[*net.UnixConn]time.Time{}}
}

// admit counts a new connection in, evicting the oldest idle one when the
// table is full; it refuses the new one when every open one is busy.
func (t *connTable) admit(conn *net.UnixConn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.open >= t.max {
		var oldest *net.UnixConn
		for c, since := range t.idle {
			if oldest == nil || since.Before(t.idle[oldest]) {
				oldest = c
			}
		}
		if oldest == nil {
			return false
		}
		delete(t.idle, oldest)
		oldest.SetReadDeadline(time.Unix(1, 0)) // its handler ends now
	}
	t.open++
	// Set here, under the lock, so an eviction's deadline is never
	// overwritten by this one.
	conn.SetReadDeadline(time.Now().Add(firstMessageWait))
	t.idle[conn] = time.Now()
	return true
}

// started marks a connection's request read; false when it was evicted
// meanwhile (its read deadline is in the past by then).
func (t *connTable) started(conn *net.UnixConn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.idle[conn]; !ok {
		return false
	}
	delete(t.idle, conn)
	conn.SetReadDeadline(time.Time{})
	return true
}

func (t *connTable) done(conn *net.UnixConn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.idle, conn)
	t.open--
}

func (t *connTable) busy() string {
	return fmt.Sprintf("the warden daemon has %d connections open, its limit; try again when some have ended", t.max)
}
