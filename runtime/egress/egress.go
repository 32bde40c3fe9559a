package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/warden-sandbox/warden/policies"
	"golang.org/x/sys/unix"
)

// Defaults for a session's proxy.
const (
	DefaultMaxConns         = 64
	DefaultIdleTimeout      = 5 * time.Minute
	DefaultDialTimeout      = 10 * time.Second
	DefaultHandshakeTimeout = 30 * time.Second
	// AuditRate and AuditBurst bound the denials one proxy writes to the
	// audit log, and AuditBytesRate and AuditBytesBurst their size: a
	// sandbox hammering the proxy must not fill the host's disk. Denials
	// over either rate are counted in one summary record.
	AuditRate       = 100 // records per second
	AuditBurst      = 200
	AuditBytesRate  = 64 << 10 // bytes per second
	AuditBytesBurst = 256 << 10
	// AuditAllowRate and the others bound allowed records separately, so
	// that a flood of denials never hides what left: each is an exchange
	// with an allowed destination, but requests on kept-alive connections
	// and quick reconnects are not bounded by the connection limit. Over
	// these rates allowed records are summed up in one record that names
	// their destinations and carries their bytes.
	AuditAllowRate       = 1000
	AuditAllowBurst      = 2000
	AuditAllowBytesRate  = 256 << 10
	AuditAllowBytesBurst = 1 << 20
	// SummaryHosts bounds the destinations an allowed summary names.
	SummaryHosts = 16
	// MaxAuditHost and MaxReason bound what a record or an error answer
	// repeats of what the sandbox sent: a name is at most 253 bytes, and a
	// reason quotes a name or a request line.
	MaxAuditHost = 253
	MaxReason    = 512
	// recordOverhead is what a record costs in the log besides its texts:
	// the event, session, policy, hash, numbers and JSON keys.
	recordOverhead = 320
)

// clip shortens s to at most n bytes (on a character boundary) and says
// how much it left out.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("…+%d bytes", len(s)-cut)
}

// clipRecord bounds the texts of a record.
func clipRecord(r Record) Record {
	r.Host = clip(r.Host, MaxAuditHost)
	r.Reason = clip(r.Reason, MaxReason)
	r.Rule = clip(r.Rule, MaxReason)
	r.Addr = clip(r.Addr, 64)
	r.Proto = clip(r.Proto, 16)
	if r.Hosts != nil {
		hosts := make([]string, len(r.Hosts))
		for i, h := range r.Hosts {
			hosts[i] = clip(h, MaxAuditHost+6)
		}
		r.Hosts = hosts
	}
	return r
}

// recordSize estimates what a record takes in the audit log.
func recordSize(r Record) float64 {
	n := recordOverhead + len(r.Host) + len(r.Reason) + len(r.Rule) + len(r.Addr) + len(r.Proto)
	for _, h := range r.Hosts {
		n += len(h) + 3
	}
	return float64(n)
}

// Config is one session's egress policy.
type Config struct {
	Policy string // the policy's name, for messages
	Allow  []policies.HostPattern
	// Hosts resolves these names (lower-case, no trailing dot) instead of
	// DNS, like an /etc/hosts file; the address checks still apply.
	Hosts map[string][]netip.Addr
	// Resolver resolves every other name; nil means net.DefaultResolver.
	Resolver *net.Resolver
	// MaxConns bounds the connections open at once (DefaultMaxConns if 0).
	MaxConns int
	// IdleTimeout closes a connection on which nothing moved for that long
	// (DefaultIdleTimeout if 0).
	IdleTimeout time.Duration
	// DialTimeout bounds one upstream connect (DefaultDialTimeout if 0).
	DialTimeout time.Duration
	// HandshakeTimeout bounds reading a request (DefaultHandshakeTimeout if 0).
	HandshakeTimeout time.Duration
	// Audit receives every decision within the audit budgets, and
	// summaries of those over them; it may be nil.
	Audit func(Record)
}

// Record is one decision: a connection (CONNECT, SOCKS5) or a request
// (plain HTTP) allowed or denied. BytesOut went from the sandbox to the
// host, BytesIn came back. Allowed means a rule matched and the addresses
// passed: such a request that could not be served (the name did not
// resolve, the destination did not answer) is allowed, with a Reason.
type Record struct {
	Allowed  bool
	Proto    string // http, connect, socks5
	Host     string // as the client asked
	Port     int
	Addr     string // the address dialed
	Rule     string // the network.allow rule that matched
	BytesIn  int64
	BytesOut int64
	Duration time.Duration
	Reason   string // why it was denied, or how an allowed one failed
	// Suppressed, when set, makes this a summary: that many decisions
	// went over their rate and were not reported one by one. A summary
	// of allowed ones carries their bytes and names their destinations
	// (Hosts, host:port, at most SummaryHosts).
	Suppressed int
	Hosts      []string
}

// Proxy serves one session.
type Proxy struct {
	cfg   Config
	route func(netip.Addr) (routeKind, error) // routeOf; tests inject failures
	ctx   context.Context
	stop  context.CancelFunc
	slots chan struct{}

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	lns    []net.Listener
	closed bool
	wg     sync.WaitGroup

	auditMu   sync.Mutex
	denyRate  budget
	allowRate budget
	denied    int     // denials not logged yet
	allowed   summary // allowed records not logged yet
	flush     *time.Timer
}

// budget is a token bucket of records and bytes.
type budget struct {
	rate, burst, bytesRate, bytesBurst float64
	records, bytes                     float64
	refilled                           time.Time
}

func (b *budget) refill() {
	now := time.Now()
	if b.refilled.IsZero() {
		b.records, b.bytes = b.burst, b.bytesBurst
	} else {
		dt := now.Sub(b.refilled).Seconds()
		b.records = min(b.burst, b.records+dt*b.rate)
		b.bytes = min(b.bytesBurst, b.bytes+dt*b.bytesRate)
	}
	b.refilled = now
}

// take spends a record of size if the budget has it.
func (b *budget) take(size float64) bool {
	b.refill()
	if b.records < 1 || b.bytes < size {
		return false
	}
	b.records--
	b.bytes -= size
	return true
}

// charge spends what a summary costs, which is written whatever the
// budget holds (at most one per second): later records wait for it.
func (b *budget) charge(size float64) {
	b.refill()
	b.records--
	b.bytes -= size
}

// summary sums up allowed records over their rate.
type summary struct {
	n       int
	out, in int64
	hosts   []string
	others  int // records to destinations past the first SummaryHosts
}

func (s *summary) add(r Record) {
	s.n++
	s.out += r.BytesOut
	s.in += r.BytesIn
	dest := hostPort(r.Host, r.Port)
	for _, h := range s.hosts {
		if h == dest {
			return
		}
	}
	if len(s.hosts) < SummaryHosts {
		s.hosts = append(s.hosts, dest)
	} else {
		s.others++
	}
}

// New makes a proxy enforcing cfg.
func New(cfg Config) *Proxy {
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	ctx, stop := context.WithCancel(context.Background())
	return &Proxy{cfg: cfg, ctx: ctx, stop: stop, route: routeOf, slots: make(chan struct{}, cfg.MaxConns), conns: map[net.Conn]struct{}{},
		denyRate:  budget{rate: AuditRate, burst: AuditBurst, bytesRate: AuditBytesRate, bytesBurst: AuditBytesBurst},
		allowRate: budget{rate: AuditAllowRate, burst: AuditAllowBurst, bytesRate: AuditAllowBytesRate, bytesBurst: AuditAllowBytesBurst}}
}

// Serve accepts connections on ln until ln or the proxy is closed.
func (p *Proxy) Serve(ln net.Listener) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		ln.Close()
		return net.ErrClosed
	}
	p.lns = append(p.lns, ln)
	p.mu.Unlock()
	shortenBacklog(ln, p.cfg.MaxConns)
	for {
		// A slot first, then Accept: connections over the limit wait in
		// the listener's (short) backlog, holding no descriptor of the
		// daemon's, and get served in turn.
		release, ok := p.acquire()
		if !ok {
			return nil
		}
		c, err := ln.Accept()
		if err != nil {
			release()
			if errors.Is(err, net.ErrClosed) || p.ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			// EMFILE and friends: back off rather than spin.
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if !p.track(c) {
			release()
			c.Close()
			return nil
		}
		if tc, ok := c.(*net.TCPConn); ok {
			tuneSandboxConn(tc)
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer release()
			defer p.untrack(c)
			p.serve(c)
		}()
	}
}

// GlobalMaxConns bounds the connections open at once through all proxies
// of this process, so that sandboxes together cannot use up the daemon's
// file descriptors: each connection holds two sockets (client and
// upstream) and, while data is in flight, a pipe (two descriptors) per
// direction (see copyConn).
var GlobalMaxConns = func() int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return 1024
	}
	return int(max(256, min(16384, (int64(rl.Cur)-1024)/6)))
}()

var globalSlots = make(chan struct{}, GlobalMaxConns)

// acquire waits for a free slot of the session's and of the process's;
// ok is false once the proxy is closed.
func (p *Proxy) acquire() (release func(), ok bool) {
	select {
	case p.slots <- struct{}{}:
	case <-p.ctx.Done():
		return nil, false
	}
	select {
	case globalSlots <- struct{}{}:
	case <-p.ctx.Done():
		<-p.slots
		return nil, false
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			<-globalSlots
			<-p.slots
		})
	}, true
}

// shortenBacklog makes the kernel queue at most n connections that wait
// for a slot (listen(2) again only changes the backlog): a sandbox cannot
// park thousands of connections, with what they sent, in the queue.
func shortenBacklog(ln net.Listener, n int) {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return
	}
	if rc, err := sc.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { unix.Listen(int(fd), n) })
	}
}

// Close stops the listeners and every open connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for _, ln := range p.lns {
		ln.Close()
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.stop()
	p.wg.Wait()
	p.auditMu.Lock()
	if p.flush != nil {
		p.flush.Stop()
		p.flush = nil
	}
	p.flushSuppressed()
	p.auditMu.Unlock()
	return nil
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

// audit reports a decision. Denials and allowed records have budgets of
// their own, so a flood of denials cannot keep what left out of the log;
// the records over a budget are summed up a second after the first of
// them, and when the proxy closes.
func (p *Proxy) audit(r Record) {
	if p.cfg.Audit == nil {
		return
	}
	r = clipRecord(r)
	size := recordSize(r)
	p.auditMu.Lock()
	defer p.auditMu.Unlock()
	b := &p.denyRate
	if r.Allowed {
		b = &p.allowRate
	}
	if b.take(size) {
		p.cfg.Audit(r)
		return
	}
	if r.Allowed {
		p.allowed.add(r)
	} else {
		p.denied++
	}
	if p.flush == nil {
		p.flush = time.AfterFunc(time.Second, func() {
			p.auditMu.Lock()
			defer p.auditMu.Unlock()
			p.flush = nil
			p.flushSuppressed()
		})
	}
}

// flushSuppressed writes the summaries of records over their budgets;
// auditMu held.
func (p *Proxy) flushSuppressed() {
	if p.cfg.Audit == nil {
		return
	}
	if p.denied > 0 {
		r := Record{Suppressed: p.denied, Reason: fmt.Sprintf("%d more denied egress requests were not logged: over %d records or %d KiB per second", p.denied, AuditRate, AuditBytesRate>>10)}
		p.denyRate.charge(recordSize(r))
		p.cfg.Audit(r)
		p.denied = 0
	}
	if s := p.allowed; s.n > 0 {
		r := Record{Allowed: true, Suppressed: s.n, BytesOut: s.out, BytesIn: s.in, Hosts: s.hosts,
			Reason: fmt.Sprintf("%d allowed requests and connections summed up in one record (over %d records or %d KiB per second)", s.n, AuditAllowRate, AuditAllowBytesRate>>10)}
		if s.others > 0 {
			r.Reason += fmt.Sprintf(", %d of them to destinations not listed", s.others)
		}
		r = clipRecord(r)
		p.allowRate.charge(recordSize(r))
		p.cfg.Audit(r)
		p.allowed = summary{}
	}
}

// serve tells the protocols apart by the first byte: SOCKS5 starts with
// 5, SOCKS4 with 4, HTTP with a method name.
func (p *Proxy) serve(c net.Conn) {
	deadline := time.Now().Add(p.cfg.HandshakeTimeout)
	c.SetReadDeadline(deadline)
	lim := &headLimit{r: c, n: -1}
	br := bufio.NewReaderSize(lim, 4096)
	first, err := br.Peek(1)
	if err != nil {
		return
	}
	switch first[0] {
	case 5:
		p.serveSOCKS(c, br)
	case 4:
		p.audit(Record{Proto: "socks4", Reason: "SOCKS4 is not supported; use SOCKS5 (socks5h://) or the HTTP proxy"})
		c.Write([]byte{0, 0x5b, 0, 0, 0, 0, 0, 0})
	default:
		p.serveHTTP(c, br, lim, deadline)
	}
}

// MaxHeaderBytes bounds a request's or response's head: net/http's
// readers would otherwise grow with an endless header line.
const MaxHeaderBytes = 64 << 10

// headLimit bounds a head read through a bufio.Reader over it: while
// armed, reads stop once the head could not fit any more, and done tells
// whether what the parser took (not what the reader buffered ahead of it,
// a body or a pipelined request) was within MaxHeaderBytes.
type headLimit struct {
	r        io.Reader
	n        int64 // what may still be read; < 0: no limit
	read     int64 // read since arm
	buffered int   // what the reader held at arm
}

func (h *headLimit) arm(br *bufio.Reader) {
	h.buffered, h.read = br.Buffered(), 0
	h.n = int64(MaxHeaderBytes + br.Size())
}

// done disarms the limit and says whether the head just parsed was too
// large.
func (h *headLimit) done(br *bufio.Reader) error {
	h.n = -1
	if int64(h.buffered)+h.read-int64(br.Buffered()) > MaxHeaderBytes {
		return errHeadTooLarge
	}
	return nil
}

func (h *headLimit) Read(b []byte) (int, error) {
	if h.n == 0 {
		return 0, errHeadTooLarge
	}
	if h.n > 0 && int64(len(b)) > h.n {
		b = b[:h.n]
	}
	n, err := h.r.Read(b)
	h.read += int64(n)
	if h.n > 0 {
		h.n -= int64(n)
	}
	return n, err
}

var errHeadTooLarge = fmt.Errorf("head larger than %d bytes (64 KiB)", MaxHeaderBytes)

// denial is a request the policy refuses; its text names the rule set.
type denial struct{ reason string }

func (d *denial) Error() string { return d.reason }

// failure is a request a rule allowed that could not be served: the name
// did not resolve or the destination did not answer. The sandbox is told
// what failed (public); the audit log also gets why (err), which may name
// the host's resolver or its addresses.
type failure struct {
	rule   string
	public string
	err    error
}

func (f *failure) Error() string { return f.public + ": " + f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

// canonicalHost is the one spelling of a requested name that is matched,
// looked up in Config.Hosts and resolved: lower-case, without brackets and
// one trailing dot. A name with an empty label (a leading dot, "..", or a
// second trailing dot) is refused: resolvers and rules each ignore one
// trailing dot, and must not be left to disagree about which name it is.
func canonicalHost(host string) (string, error) {
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if _, err := netip.ParseAddr(h); err == nil {
		return h, nil
	}
	if h == "" || strings.HasPrefix(h, ".") || strings.HasSuffix(h, ".") || strings.Contains(h, "..") {
		return "", &denial{fmt.Sprintf("%q is not a host name: it has an empty label; ask for the name with at most one trailing dot", host)}
	}
	return h, nil
}

// target is what a client asked for, checked: the rule that allowed it and
// the addresses that passed the address checks, in resolver order.
type target struct {
	host  string
	port  int
	rule  string
	addrs []netip.AddrPort
}

// check decides a request for host:port. It resolves only names a rule
// matches, so a denied name never reaches DNS.
func (p *Proxy) check(ctx context.Context, host string, port int) (*target, error) {
	host, err := canonicalHost(host)
	if err != nil {
		return nil, err
	}
	t := &target{host: host, port: port}
	for _, r := range p.cfg.Allow {
		if r.Match(host, port) {
			t.rule = r.String()
			break
		}
	}
	if t.rule == "" {
		return nil, &denial{fmt.Sprintf("%s matches no network.allow rule of policy %q (%s)", hostPort(host, port), p.cfg.Policy, p.rules())}
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return nil, &denial{fmt.Sprintf("%s: addresses with a zone are not allowed", host)}
		}
		addrs = []netip.Addr{a}
	} else if fixed, ok := p.cfg.Hosts[host]; ok {
		addrs = fixed
	} else {
		lctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
		defer cancel()
		addrs, err = p.cfg.Resolver.LookupNetIP(lctx, "ip", host)
		if err != nil {
			return nil, &failure{rule: t.rule, public: "cannot resolve " + host, err: err}
		}
	}
	var refused []string
	for _, a := range addrs {
		a = a.Unmap().WithZone("")
		why, opener := p.refuseAddr(a, port)
		if why != "" {
			refused = append(refused, why)
			continue
		}
		if opener != "" && opener != t.rule && !strings.Contains(t.rule, " + ") {
			t.rule += " + " + opener // the audit names both rules
		}
		t.addrs = append(t.addrs, netip.AddrPortFrom(a, uint16(port)))
	}
	if len(t.addrs) == 0 {
		if len(refused) == 0 {
			return nil, &failure{rule: t.rule, public: "cannot resolve " + host, err: errors.New("no addresses")}
		}
		return nil, &denial{fmt.Sprintf("%s resolves to %s, which only a network.allow rule naming the address opens (policy %q: %s)",
			hostPort(host, port), strings.Join(refused, ", "), p.cfg.Policy, p.rules())}
	}
	return t, nil
}

// refuseAddr says why a resolved address may not be dialed, or "" and the
// address rule that opens it if it needs one. The host's own addresses
// (whatever range they are in) are opened only by a rule naming exactly
// that address; other special addresses by an address rule at least as
// specific as their range (so 0.0.0.0/0 does not open loopback, 10.0.0.0/8
// opens 10.1.2.3 but not the host's own 10.0.0.5); see policies
// HostPattern.Opens. A NAT64 or 6to4 address is judged by the IPv4 address
// it embeds, and its routing by both.
func (p *Proxy) refuseAddr(a netip.Addr, port int) (why, opener string) {
	kind, err := p.routeKind(a)
	if err != nil {
		return fmt.Sprintf("%s (cannot tell whether it is this host's own address: %v)", a, err), ""
	}
	if kind == routeBroadcast {
		return fmt.Sprintf("%s (broadcast, never allowed)", a), ""
	}
	own := kind == routeOwn
	class, special := policies.Classify(a)
	if !special && !own {
		return "", ""
	}
	if special && class.Never {
		return fmt.Sprintf("%s (%s, never allowed)", a, class.Name), ""
	}
	for _, r := range p.cfg.Allow {
		if r.Opens(a, port, own) {
			return "", r.String()
		}
	}
	if own && !special {
		return fmt.Sprintf("%s (this host's own address)", a), ""
	}
	return fmt.Sprintf("%s (%s)", a, class.Name), ""
}

// routeKind asks the routing table about a and, for a NAT64 or 6to4
// address, about the IPv4 address it leads to.
func (p *Proxy) routeKind(a netip.Addr) (routeKind, error) {
	kind, err := p.route(a)
	if err != nil || kind == routeOwn {
		return kind, err
	}
	if e, ok := policies.Embedded(a); ok {
		k, err := p.route(e)
		if err != nil || k != routeElsewhere {
			return k, err
		}
	}
	return kind, nil
}

// rules lists the rule set for a message, shortened when long.
func (p *Proxy) rules() string {
	if len(p.cfg.Allow) == 0 {
		return "no rules"
	}
	var s []string
	for i, r := range p.cfg.Allow {
		if i == 8 {
			s = append(s, fmt.Sprintf("and %d more", len(p.cfg.Allow)-8))
			break
		}
		s = append(s, r.String())
	}
	return "allows " + strings.Join(s, ", ")
}

// dial connects to the first checked address that answers. Addresses are
// literal: nothing is resolved again. Its errors are failures.
func (p *Proxy) dial(ctx context.Context, t *target) (*net.TCPConn, netip.AddrPort, error) {
	d := net.Dialer{Timeout: p.cfg.DialTimeout}
	var errs []error
	for _, a := range t.addrs {
		c, err := d.DialContext(ctx, "tcp", a.String())
		if err == nil {
			tc := c.(*net.TCPConn)
			tuneUpstreamConn(tc)
			if !p.track(tc) {
				tc.Close()
				return nil, a, net.ErrClosed
			}
			return tc, a, nil
		}
		errs = append(errs, err)
	}
	return nil, netip.AddrPort{}, &failure{rule: t.rule, public: "cannot connect to " + hostPort(t.host, t.port), err: errors.Join(errs...)}
}

func hostPort(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// Socket buffers. Data a stalled peer does not take waits in the daemon's
// kernel memory, so how much may wait is bounded: the sandbox's side is a
// local hop (fixed 256 KiB buffers, which the kernel doubles, are plenty);
// upstream, what is not yet sent is held to 128 KiB (TCP_NOTSENT_LOWAT; in
// flight may be what the peer's window takes) and the receive buffer to
// 1 MiB (2 MiB with the kernel's overhead: a window for ~80 Mbit/s at a
// 100 ms round trip). The kernel's autotuning would let a sandbox that
// stops reading pin up to tcp_rmem's and tcp_wmem's maxima per socket.
//
// The sandbox's side is a loopback hop, where congestion control has
// nothing to do, while a pacing one (bbr, a common host default) arms a
// timer for each burst it sends: reno, built into every kernel and allowed
// to every user, does not pace. Upstream keeps the host's choice.
const (
	sandboxCongestion    = "reno"
	sandboxSocketBuffer  = 256 << 10
	upstreamReadBuffer   = 1 << 20
	upstreamNotSentLowat = 128 << 10
)

func tuneSandboxConn(c *net.TCPConn) {
	c.SetReadBuffer(sandboxSocketBuffer)
	c.SetWriteBuffer(sandboxSocketBuffer)
	if rc, err := c.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, sandboxCongestion)
		})
	}
}

func tuneUpstreamConn(c *net.TCPConn) {
	c.SetReadBuffer(upstreamReadBuffer)
	if rc, err := c.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, upstreamNotSentLowat)
		})
	}
}
