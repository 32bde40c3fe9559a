package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// warden's processes talk over SOCK_SEQPACKET unix sockets: each message is
// one JSON document, and file descriptors (a caller's stdin, stdout and
// stderr, a terminal's master side) ride along as SCM_RIGHTS, so output
// never copies through warden.

// maxMessage bounds one message; argv and env of a command must fit.
const maxMessage = 1 << 20

// maxFDs bounds the descriptors one message may carry.
const maxFDs = 4

var (
	errMessageTooLarge = fmt.Errorf("message larger than %d bytes: shorten the command line or its environment", maxMessage)
	errTooManyFDs      = fmt.Errorf("more than %d file descriptors in one message: send stdin, stdout and stderr only", maxFDs)
)

// send writes v as one message with fds attached.
func send(conn *net.UnixConn, v any, fds ...int) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(data) > maxMessage {
		return errMessageTooLarge
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, oobn, err := conn.WriteMsgUnix(data, oob, nil)
	if err != nil {
		return err
	}
	if n != len(data) || oobn != len(oob) {
		return errors.New("short write on agent socket")
	}
	return nil
}

// receive reads one message into v and returns the descriptors that came
// with it. The caller owns (and must close) the returned files. It peeks
// at the message's size first, so a reader waiting on a connection holds
// no buffer and a small message costs a small allocation.
func receive(conn *net.UnixConn, v any) ([]*os.File, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	var (
		buf         []byte
		n, oobn, fl int
		oob         = make([]byte, unix.CmsgSpace(maxFDs*4))
		peek        [1]byte
		rerr        error
	)
	err = raw.Read(func(fd uintptr) bool {
		size, _, _, _, e := unix.Recvmsg(int(fd), peek[:], nil, unix.MSG_PEEK|unix.MSG_TRUNC|unix.MSG_DONTWAIT)
		if e == unix.EAGAIN {
			return false
		}
		if e != nil {
			rerr = e
			return true
		}
		buf = make([]byte, min(size, maxMessage)+1)
		n, oobn, fl, _, rerr = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC|unix.MSG_DONTWAIT)
		return rerr != unix.EAGAIN
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return nil, err
	}
	files, ferr := parseRights(oob[:oobn])
	if fl&unix.MSG_TRUNC != 0 || n > maxMessage {
		closeAll(files)
		return nil, errMessageTooLarge
	}
	if fl&unix.MSG_CTRUNC != 0 { // the kernel closed the ones that did not fit
		closeAll(files)
		return nil, errTooManyFDs
	}
	if ferr != nil {
		closeAll(files)
		return nil, ferr
	}
	if n == 0 {
		closeAll(files)
		return nil, errClosed
	}
	if err := json.Unmarshal(buf[:n], v); err != nil {
		closeAll(files)
		return nil, fmt.Errorf("malformed message: %w", err)
	}
	return files, nil
}

var errClosed = errors.New("connection closed")

// peerGone reports whether the other end has closed conn and sent nothing
// more to read.
func peerGone(conn *net.UnixConn) bool {
	raw, err := conn.SyscallConn()
	if err != nil {
		return true
	}
	gone := false
	raw.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		gone = n == 0 && err == nil
	})
	return gone
}

func parseRights(oob []byte) ([]*os.File, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			unix.CloseOnExec(fd)
			files = append(files, os.NewFile(uintptr(fd), "passed"))
		}
	}
	return files, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}

// dialPacket connects to a SOCK_SEQPACKET unix socket.
func dialPacket(path string) (*net.UnixConn, error) {
	conn, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, err
	}
	growBuffers(conn)
	return conn, nil
}

// growBuffers lets one message hold maxMessage bytes. As root, FORCE goes
// past the system's wmem_max.
func growBuffers(conn *net.UnixConn) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return
	}
	raw.Control(func(fd uintptr) {
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 2*maxMessage) != nil {
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, 2*maxMessage)
		}
	})
}

// execRequest asks the agent to run one command. The first message on a
// connection; stdin, stdout and stderr come with it unless Tty is set.
type execRequest struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	Cwd  string   `json:"cwd"`
	Tty  bool     `json:"tty,omitempty"`
	Rows uint16   `json:"rows,omitempty"`
	Cols uint16   `json:"cols,omitempty"`
	// Seal, alone, tells a pooled agent its session's folders are bound.
	Seal bool `json:"seal,omitempty"`
}

// execControl is what a client may send while the command runs.
type execControl struct {
	Signal int    `json:"signal,omitempty"` // deliver to the command's process group
	Kill   bool   `json:"kill,omitempty"`   // kill the command's whole tree
	Rows   uint16 `json:"rows,omitempty"`   // resize the terminal
	Cols   uint16 `json:"cols,omitempty"`
}

// execEvent is what the agent reports: first Started (with the terminal's
// master side when Tty), then Exited; or Error with the exit code warden
// gives it (126 cannot run, 127 not found or not allowed).
type execEvent struct {
	Started bool   `json:"started,omitempty"`
	Pid     int    `json:"pid,omitempty"`
	Exited  bool   `json:"exited,omitempty"`
	Code    int    `json:"code"`
	Signal  int    `json:"signal,omitempty"`
	Error   string `json:"error,omitempty"`
}
