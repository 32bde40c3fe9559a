package dashboard

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// The live parts of the pages come as server-sent events: each event's
// data is a fragment of the page rendered by the same templates (so
// escaped the same way), which the page's script puts in place.

// eventEvery is how often a live page is brought up to date.
const eventEvery = 500 * time.Millisecond

// eventStream writes server-sent events to one browser.
type eventStream struct {
	w    http.ResponseWriter
	f    http.Flusher
	last map[string]string // what each event last sent: only changes go
}

func startEvents(w http.ResponseWriter) (*eventStream, bool) {
	f, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming is not supported here", http.StatusInternalServerError)
		return nil, false
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	f.Flush()
	return &eventStream{w: w, f: f, last: map[string]string{}}, true
}

// send renders template name and sends it as event name, unless it is
// what was sent last time.
func (e *eventStream) send(name string, p page) error {
	var buf bytes.Buffer
	if err := templates().ExecuteTemplate(&buf, name, p); err != nil {
		return err
	}
	if e.last[name] == buf.String() {
		return nil
	}
	e.last[name] = buf.String()
	fmt.Fprintf(e.w, "event: %s\n", name)
	for _, line := range bytes.Split(buf.Bytes(), []byte("\n")) {
		fmt.Fprintf(e.w, "data: %s\n", line)
	}
	if _, err := io.WriteString(e.w, "\n"); err != nil {
		return err
	}
	e.f.Flush()
	return nil
}

// sessionsEvents keeps the sessions page's table up to date.
func (s *Server) sessionsEvents(w http.ResponseWriter, r *http.Request) {
	ev, ok := startEvents(w)
	if !ok {
		return
	}
	t := time.NewTicker(eventEvery)
	defer t.Stop()
	for {
		p := s.livePage(r, "sessions")
		rows, err := s.sessions()
		if err != nil {
			p.Error = err.Error()
		}
		p.Sessions = rows
		if ev.send("sessions-table", p) != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-t.C:
		}
	}
}

// sessionEvents keeps a session page's state, running commands and audit
// lines up to date.
func (s *Server) sessionEvents(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ev, ok := startEvents(w)
	if !ok {
		return
	}
	t := time.NewTicker(eventEvery)
	defer t.Stop()
	var seen auditStamp
	for {
		p := s.livePage(r, "session "+id)
		row, err := s.session(id)
		if err != nil {
			p.Error = err.Error()
		}
		p.Session = row
		if ev.send("session-detail", p) != nil {
			return
		}
		if stamp := stampOf(s.cfg.AuditLog); stamp != seen {
			seen = stamp
			p.Audit, err = tailAudit(s.cfg.AuditLog, id)
			if err != nil {
				p.Error = err.Error()
			}
			if ev.send("audit-lines", p) != nil {
				return
			}
		}
		select {
		case <-r.Context().Done():
			return
		case <-t.C:
		}
	}
}

// auditLine is one line of a session's audit tail.
type auditLine struct {
	Time  string
	Event string
	Text  string // the line itself, JSON
}

// auditTail bounds what a session page shows of the audit log: its last
// lines, from the log's last auditTailBytes.
const (
	auditTailBytes = 512 << 10
	auditTailLines = 200
)

type auditStamp struct {
	size  int64
	mtime time.Time
}

func stampOf(path string) auditStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return auditStamp{}
	}
	return auditStamp{fi.Size(), fi.ModTime()}
}

// tailAudit reads the last lines of the audit log that are about session
// id (all of them when id is ""). A log not made yet has no lines; one
// that is not a regular file is refused, never opened for reading as one
// (a FIFO would block, a device never end).
func tailAudit(path, id string) ([]auditLine, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err == unix.ENOENT {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("audit log %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("audit log %s is not a regular file", path)
	}
	start := max(0, fi.Size()-auditTailBytes)
	sc := bufio.NewScanner(io.NewSectionReader(f, start, fi.Size()-start))
	sc.Buffer(make([]byte, 64<<10), auditTailBytes)
	var lines []auditLine
	first := start > 0
	for sc.Scan() {
		if first { // cut by the start of the window
			first = false
			continue
		}
		var rec struct {
			Time    time.Time `json:"time"`
			Event   string    `json:"event"`
			Session string    `json:"session"`
		}
		if json.Unmarshal(sc.Bytes(), &rec) != nil || (id != "" && rec.Session != id) {
			continue
		}
		lines = append(lines, auditLine{Time: rec.Time.Local().Format("15:04:05.000"), Event: rec.Event, Text: sc.Text()})
		if len(lines) > auditTailLines {
			lines = lines[1:]
		}
	}
	return lines, nil
}
