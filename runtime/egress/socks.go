package egress

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"
)

// SOCKS5 reply codes (RFC 1928).
const (
	socksOK           = 0x00
	socksFailure      = 0x01
	socksNotAllowed   = 0x02 // connection not allowed by ruleset
	socksHostUnreach  = 0x04
	socksRefused      = 0x05
	socksBadCommand   = 0x07
	socksBadAddrType  = 0x08
	socksNoAcceptable = 0xff
)

// serveSOCKS handles one SOCKS5 CONNECT without authentication. Names
// (ATYP 3, socks5h://) are resolved here; address literals are checked
// like any other.
func (p *Proxy) serveSOCKS(c net.Conn, br *bufio.Reader) {
	start := time.Now()
	rec := Record{Proto: "socks5"}
	fail := func(code byte, reason string) {
		rec.Reason = reason
		p.audit(rec)
		// VER REP RSV ATYP=IPv4 0.0.0.0:0
		c.Write([]byte{5, code, 0, 1, 0, 0, 0, 0, 0, 0})
	}
	var hello [2]byte
	if _, err := io.ReadFull(br, hello[:]); err != nil {
		return
	}
	methods := make([]byte, hello[1])
	if _, err := io.ReadFull(br, methods); err != nil {
		return
	}
	noAuth := false
	for _, m := range methods {
		noAuth = noAuth || m == 0
	}
	if !noAuth {
		rec.Reason = "SOCKS5 client offers no 'no authentication' method; warden's proxy takes no credentials"
		p.audit(rec)
		c.Write([]byte{5, socksNoAcceptable})
		return
	}
	if _, err := c.Write([]byte{5, 0}); err != nil {
		return
	}
	var head [4]byte
	if _, err := io.ReadFull(br, head[:]); err != nil {
		return
	}
	if head[0] != 5 {
		fail(socksFailure, fmt.Sprintf("malformed SOCKS5 request: version %d", head[0]))
		return
	}
	var host string
	switch head[3] {
	case 1, 4:
		b := make([]byte, 4)
		if head[3] == 4 {
			b = make([]byte, 16)
		}
		if _, err := io.ReadFull(br, b); err != nil {
			return
		}
		a, _ := netip.AddrFromSlice(b)
		host = a.String()
	case 3:
		n, err := br.ReadByte()
		if err != nil {
			return
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(br, b); err != nil {
			return
		}
		host = string(b)
	default:
		fail(socksBadAddrType, fmt.Sprintf("SOCKS5 address type %d is not supported", head[3]))
		return
	}
	var pb [2]byte
	if _, err := io.ReadFull(br, pb[:]); err != nil {
		return
	}
	port := int(binary.BigEndian.Uint16(pb[:]))
	rec.Host, rec.Port = host, port
	if head[1] != 1 {
		fail(socksBadCommand, fmt.Sprintf("SOCKS5 command %d is not supported (only CONNECT; no BIND, no UDP)", head[1]))
		return
	}
	if port == 0 {
		fail(socksNotAllowed, "port 0 is not allowed")
		return
	}
	t, err := p.check(p.ctx, host, port)
	var d *denial
	var f *failure
	switch {
	case errors.As(err, &d):
		fail(socksNotAllowed, d.reason)
		return
	case errors.As(err, &f):
		rec.Allowed, rec.Rule = true, f.rule
		fail(socksHostUnreach, err.Error())
		return
	case err != nil:
		fail(socksFailure, err.Error())
		return
	}
	rec.Allowed, rec.Rule = true, t.rule
	upc, addr, err := p.dial(p.ctx, t)
	if err != nil {
		fail(socksRefused, err.Error())
		return
	}
	defer p.untrack(upc)
	rec.Addr = addr.String()
	// The bound address is not the sandbox's business.
	if _, err := c.Write([]byte{5, socksOK, 0, 1, 0, 0, 0, 0, 0, 0}); err != nil {
		return
	}
	var idled bool
	rec.BytesOut, rec.BytesIn, idled = pipe(c.(stream), br, upc, nil, p.cfg.IdleTimeout)
	rec.Duration = time.Since(start)
	if idled {
		rec.Reason = idleReason(p.cfg.IdleTimeout)
	}
	p.audit(rec)
}
