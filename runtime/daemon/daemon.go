package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/runtime/internal/protocol"
	"github.com/warden-sandbox/warden/runtime/internal/wire"
	"github.com/warden-sandbox/warden/runtime/sandbox"
	"github.com/warden-sandbox/warden/spec"
)

// SocketPath is the daemon's socket under a state root.
func SocketPath(root string) string { return protocol.SocketPath(root) }

// StreamSocketPath is the daemon's stream socket under a state root, for
// clients that cannot pass descriptors.
func StreamSocketPath(root string) string { return protocol.StreamSocketPath(root) }

// Daemon owns the sessions of one state root: it serves the CLI on a 0600
// socket, expires idle sessions and writes the audit log.
type Daemon struct {
	rt    *sandbox.Runtime
	audit *sandbox.AuditLog
	lock  *os.File // the root folder, flocked; see lockRoot
	conns *connTable

	lnMu    sync.Mutex
	sockets []*socket // the packet socket, then the stream one; see socket.go

	mu       sync.Mutex
	sessions map[string]*daemonSession
	pools    *pools  // warm pools; see pool.go
	guesses  guesses // the claim specs of the latest claims; see claim.go

	counters  *counters      // the stats op's counts; see stats.go
	approvals *approvalQueue // commands waiting for a human; see approvals.go
}

type daemonSession struct {
	*sandbox.Session
	running int  // commands in flight
	execs   int  // commands run through this daemon
	removed bool // by `session rm --force` while commands ran
	oneShot bool // a do's sandbox: its one command only, then discarded
	// commands are those running now, for the stats op.
	commands map[*execRequest]running
}

// ErrDaemonRunning is returned when another daemon holds the root.
var ErrDaemonRunning = protocol.ErrDaemonRunning

// NewDaemon takes the root's lock, re-adopts the sessions a previous
// daemon left running (reaping those whose sandbox died) and listens.
func NewDaemon(rt *sandbox.Runtime, auditPath string) (*Daemon, error) {
	if err := rt.MakeDirs(); err != nil {
		return nil, err
	}
	lock, err := lockRoot(rt.Root)
	if err != nil {
		return nil, err
	}
	audit, err := sandbox.OpenAuditLog(auditPath)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("audit log: %w", err)
	}
	d := &Daemon{rt: rt, audit: audit, lock: lock, conns: newConnTable(), sessions: map[string]*daemonSession{}, pools: newPools(rt),
		counters: newCounters(), approvals: newApprovalQueue()}
	audit.Observe(d.counters.observe)
	rt.SetAuditLog(audit)
	rt.SetApprover(d.approvals.wait)
	// Before anything is adopted or reaped: a pool state that cannot be
	// read stops the start and changes nothing.
	if err := d.pools.load(); err != nil {
		audit.Close()
		lock.Close()
		return nil, err
	}
	d.adopt()
	d.sockets = []*socket{
		{path: SocketPath(rt.Root), network: "unixpacket", peer: newPacketPeer},
		{path: StreamSocketPath(rt.Root), network: "unix", peer: newStreamPeer},
	}
	for _, sock := range d.sockets {
		os.Remove(sock.path) // a dead daemon's socket; we hold the lock
		if sock.ln, sock.id, err = listenSocket(sock.network, sock.path); err != nil {
			d.Close()
			return nil, fmt.Errorf("daemon socket: %w", err)
		}
	}
	return d, nil
}

// adopt picks up sessions from the state root: running ones are served
// again, the rest are reaped so nothing is left behind.
func (d *Daemon) adopt() {
	for _, f := range d.rt.RemoveHalfMade() {
		logrus.Infof("removed %s, a session folder a create cut short left", strings.TrimPrefix(f, "folder "))
	}
	for _, id := range d.rt.IDs() {
		s, err := d.rt.Adopt(id)
		if errors.Is(err, sandbox.ErrHeld) {
			continue // run by `warden do` or a Go program, not a daemon's
		}
		if err != nil {
			logrus.Warnf("reaping session %s: %v", id, err)
			d.audit.Write(sandbox.AuditRecord{Event: "session.reap", Session: id, Error: err.Error()})
			continue
		}
		d.sessions[id] = &daemonSession{Session: s}
		logrus.Infof("re-adopted session %s", id)
	}
}

// Serve answers requests until ctx is done.
func (d *Daemon) Serve(ctx context.Context) error {
	go d.expireLoop(ctx)
	go d.pools.loop(ctx)
	d.lnMu.Lock()
	for _, sock := range d.sockets {
		go d.accept(ctx, sock.ln, sock.peer)
	}
	d.lnMu.Unlock()
	d.watchSocket(ctx)
	d.closeSocket()
	return nil
}

// checkPeer lets only the daemon's own user talk to it. The socket's mode
// already says so; this holds even where a sandbox could reach the socket
// file (a sandbox's processes never run as that user on the host).
func checkPeer(conn *net.UnixConn) error {
	cred, err := peerCred(conn)
	if err != nil {
		return err
	}
	if int(cred.Uid) != os.Geteuid() {
		return fmt.Errorf("process %d runs as uid %d, not %d", cred.Pid, cred.Uid, os.Geteuid())
	}
	return nil
}

// peerCred is who connected: pid, uid and gid of the peer's process.
func peerCred(conn *net.UnixConn) (*unix.Ucred, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, cerr
}

// Close releases the socket and lock; sessions keep running for the next
// daemon to adopt.
func (d *Daemon) Close() {
	d.closeSocket()
	d.mu.Lock()
	for _, s := range d.sessions {
		s.StopEgress() // the next daemon serves it again
	}
	d.mu.Unlock()
	d.audit.Close()
	d.rt.RemoveRootCgroups() // only when no container of the root is left
	d.rt.ReleaseViews()      // those of gVisor starts that failed; the sessions' stay
	d.lock.Close()
}

// expireLoop closes sessions idle past their policy's limits.idle.
func (d *Daemon) expireLoop(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		d.mu.Lock()
		var expired []*daemonSession
		for id, s := range d.sessions {
			idle := now.Sub(s.LastUsed())
			// A frozen session is kept for whoever froze it to look at.
			if s.running == 0 && idle > s.Limits.Idle && !s.Frozen() {
				expired = append(expired, s)
				delete(d.sessions, id)
			}
		}
		d.mu.Unlock()
		for _, s := range expired {
			err := s.Close()
			rec := sandbox.AuditRecord{Event: "session.expire", Session: s.ID, Policy: s.PolicyName, PolicyHash: s.PolicyHash}
			if err != nil {
				rec.Error = err.Error()
			}
			d.audit.Write(rec)
		}
	}
}

// ProtocolVersion is the major version of the socket protocol this
// daemon and its client speak (docs/protocol.md, protocol.Version).
const ProtocolVersion = protocol.Version

// The protocol's messages: their types, shared with runtime/client, are
// in runtime/internal/protocol; testdata/protocol holds their JSON, which
// a rename fails.
type (
	request       = protocol.Request
	createRequest = protocol.CreateRequest
	execRequest   = protocol.ExecRequest
	reply         = protocol.Reply
	control       = protocol.Control
	// SessionInfo describes a session for `session ls`.
	SessionInfo = protocol.SessionInfo
)

func (d *Daemon) handle(ctx context.Context, p peer) {
	conn := p.conn()
	defer p.close()
	defer d.conns.done(conn)
	var req request
	files, err := p.receive(&req)
	if !d.conns.started(conn) {
		wire.CloseAll(files)
		p.send(reply{Error: d.conns.busy() + " (this connection sent no request and was closed)", Code: CodeDaemonUnavailable})
		return
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		p.send(reply{Error: fmt.Sprintf("bad request: none within %s of connecting", firstMessageWait), Code: CodeInvalidInput})
		return
	}
	if err != nil {
		p.send(reply{Error: "bad request: " + err.Error(), Code: CodeInvalidInput})
		return
	}
	defer wire.CloseAll(files)
	if err := checkVersion(req.V); err != nil {
		p.send(reply{Error: err.Error(), Code: CodeOf(err)})
		return
	}
	var answer reply
	switch req.Op {
	case "ping":
		answer.V = ProtocolVersion
	case "create":
		_, err = d.create(req.ID, req.Create, false)
	case "exec":
		d.exec(ctx, p, &req, files)
		return
	case "do":
		d.do(ctx, p, &req, files)
		return
	case "list":
		answer.Sessions = d.list()
	case "stats":
		st := d.stats()
		answer.Stats = &st
	case "remove":
		err = d.remove(req.ID, req.Force)
	case "gc":
		answer.Removed, err = d.gc()
	case "freeze", "thaw", "kill":
		answer.Killed, err = d.killSwitch(conn, req.Op, req.ID)
	case "freeze.all", "thaw.all":
		answer.Sessions, err = d.killSwitchAll(conn, req.Op)
	case "approvals.ls":
		answer.Approvals = d.Approvals()
	case "approvals.wait":
		answer.Approvals = d.waitApprovals(ctx, conn)
	case "approvals.approve", "approvals.deny":
		err = d.answerOp(conn, &req)
	case "pool.fill", "pool.status", "pool.drain":
		answer.Pools, err = d.poolOp(req.Op, req.Pool)
	default:
		err = kindf(spec.ErrInvalid, "unknown operation %q", req.Op)
	}
	if err != nil {
		answer.Error, answer.Code = err.Error(), CodeOf(err)
	}
	p.send(answer)
}

// checkVersion refuses a request in a protocol version this daemon does
// not speak, before it is looked at.
func checkVersion(v int) error {
	if v == 0 || v == ProtocolVersion {
		return nil
	}
	return kindf(ErrUnsupportedVersion, "protocol version %d is not spoken here: this warden daemon speaks version %d; use a client of its version, or restart the daemon from a newer warden", v, ProtocolVersion)
}

// create makes a session (or, with existingOK, returns the one there).
func (d *Daemon) create(id string, c *createRequest, existingOK bool) (*daemonSession, error) {
	if err := sandbox.CheckID(id); err != nil {
		return nil, err
	}
	defer d.rt.Changing()()
	d.mu.Lock()
	defer d.mu.Unlock()
	if s, ok := d.sessions[id]; ok {
		if s.oneShot {
			return nil, fmt.Errorf("%w: %s is a one-shot run (warden do), which runs its one command only", sandbox.ErrSessionExists, id)
		}
		if !existingOK {
			return nil, fmt.Errorf("%w: %s; pick another id or remove it with `warden session rm %s`", sandbox.ErrSessionExists, id, id)
		}
		if c == nil {
			return s, nil
		}
		if err := s.CheckSame(c.PolicyTOML, c.Vars); err != nil {
			return nil, err
		}
		return s, nil
	}
	if c == nil || c.PolicyTOML == "" {
		return nil, fmt.Errorf("%w: %s; create it with `warden session create --id %s --policy FILE --workspace DIR`, or pass --policy (and --workspace) to exec", sandbox.ErrNoSession, id, id)
	}
	p, err := policies.Parse(id+" policy", []byte(c.PolicyTOML))
	if err != nil {
		return nil, err
	}
	if err := checkVars(c.Vars); err != nil {
		return nil, err
	}
	s, err := d.createSession(sandbox.SessionConfig{ID: id, Policy: p, Vars: c.Vars})
	if err != nil {
		return nil, err
	}
	ds := &daemonSession{Session: s}
	d.sessions[id] = ds
	d.audit.Write(sandbox.AuditRecord{Event: "session.create", Session: id, Policy: s.PolicyName, PolicyHash: s.PolicyHash})
	return ds, nil
}

// checkVars refuses session folders a request names wrongly: each given
// must be an absolute path to an existing folder.
func checkVars(v policies.Vars) error {
	for _, f := range []struct{ name, path string }{
		{"workspace ($WORK_DIR)", v.WorkDir}, {"data folder ($DATA_DIR)", v.DataDir},
		{"skill folder ($SKILL_DIR)", v.SkillDir}, {"home ($HOME)", v.Home},
	} {
		if f.path == "" {
			continue
		}
		if !filepath.IsAbs(f.path) {
			return fmt.Errorf("%w: %s %q is not an absolute path; give an absolute path", spec.ErrInvalid, f.name, f.path)
		}
		if fi, err := os.Stat(f.path); f.name != "home ($HOME)" && (err != nil || !fi.IsDir()) {
			return fmt.Errorf("%w: %s %s is not an existing folder; create it first", spec.ErrInvalid, f.name, f.path)
		}
	}
	return nil
}

func (d *Daemon) exec(ctx context.Context, p peer, req *request, files []*os.File) {
	fail := func(err error) { p.send(reply{Error: err.Error(), Code: CodeOf(err)}) }
	e := req.Exec
	if e == nil || len(e.Argv) == 0 {
		fail(kindf(spec.ErrInvalid, "no command given"))
		return
	}
	stdio, stdioDone, err := p.stdio(e.Tty, files)
	if err != nil {
		fail(err)
		return
	}
	if p.gone() {
		stdioDone()
		return // it gave up waiting (a signal) before the request was read: run nothing
	}
	s, err := d.create(req.ID, req.Create, true)
	if err != nil {
		stdioDone()
		fail(err)
		return
	}
	res, err := d.run(ctx, p, s, e, stdio, stdioDone, true)
	if err != nil {
		fail(err)
		return
	}
	p.send(reply{Result: &res})
}

// run runs e in s with the given stdio and returns how it ended; signals
// and window sizes the client sends reach the command, and the client
// going away kills it. startLine writes the exec.start audit line first.
func (d *Daemon) run(ctx context.Context, p peer, s *daemonSession, e *execRequest, stdio [3]*os.File, stdioDone func(), startLine bool) (sandbox.ExecResult, error) {
	d.mu.Lock()
	s.running++
	s.execs++
	if s.commands == nil {
		s.commands = map[*execRequest]running{}
	}
	s.commands[e] = running{argv: e.Argv, cwd: s.Cwd(e.Cwd), started: time.Now().UTC()}
	d.mu.Unlock()
	// The exec line comes when the command ends; this one says it
	// started, should the daemon die (kill -9) before then.
	if startLine {
		d.audit.Write(sandbox.AuditRecord{Event: "exec.start", Session: s.ID, Policy: s.PolicyName, PolicyHash: s.PolicyHash,
			Argv: e.Argv, Cwd: s.Cwd(e.Cwd)})
	}
	// The client going away (or a signal it forwards) reaches the command.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	signals := make(chan unix.Signal, 4)
	resize := make(chan sandbox.WindowSize, 1)
	go func() {
		for {
			var c control
			fs, err := p.receive(&c)
			wire.CloseAll(fs)
			if err != nil {
				cancel()
				return
			}
			if c.Signal > 0 && c.Signal < 65 {
				select {
				case signals <- unix.Signal(c.Signal):
				default:
				}
			}
			if c.Rows > 0 && c.Cols > 0 {
				select { // only the latest size matters
				case <-resize:
				default:
				}
				resize <- sandbox.WindowSize{Rows: c.Rows, Cols: c.Cols}
			}
		}
	}()
	o := sandbox.ExecOptions{Argv: e.Argv, Env: e.Env, CallerEnv: e.CallerEnv, Cwd: e.Cwd, Timeout: e.Timeout, Tty: e.Tty, Rows: e.Rows, Cols: e.Cols, Signals: signals, Resize: resize}
	if e.Tty {
		o.OnTerminal = func(master *os.File) {
			p.send(reply{Started: true}, int(master.Fd()))
			master.Close()
		}
	} else {
		o.Stdin, o.Stdout, o.Stderr = stdio[0], stdio[1], stdio[2]
	}
	res, err := s.Exec(cctx, o)
	stdioDone() // all its output reaches the client before the result
	// Ended before the reply: a call the reply lets through (rm without
	// --force) must not find the command still counted as running.
	d.mu.Lock()
	s.running--
	delete(s.commands, e)
	removed := s.removed
	d.mu.Unlock()
	if removed {
		why := fmt.Sprintf("session %s was removed (session rm --force) while the command ran; the command was killed with it", s.ID)
		if err != nil {
			err = kindf(sandbox.ErrSandboxStopped, "%s", why)
		} else if res.Signal != 0 {
			res.Error = why
		}
	}
	return res, err
}

func (d *Daemon) list() []SessionInfo {
	// The counts under the lock; the sandboxes' states outside it, as a
	// container being frozen may keep its state from being read a while.
	d.mu.Lock()
	var out []SessionInfo
	var sessions []*daemonSession
	for _, s := range d.sessions {
		out = append(out, SessionInfo{ID: s.ID, Policy: s.PolicyName, Workspace: s.Vars.WorkDir,
			Created: s.Created, Execs: s.execs, Running: s.running, Pool: s.Pool})
		sessions = append(sessions, s)
	}
	d.mu.Unlock()
	for i, s := range sessions {
		out[i].LastUsed = s.LastUsed().UTC()
		out[i].State = "running"
		if s.Frozen() {
			out[i].State = "frozen"
		} else if !s.Running() {
			out[i].State = "stopped"
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (d *Daemon) remove(id string, force bool) error {
	if err := sandbox.CheckID(id); err != nil {
		return err
	}
	d.mu.Lock()
	s, ok := d.sessions[id]
	if ok && s.running > 0 && !force {
		d.mu.Unlock()
		return kindf(errSessionBusy, "session %s has %d command(s) running; wait, or use --force to kill them", id, s.running)
	}
	if ok {
		s.removed = true // its commands' callers learn why they ended
	}
	delete(d.sessions, id)
	d.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %s", sandbox.ErrNoSession, id)
	}
	err := s.Close()
	rec := sandbox.AuditRecord{Event: "session.remove", Session: id, Policy: s.PolicyName, PolicyHash: s.PolicyHash}
	if err != nil {
		rec.Error = err.Error()
	}
	d.audit.Write(rec)
	return err
}

// gc removes what no live session owns. A session whose sandbox has
// stopped (its agent died) runs nothing any more: it is removed too, its
// workspace left as it is.
func (d *Daemon) gc() ([]string, error) {
	defer d.rt.Collecting()()
	d.mu.Lock()
	live := map[string]bool{}
	var dead []*daemonSession
	for id, s := range d.sessions {
		if s.Stopped() {
			dead = append(dead, s)
			delete(d.sessions, id)
			continue
		}
		live[id], live[s.ContainerID()] = true, true
	}
	d.mu.Unlock()
	for _, s := range dead {
		s.Release() // rt.GC below removes what is left of it
		d.audit.Write(sandbox.AuditRecord{Event: "session.reap", Session: s.ID, Policy: s.PolicyName, PolicyHash: s.PolicyHash,
			Error: "its sandbox had stopped"})
	}
	d.pools.live(live)
	removed, poolErr := d.pools.gc(live)
	more, err := d.rt.GC(live)
	return append(removed, more...), errors.Join(poolErr, err)
}
