package sandbox

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/warden-sandbox/warden/runtime/internal/protocol"
	"github.com/warden-sandbox/warden/runtime/internal/wire"
	"github.com/warden-sandbox/warden/spec"
	"golang.org/x/sys/unix"
)

// The kill switch: freezing a session stops every process of its sandbox
// where it is (the cgroup freezer), its agent too, so nothing in it makes
// progress until it is thawed; killing one kills every process but the
// agent, which goes on serving new commands.

var (
	// ErrFrozen: the session is frozen; it runs no new command.
	ErrFrozen = protocol.ErrFrozen
	// ErrNotFrozen: a thaw of a session that is not frozen.
	ErrNotFrozen = errors.New("session is not frozen")
)

// killWait bounds how long Kill waits for the processes it killed to be
// gone.
const killWait = 5 * time.Second

// Frozen reports whether the session is frozen.
func (s *Session) Frozen() bool { return s.frozen.Load() }

// Freeze stops every process of the session's sandbox. Commands already
// running stop where they are (their timeouts go on counting); new ones
// are refused with ErrFrozen until Thaw.
func (s *Session) Freeze() error {
	s.gate.Lock()
	defer s.gate.Unlock()
	if s.frozen.Load() {
		return fmt.Errorf("%w already: %s; nothing changed; thaw it with `warden session thaw %s`", ErrFrozen, s.ID, s.ID)
	}
	if err := s.container.pause(); err != nil {
		return fmt.Errorf("session %s: freeze: %w", s.ID, err)
	}
	s.frozen.Store(true)
	return nil
}

// Thaw lets a frozen session's processes go on. Its idle time counts from
// the thaw.
func (s *Session) Thaw() error {
	s.gate.Lock()
	defer s.gate.Unlock()
	if !s.frozen.Load() {
		return kindf(spec.ErrInvalid, "%w: %s; nothing to thaw", ErrNotFrozen, s.ID)
	}
	if err := s.container.resume(); err != nil {
		return fmt.Errorf("session %s: thaw: %w", s.ID, err)
	}
	s.frozen.Store(false)
	s.touch()
	return nil
}

// Kill kills every process of the session's sandbox but its agent, and
// returns how many it killed once they are gone. Running commands end
// with SIGKILL and say why; the session runs new commands afterwards. A
// frozen session stays frozen: it is thawed only for the moment its
// killed processes take to die (a frozen process cannot die) and its
// agent to report the commands' ends.
func (s *Session) Kill() (int, error) {
	s.gate.Lock()
	defer s.gate.Unlock()
	s.mu.Lock()
	s.kills++
	s.mu.Unlock()
	frozen := s.frozen.Load()
	if _, gvisor := s.container.(*gvisorContainer); gvisor {
		return s.killInside(frozen)
	}
	// Frozen, the set cannot change under the kill: no fork, no exec. A
	// sandbox that cannot be frozen is killed all the same, pass after
	// pass until nothing but its agent is left.
	paused := frozen
	if !frozen {
		paused = s.container.pause() == nil
	}
	victims, err := s.otherProcesses()
	for _, pid := range victims {
		unix.Kill(pid, unix.SIGKILL)
	}
	if paused {
		if rerr := s.container.resume(); rerr != nil {
			return 0, errors.Join(err, fmt.Errorf("session %s: kill: thaw: %w", s.ID, rerr))
		}
	}
	if err != nil {
		return 0, fmt.Errorf("session %s: kill: %w", s.ID, err)
	}
	deadline := time.Now().Add(killWait)
	for {
		left, err := s.otherProcesses()
		if !paused && err == nil {
			for _, pid := range left { // forked since the last pass
				if !slices.Contains(victims, pid) {
					unix.Kill(pid, unix.SIGKILL)
					victims = append(victims, pid)
				}
			}
		}
		left = slices.DeleteFunc(left, func(pid int) bool { return !slices.Contains(victims, pid) })
		if err == nil && len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			err = fmt.Errorf("session %s: kill: processes %v still run after %s", s.ID, left, killWait)
			if frozen {
				err = errors.Join(err, s.container.pause())
			}
			return len(victims), err
		}
		time.Sleep(time.Millisecond)
	}
	if frozen {
		// The agent reports the ends of the commands it ran before it is
		// frozen again, or their callers would wait for the thaw.
		for s.waiting.Load() > 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if err := s.container.pause(); err != nil {
			s.frozen.Store(false)
			return len(victims), fmt.Errorf("session %s: killed, but could not freeze it again: %w", s.ID, err)
		}
	}
	return len(victims), nil
}

// otherProcesses lists the sandbox's processes but its agent.
func (s *Session) otherProcesses() ([]int, error) {
	pids, err := s.container.processes()
	if err != nil {
		return nil, err
	}
	agent, _, err := s.container.init()
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(pids, func(pid int) bool { return pid == agent }), nil
}

// killedSince reports whether the session was killed after its kill count
// was n.
func (s *Session) killedSince(n uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kills != n
}

// killAllReply is a gVisor agent's answer to KillAll: how many processes
// it killed, and how many still ran when it gave up.
type killAllReply struct {
	Killed int `json:"killed"`
	Left   int `json:"left,omitempty"`
}

// killInside is Kill under gVisor, whose sandbox's processes the host
// cannot signal one by one: the agent kills them from inside. A frozen
// sandbox is thawed for it, and frozen again once the agent has reported
// the commands' ends.
func (s *Session) killInside(frozen bool) (int, error) {
	if frozen {
		if err := s.container.resume(); err != nil {
			return 0, fmt.Errorf("session %s: kill: thaw: %w", s.ID, err)
		}
	}
	n, err := func() (int, error) {
		conn, err := wire.DialPacket(s.socketPath())
		if err != nil {
			return 0, fmt.Errorf("agent unreachable: %w", err)
		}
		defer conn.Close()
		if err := wire.Send(conn, execRequest{KillAll: true}); err != nil {
			return 0, err
		}
		conn.SetReadDeadline(time.Now().Add(2 * killWait))
		var r killAllReply
		files, err := wire.Receive(conn, &r)
		wire.CloseAll(files)
		if err != nil {
			return 0, err
		}
		if r.Left > 0 {
			return r.Killed, fmt.Errorf("%d processes still run after %s", r.Left, killWait)
		}
		return r.Killed, nil
	}()
	deadline := time.Now().Add(killWait)
	for frozen && s.waiting.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if frozen {
		if perr := s.container.pause(); perr != nil {
			s.frozen.Store(false)
			err = errors.Join(err, fmt.Errorf("killed, but could not freeze it again: %w", perr))
		}
	}
	if err != nil {
		return n, fmt.Errorf("session %s: kill: %w", s.ID, err)
	}
	return n, nil
}
