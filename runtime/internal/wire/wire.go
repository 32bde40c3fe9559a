// Package wire carries warden's messages between its processes: one JSON
// document per SOCK_SEQPACKET message, with file descriptors attached as
// SCM_RIGHTS so a command's stdio never copies through warden.
package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// MaxMessage bounds one message; argv and env of a command must fit.
const MaxMessage = 1 << 20

// MaxFDs bounds the descriptors one message may carry.
const MaxFDs = 4

var (
	ErrMessageTooLarge = fmt.Errorf("message larger than %d bytes: shorten the command line or its environment", MaxMessage)
	ErrTooManyFDs      = fmt.Errorf("more than %d file descriptors in one message: send stdin, stdout and stderr only", MaxFDs)
)

// Send writes v as one message with fds attached.
func Send(conn *net.UnixConn, v any, fds ...int) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return SendData(conn, data, fds...)
}

// SendData writes data, a message marshalled before (so that it follows
// the connect at once and the peer's first read finds it), with fds
// attached.
func SendData(conn *net.UnixConn, data []byte, fds ...int) error {
	if len(data) > MaxMessage {
		return ErrMessageTooLarge
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

// Receive reads one message into v and returns the descriptors that came
// with it. The caller owns (and must close) the returned files. It peeks
// at the message's size first, so a reader waiting on a connection holds
// no buffer and a small message costs a small allocation.
func Receive(conn *net.UnixConn, v any) ([]*os.File, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	var (
		buf         []byte
		n, oobn, fl int
		oob         = make([]byte, unix.CmsgSpace(MaxFDs*4))
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
		buf = make([]byte, min(size, MaxMessage)+1)
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
	if fl&unix.MSG_TRUNC != 0 || n > MaxMessage {
		CloseAll(files)
		return nil, ErrMessageTooLarge
	}
	if fl&unix.MSG_CTRUNC != 0 { // the kernel closed the ones that did not fit
		CloseAll(files)
		return nil, ErrTooManyFDs
	}
	if ferr != nil {
		CloseAll(files)
		return nil, ferr
	}
	if n == 0 {
		CloseAll(files)
		return nil, ErrClosed
	}
	if err := json.Unmarshal(buf[:n], v); err != nil {
		CloseAll(files)
		return nil, fmt.Errorf("malformed message: %w", err)
	}
	return files, nil
}

var ErrClosed = errors.New("connection closed")

// PeerGone reports whether the other end has closed conn and sent nothing
// more to read.
func PeerGone(conn *net.UnixConn) bool {
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

func CloseAll(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}

// DialPacket connects to a SOCK_SEQPACKET unix socket.
func DialPacket(path string) (*net.UnixConn, error) {
	conn, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, err
	}
	GrowBuffers(conn)
	return conn, nil
}

// GrowBuffers lets one message hold MaxMessage bytes. As root, FORCE goes
// past the system's wmem_max.
func GrowBuffers(conn *net.UnixConn) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return
	}
	raw.Control(func(fd uintptr) {
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 2*MaxMessage) != nil {
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, 2*MaxMessage)
		}
	})
}
