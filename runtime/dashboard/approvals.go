package dashboard

import (
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/runtime/daemon"
)

// The pending-approvals page: the commands a policy's commands.ask holds
// (the daemon's queue, as `warden approvals ls` lists it), live, with
// approve and deny buttons that answer as the signed-in browser's login.

// approvalsRefresh is how often an open approvals page lists the queue
// again besides its changes: approvals.wait reports the next change, and
// one that comes between two waits would otherwise wait for the next.
const approvalsRefresh = 2 * time.Second

// approvalWatch keeps the daemon's queue for every open approvals page
// through one approvals.wait at a time, however many pages are open: a
// held connection is one of the daemon's bounded few.
type approvalWatch struct {
	client *daemon.Client

	mu       sync.Mutex
	last     listing
	changed  chan struct{} // closed and replaced when last changes
	watchers int
	running  bool
}

// listing is one answer of the daemon: the queue, or why it could not be
// listed; listed is false before the first.
type listing struct {
	list   []daemon.Approval
	err    error
	listed bool
}

func newApprovalWatch(c *daemon.Client) *approvalWatch {
	return &approvalWatch{client: c, changed: make(chan struct{})}
}

// watch counts a watcher in (starting the watch when none runs) until
// the returned function counts it out.
func (w *approvalWatch) watch() (stop func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.watchers++
	if !w.running {
		w.running = true
		go w.run()
	}
	return func() {
		w.mu.Lock()
		w.watchers--
		w.mu.Unlock()
	}
}

// current is the queue as last listed and a channel closed at its next
// change.
func (w *approvalWatch) current() (listing, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last, w.changed
}

func (w *approvalWatch) set(list []daemon.Approval, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.last.listed && reflect.DeepEqual(list, w.last.list) && fmt.Sprint(err) == fmt.Sprint(w.last.err) {
		return
	}
	w.last = listing{list: list, err: err, listed: true}
	close(w.changed)
	w.changed = make(chan struct{})
}

// watched says whether anyone watches; when nobody does, the watch ends.
func (w *approvalWatch) watched() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.watchers == 0 {
		w.running = false
		w.last = listing{} // a later watch starts from a fresh listing
	}
	return w.running
}

type waitResult struct {
	list []daemon.Approval
	err  error
}

// run lists the queue, then waits for its changes while anyone watches.
// It ends only between two waits, so no approvals.wait outlives it.
func (w *approvalWatch) run() {
	w.set(w.client.Approvals())
	waited := make(chan waitResult, 1)
	wait := func() {
		go func() {
			list, err := w.client.WaitApprovals()
			waited <- waitResult{list, err}
		}()
	}
	wait()
	t := time.NewTicker(approvalsRefresh)
	defer t.Stop()
	for {
		select {
		case res := <-waited:
			if !w.watched() {
				return
			}
			w.set(res.list, res.err)
			if res.err != nil {
				time.Sleep(eventEvery) // a daemon that cannot be asked is not asked in a tight loop
			}
			wait()
		case <-t.C:
			w.mu.Lock()
			n := w.watchers
			w.mu.Unlock()
			if n > 0 {
				w.set(w.client.Approvals())
			}
		}
	}
}

func (s *Server) approvalsPage(w http.ResponseWriter, r *http.Request) {
	p := s.basePage(r, "approvals")
	list, err := s.cfg.Client.Approvals()
	if err != nil {
		p.Error = err.Error()
	}
	p.Approvals = list
	render(w, "approvals", p)
}

// approvalsEvents keeps the approvals page's table up to date: a new
// fragment at each change of the queue.
func (s *Server) approvalsEvents(w http.ResponseWriter, r *http.Request) {
	ev, ok := startEvents(w)
	if !ok {
		return
	}
	defer s.approvals.watch()()
	for {
		last, changed := s.approvals.current()
		if last.listed {
			p := s.livePage(r, "approvals")
			p.Approvals = last.list
			if last.err != nil {
				p.Error = last.err.Error()
			}
			if ev.send("approvals-table", p) != nil {
				return
			}
		}
		select {
		case <-r.Context().Done():
			return
		case <-changed:
		}
	}
}

// approvalID is the daemon's form of an approval's id.
var approvalID = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^ap-[0-9a-f]{10}$`) })

// approvalAction is an approval's approve or deny button: the answer is
// the login's (its name in the audit line, beside warden serve's uid).
func (s *Server) approvalAction(w http.ResponseWriter, r *http.Request, l *login) {
	id, op := r.PathValue("id"), r.PathValue("op")
	if !approvalID().MatchString(id) {
		http.Error(w, fmt.Sprintf("%q is not an approval id (ap- and 10 hex digits); the approvals page lists them", id), http.StatusBadRequest)
		return
	}
	var allow bool
	var msg string
	switch op {
	case "approve":
		allow, msg = true, id+" approved"
	case "deny":
		msg = id + " denied"
	default:
		http.Error(w, "unknown action "+op+"; the actions are approve and deny", http.StatusNotFound)
		return
	}
	// Say which command it was: the id alone means little once it is gone.
	if list, err := s.cfg.Client.Approvals(); err == nil {
		for _, a := range list {
			if a.ID == id {
				msg += ": " + argvText(a.Argv) + " in session " + a.Session
			}
		}
	}
	if err := s.cfg.Client.AnswerFor(id, allow, l.name, strings.TrimSpace(r.PostFormValue("reason"))); err != nil {
		msg = id + ": " + op + " failed: " + err.Error()
	}
	s.setFlash(l, msg)
	http.Redirect(w, r, "/approvals", http.StatusSeeOther)
}
