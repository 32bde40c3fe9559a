package sandbox

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/runtime/internal/protocol"
	"github.com/warden-sandbox/warden/runtime/internal/wire"
	"github.com/warden-sandbox/warden/spec"
)

// Command rules ([commands]): the sandbox has only warden's stub where a
// ruled program was (spec/commands.go). A call of a ruled program reaches
// the session here, from the caller of Exec (its argv[0] names the
// program) or from the stub through the agent's rules channel; the rules
// decide, an ask waits for the Runtime's Approver, and the agent runs the
// real program from a copy only the host holds.

// DeniedExitCode is the status of a command the rules refuse (a deny, an
// ask denied or unanswered): 126, "found but cannot be run".
const DeniedExitCode = 126

// Approval is a command waiting for a human.
type Approval = protocol.Approval

// MaxWaitingAsks bounds the asks of one session waiting at once, so a
// sandbox cannot flood the people who answer them.
const MaxWaitingAsks = 32

// Answer is a human's answer, or the timeout's.
type Answer struct {
	Allow    bool
	UID      *int   // who answered (the caller's uid); nil when nobody did
	By       string // who answered, when not a uid, or for whom the uid did (a dashboard login)
	Reason   string // the answerer's words, or why nobody could
	TimedOut bool
}

// Approver waits for the answer to an ask; it calls waiting with the
// approval's id once it is listed. The daemon's queue is one; a Runtime
// without one (warden do, a Go program) denies every ask.
type Approver func(ctx context.Context, a Approval, waiting func(id string)) Answer

// SetApprover sets who answers asks.
func (rt *Runtime) SetApprover(a Approver) { rt.approver = a }

// commandDecision is what the rules and a human made of one call.
type commandDecision struct {
	allow bool
	line  string // for the caller, when refused
}

// ruledProgram finds the ruled program a top-level argv[0] names.
func (s *Session) ruledProgram(argv0 string) int {
	for i, p := range s.Commands {
		for _, n := range p.Names {
			if n == argv0 {
				return i
			}
		}
	}
	return -1
}

// decide applies the rules to one call of ruled program prog and, for an
// ask, waits for the answer; notice tells the caller it waits. Every
// decision a rule made is an audit line.
func (s *Session) decide(ctx context.Context, prog int, argv []string, cwd, parent string, notice func(string)) commandDecision {
	d := s.policy.Commands.Decide(s.Commands[prog].Names, argv[1:])
	rec := AuditRecord{Event: "command", Session: s.ID, Policy: s.PolicyName, PolicyHash: s.PolicyHash,
		Argv: argv, Cwd: cwd, Rule: d.Describe(), Parent: parent}
	cmdline := shellLine(argv)
	switch d.Action {
	case policies.ActionNone:
		return commandDecision{allow: true}
	case policies.ActionAllow:
		rec.Decision = "allow"
		s.rt.auditSink().Write(rec)
		return commandDecision{allow: true}
	case policies.ActionDeny:
		rec.Decision = "deny"
		s.rt.auditSink().Write(rec)
		return commandDecision{line: fmt.Sprintf("%s: denied by %s", cmdline, d.Describe())}
	}
	timeout := s.policy.Commands.AskTimeout()
	if n := s.asking.Add(1); n > MaxWaitingAsks {
		s.asking.Add(-1)
		rec.Decision, rec.Reason = "denied", fmt.Sprintf("more than %d commands of the session wait for approval", MaxWaitingAsks)
		s.rt.auditSink().Write(rec)
		return commandDecision{line: fmt.Sprintf("%s: refused (%s, %s; nothing was run)", cmdline, d.Describe(), rec.Reason)}
	}
	defer s.asking.Add(-1)
	a := Approval{Session: s.ID, Policy: s.PolicyName, Argv: argv, Cwd: cwd, Parent: parent, Rule: d.Describe(),
		Since: time.Now().UTC(), Timeout: timeout}
	var ans Answer
	if s.rt.approver == nil {
		ans = Answer{Reason: "nobody can answer outside the daemon: run it in a daemon session (warden exec --session)"}
	} else {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		ans = s.rt.approver(ctx, a, func(id string) {
			a.ID = id
			notice(fmt.Sprintf("%s: waiting for approval %s (%s); answer with `warden approvals approve %s` or `warden approvals deny %s` within %s",
				cmdline, id, d.Describe(), id, id, timeout))
		})
		cancel()
	}
	rec.Approval, rec.UID, rec.AnsweredBy, rec.Reason = a.ID, ans.UID, ans.By, ans.Reason
	why := "denied"
	switch {
	case ans.Allow:
		rec.Decision = "approved"
	case ans.TimedOut:
		rec.Decision, why = "timeout", fmt.Sprintf("no answer within %s", timeout)
	case ans.By != "" && ans.UID != nil: // a front end's user, through its uid
		rec.Decision, why = "denied", fmt.Sprintf("denied by %s (uid %d)", ans.By, *ans.UID)
	case ans.UID != nil:
		rec.Decision, why = "denied", fmt.Sprintf("denied by uid %d", *ans.UID)
	case ans.By != "":
		rec.Decision, why = "denied", "denied by "+ans.By
	case ctx.Err() != nil:
		rec.Decision, why = "withdrawn", "withdrawn" // its caller went away
	default:
		rec.Decision = "denied"
	}
	s.rt.auditSink().Write(rec)
	if ans.Allow {
		return commandDecision{allow: true}
	}
	if ans.Reason != "" {
		why += ": " + ans.Reason
	}
	return commandDecision{line: fmt.Sprintf("%s: refused (%s, %s)", cmdline, d.Describe(), why)}
}

// shellLine quotes argv for messages.
func shellLine(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		switch {
		case strings.ContainsFunc(a, func(r rune) bool { return r < 0x20 || r == 0x7f || r == utf8.RuneError }):
			q[i] = strconv.Quote(a) // no control character reaches a terminal
		case a != "" && !strings.ContainsAny(a, " '\"\\$`*?[]{}()<>|&;#~"):
			q[i] = a
		default:
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}

// ---- the rules channel: the agent's calls from the stubs ----

type rulesAsk struct {
	Ask     uint64   `json:"ask"`
	Cancel  uint64   `json:"cancel"`
	Program int      `json:"program"`
	Argv    []string `json:"argv"`
	Cwd     string   `json:"cwd"`
	Parent  string   `json:"parent"`
}

type rulesAnswer struct {
	Answer  uint64 `json:"answer,omitempty"`
	Allow   bool   `json:"allow,omitempty"`
	Waiting bool   `json:"waiting,omitempty"`
	Code    int    `json:"code,omitempty"`
	Error   string `json:"error,omitempty"`
	Program int    `json:"program,omitempty"` // 1 + the program whose copy comes with it
	// Script, with Program and no copy: that program is a script, run
	// as this (interpreter, its argument, the script's text) then the
	// call's arguments.
	Script []string `json:"script,omitempty"`
}

// serveRules opens the session's rules channel: it hands the agent the
// ruled programs' copies (for a script, how it runs) and answers the
// stubs' calls until the session closes (closeRules) or its agent goes.
func (s *Session) serveRules() error {
	if len(s.Commands) == 0 {
		return nil
	}
	conn, err := wire.DialPacket(s.socketPath())
	if err != nil {
		return fmt.Errorf("command rules: agent unreachable: %w", err)
	}
	if err := wire.Send(conn, execRequest{Rules: true}); err != nil {
		conn.Close()
		return err
	}
	for i, p := range s.Commands {
		var err error
		if len(p.Script) > 0 {
			// A script's text is no secret: its interpreter reads it in
			// the sandbox, where its stub cannot be run by another way.
			err = wire.Send(conn, rulesAnswer{Program: i + 1, Script: p.Script})
		} else {
			var f *os.File
			if f, err = s.rt.programCopy(p.File); err == nil {
				err = wire.Send(conn, rulesAnswer{Program: i + 1}, int(f.Fd()))
			}
		}
		if err != nil {
			conn.Close()
			return fmt.Errorf("command rules: %s: %w", p.File, err)
		}
	}
	s.mu.Lock()
	old := s.rulesConn
	s.rulesConn = conn
	s.mu.Unlock()
	if old != nil {
		old.Close()
	}
	go s.rulesLoop(conn)
	return nil
}

func (s *Session) closeRules() {
	s.mu.Lock()
	conn := s.rulesConn
	s.rulesConn = nil
	s.mu.Unlock()
	if conn != nil {
		conn.Close()
	}
}

func (s *Session) rulesLoop(conn *net.UnixConn) {
	var mu sync.Mutex
	cancels := map[uint64]context.CancelFunc{}
	defer func() {
		mu.Lock()
		for _, c := range cancels {
			c()
		}
		mu.Unlock()
	}()
	for {
		var m rulesAsk
		files, err := wire.Receive(conn, &m)
		wire.CloseAll(files)
		if err != nil {
			logrus.Debugf("session %s: command rules channel: %v", s.ID, err)
			return
		}
		if m.Cancel != 0 {
			mu.Lock()
			if c := cancels[m.Cancel]; c != nil {
				c()
			}
			mu.Unlock()
			continue
		}
		if m.Program < 0 || m.Program >= len(s.Commands) || len(m.Argv) == 0 {
			wire.Send(conn, rulesAnswer{Answer: m.Ask, Code: DeniedExitCode, Error: "malformed call; nothing was run"})
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		mu.Lock()
		cancels[m.Ask] = cancel
		mu.Unlock()
		go func() {
			defer func() {
				mu.Lock()
				delete(cancels, m.Ask)
				mu.Unlock()
				cancel()
			}()
			dec := s.decide(ctx, m.Program, m.Argv, m.Cwd, m.Parent, func(line string) {
				wire.Send(conn, rulesAnswer{Answer: m.Ask, Waiting: true, Error: line})
			})
			if dec.allow {
				wire.Send(conn, rulesAnswer{Answer: m.Ask, Allow: true})
			} else {
				wire.Send(conn, rulesAnswer{Answer: m.Ask, Code: DeniedExitCode, Error: dec.line})
			}
		}()
	}
}

// ---- the programs' copies ----

// programCopy is a sealed in-memory copy of a ruled program, shared by
// every session: the agent runs it with execveat. Its mode is 0111, so a
// process running it is not dumpable and no other process of the sandbox
// can reopen it through /proc/PID/exe; its owner (host root) is no one in
// the sandbox, which cannot change that.
func (rt *Runtime) programCopy(file string) (*os.File, error) {
	fi, err := os.Stat(file)
	if err != nil {
		return nil, err
	}
	key := fmt.Sprintf("%s %d %d", file, fi.Size(), fi.ModTime().UnixNano())
	rt.copies.Lock()
	defer rt.copies.Unlock()
	if f := rt.copies.byKey[key]; f != nil {
		return f, nil
	}
	fd, err := unix.MemfdCreate("warden-"+strings.ReplaceAll(file, "/", "-"), unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, err
	}
	mem := os.NewFile(uintptr(fd), "memfd")
	defer mem.Close()
	src, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	if _, err := io.Copy(mem, src); err != nil {
		return nil, err
	}
	if err := unix.Fchmod(fd, 0o111); err != nil {
		return nil, err
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE); err != nil {
		return nil, err
	}
	// A writable descriptor would make every exec fail (ETXTBSY).
	ro, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", fd), os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if rt.copies.byKey == nil {
		rt.copies.byKey = map[string]*os.File{}
	}
	for k, f := range rt.copies.byKey {
		if strings.HasPrefix(k, file+" ") {
			f.Close()
			delete(rt.copies.byKey, k)
		}
	}
	rt.copies.byKey[key] = ro
	return ro, nil
}

// commandsOf reads the ruled programs from a generated spec.
func commandsOf(b *spec.Bundle) []spec.CommandProgram {
	progs, err := spec.CommandPrograms(b.Spec)
	if err != nil {
		logrus.Warnf("%v", err)
	}
	return progs
}

// stubArgs is the agent's --stubs value.
func stubArgs(progs []spec.CommandProgram) string {
	var items []string
	for i, p := range progs {
		for _, st := range p.Stubs {
			items = append(items, fmt.Sprintf("%d=%s", i, st))
		}
	}
	return strings.Join(items, ":")
}
