package dashboard

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/warden-sandbox/warden/runtime/daemon"
)

func TestLoadToken(t *testing.T) {
	root := t.TempDir()
	tok, created, err := LoadToken(root)
	if err != nil || !created || len(tok) != 64 {
		t.Fatalf("first LoadToken: %q, created %v, %v", tok, created, err)
	}
	fi, err := os.Stat(TokenPath(root))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v, mode %v; want 0600", err, fi.Mode())
	}
	again, created, err := LoadToken(root)
	if err != nil || created || again != tok {
		t.Fatalf("second LoadToken: %q, created %v, %v; want the same token, not made", again, created, err)
	}
	for name, setup := range map[string]func(path string) error{
		"readable by others": func(p string) error { return os.Chmod(p, 0o644) },
		"a symbolic link": func(p string) error {
			other := filepath.Join(filepath.Dir(p), "elsewhere")
			os.WriteFile(other, []byte(tok+"\n"), 0o600)
			os.Remove(p)
			return os.Symlink(other, p)
		},
		"not a token": func(p string) error { return os.WriteFile(p, []byte("hello\n"), 0o600) },
		"a folder":    func(p string) error { os.Remove(p); return os.Mkdir(p, 0o700) },
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			if _, _, err := LoadToken(root); err != nil {
				t.Fatal(err)
			}
			if err := setup(TokenPath(root)); err != nil {
				t.Fatal(err)
			}
			if got, _, err := LoadToken(root); err == nil || got != "" {
				t.Errorf("LoadToken took %q, want a refusal", got)
			}
		})
	}
}

func TestArgvText(t *testing.T) {
	for argv, want := range map[string]string{
		"ls\x00-l":                    "ls -l",
		"sh\x00-c\x00echo hi":         "sh -c 'echo hi'",
		"echo\x00it's":                `echo 'it'\''s'`,
		"echo\x00":                    "echo ''",
		"cat\x00<script>alert(1)</x>": "cat '<script>alert(1)</x>'",
	} {
		if got := argvText(strings.Split(argv, "\x00")); got != want {
			t.Errorf("argvText(%q) = %q, want %q", argv, got, want)
		}
	}
}

// TestChecks holds the checks that come before the daemon is asked
// anything: Host, token, sign-in cookie and CSRF token.
func TestChecks(t *testing.T) {
	token := strings.Repeat("ab", 32)
	// A root no daemon serves, and a binary that cannot start one: the
	// requests below must be refused before either is looked at.
	s, err := New(Config{Client: &daemon.Client{Root: filepath.Join(t.TempDir(), "root"), Binary: "/bin/false"},
		AuditLog: "/nonexistent", Addr: "127.0.0.1:8765", Token: token})
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, target, host string, form url.Values, cookie *http.Cookie, header ...string) *httptest.ResponseRecorder {
		var r *http.Request
		if form != nil {
			r = httptest.NewRequest(method, target, strings.NewReader(form.Encode()))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		} else {
			r = httptest.NewRequest(method, target, nil)
		}
		r.Host = host
		if cookie != nil {
			r.AddCookie(cookie)
		}
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		return w
	}
	const here = "127.0.0.1:8765"
	if w := do("GET", "/metrics", "evil.example:8765", nil, nil, "Authorization", "Bearer "+token); w.Code != http.StatusMisdirectedRequest {
		t.Errorf("foreign Host: %d, want 421", w.Code)
	}
	if w := do("GET", "/metrics", here, nil, nil); w.Code != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", w.Code)
	}
	if w := do("GET", "/metrics", here, nil, nil, "Authorization", "Bearer "+strings.Repeat("cd", 32)); w.Code != http.StatusUnauthorized {
		t.Errorf("wrong token: %d, want 401", w.Code)
	}
	if w := do("POST", "/all/freeze", here, url.Values{"token": {token}}, nil, "Authorization", "Bearer "+token); w.Code != http.StatusUnauthorized {
		t.Errorf("a change with the token but no sign-in: %d, want 401", w.Code)
	}
	w := do("GET", "/login?token="+token, "localhost:8765", nil, nil)
	if w.Code != http.StatusSeeOther {
		t.Fatalf("sign-in: %d, want 303", w.Code)
	}
	cookie := w.Result().Cookies()[0]
	if !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode {
		t.Errorf("cookie %v: want HttpOnly and SameSite=Strict", cookie)
	}
	if w := do("POST", "/all/freeze", here, url.Values{"csrf": {"x"}}, cookie); w.Code != http.StatusForbidden {
		t.Errorf("a change without the CSRF token: %d, want 403", w.Code)
	}
	var csrf string
	s.mu.Lock()
	csrf = s.logins[cookie.Value].csrf
	s.mu.Unlock()
	if w := do("POST", "/all/freeze", here, url.Values{"csrf": {csrf}}, cookie, "Origin", "http://evil.example"); w.Code != http.StatusForbidden {
		t.Errorf("a change from another site: %d, want 403", w.Code)
	}
	if w := do("POST", "/sessions/x/unknown", here, url.Values{"csrf": {csrf}}, cookie, "Origin", "http://"+here); w.Code != http.StatusNotFound {
		t.Errorf("an unknown action: %d, want 404", w.Code)
	}
	// Approvals: the same checks before the daemon is asked, then the
	// id and the action.
	approve := "/approvals/ap-0123456789/approve"
	if w := do("GET", "/approvals", here, nil, nil); w.Code != http.StatusUnauthorized {
		t.Errorf("the approvals page without the token: %d, want 401", w.Code)
	}
	if w := do("GET", "/events/approvals", here, nil, nil); w.Code != http.StatusUnauthorized {
		t.Errorf("the approvals stream without the token: %d, want 401", w.Code)
	}
	for name, q := range map[string]struct {
		form   url.Values
		cookie *http.Cookie
		header []string
		want   int
	}{
		"no login":                   {url.Values{"csrf": {csrf}}, nil, []string{"Authorization", "Bearer " + token}, http.StatusUnauthorized},
		"no CSRF token":              {url.Values{"reason": {"x"}}, cookie, nil, http.StatusForbidden},
		"the token as the CSRF":      {url.Values{"csrf": {token}}, cookie, nil, http.StatusForbidden},
		"another site":               {url.Values{"csrf": {csrf}}, cookie, []string{"Origin", "http://evil.example"}, http.StatusForbidden},
		"a sandboxed frame":          {url.Values{"csrf": {csrf}}, cookie, []string{"Origin", "null"}, http.StatusForbidden},
		"the right form, a GET only": {nil, cookie, nil, http.StatusMethodNotAllowed},
	} {
		method := "POST"
		if q.form == nil {
			method = "GET"
		}
		if w := do(method, approve, here, q.form, q.cookie, q.header...); w.Code != q.want {
			t.Errorf("approve, %s: %d, want %d", name, w.Code, q.want)
		}
	}
	for path, want := range map[string]int{
		"/approvals/ap-0123456789/allow":    http.StatusNotFound,
		"/approvals/ap-01234567/approve":    http.StatusBadRequest,
		"/approvals/..%2Fetc/deny":          http.StatusBadRequest,
		"/approvals/AP-0123456789/approve":  http.StatusBadRequest,
		"/approvals/ap-0123456789x/approve": http.StatusBadRequest,
	} {
		if w := do("POST", path, here, url.Values{"csrf": {csrf}}, cookie, "Origin", "http://"+here); w.Code != want {
			t.Errorf("POST %s: %d, want %d", path, w.Code, want)
		}
	}
	if _, err := New(Config{Addr: "0.0.0.0:8765", Token: token}); err == nil {
		t.Errorf("New took a non-loopback address")
	}
}

// TestApprovalsEscaping renders the approvals table with what a
// sandboxed program chooses (its argv, its folder, its parent's command
// line): each shows as text, never as markup, in an element or an
// attribute.
func TestApprovalsEscaping(t *testing.T) {
	since := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	p := page{CSRF: "c0ffee", Now: since.Add(12 * time.Second), Approvals: []daemon.Approval{{
		ID: "ap-0123456789", Session: "s1", Policy: "rules",
		Argv:   []string{"git", "push", `<script>alert(1)</script>`, `"><img src=x onerror=alert(2)>`, `it's`},
		Cwd:    `/workspace/"><b>bold</b>`,
		Parent: `sh -c '<iframe src=//evil.example>'`,
		Rule:   `commands.ask "git push **"`, Since: since, Timeout: 5 * time.Minute}}}
	var out strings.Builder
	if err := templates().ExecuteTemplate(&out, "approvals-table", p); err != nil {
		t.Fatal(err)
	}
	html := out.String()
	for _, raw := range []string{"<script>", "<img", "<b>", "<iframe", "onerror=alert(2)>"} {
		if strings.Contains(html, raw) {
			t.Errorf("the table holds %q as markup:\n%s", raw, html)
		}
	}
	for _, want := range []string{"&lt;script&gt;alert(1)&lt;/script&gt;", "&#39;it&#39;\\&#39;&#39;s&#39;", "&lt;b&gt;bold&lt;/b&gt;",
		"&lt;iframe src=//evil.example&gt;", `action="/approvals/ap-0123456789/approve"`, `formaction="/approvals/ap-0123456789/deny"`,
		`name="csrf" value="c0ffee"`, `data-since="2026-11-27T06:00:00.000Z"`} {
		if !strings.Contains(html, want) {
			t.Errorf("the table lacks %q:\n%s", want, html)
		}
	}
}

// TestScrapeWrite holds the text /metrics serves: each family once, its
// series sorted by label values, a histogram's cumulative buckets with
// +Inf added, and text a Prometheus parser reads back.
func TestScrapeWrite(t *testing.T) {
	s := scrape{}
	s.sample(descSessions, 2, "running")
	s.sample(descUp, 1)
	s.sample(descSessions, 0, "frozen")
	s.sample(descCommands, 5, "ok")
	bounds, counts, n, sum := []float64{0.005, 0.01}, []uint64{3, 4}, uint64(6), 0.25
	s.add(descExec, &dto.Metric{Histogram: &dto.Histogram{SampleCount: &n, SampleSum: &sum, Bucket: []*dto.Bucket{
		{UpperBound: &bounds[0], CumulativeCount: &counts[0]}, {UpperBound: &bounds[1], CumulativeCount: &counts[1]}}}})
	w := httptest.NewRecorder()
	s.write(w, httptest.NewRequest("GET", "/metrics", nil))
	body := w.Body.String()
	if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q, want Prometheus text", ct)
	}
	for _, want := range []string{
		"# TYPE warden_commands_total counter\nwarden_commands_total{outcome=\"ok\"} 5\n",
		"warden_exec_duration_seconds_bucket{le=\"0.005\"} 3\nwarden_exec_duration_seconds_bucket{le=\"0.01\"} 4\nwarden_exec_duration_seconds_bucket{le=\"+Inf\"} 6\nwarden_exec_duration_seconds_sum 0.25\nwarden_exec_duration_seconds_count 6\n",
		"# TYPE warden_sessions gauge\nwarden_sessions{state=\"frozen\"} 0\nwarden_sessions{state=\"running\"} 2\n",
		"# TYPE warden_daemon_up gauge\nwarden_daemon_up 1\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
	if strings.Index(body, "warden_commands_total") > strings.Index(body, "warden_sessions") {
		t.Errorf("families not sorted by name:\n%s", body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil || len(families) != 4 {
		t.Fatalf("parsed back: %d families, %v\n%s", len(families), err, body)
	}

	// Labels by name, series by their values in that order; gzipped for
	// a scraper that accepts it, and not for one that refuses it.
	s = scrape{}
	s.sample(descMemory, 3, "s2", "a")
	s.sample(descMemory, 1, "s9", "a")
	s.sample(descMemory, 2, "s1", "b")
	for _, tc := range []struct {
		accept string
		gzip   bool
	}{{"gzip", true}, {"deflate, gzip;q=0.5", true}, {"gzip;q=0", false}, {"identity", false}} {
		r := httptest.NewRequest("GET", "/metrics", nil)
		r.Header.Set("Accept-Encoding", tc.accept)
		w := httptest.NewRecorder()
		s.write(w, r)
		var body io.Reader = w.Body
		if got := w.Header().Get("Content-Encoding") == "gzip"; got != tc.gzip {
			t.Errorf("Accept-Encoding %q: gzipped=%v, want %v", tc.accept, got, tc.gzip)
		}
		if tc.gzip {
			z, err := gzip.NewReader(w.Body)
			if err != nil {
				t.Fatalf("Accept-Encoding %q: %v", tc.accept, err)
			}
			body = z
		}
		text, err := io.ReadAll(body)
		if err != nil {
			t.Fatal(err)
		}
		want := "warden_session_memory_bytes{policy=\"a\",session=\"s2\"} 3\nwarden_session_memory_bytes{policy=\"a\",session=\"s9\"} 1\nwarden_session_memory_bytes{policy=\"b\",session=\"s1\"} 2\n"
		if !strings.Contains(string(text), want) {
			t.Errorf("Accept-Encoding %q: /metrics lacks %q:\n%s", tc.accept, want, text)
		}
	}
}
