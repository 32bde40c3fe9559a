package daemon

import (
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"

	"github.com/warden-sandbox/warden/runtime/sandbox"
)

// The kill switch's operations: freeze, thaw and kill one session, and
// freeze or thaw every session of the root at once. Each change is an
// audit line naming the caller (the socket's peer credentials).

// caller is who asked for a change, for its audit line.
type caller struct{ uid, pid int }

func callerOf(conn *net.UnixConn) caller {
	cred, err := peerCred(conn)
	if err != nil {
		return caller{uid: -1} // checkPeer let it in; the line says it is unknown
	}
	return caller{uid: int(cred.Uid), pid: int(cred.Pid)}
}

// killSwitch freezes, thaws or kills one session (op freeze, thaw or
// kill); a kill returns how many processes it killed.
func (d *Daemon) killSwitch(conn *net.UnixConn, op, id string) (int, error) {
	if err := sandbox.CheckID(id); err != nil {
		return 0, err
	}
	d.mu.Lock()
	s, ok := d.sessions[id]
	d.mu.Unlock()
	if !ok {
		return 0, fmt.Errorf("%w: %s; `warden session ls` lists the sessions", sandbox.ErrNoSession, id)
	}
	return d.switchSession(s, op, callerOf(conn))
}

// killSwitchAll freezes (op freeze.all) every session that is not frozen,
// or thaws (thaw.all) every frozen one, and lists those it changed.
func (d *Daemon) killSwitchAll(conn *net.UnixConn, op string) ([]SessionInfo, error) {
	who := callerOf(conn)
	freeze := op == "freeze.all"
	d.mu.Lock()
	var todo []*daemonSession
	for _, s := range d.sessions {
		if s.Frozen() != freeze {
			todo = append(todo, s)
		}
	}
	d.mu.Unlock()
	single := "thaw"
	if freeze {
		single = "freeze"
	}
	// All at once: a freeze mostly waits for the sandbox's processes to
	// be scheduled and stop, and each one frozen frees the CPUs for the
	// others.
	var mu sync.Mutex
	var wg sync.WaitGroup
	changed := map[string]bool{}
	var errs []error
	for _, s := range todo {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := d.switchSession(s, single, who)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				changed[s.ID] = true
			case errors.Is(err, sandbox.ErrFrozen), errors.Is(err, sandbox.ErrNotFrozen):
				// another call changed it meanwhile: it is as asked
			default:
				errs = append(errs, err)
			}
		}()
	}
	wg.Wait()
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	var out []SessionInfo
	for _, info := range d.list() {
		if changed[info.ID] {
			out = append(out, info)
		}
	}
	return out, errors.Join(errs...)
}

// switchSession does op to s and writes its audit line; a refusal that
// changed nothing (already frozen, not frozen) writes none.
func (d *Daemon) switchSession(s *daemonSession, op string, who caller) (int, error) {
	var killed int
	var err error
	switch op {
	case "freeze":
		err = s.Freeze()
	case "thaw":
		err = s.Thaw()
	case "kill":
		killed, err = s.Kill()
	default:
		return 0, fmt.Errorf("unknown operation %q", op)
	}
	if errors.Is(err, sandbox.ErrFrozen) || errors.Is(err, sandbox.ErrNotFrozen) {
		return 0, err
	}
	uid := who.uid
	rec := sandbox.AuditRecord{Event: "session." + op, Session: s.ID, Policy: s.PolicyName, PolicyHash: s.PolicyHash,
		UID: &uid, Pid: who.pid, Killed: killed}
	if err != nil {
		rec.Error = err.Error()
	}
	d.audit.Write(rec)
	return killed, err
}
