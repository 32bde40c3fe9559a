package egress

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// writeHTTPError answers with a status and a one-line reason, and asks the
// client to close.
func writeHTTPError(w io.Writer, code int, status, reason string) {
	body := "warden egress: " + clip(reason, MaxReason) + "\n"
	fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\nX-Warden-Egress: denied\r\n\r\n%s",
		code, status, len(body), body)
}

// answer turns a failed check or dial into a reply and an audit record.
// A denial is the policy's; a failure (the name did not resolve, the
// destination did not answer) is an allowed request that failed, and the
// sandbox gets only what failed, not the host's resolver or addresses.
func (p *Proxy) answer(c net.Conn, rec Record, err error) {
	var d *denial
	var f *failure
	rec.Reason = err.Error()
	switch {
	case errors.As(err, &d):
		rec.Reason = d.reason
		writeHTTPError(c, 403, "Forbidden", d.reason)
	case errors.As(err, &f):
		rec.Allowed, rec.Rule = true, f.rule
		writeHTTPError(c, 502, "Bad Gateway", f.public)
	default:
		writeHTTPError(c, 502, "Bad Gateway", "cannot reach "+hostPort(rec.Host, rec.Port))
	}
	p.audit(rec)
}

// splitHostPort reads host[:port] with a default port.
func splitHostPort(authority string, def int) (string, int, error) {
	host, portText, err := net.SplitHostPort(authority)
	if err != nil {
		if def == 0 || strings.Contains(strings.TrimSuffix(strings.TrimPrefix(authority, "["), "]"), "]") {
			return "", 0, fmt.Errorf("bad host:port %q", authority)
		}
		host, portText = strings.TrimSuffix(strings.TrimPrefix(authority, "["), "]"), strconv.Itoa(def)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("bad port in %q", authority)
	}
	if host == "" {
		return "", 0, fmt.Errorf("no host in %q", authority)
	}
	return host, port, nil
}

// upstream is the connection a keep-alive client's requests go to while
// they name the same host and port.
type upstream struct {
	p    *Proxy
	key  string
	conn *net.TCPConn
	br   *bufio.Reader
	lim  *headLimit
}

func (u *upstream) close() {
	if u != nil && u.conn != nil {
		u.p.untrack(u.conn)
	}
}

// serveHTTP handles proxy requests on one client connection: CONNECT, or a
// sequence of absolute-form requests. Every request's head must arrive
// within HandshakeTimeout of its first byte (the first request's, of the
// connection); between requests the connection may idle for IdleTimeout.
func (p *Proxy) serveHTTP(c net.Conn, br *bufio.Reader, lim *headLimit, deadline time.Time) {
	client := c.(stream)
	var up *upstream
	defer func() { up.close() }()
	for first := true; ; first = false {
		if !first {
			c.SetReadDeadline(time.Now().Add(p.cfg.IdleTimeout))
			if _, err := br.Peek(1); err != nil {
				return // the client closed or idled out between requests
			}
			deadline = time.Now().Add(p.cfg.HandshakeTimeout)
			c.SetReadDeadline(deadline)
		}
		lim.arm(br)
		req, err := http.ReadRequest(br)
		if tooLarge := lim.done(br); err == nil && tooLarge != nil {
			err = tooLarge
		}
		if err != nil {
			// A head cut short by the deadline may fail as a malformed
			// one: the reader hands over the partial line first.
			if !time.Now().Before(deadline) {
				err = os.ErrDeadlineExceeded
			}
			p.refuseHead(c, err)
			return
		}
		if req.Method == http.MethodConnect {
			p.serveConnect(client, br, req)
			return
		}
		var keep bool
		up, keep = p.forward(client, br, req, up)
		if !keep {
			return
		}
	}
}

// refuseHead answers and audits a request head that could not be read:
// too large, too slow, cut short or malformed.
func (p *Proxy) refuseHead(c net.Conn, err error) {
	switch {
	case errors.Is(err, errHeadTooLarge):
		reason := "request " + errHeadTooLarge.Error()
		p.audit(Record{Proto: "http", Reason: reason})
		writeHTTPError(c, 431, "Request Header Fields Too Large", reason)
		lingerClose(c)
	case errors.Is(err, os.ErrDeadlineExceeded):
		reason := fmt.Sprintf("request head not complete within %s of its first byte", p.cfg.HandshakeTimeout)
		p.audit(Record{Proto: "http", Reason: reason})
		writeHTTPError(c, 408, "Request Timeout", reason)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		p.audit(Record{Proto: "http", Reason: "the client closed the connection within a request head"})
	default:
		reason := "malformed request: " + err.Error()
		p.audit(Record{Proto: "http", Reason: reason})
		writeHTTPError(c, 400, "Bad Request", reason)
		lingerClose(c)
	}
}

// lingerClose ends the answer and reads on for a while: a client still
// sending the rest of what was refused would otherwise get a reset
// (closing with unread data) and may lose the answer with it.
func lingerClose(c net.Conn) {
	if s, ok := c.(stream); ok {
		s.CloseWrite()
	}
	c.SetReadDeadline(time.Now().Add(time.Second))
	io.CopyN(io.Discard, c, 1<<20)
}

func (p *Proxy) serveConnect(c stream, br *bufio.Reader, req *http.Request) {
	start := time.Now()
	rec := Record{Proto: "connect"}
	host, port, err := splitHostPort(req.RequestURI, 0)
	if err != nil {
		rec.Reason = "malformed CONNECT: " + err.Error()
		p.audit(rec)
		writeHTTPError(c, 400, "Bad Request", rec.Reason)
		return
	}
	rec.Host, rec.Port = host, port
	t, err := p.check(p.ctx, host, port)
	if err != nil {
		p.answer(c, rec, err)
		return
	}
	rec.Allowed, rec.Rule = true, t.rule
	upc, addr, err := p.dial(p.ctx, t)
	if err != nil {
		p.answer(c, rec, err)
		return
	}
	defer p.untrack(upc)
	rec.Addr = addr.String()
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		rec.Reason = err.Error()
		p.audit(rec)
		return
	}
	var idled bool
	rec.BytesOut, rec.BytesIn, idled = pipe(c, br, upc, nil, p.cfg.IdleTimeout)
	rec.Duration = time.Since(start)
	if idled {
		rec.Reason = idleReason(p.cfg.IdleTimeout)
	}
	p.audit(rec)
}

// forward sends one absolute-form request upstream and its response back.
// It returns the upstream to reuse and whether the client connection may
// carry another request.
func (p *Proxy) forward(c stream, br *bufio.Reader, req *http.Request, up *upstream) (*upstream, bool) {
	start := time.Now()
	rec := Record{Proto: "http"}
	if req.URL.Scheme != "http" || req.URL.Host == "" {
		up.close()
		rec.Reason = fmt.Sprintf("%s %s is not a proxy request: send absolute http:// URLs here (HTTP_PROXY), and https through CONNECT (HTTPS_PROXY)", req.Method, req.RequestURI)
		p.audit(rec)
		writeHTTPError(c, 400, "Bad Request", rec.Reason)
		return nil, false
	}
	host, port, err := splitHostPort(req.URL.Host, 80)
	if err != nil {
		up.close()
		rec.Reason = "malformed request: " + err.Error()
		p.audit(rec)
		writeHTTPError(c, 400, "Bad Request", rec.Reason)
		return nil, false
	}
	rec.Host, rec.Port = host, port
	t, err := p.check(p.ctx, host, port)
	if err != nil {
		up.close()
		p.answer(c, rec, err)
		return nil, false
	}
	rec.Allowed, rec.Rule = true, t.rule
	var keep bool
	key := hostPort(t.host, port)
	reused := up != nil && up.key == key
	for attempt := 0; ; attempt++ {
		if !reused {
			up.close()
			upc, _, err := p.dial(p.ctx, t)
			if err != nil {
				p.answer(c, rec, err)
				return nil, false
			}
			up = &upstream{p: p, key: key, conn: upc, lim: &headLimit{r: upc, n: -1}}
			up.br = bufio.NewReaderSize(up.lim, 32<<10)
		}
		rec.Addr = up.conn.RemoteAddr().String()
		keep, err = p.exchange(c, br, req, up, &rec, reused)
		if !errors.Is(err, errStale) || attempt > 0 {
			break
		}
		// The upstream closed the kept-alive connection while it was
		// idle; the request (without a body) goes again on a new one.
		reused, rec.BytesOut = false, 0
	}
	rec.Duration = time.Since(start)
	if err != nil {
		rec.Reason = err.Error()
	}
	p.audit(rec)
	if err != nil || !keep {
		up.close()
		return nil, false
	}
	return up, true
}

// exchange writes the request upstream and copies the response back. The
// Host header is the URL's authority (ReadRequest already made it so), so a
// request cannot name an allowed host and ask another one behind it.
//
// On a reused upstream connection that turns out closed before any answer,
// a request without a body fails with errStale and nothing sent to the
// client, so the caller can try a new connection.
func (p *Proxy) exchange(c stream, br *bufio.Reader, req *http.Request, up *upstream, rec *Record, reused bool) (keep bool, err error) {
	// Only idempotent methods are sent again (as net/http's Transport
	// does): a body-less POST may have been acted on.
	retryable := reused && (req.Body == nil || req.Body == http.NoBody) && idempotent(req.Method)
	for _, h := range []string{"Proxy-Connection", "Proxy-Authorization", "Proxy-Authenticate"} {
		req.Header.Del(h)
	}
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header["User-Agent"] = []string{""} // net/http would add its own
	}
	if strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
		req.Header.Del("Expect")
		io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n")
	}
	idle := p.cfg.IdleTimeout
	c.SetReadDeadline(time.Now().Add(idle))
	if req.Body != nil && req.Body != http.NoBody {
		req.Body = &deadlineReader{r: req.Body, c: c, idle: idle}
	}
	out := &countWriter{w: up.conn}
	up.conn.SetWriteDeadline(time.Now().Add(idle))
	err = req.Write(out)
	rec.BytesOut = out.n
	if err != nil {
		if retryable {
			return false, errStale
		}
		writeHTTPError(c, 502, "Bad Gateway", "cannot send the request to "+hostPort(rec.Host, rec.Port))
		return false, fmt.Errorf("sending the request upstream: %w", err)
	}
	for first := true; ; first = false {
		up.conn.SetReadDeadline(time.Now().Add(idle))
		up.lim.arm(up.br)
		resp, err := http.ReadResponse(up.br, req)
		if tooLarge := up.lim.done(up.br); err == nil && tooLarge != nil {
			err = tooLarge
		}
		if err != nil && first && retryable && up.br.Buffered() == 0 &&
			(errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)) {
			return false, errStale
		}
		if err != nil {
			public := "no valid response from " + hostPort(rec.Host, rec.Port)
			if errors.Is(err, errHeadTooLarge) {
				public += ": " + errHeadTooLarge.Error()
			}
			writeHTTPError(c, 502, "Bad Gateway", public)
			return false, fmt.Errorf("reading the response: %w", err)
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			n, err := writeHead(c, resp)
			rec.BytesIn += n
			if err != nil {
				return false, err
			}
			continue
		}
		if resp.ContentLength < 0 || len(resp.TransferEncoding) > 0 {
			// Chunked or ended by close: let net/http re-frame it.
			resp.Body = &deadlineReader{r: resp.Body, c: up.conn, idle: idle}
			cw := &countWriter{w: c, conn: c, idle: idle}
			bw := bufio.NewWriterSize(cw, 32<<10)
			err := resp.Write(bw)
			if err == nil {
				err = bw.Flush()
			}
			rec.BytesIn += cw.n
			return err == nil && !resp.Close && !req.Close, err
		}
		n, err := writeHead(c, resp)
		rec.BytesIn += n
		if err != nil {
			return false, err
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			o, i, idled := pipe(c, br, up.conn, up.br, idle)
			rec.BytesOut += o
			rec.BytesIn += i
			if idled {
				return false, errors.New(idleReason(idle))
			}
			return false, nil
		}
		length := resp.ContentLength
		if req.Method == http.MethodHead || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified {
			length = 0 // ContentLength tells a HEAD's length; nothing follows
		}
		n, err = copyBody(c, up, length, idle)
		rec.BytesIn += n
		if err != nil {
			return false, err
		}
		return !resp.Close && !req.Close, nil
	}
}

// writeHead writes a response's status line and headers as received.
func writeHead(c net.Conn, resp *http.Response) (int64, error) {
	var head bytes.Buffer
	fmt.Fprintf(&head, "HTTP/%d.%d %s\r\n", resp.ProtoMajor, resp.ProtoMinor, resp.Status)
	resp.Header.Write(&head)
	head.WriteString("\r\n")
	n, err := c.Write(head.Bytes())
	return int64(n), err
}

// copyBody moves a body of known length: what the reader buffered, then the
// rest socket to socket.
func copyBody(c stream, up *upstream, n int64, idle time.Duration) (int64, error) {
	var done int64
	if b := int64(up.br.Buffered()); b > 0 && n > 0 {
		buf, _ := up.br.Peek(int(min(b, n)))
		w, err := c.Write(buf)
		up.br.Discard(w)
		done += int64(w)
		if err != nil {
			return done, err
		}
	}
	if done == n {
		return done, nil
	}
	w := watch(idle, c, up.conn)
	m, err := copyConn(c, up.conn, n-done)
	if w.end() {
		err = errors.New(idleReason(idle))
	}
	return done + m, err
}

// countWriter counts what it writes; with conn set it re-arms the write
// deadline first (never used with splice, where an expiring write deadline
// would lose data).
type countWriter struct {
	w    io.Writer
	n    int64
	conn net.Conn
	idle time.Duration
}

func (c *countWriter) Write(b []byte) (int, error) {
	if c.conn != nil {
		c.conn.SetWriteDeadline(time.Now().Add(c.idle))
	}
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// deadlineReader re-arms a connection's read deadline before each read, so
// only silence (not a long body) times out.
type deadlineReader struct {
	r    io.ReadCloser
	c    net.Conn
	idle time.Duration
}

func (d *deadlineReader) Read(b []byte) (int, error) {
	d.c.SetReadDeadline(time.Now().Add(d.idle))
	return d.r.Read(b)
}

func (d *deadlineReader) Close() error { return d.r.Close() }

var errStale = errors.New("the kept-alive upstream connection was closed")

func idleReason(idle time.Duration) string {
	return fmt.Sprintf("closed: nothing moved for %s (the idle timeout)", idle)
}

// idempotent reports whether a request with this method may be sent twice.
func idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}
