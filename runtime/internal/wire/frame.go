package wire

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
)

// Frames carry the same messages over a SOCK_STREAM socket, for clients
// that cannot pass descriptors (Node, a remote caller behind a relay):
// each frame is a 5-byte header, the payload's length (4 bytes, big
// endian) and its kind (1 byte), then the payload. A message frame holds
// one JSON object; the command's stdio travels in data frames.
const (
	FrameStdin   byte = 0 // client to daemon: bytes for the command's stdin; empty: end of stdin
	FrameStdout  byte = 1 // daemon to client: bytes the command wrote to stdout
	FrameStderr  byte = 2 // daemon to client: bytes the command wrote to stderr
	FrameMessage byte = 3 // either way: one JSON object (a request, a control message, a reply)
)

// FrameHeader is the size of a frame's header.
const FrameHeader = 5

// WriteFrame writes one frame with a single writev, so frames written
// from several goroutines under one lock never interleave.
func WriteFrame(conn net.Conn, kind byte, payload []byte) error {
	if len(payload) > MaxMessage {
		return ErrMessageTooLarge
	}
	var hdr [FrameHeader]byte
	binary.BigEndian.PutUint32(hdr[:4], uint32(len(payload)))
	hdr[4] = kind
	bufs := net.Buffers{hdr[:], payload}
	_, err := bufs.WriteTo(conn)
	return err
}

// ReadFrame reads the next frame into buf (grown as needed) and returns
// its kind and payload, which is valid until the next call. A frame
// longer than MaxMessage is refused before its payload is read.
func ReadFrame(r *bufio.Reader, buf []byte) (kind byte, payload []byte, grown []byte, err error) {
	var hdr [FrameHeader]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if err == io.EOF {
			err = ErrClosed
		}
		return 0, nil, buf, err
	}
	n := binary.BigEndian.Uint32(hdr[:4])
	if n > MaxMessage {
		return 0, nil, buf, fmt.Errorf("%w: a frame of %d bytes (at most %d)", ErrBadFrame, n, MaxMessage)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	payload = buf[:n]
	if _, err := io.ReadFull(r, payload); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, buf, err
	}
	return hdr[4], payload, buf, nil
}

// ErrBadFrame is a stream that breaks the framing: the peer must be
// answered with an error and closed, as its next frame cannot be found.
var ErrBadFrame = fmt.Errorf("bad frame")
