package daemon

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/runtime/sandbox"
)

// TestApprovalQueue: an ask is listed while it waits, the first answer
// wins, a timeout or a withdrawn call ends it, and each change wakes a
// watcher.
func TestApprovalQueue(t *testing.T) {
	d := &Daemon{approvals: newApprovalQueue()}
	ask := func(ctx context.Context) (chan sandbox.Answer, string) {
		ids := make(chan string, 1)
		out := make(chan sandbox.Answer, 1)
		go func() {
			out <- d.approvals.wait(ctx, sandbox.Approval{Session: "s", Argv: []string{"git", "push"}, Since: time.Now()}, func(id string) { ids <- id })
		}()
		return out, <-ids
	}

	changed := d.ApprovalsChanged()
	answer, id := ask(context.Background())
	select {
	case <-changed:
	case <-time.After(time.Second):
		t.Fatal("listing an ask did not wake the watcher")
	}
	if list := d.Approvals(); len(list) != 1 || list[0].ID != id || list[0].Session != "s" {
		t.Fatalf("listed: %+v", list)
	}
	uid := 7
	changed = d.ApprovalsChanged()
	if err := d.Answer(id, true, &uid, "", "ok"); err != nil {
		t.Fatal(err)
	}
	if a := <-answer; !a.Allow || *a.UID != 7 || a.Reason != "ok" {
		t.Errorf("answer: %+v", a)
	}
	<-changed
	if list := d.Approvals(); len(list) != 0 {
		t.Errorf("answered, still listed: %+v", list)
	}
	if err := d.Answer(id, false, &uid, "", ""); !errors.Is(err, ErrNoApproval) {
		t.Errorf("a second answer: %v", err)
	}
	if err := d.Answer("ap-x", true, &uid, "", "two\nlines"); err == nil {
		t.Error("a reason with a newline was taken")
	}
	// A front end answers for its user: the answer carries both.
	answer, id = ask(context.Background())
	if err := d.Answer(id, false, &uid, "dashboard\nlogin forged", ""); err == nil {
		t.Error("a by with a newline was taken")
	}
	if err := d.Answer(id, false, &uid, "dashboard login 5c1e0a9f", "no"); err != nil {
		t.Fatal(err)
	}
	if a := <-answer; a.Allow || *a.UID != 7 || a.By != "dashboard login 5c1e0a9f" || a.Reason != "no" {
		t.Errorf("answer for a front end's user: %+v", a)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	answer, _ = ask(ctx)
	if a := <-answer; a.Allow || !a.TimedOut {
		t.Errorf("unanswered: %+v", a)
	}
	ctx, cancel = context.WithCancel(context.Background())
	answer, _ = ask(ctx)
	cancel()
	if a := <-answer; a.Allow || a.TimedOut || a.Reason == "" {
		t.Errorf("withdrawn: %+v", a)
	}
	if list := d.Approvals(); len(list) != 0 {
		t.Errorf("left in the queue: %+v", list)
	}

	// approvals.wait answers at the next change.
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET, 0)
	if err != nil {
		t.Fatal(err)
	}
	peer := os.NewFile(uintptr(fds[1]), "peer")
	defer peer.Close()
	fc, err := net.FileConn(os.NewFile(uintptr(fds[0]), "conn"))
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	waited := make(chan []Approval, 1)
	go func() { waited <- d.waitApprovals(context.Background(), fc.(*net.UnixConn)) }()
	time.Sleep(20 * time.Millisecond)
	select {
	case l := <-waited:
		t.Fatalf("approvals.wait answered before a change: %+v", l)
	default:
	}
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	_, id = ask(ctx)
	select {
	case l := <-waited:
		if len(l) != 1 || l[0].ID != id {
			t.Errorf("approvals.wait: %+v", l)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("approvals.wait did not answer the change")
	}
}
