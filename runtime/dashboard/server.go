package dashboard

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/runtime/daemon"
)

// Config is what a dashboard serves and how it checks its callers.
type Config struct {
	// Client reaches the state root's daemon (starting it when needed).
	Client *daemon.Client
	// AuditLog is the file the session pages tail.
	AuditLog string
	// Addr is the address the dashboard listens on (host:port, a loopback
	// address): requests must name it, or localhost, in their Host.
	Addr string
	// Token signs in; see LoadToken.
	Token string
}

// Server is the dashboard's HTTP handler.
type Server struct {
	cfg   Config
	hosts map[string]bool // the Host values accepted
	mux   *http.ServeMux

	mu     sync.Mutex
	logins map[string]*login // by cookie value

	approvals *approvalWatch // the queue, for the open approvals pages
}

// login is one browser signed in with the token: its cookie's value is
// the key, and a form that changes anything must carry its csrf.
type login struct {
	csrf    string
	created time.Time
	flash   string // a message for the next page, shown once
	// name is who answers an approval from this browser, in the audit
	// line: the token is one for all, so the login is what tells
	// browsers apart.
	name string
}

const (
	cookieName = "warden_dashboard"
	// maxLogins bounds the signed-in browsers kept; the oldest goes first.
	maxLogins = 64
	loginLife = 12 * time.Hour
)

// New makes a dashboard. cfg.Addr must be a loopback host:port.
func New(cfg Config) (*Server, error) {
	host, port, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, err
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("%s is not a loopback address", cfg.Addr)
	}
	if len(cfg.Token) < 32 {
		return nil, fmt.Errorf("the dashboard token is too short")
	}
	s := &Server{cfg: cfg, logins: map[string]*login{}, mux: http.NewServeMux(), approvals: newApprovalWatch(cfg.Client),
		hosts: map[string]bool{
			strings.ToLower(cfg.Addr):                   true,
			"localhost:" + port:                         true,
			net.JoinHostPort(ip.Unmap().String(), port): true,
		}}

	s.mux.HandleFunc("GET /login", s.loginPage)
	s.mux.HandleFunc("POST /login", s.loginPost)
	s.mux.Handle("GET /{$}", s.authed(s.sessionsPage))
	s.mux.Handle("GET /events/sessions", s.authed(s.sessionsEvents))
	s.mux.Handle("GET /sessions/{id}", s.authed(s.sessionPage))
	s.mux.Handle("GET /sessions/{id}/events", s.authed(s.sessionEvents))
	s.mux.Handle("POST /sessions/{id}/{op}", s.changes(s.sessionAction))
	s.mux.Handle("POST /all/{op}", s.changes(s.allAction))
	s.mux.Handle("POST /logout", s.changes(s.logout))
	s.mux.Handle("GET /approvals", s.authed(s.approvalsPage))
	s.mux.Handle("GET /events/approvals", s.authed(s.approvalsEvents))
	s.mux.Handle("POST /approvals/{id}/{op}", s.changes(s.approvalAction))
	s.mux.Handle("GET /pools", s.authed(s.poolsPage))
	s.mux.Handle("GET /metrics", s.authed(metrics(cfg.Client)))
	s.mux.Handle("GET /static/app.js", s.authed(static("app.js", "text/javascript; charset=utf-8")))
	s.mux.Handle("GET /static/style.css", s.authed(static("style.css", "text/css; charset=utf-8")))
	return s, nil
}

// ServeHTTP checks the Host of every request before any route: a page
// on another site that makes a browser resolve its own name to this
// machine (DNS rebinding) sends that name, never this address.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	// same-origin, not no-referrer: with no-referrer a browser sends
	// "Origin: null" on the pages' own forms, which changes refuses.
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	if !s.hosts[strings.ToLower(r.Host)] {
		http.Error(w, fmt.Sprintf("warden serve answers only requests for %s (or localhost); this one is for another host", s.cfg.Addr), http.StatusMisdirectedRequest)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// signedIn is the login of r's cookie, if any.
func (s *Server) signedIn(r *http.Request) *login {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.logins[c.Value]
	if l == nil || time.Since(l.created) > loginLife {
		return nil
	}
	return l
}

// bearer reports whether r carries the token in its Authorization header
// (a Prometheus scraper, curl). A page on another site cannot set it.
func (s *Server) bearer(r *http.Request) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && s.tokenIs(got)
}

func (s *Server) tokenIs(got string) bool {
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(s.cfg.Token)) == 1
}

// authed lets through a request that is signed in (cookie) or carries the
// token; a browser without either is sent to sign in.
func (s *Server) authed(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.signedIn(r) == nil && !s.bearer(r) {
			refuse(w, r)
			return
		}
		h(w, r)
	})
}

// changes lets through a change only from a signed-in browser whose form
// carries the CSRF token of its login, from this very site: the token in
// a header or form, without the login's CSRF token, changes nothing.
func (s *Server) changes(h func(http.ResponseWriter, *http.Request, *login)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l := s.signedIn(r)
		if l == nil {
			refuse(w, r)
			return
		}
		if o := r.Header.Get("Origin"); o != "" && !s.hosts[strings.ToLower(strings.TrimPrefix(o, "http://"))] {
			http.Error(w, "refused: this change comes from another site (Origin "+o+")", http.StatusForbidden)
			return
		}
		if subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(l.csrf)) != 1 {
			http.Error(w, "refused: the form carries no valid CSRF token; reload the page and try again", http.StatusForbidden)
			return
		}
		h(w, r, l)
	})
}

// refuse answers a request that is not signed in: a page goes to the
// sign-in form, anything else gets 401.
func refuse(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/html") {
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="warden"`)
	http.Error(w, "unauthorized: sign in at /login with the token warden serve printed (or send it as Authorization: Bearer TOKEN)", http.StatusUnauthorized)
}

func randomText() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}

// signIn makes a login and sets its cookie: HttpOnly (no script reads
// it), SameSite=Strict (no other site's page sends it).
func (s *Server) signIn(w http.ResponseWriter) {
	key := randomText()
	s.mu.Lock()
	if len(s.logins) >= maxLogins {
		var oldest string
		for k, l := range s.logins {
			if oldest == "" || l.created.Before(s.logins[oldest].created) {
				oldest = k
			}
		}
		delete(s.logins, oldest)
	}
	s.logins[key] = &login{csrf: randomText(), created: time.Now(), name: "dashboard login " + randomText()[:8]}
	s.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: key, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, MaxAge: int(loginLife.Seconds())})
}

// loginPage signs in with ?token= (the link warden serve prints) or shows
// the form to paste it.
func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	if t := r.URL.Query().Get("token"); t != "" {
		if s.tokenIs(t) {
			s.signIn(w)
			http.Redirect(w, r, "/", http.StatusSeeOther)
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
		render(w, "login", page{Title: "sign in", Error: "wrong token"})
		return
	}
	render(w, "login", page{Title: "sign in"})
}

// loginPost signs in with the form's token. It needs no CSRF token: it
// is the token itself, which another site does not have.
func (s *Server) loginPost(w http.ResponseWriter, r *http.Request) {
	if !s.tokenIs(r.PostFormValue("token")) {
		w.WriteHeader(http.StatusUnauthorized)
		render(w, "login", page{Title: "sign in", Error: "wrong token"})
		return
	}
	s.signIn(w)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request, l *login) {
	s.mu.Lock()
	for k, v := range s.logins {
		if v == l {
			delete(s.logins, k)
		}
	}
	s.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// takeFlash is the login's message for this page, once.
func (s *Server) takeFlash(l *login) string {
	if l == nil {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f := l.flash
	l.flash = ""
	return f
}

func (s *Server) setFlash(l *login, msg string) {
	s.mu.Lock()
	l.flash = msg
	s.mu.Unlock()
}
