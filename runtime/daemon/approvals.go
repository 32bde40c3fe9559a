package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/runtime/internal/protocol"
	"github.com/warden-sandbox/warden/runtime/sandbox"
	"github.com/warden-sandbox/warden/spec"
)

// The pending-approvals queue: every command a policy's commands.ask
// holds waits here until someone answers (warden approvals approve|deny,
// or any other front end through Approvals, Answer and ApprovalsChanged),
// its timeout passes, or its caller goes away. The decision's audit line
// is the session's (sandbox.Session.decide).

// Approval is a command waiting for a human.
type Approval = protocol.Approval

// ErrNoApproval: no command waits under that id.
var ErrNoApproval = errors.New("no such approval")

type pendingApproval struct {
	Approval
	answer chan sandbox.Answer // buffered: the first answer wins
}

type approvalQueue struct {
	mu      sync.Mutex
	pending map[string]*pendingApproval
	changed chan struct{} // closed and replaced at every change
}

func newApprovalQueue() *approvalQueue {
	return &approvalQueue{pending: map[string]*pendingApproval{}, changed: make(chan struct{})}
}

// notify wakes whoever waits for a change; q.mu is held.
func (q *approvalQueue) notify() {
	close(q.changed)
	q.changed = make(chan struct{})
}

// wait is the runtime's sandbox.Approver.
func (q *approvalQueue) wait(ctx context.Context, a sandbox.Approval, waiting func(id string)) sandbox.Answer {
	var b [5]byte
	rand.Read(b[:])
	a.ID = "ap-" + hex.EncodeToString(b[:])
	p := &pendingApproval{Approval: a, answer: make(chan sandbox.Answer, 1)}
	q.mu.Lock()
	q.pending[a.ID] = p
	q.notify()
	q.mu.Unlock()
	defer func() {
		q.mu.Lock()
		delete(q.pending, a.ID)
		q.notify()
		q.mu.Unlock()
	}()
	waiting(a.ID)
	select {
	case ans := <-p.answer:
		return ans
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return sandbox.Answer{TimedOut: true}
		}
		return sandbox.Answer{Reason: "the command went away before an answer"}
	}
}

// Approvals lists the commands waiting for an answer, oldest first.
func (d *Daemon) Approvals() []Approval {
	q := d.approvals
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]Approval, 0, len(q.pending))
	for _, p := range q.pending {
		out = append(out, p.Approval)
	}
	slices.SortFunc(out, func(a, b Approval) int {
		if c := a.Since.Compare(b.Since); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// ApprovalsChanged returns a channel closed at the next change of the
// queue (an ask added, answered, timed out or withdrawn): a front end
// waits on it, then lists again.
func (d *Daemon) ApprovalsChanged() <-chan struct{} {
	d.approvals.mu.Lock()
	defer d.approvals.mu.Unlock()
	return d.approvals.changed
}

// Answer approves or denies a waiting command. uid is who answered (nil
// for a front end that names its user in by instead; over the socket, the
// caller's uid, and by the user a front end answers for); reason goes
// into the audit line and, for a deny, to the command's caller.
func (d *Daemon) Answer(id string, allow bool, uid *int, by, reason string) error {
	if !oneLine(reason, 1024) {
		return kindf(spec.ErrInvalid, "--reason: one line of at most 1024 characters, without control characters")
	}
	if !oneLine(by, 128) {
		return kindf(spec.ErrInvalid, "by: who answered must be one line of at most 128 characters, without control characters")
	}
	q := d.approvals
	q.mu.Lock()
	defer q.mu.Unlock()
	p, ok := q.pending[id]
	if !ok {
		return kindf(spec.ErrInvalid, "%w: %q waits for nothing (answered, timed out or withdrawn already?); `warden approvals ls` lists those waiting", ErrNoApproval, id)
	}
	select {
	case p.answer <- sandbox.Answer{Allow: allow, UID: uid, By: by, Reason: reason}:
	default:
		return kindf(spec.ErrInvalid, "%w: %s was answered already", ErrNoApproval, id)
	}
	return nil
}

// oneLine: s fits an audit line's field as one line of at most max bytes.
func oneLine(s string, max int) bool {
	return len(s) <= max && !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f })
}

// approvalsWait bounds one approvals.wait, so a watcher's connection
// is never held for ever.
const approvalsWait = 30 * time.Second

// waitApprovals serves approvals.wait: the list at the queue's next change,
// or after approvalsWait, or when the caller goes away.
func (d *Daemon) waitApprovals(ctx context.Context, conn *net.UnixConn) []Approval {
	changed := d.ApprovalsChanged()
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		var b [1]byte
		conn.Read(b[:]) // returns when the caller closes its side
	}()
	select {
	case <-changed:
	case <-gone:
	case <-ctx.Done():
	case <-time.After(approvalsWait):
	}
	return d.Approvals()
}

// answerOp serves approvals.approve and approvals.deny.
func (d *Daemon) answerOp(conn *net.UnixConn, req *request) error {
	if req.ID == "" {
		return kindf(spec.ErrInvalid, "no approval id given; `warden approvals ls` lists them")
	}
	who := callerOf(conn)
	uid := who.uid
	if err := d.Answer(req.ID, req.Op == "approvals.approve", &uid, req.By, req.Reason); err != nil {
		return err
	}
	// The caller returns once the waiting command has its answer.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		ch := d.ApprovalsChanged()
		if !slices.ContainsFunc(d.Approvals(), func(a Approval) bool { return a.ID == req.ID }) {
			return nil
		}
		select {
		case <-ch:
		case <-time.After(time.Until(deadline)):
		}
	}
	return fmt.Errorf("approval %s: answered, but the command has not taken it yet", req.ID)
}
