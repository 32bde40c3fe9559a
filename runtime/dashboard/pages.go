package dashboard

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/runtime/daemon"
	"github.com/warden-sandbox/warden/runtime/sandbox"
)

//go:embed web
var webFS embed.FS

// static serves one embedded file of web/: the pages' script or style
// sheet.
func static(name, contentType string) http.HandlerFunc {
	data, err := fs.ReadFile(webFS, "web/"+name)
	if err != nil {
		panic(err) // embedded: a build without it does not exist
	}
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.Write(data)
	}
}

// html/template escapes every value an agent could choose (argv, paths,
// host names in audit lines) for where it stands; nothing here is marked
// as safe HTML.
//
// Parsed when first used, not when the package initialises: every warden
// process (a container's init too) links this package, few serve pages.
var templates = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("").Funcs(template.FuncMap{
		"duration": humanDuration,
		"bytes":    humanBytes,
		"argv":     argvText,
		"actions":  actionsOf,
	}).ParseFS(webFS, "web/*.html"))
})

// page is what every template gets.
type page struct {
	Title     string
	CSRF      string
	Flash     string
	Error     string // the daemon could not be asked
	Sessions  []sessionRow
	Session   *sessionRow
	Pools     []daemon.PoolInfo
	Approvals []daemon.Approval
	Audit     []auditLine
	Now       time.Time
	Login     string // the signed-in browser's name in audit lines
}

// sessionRow is one session as the pages show it: `session ls` with its
// cgroup's use and running commands.
type sessionRow struct {
	daemon.SessionInfo
	Memory     *uint64
	CPU        *time.Duration
	UsageError string
	Commands   []daemon.RunningCommand
}

func render(w http.ResponseWriter, name string, p page) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	var buf bytes.Buffer
	if err := templates().ExecuteTemplate(&buf, name, p); err != nil {
		http.Error(w, "rendering the page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Write(buf.Bytes())
}

// sessions asks the daemon for its sessions and their use.
func (s *Server) sessions() ([]sessionRow, error) {
	infos, err := s.cfg.Client.Sessions()
	if err != nil {
		return nil, err
	}
	st, err := s.cfg.Client.Stats()
	if err != nil {
		return nil, err
	}
	byID := map[string]daemon.SessionStats{}
	for _, ss := range st.Sessions {
		byID[ss.ID] = ss
	}
	rows := make([]sessionRow, 0, len(infos))
	for _, info := range infos {
		ss := byID[info.ID]
		row := sessionRow{SessionInfo: info, Memory: ss.MemoryBytes, UsageError: ss.UsageError, Commands: ss.Commands}
		if ss.CPUNanos != nil {
			d := time.Duration(*ss.CPUNanos)
			row.CPU = &d
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func (s *Server) basePage(r *http.Request, title string) page {
	p := s.livePage(r, title)
	if l := s.signedIn(r); l != nil {
		p.Flash = s.takeFlash(l)
	}
	return p
}

// livePage is what a live fragment gets: never the login's message,
// which is the next page's (a stream still open as the browser follows a
// button's answer would otherwise take it first).
func (s *Server) livePage(r *http.Request, title string) page {
	p := page{Title: title, Now: time.Now()}
	if l := s.signedIn(r); l != nil {
		p.CSRF = l.csrf
		p.Login = l.name
	}
	return p
}

func (s *Server) sessionsPage(w http.ResponseWriter, r *http.Request) {
	p := s.basePage(r, "sessions")
	rows, err := s.sessions()
	if err != nil {
		p.Error = err.Error()
	}
	p.Sessions = rows
	render(w, "sessions", p)
}

func (s *Server) sessionPage(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	p := s.basePage(r, "session "+id)
	row, err := s.session(id)
	if err != nil {
		w.WriteHeader(http.StatusNotFound)
		p.Error = err.Error()
		render(w, "session", p)
		return
	}
	p.Session = row
	p.Audit, err = tailAudit(s.cfg.AuditLog, id)
	if err != nil && p.Error == "" {
		p.Error = err.Error()
	}
	render(w, "session", p)
}

// session is one session's row; an id the daemon does not serve is an
// error.
func (s *Server) session(id string) (*sessionRow, error) {
	if err := sandbox.CheckID(id); err != nil {
		return nil, err
	}
	rows, err := s.sessions()
	if err != nil {
		return nil, err
	}
	for i := range rows {
		if rows[i].ID == id {
			return &rows[i], nil
		}
	}
	return nil, fmt.Errorf("no such session: %s", id)
}

func (s *Server) poolsPage(w http.ResponseWriter, r *http.Request) {
	p := s.basePage(r, "pools")
	pools, err := s.cfg.Client.Pools()
	if err != nil {
		p.Error = err.Error()
	}
	sort.Slice(pools, func(i, j int) bool { return pools[i].Policy+pools[i].Key < pools[j].Policy+pools[j].Key })
	p.Pools = pools
	render(w, "pools", p)
}

// sessionAction is a session's freeze, thaw or kill button.
func (s *Server) sessionAction(w http.ResponseWriter, r *http.Request, l *login) {
	id, op := r.PathValue("id"), r.PathValue("op")
	back := "/"
	if r.PostFormValue("from") == "session" {
		back = "/sessions/" + id
	}
	if err := sandbox.CheckID(id); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c := s.cfg.Client
	var err error
	msg := ""
	switch op {
	case "freeze":
		err, msg = c.Freeze(id), "session "+id+" frozen"
	case "thaw":
		err, msg = c.Thaw(id), "session "+id+" thawed"
	case "kill":
		var n int
		n, err = c.Kill(id)
		msg = fmt.Sprintf("session %s: killed %d process(es)", id, n)
	default:
		http.Error(w, "unknown action "+op+"; the actions are freeze, thaw and kill", http.StatusNotFound)
		return
	}
	if err != nil {
		msg = "session " + id + ": " + op + " failed: " + err.Error()
	}
	s.setFlash(l, msg)
	http.Redirect(w, r, back, http.StatusSeeOther)
}

// allAction is the freeze-all (and thaw-all) button.
func (s *Server) allAction(w http.ResponseWriter, r *http.Request, l *login) {
	var changed []daemon.SessionInfo
	var err error
	var did string
	switch r.PathValue("op") {
	case "freeze":
		changed, err = s.cfg.Client.FreezeAll()
		did = "froze"
	case "thaw":
		changed, err = s.cfg.Client.ThawAll()
		did = "thawed"
	default:
		http.Error(w, "unknown action; the actions are freeze and thaw", http.StatusNotFound)
		return
	}
	var ids []string
	for _, c := range changed {
		ids = append(ids, c.ID)
	}
	msg := fmt.Sprintf("%s %d session(s): %s", did, len(ids), strings.Join(ids, ", "))
	if len(ids) == 0 {
		msg = did + " no session"
	}
	if err != nil {
		msg += "; failed: " + err.Error()
	}
	s.setFlash(l, msg)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// actionButtons is what the freeze, thaw and kill buttons of a session
// need: the login's CSRF token, and the page to come back to.
type actionButtons struct {
	CSRF string
	Row  sessionRow
	From string
}

func actionsOf(p page, row sessionRow, from ...string) actionButtons {
	return actionButtons{CSRF: p.CSRF, Row: row, From: strings.Join(from, "")}
}

func humanDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func humanBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// argvText shows a command line as a shell would take it back: each
// argument that needs it in single quotes. The template escapes the
// result for HTML.
func argvText(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == "" {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}
