package integration

import (
	"bufio"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// warden serve (docs/dashboard.md): its pages, /metrics, and its checks
// as an attacker would try them.

type dtoFamily = dto.MetricFamily

// dashboard is one `warden serve` of a root.
type dashboard struct {
	t      *testing.T
	url    string // http://127.0.0.1:PORT
	host   string // 127.0.0.1:PORT
	token  string
	cmd    *exec.Cmd
	mu     sync.Mutex
	output strings.Builder // what it printed
	http   *http.Client
}

// serve starts `warden serve --listen 127.0.0.1:0` on the root and stops
// it (SIGTERM, exit 0) when the test ends.
func (r *wardenRoot) serve() *dashboard {
	r.t.Helper()
	d := &dashboard{t: r.t, http: &http.Client{Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	d.cmd = r.command("serve", "--listen", "127.0.0.1:0")
	out, err := d.cmd.StdoutPipe()
	if err != nil {
		r.t.Fatal(err)
	}
	d.cmd.Stderr = &d.output
	if err := d.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(d.stop)
	first := make(chan string, 1)
	go func() {
		var line0 string
		sc := bufio.NewScanner(out)
		for n := 0; sc.Scan(); n++ {
			d.mu.Lock()
			d.output.WriteString(sc.Text() + "\n")
			d.mu.Unlock()
			if n == 0 {
				line0 = sc.Text()
			}
			if n == 1 { // the token line, in either form, printed by then
				first <- line0
			}
		}
		close(first)
	}()
	select {
	case line, ok := <-first:
		u, found := strings.CutPrefix(line, "warden serve: ")
		if !ok || !found {
			d.cmd.Wait()
			r.t.Fatalf("warden serve printed %q first; output:\n%s", line, d.printed())
		}
		d.url = strings.TrimSuffix(u, "/")
		d.host = strings.TrimPrefix(d.url, "http://")
	case <-time.After(30 * time.Second):
		r.t.Fatalf("warden serve said nothing within 30 s")
	}
	tok, err := os.ReadFile(filepath.Join(r.root, "dashboard.token"))
	if err != nil {
		r.t.Fatal(err)
	}
	d.token = strings.TrimSpace(string(tok))
	return d
}

func (d *dashboard) printed() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.output.String()
}

func (d *dashboard) stop() {
	if d.cmd.ProcessState != nil {
		return
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- d.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			d.t.Errorf("warden serve ended with %v after SIGTERM; output:\n%s", err, d.printed())
		}
	case <-time.After(10 * time.Second):
		d.cmd.Process.Kill()
		<-done
		d.t.Errorf("warden serve did not stop within 10 s of SIGTERM")
	}
}

// request is one HTTP request to the dashboard, as a browser or an
// attacker would send it.
type request struct {
	method, path string
	host         string            // Host header; "" is the dashboard's own
	header       map[string]string // extra headers
	cookie       string            // the login cookie's value
	form         url.Values        // a POST's form
}

type response struct {
	status int
	body   string
	header http.Header
}

func (d *dashboard) do(q request) response {
	d.t.Helper()
	var body io.Reader
	if q.form != nil {
		body = strings.NewReader(q.form.Encode())
	}
	if q.method == "" {
		q.method = http.MethodGet
	}
	req, err := http.NewRequest(q.method, d.url+q.path, body)
	if err != nil {
		d.t.Fatal(err)
	}
	if q.form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if q.host != "" {
		req.Host = q.host
	}
	for k, v := range q.header {
		req.Header.Set(k, v)
	}
	if q.cookie != "" {
		req.AddCookie(&http.Cookie{Name: "warden_dashboard", Value: q.cookie})
	}
	resp, err := d.http.Do(req)
	if err != nil {
		d.t.Fatalf("%s %s: %v", q.method, q.path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, body: string(data), header: resp.Header}
}

func (d *dashboard) bearer() map[string]string {
	return map[string]string{"Authorization": "Bearer " + d.token}
}

// login signs in with the token as the printed link does and returns the
// cookie and the page's CSRF token.
func (d *dashboard) login() (cookie, csrf string) {
	d.t.Helper()
	res := d.do(request{path: "/login?token=" + d.token})
	if res.status != http.StatusSeeOther || res.header.Get("Location") != "/" {
		d.t.Fatalf("sign-in: status %d, Location %q, want 303 to /", res.status, res.header.Get("Location"))
	}
	var c *http.Cookie
	for _, ck := range (&http.Response{Header: res.header}).Cookies() {
		if ck.Name == "warden_dashboard" {
			c = ck
		}
	}
	if c == nil {
		d.t.Fatalf("sign-in set no cookie: %v", res.header)
	}
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
		d.t.Errorf("the login cookie is not HttpOnly and SameSite=Strict: %s", res.header.Get("Set-Cookie"))
	}
	page := d.do(request{path: "/", cookie: c.Value})
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(page.body)
	if page.status != http.StatusOK || m == nil {
		d.t.Fatalf("the sessions page after sign-in: status %d, no CSRF token:\n%s", page.status, page.body)
	}
	return c.Value, m[1]
}

// metrics scrapes /metrics with the token and parses it.
func (d *dashboard) metrics() map[string]*dtoFamily {
	d.t.Helper()
	res := d.do(request{path: "/metrics", header: d.bearer()})
	if res.status != http.StatusOK {
		d.t.Fatalf("/metrics: status %d: %s", res.status, res.body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(res.body))
	if err != nil {
		d.t.Fatalf("/metrics is not Prometheus text: %v\n%s", err, res.body)
	}
	return families
}

// metric is the value of the series of family name whose labels include
// those given; ok is false when there is none.
func metric(families map[string]*dtoFamily, name string, labels ...string) (float64, bool) {
	f := families[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if have[labels[i]] != labels[i+1] {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

// sleeperPolicy lets a session run shells and sleep.
const sleeperPolicy = `name = "dash-test"
[fs]
write = ["$WORK_DIR"]
[exec]
allow = ["sh", "sleep", "true", "cat"]
[limits]
timeout = "5m"
`

// startSleeper runs argv (a sleep, however dressed) in the session in
// the background until the test ends, and waits until it runs.
func (r *wardenRoot) startSleeper(id string, argv ...string) *exec.Cmd {
	r.t.Helper()
	bg := r.command(append([]string{"exec", "--session", id, "--"}, argv...)...)
	if err := bg.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { bg.Process.Kill(); bg.Wait() })
	r.waitStarted(id, "sleep")
	return bg
}

// TestDashboardAuth tries the dashboard as an attacker would: without
// the token, with a wrong one, from another site's form (the token in the
// form or a header but without the login's CSRF token, another login's
// CSRF token, a foreign Origin), and through a foreign Host name (DNS
// rebinding). Each is refused and changes nothing; the same requests
// done right work.
func TestDashboardAuth(t *testing.T) {
	r := newRoot(t)
	id := r.create("dash", r.policy(sleeperPolicy), tempDir(t))
	bg := r.startSleeper(id, "sleep", "300")
	d := r.serve()
	if !strings.Contains(d.printed(), "token (shown this once; kept in "+filepath.Join(r.root, "dashboard.token")+", mode 0600): "+d.token) {
		t.Errorf("the first start does not print the token once:\n%s", d.printed())
	}
	if fi, err := os.Stat(filepath.Join(r.root, "dashboard.token")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("dashboard.token: %v, mode %v, want 0600", err, fi.Mode())
	}

	t.Run("no token", func(t *testing.T) {
		for _, path := range []string{"/", "/pools", "/approvals", "/metrics", "/events/sessions", "/events/approvals", "/sessions/" + id, "/sessions/" + id + "/events", "/static/app.js", "/static/style.css"} {
			res := d.do(request{path: path})
			if res.status != http.StatusUnauthorized {
				t.Errorf("GET %s without the token: status %d, want 401", path, res.status)
			}
			if strings.Contains(res.body, id) {
				t.Errorf("GET %s without the token shows the session's id", path)
			}
		}
		// A browser is sent to sign in.
		res := d.do(request{path: "/", header: map[string]string{"Accept": "text/html"}})
		if res.status != http.StatusSeeOther || res.header.Get("Location") != "/login" {
			t.Errorf("a browser without the token: status %d to %q, want 303 to /login", res.status, res.header.Get("Location"))
		}
	})
	t.Run("wrong token", func(t *testing.T) {
		wrong := strings.Repeat("0", len(d.token))
		for _, q := range []request{
			{path: "/metrics", header: map[string]string{"Authorization": "Bearer " + wrong}},
			{path: "/metrics", header: map[string]string{"Authorization": "Bearer " + d.token[:len(d.token)-1]}},
			{path: "/metrics", header: map[string]string{"Authorization": "Basic " + d.token}},
			{path: "/metrics?token=" + d.token}, // only /login takes it from the URL
			{path: "/", cookie: d.token},        // the token is not a cookie
			{path: "/login?token=" + wrong},
			{method: "POST", path: "/login", form: url.Values{"token": {wrong}}},
		} {
			res := d.do(q)
			if res.status != http.StatusUnauthorized {
				t.Errorf("%s %s with a wrong token: status %d, want 401", q.method, q.path, res.status)
			}
			if res.header.Get("Set-Cookie") != "" {
				t.Errorf("%s %s with a wrong token set a cookie", q.method, q.path)
			}
		}
	})

	cookie, csrf := d.login()
	cookie2, csrf2 := d.login()
	kill := "/sessions/" + id + "/kill"
	freeze := "/sessions/" + id + "/freeze"
	t.Run("cross-site changes", func(t *testing.T) {
		for name, q := range map[string]request{
			"the token in the form, no login":           {method: "POST", path: kill, form: url.Values{"token": {d.token}, "csrf": {csrf}}},
			"the token as a bearer, no login":           {method: "POST", path: kill, header: d.bearer(), form: url.Values{"csrf": {csrf}}},
			"the login cookie, no CSRF token":           {method: "POST", path: kill, cookie: cookie, form: url.Values{"token": {d.token}}},
			"the login cookie, the token as CSRF":       {method: "POST", path: kill, cookie: cookie, form: url.Values{"csrf": {d.token}}},
			"the login cookie, a wrong CSRF token":      {method: "POST", path: freeze, cookie: cookie, form: url.Values{"csrf": {strings.Repeat("a", len(csrf))}}},
			"the login cookie, another login's CSRF":    {method: "POST", path: freeze, cookie: cookie, form: url.Values{"csrf": {csrf2}}},
			"a right form from another site's page":     {method: "POST", path: freeze, cookie: cookie, form: url.Values{"csrf": {csrf}}, header: map[string]string{"Origin": "http://evil.example"}},
			"a right form from a sandboxed frame":       {method: "POST", path: "/all/freeze", cookie: cookie, form: url.Values{"csrf": {csrf}}, header: map[string]string{"Origin": "null"}},
			"freeze all with the bearer token only":     {method: "POST", path: "/all/freeze", header: d.bearer()},
			"a GET of a change":                         {path: freeze, cookie: cookie},
			"a foreign Host, right cookie and CSRF":     {method: "POST", path: freeze, host: "evil.example", cookie: cookie, form: url.Values{"csrf": {csrf}}},
			"a rebound name with this port, right form": {method: "POST", path: freeze, host: "rebind.evil.example:" + strings.Split(d.host, ":")[1], cookie: cookie, form: url.Values{"csrf": {csrf}}},
		} {
			res := d.do(q)
			if res.status < 400 {
				t.Errorf("%s: status %d, want a refusal", name, res.status)
			}
		}
		if st := r.stateOf(id); st != "running" || r.freezerState(id) != "THAWED" {
			t.Errorf("after the refused changes the session is %s (freezer %s), want running", st, r.freezerState(id))
		}
		if len(commandProcesses(id, "300")) == 0 || bg.ProcessState != nil {
			t.Errorf("a refused kill killed the session's command")
		}
	})
	t.Run("rebinding", func(t *testing.T) {
		port := strings.Split(d.host, ":")[1]
		for _, host := range []string{"evil.example", "evil.example:" + port, "127.0.0.1.evil.example:" + port, "127.0.0.2:" + port, "0.0.0.0:" + port} {
			for _, path := range []string{"/", "/metrics", "/login?token=" + d.token, "/events/sessions"} {
				res := d.do(request{path: path, host: host, header: d.bearer(), cookie: cookie})
				if res.status != http.StatusMisdirectedRequest || strings.Contains(res.body, id) {
					t.Errorf("GET %s for Host %s: status %d, want 421", path, host, res.status)
				}
			}
		}
		for _, host := range []string{d.host, "localhost:" + port, "LOCALHOST:" + port} {
			if res := d.do(request{path: "/metrics", host: host, header: d.bearer()}); res.status != http.StatusOK {
				t.Errorf("GET /metrics for Host %s: status %d, want 200", host, res.status)
			}
		}
	})
	t.Run("the right requests", func(t *testing.T) {
		res := d.do(request{path: "/", cookie: cookie})
		if res.status != http.StatusOK || !strings.Contains(res.body, id) {
			t.Fatalf("GET / signed in: status %d; the session %s is not on it", res.status, id)
		}
		for path, want := range map[string]string{"/static/app.js": "EventSource", "/static/style.css": "font"} {
			if res := d.do(request{path: path, cookie: cookie}); res.status != http.StatusOK || !strings.Contains(res.body, want) {
				t.Errorf("GET %s signed in: status %d, body %.80q", path, res.status, res.body)
			}
		}
		for _, h := range []string{"Content-Security-Policy", "X-Frame-Options", "X-Content-Type-Options"} {
			if res.header.Get(h) == "" {
				t.Errorf("GET / has no %s header", h)
			}
		}
		res = d.do(request{method: "POST", path: freeze, cookie: cookie, form: url.Values{"csrf": {csrf}}, header: map[string]string{"Origin": d.url}})
		if res.status != http.StatusSeeOther {
			t.Fatalf("freeze with the login and its CSRF token: status %d: %s", res.status, res.body)
		}
		if r.freezerState(id) != "FROZEN" {
			t.Fatalf("the session was not frozen: freezer %s", r.freezerState(id))
		}
		res = d.do(request{method: "POST", path: kill, cookie: cookie2, form: url.Values{"csrf": {csrf2}}})
		if res.status != http.StatusSeeOther {
			t.Fatalf("kill: status %d: %s", res.status, res.body)
		}
		if page := d.do(request{path: "/", cookie: cookie2}); !strings.Contains(page.body, "killed 1 process(es)") {
			t.Errorf("the page after the kill does not say what it killed:\n%s", page.body)
		}
		if left := commandProcesses(id, "300"); len(left) > 0 {
			t.Errorf("after the kill, the command's processes %v still run", left)
		}
		if err := bg.Wait(); err == nil || bg.ProcessState.ExitCode() != 137 {
			t.Errorf("the killed command's caller: %v, want exit 137", err)
		}
		// Signed out, the cookie is worth nothing.
		d.do(request{method: "POST", path: "/logout", cookie: cookie, form: url.Values{"csrf": {csrf}}})
		if res := d.do(request{path: "/metrics", cookie: cookie}); res.status != http.StatusUnauthorized {
			t.Errorf("a signed-out cookie: status %d, want 401", res.status)
		}
	})
	// The records of the changes name the caller: the dashboard's own
	// uid and pid.
	recs, _ := r.logs("--session", id)
	var events []string
	for _, rec := range recs {
		if strings.HasPrefix(rec.Event, "session.") {
			events = append(events, rec.Event)
		}
	}
	if strings.Join(events, " ") != "session.create session.freeze session.kill" {
		t.Errorf("the audit log has %v, want exactly the one freeze and one kill done right", events)
	}
}

// TestDashboardServeInput checks warden serve's bad input: an address
// beyond loopback and a token file others may read are refused in one
// line, exit 125, changing nothing; a second start does not print the
// token again.
func TestDashboardServeInput(t *testing.T) {
	r := newRoot(t)
	for _, listen := range []string{"0.0.0.0:0", "[::]:0", "192.0.2.1:8765", ":8765", "example.com:80", "nonsense"} {
		res := r.warden("serve", "--listen", listen)
		if res.Exit != 125 || strings.Count(strings.TrimSpace(res.Stderr), "\n") != 0 || !strings.Contains(res.Stderr, "--listen") {
			t.Errorf("serve --listen %s: exit %d, stderr %q; want 125 and one line", listen, res.Exit, res.Stderr)
		}
	}
	if _, err := os.Stat(r.root); err == nil {
		t.Errorf("a refused serve made the state root %s", r.root)
	}
	d := r.serve()
	d.stop()
	d = r.serve()
	if strings.Contains(d.printed(), d.token) || !strings.Contains(d.printed(), "token: in "+filepath.Join(r.root, "dashboard.token")) {
		t.Errorf("the second start prints:\n%s\nwant where the token is, not the token", d.printed())
	}
	d.stop()
	tokenFile := filepath.Join(r.root, "dashboard.token")
	if err := os.Chmod(tokenFile, 0o644); err != nil {
		t.Fatal(err)
	}
	res := r.warden("serve", "--listen", "127.0.0.1:0")
	if res.Exit != 125 || !strings.Contains(res.Stderr, "may be read by others") || strings.Count(strings.TrimSpace(res.Stderr), "\n") != 0 {
		t.Errorf("serve with a 0644 token file: exit %d, stderr %q; want 125 and one line", res.Exit, res.Stderr)
	}
	if data, _ := os.ReadFile(tokenFile); strings.TrimSpace(string(data)) != d.token {
		t.Errorf("the refused token file was changed")
	}
}

// TestDashboardEscaping shows what an agent chose (a workspace's name, a
// command's arguments) on every page as text: a <script> or a quote in
// them never becomes markup.
func TestDashboardEscaping(t *testing.T) {
	r := newRoot(t)
	ws := filepath.Join(tempDir(t), `ws<script>alert('ws')</script>"'&`[:22]+`"x'&<b>`)
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	id := r.create("dash", r.policy(sleeperPolicy), ws)
	evil := []string{"sh", "-c", "sleep 300", `<script>alert(1)</script>`, `"><img src=x onerror=alert(2)>`, `it's`}
	r.startSleeper(id, evil...)
	d := r.serve()
	cookie, _ := d.login()
	// The live fragments: the first event of each stream.
	fragment := func(path string) string {
		req, _ := http.NewRequest("GET", d.url+path, nil)
		req.AddCookie(&http.Cookie{Name: "warden_dashboard", Value: cookie})
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out strings.Builder
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() && (out.Len() == 0 || sc.Text() != "") {
			out.WriteString(sc.Text() + "\n")
		}
		return out.String()
	}
	pages := map[string]string{
		"/":                   d.do(request{path: "/", cookie: cookie}).body,
		"/sessions/ID":        d.do(request{path: "/sessions/" + id, cookie: cookie}).body,
		"/events/sessions":    fragment("/events/sessions"),
		"/sessions/ID/events": fragment("/sessions/" + id + "/events"),
	}
	for name, body := range pages {
		for _, raw := range []string{"<script>alert", "<img", "<b>", "onerror=alert(2)>", `'it's'`} {
			if strings.Contains(body, raw) {
				t.Errorf("%s holds %q as markup:\n%s", name, raw, body)
			}
		}
	}
	for _, want := range []string{"&lt;script&gt;alert(1)&lt;/script&gt;", "&lt;b&gt;", "&#39;"} {
		if !strings.Contains(pages["/sessions/ID"], want) {
			t.Errorf("/sessions/ID lacks %q (the argv or workspace as text):\n%s", want, pages["/sessions/ID"])
		}
	}
	if !strings.Contains(pages["/events/sessions"], "&lt;script&gt;alert(1)") {
		t.Errorf("the sessions stream does not show the running command:\n%s", pages["/events/sessions"])
	}
}

// TestDashboardMetrics runs commands of every outcome, egress allowed and
// denied, a pool hit, and a freeze, and reads each back from /metrics.
func TestDashboardMetrics(t *testing.T) {
	u := startUpstreams(t)
	r := newRoot(t)
	id, _ := u.create(r, "metrics", u.egressPolicy())
	d := r.serve()
	before := d.metrics()
	if _, ok := metric(before, "warden_daemon_up"); !ok {
		t.Fatalf("/metrics has no warden_daemon_up")
	}
	u.exec(r, id, "sh", "-c", "true")
	u.exec(r, id, "sh", "-c", "exit 3")
	u.exec(r, id, "nosuch-program")
	r.warden("exec", "--session", id, "--timeout", "200ms", "--", "sh", "-c", "while :; do :; done")
	want(t, "allowed", u.exec(r, id, "curl", "-sS", "-o", "/dev/null", "--max-time", "10", "http://api.egress.test:"+itoa(u.http)+"/big?n=100000"), 0)
	want(t, "denied", u.exec(r, id, "curl", "-sSf", "--max-time", "10", "http://api.egress.test:"+itoa(u.other)+"/file"), 22)
	pol := r.policy(sleeperPolicy)
	if res := r.warden("pool", "fill", "--policy", pol, "--size", "1"); res.Exit != 0 {
		t.Fatalf("pool fill: %s", res.Stderr)
	}
	r.create("pooled", pol, tempDir(t))
	if res := r.warden("session", "freeze", id); res.Exit != 0 {
		t.Fatalf("freeze: %s", res.Stderr)
	}
	var m map[string]*dtoFamily
	deadline := time.Now().Add(5 * time.Second) // an egress record comes as its connection closes
	for {
		m = d.metrics()
		if v, _ := metric(m, "warden_egress_connections_total", "decision", "denied"); v >= 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, c := range []struct {
		name   string
		labels []string
		min    float64
		max    float64
	}{
		{"warden_commands_total", []string{"outcome", "ok"}, 2, 2},     // true, the allowed curl
		{"warden_commands_total", []string{"outcome", "failed"}, 2, 2}, // exit 3, the denied curl's 22
		{"warden_commands_total", []string{"outcome", "not_started"}, 1, 1},
		{"warden_commands_total", []string{"outcome", "timeout"}, 1, 1},
		{"warden_commands_total", []string{"outcome", "oom"}, 0, 0},
		{"warden_exec_duration_seconds", nil, 6, 6},
		{"warden_sessions", []string{"state", "running"}, 1, 1},
		{"warden_sessions", []string{"state", "frozen"}, 1, 1},
		{"warden_session_memory_bytes", []string{"session", id}, 100 << 10, 1 << 30},
		{"warden_session_cpu_seconds_total", []string{"session", id}, 0.1, 100}, // the 200 ms busy loop
		{"warden_session_running_commands", []string{"session", id}, 0, 0},
		{"warden_pool_hits_total", []string{"policy", "dash-test"}, 1, 1},
		{"warden_pool_misses_total", []string{"policy", "dash-test"}, 0, 0},
		{"warden_egress_connections_total", []string{"decision", "allowed"}, 1, 1},
		{"warden_egress_connections_total", []string{"decision", "denied"}, 1, 1},
		{"warden_egress_bytes_total", []string{"direction", "in"}, 100000, 200000},
		{"warden_egress_bytes_total", []string{"direction", "out"}, 50, 1000},
	} {
		v, ok := metric(m, c.name, c.labels...)
		if !ok || v < c.min || v > c.max {
			t.Errorf("%s%v = %g (present: %v), want %g..%g", c.name, c.labels, v, ok, c.min, c.max)
		}
	}
	if h := m["warden_exec_duration_seconds"]; h == nil || h.GetType() != dto.MetricType_HISTOGRAM {
		t.Errorf("warden_exec_duration_seconds is not a histogram")
	}
	r.warden("session", "thaw", id)
	r.warden("pool", "drain")
}

func itoa(n int) string { return strconv.Itoa(n) }
