package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The dashboard's approvals page (docs/dashboard.md#approvals): commands a
// policy's commands.ask holds, answered from the page as a signed-in
// browser's login.

// askPolicy asks before any git push; a test's answer comes long before
// its timeout.
const askPolicy = `name = "dash-ask"
[fs]
write = ["$WORK_DIR"]
[commands]
ask = ["git push **"]
timeout = "2m"
`

// askSession makes a session of askPolicy whose workspace holds a
// repository r with a commit and a bare repository bare.git as its origin
// (the host's path to it returned).
func (r *wardenRoot) askSession(name string) (id, bare string) {
	r.t.Helper()
	ws := tempDir(r.t)
	id = r.create(name, r.policy(askPolicy), ws)
	r.sh(id, `cd /workspace && git init -q --bare bare.git && git init -q r && cd r &&
		git -c user.email=a@example.com -c user.name=a commit -q --allow-empty -m one && git remote add origin /workspace/bare.git`)
	return id, filepath.Join(ws, "bare.git")
}

// waitingExec starts `warden exec` of argv in the session's repository in
// the background (it waits for an answer), its output collected.
func (r *wardenRoot) waitingExec(id string, argv ...string) (cmd *exec.Cmd, stdout, stderr *bytes.Buffer) {
	r.t.Helper()
	cmd = r.command(append([]string{"exec", "--session", id, "--cwd", "/workspace/r", "--"}, argv...)...)
	stdout, stderr = &bytes.Buffer{}, &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, stdout, stderr
}

// answerRecord is the audit line of an ask's decision.
type answerRecord struct {
	Event, Session, Decision, Approval, Reason, AnsweredBy string
	UID                                                    *int
	Time                                                   time.Time
}

// answerOf is the audit line of approval id's decision; false when there
// is none.
func (r *wardenRoot) answerOf(id string) (answerRecord, bool) {
	r.t.Helper()
	f, err := os.Open(filepath.Join(r.root, "audit.log"))
	if err != nil {
		r.t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec answerRecord
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Event == "command" && rec.Approval == id {
			return rec, true
		}
	}
	return answerRecord{}, false
}

// exited waits up to 10 s for a background command's end; false when it
// still runs.
func exited(cmd *exec.Cmd) (err error, done bool) {
	ch := make(chan error, 1)
	go func() { ch <- cmd.Wait() }()
	select {
	case err := <-ch:
		return err, true
	case <-time.After(10 * time.Second):
		return nil, false
	}
}

// stillWaits reports whether approval id still waits: listed by
// `warden approvals ls`.
func (r *wardenRoot) stillWaits(id string) bool {
	r.t.Helper()
	var list []approvalInfo
	if err := json.Unmarshal([]byte(r.warden("approvals", "ls", "--format", "json").Stdout), &list); err != nil {
		r.t.Fatal(err)
	}
	for _, a := range list {
		if a.ID == id {
			return true
		}
	}
	return false
}

var loginName = regexp.MustCompile(`<code id="login">(dashboard login [0-9a-f]{8})</code>`)

// TestDashboardApprovals tries the approvals page as an attacker would:
// the command line a sandbox chose shows as text on the page and in its
// live stream; an answer without the login, without its CSRF token, with
// another login's, or from another site is refused and the command goes
// on waiting. Done right, the deny reaches the waiting caller (exit 126,
// the login named) and its audit line names the login and warden serve's
// uid; /metrics counts it.
func TestDashboardApprovals(t *testing.T) {
	r := newRoot(t)
	id, bare := r.askSession("ask")
	evil := []string{"git", "push", "origin", `<script>alert(1)</script>`, `"><img src=x onerror=alert(2)>`, `it's`}
	bg, _, stderr := r.waitingExec(id, evil...)
	a, ok := r.waitApproval(t, id, "push")
	if !ok {
		t.FailNow()
	}
	d := r.serve()
	cookie, csrf := d.login()
	cookie2, csrf2 := d.login()

	t.Run("escaping", func(t *testing.T) {
		page := d.do(request{path: "/approvals", cookie: cookie})
		if page.status != http.StatusOK || !strings.Contains(page.body, a.ID) {
			t.Fatalf("GET /approvals: status %d, %s not on it:\n%s", page.status, a.ID, page.body)
		}
		req, _ := http.NewRequest("GET", d.url+"/events/approvals", nil)
		req.AddCookie(&http.Cookie{Name: "warden_dashboard", Value: cookie})
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var stream strings.Builder
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() && (stream.Len() == 0 || sc.Text() != "") {
			stream.WriteString(sc.Text() + "\n")
		}
		resp.Body.Close()
		for name, body := range map[string]string{"/approvals": page.body, "/events/approvals": stream.String()} {
			for _, raw := range []string{"<script>alert", "<img", "onerror=alert(2)>", `'it's'`} {
				if strings.Contains(body, raw) {
					t.Errorf("%s holds %q as markup:\n%s", name, raw, body)
				}
			}
			for _, want := range []string{a.ID, "&lt;script&gt;alert(1)&lt;/script&gt;", "&lt;img src=x onerror=alert(2)&gt;", "/workspace/r", `commands.ask &#34;git push **&#34;`} {
				if !strings.Contains(body, want) {
					t.Errorf("%s lacks %q:\n%s", name, want, body)
				}
			}
		}
	})

	deny := "/approvals/" + a.ID + "/deny"
	approve := "/approvals/" + a.ID + "/approve"
	t.Run("refused answers", func(t *testing.T) {
		port := strings.Split(d.host, ":")[1]
		for name, q := range map[string]request{
			"the token as a bearer, no login":        {method: "POST", path: approve, header: d.bearer(), form: url.Values{"csrf": {csrf}}},
			"the token in the form, no login":        {method: "POST", path: approve, form: url.Values{"token": {d.token}, "csrf": {csrf}}},
			"the login cookie, no CSRF token":        {method: "POST", path: approve, cookie: cookie, form: url.Values{"reason": {"ok"}}},
			"the login cookie, the token as CSRF":    {method: "POST", path: approve, cookie: cookie, form: url.Values{"csrf": {d.token}}},
			"the login cookie, another login's CSRF": {method: "POST", path: deny, cookie: cookie, form: url.Values{"csrf": {csrf2}}},
			"a right form from another site's page":  {method: "POST", path: approve, cookie: cookie, form: url.Values{"csrf": {csrf}}, header: map[string]string{"Origin": "http://evil.example"}},
			"a right form from a sandboxed frame":    {method: "POST", path: approve, cookie: cookie, form: url.Values{"csrf": {csrf}}, header: map[string]string{"Origin": "null"}},
			"a rebound name, right form":             {method: "POST", path: approve, host: "rebind.evil.example:" + port, cookie: cookie, form: url.Values{"csrf": {csrf}}},
			"a GET of an answer":                     {path: approve, cookie: cookie},
			"a GET with the token":                   {path: approve + "?csrf=" + csrf, header: d.bearer()},
		} {
			if res := d.do(q); res.status < 400 {
				t.Errorf("%s: status %d, want a refusal", name, res.status)
			}
		}
		if !r.stillWaits(a.ID) {
			t.Fatalf("after the refused answers the command no longer waits: stderr %q", stderr.String())
		}
		if _, found := r.answerOf(a.ID); found {
			t.Errorf("a refused answer left an audit line")
		}
	})

	m := d.metrics()
	if v, ok := metric(m, "warden_approvals_pending"); !ok || v != 1 {
		t.Errorf("warden_approvals_pending = %g (present: %v), want 1", v, ok)
	}
	if v, ok := metric(m, "warden_approvals_answered_total", "outcome", "denied"); !ok || v != 0 {
		t.Errorf("warden_approvals_answered_total{denied} before the answer = %g (present: %v), want 0", v, ok)
	}

	t.Run("the right answer", func(t *testing.T) {
		page := d.do(request{path: "/approvals", cookie: cookie2})
		name := loginName.FindStringSubmatch(page.body)
		if name == nil {
			t.Fatalf("the approvals page does not say whom answers are recorded as:\n%s", page.body)
		}
		res := d.do(request{method: "POST", path: deny, cookie: cookie2, form: url.Values{"csrf": {csrf2}, "reason": {"not from a test"}}, header: map[string]string{"Origin": d.url}})
		if res.status != http.StatusSeeOther || res.header.Get("Location") != "/approvals" {
			t.Fatalf("deny with the login and its CSRF token: status %d to %q: %s", res.status, res.header.Get("Location"), res.body)
		}
		err, done := exited(bg)
		if !done {
			t.Fatalf("the denied command's caller did not end")
		}
		wantLine := `(commands.ask "git push **", denied by ` + name[1] + ` (uid 0): not from a test)`
		if code := exitCode(err); code != 126 || !strings.Contains(stderr.String(), wantLine) {
			t.Errorf("the denied caller: exit %d, stderr %q; want 126 and %q", code, stderr.String(), wantLine)
		}
		if page := d.do(request{path: "/approvals", cookie: cookie2}); !strings.Contains(page.body, a.ID+" denied: git push origin &#39;&lt;script&gt;") ||
			strings.Contains(page.body, "<script>alert") || strings.Contains(page.body, `data-id="`+a.ID) {
			t.Errorf("the page after the deny does not say so (the command as text), or still lists it:\n%s", page.body)
		}
		rec, found := r.answerOf(a.ID)
		if !found || rec.Decision != "denied" || rec.AnsweredBy != name[1] || rec.UID == nil || *rec.UID != 0 ||
			rec.Reason != "not from a test" || rec.Session != id || time.Since(rec.Time) > time.Minute {
			t.Errorf("the answer's audit line: %+v (found %v); want denied by %s, uid 0, the reason, now", rec, found, name[1])
		}
		// A second answer finds nothing to answer, and says so.
		d.do(request{method: "POST", path: approve, cookie: cookie2, form: url.Values{"csrf": {csrf2}}})
		if page := d.do(request{path: "/approvals", cookie: cookie2}); !strings.Contains(page.body, "approve failed") || !strings.Contains(page.body, "waits for nothing") {
			t.Errorf("a second answer is not reported as failed:\n%s", page.body)
		}
	})
	if out, err := hostRun("git", "--git-dir", bare, "branch", "--list"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("a denied push pushed: %q %v", out, err)
	}
	m = d.metrics()
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"warden_approvals_pending", nil, 0},
		{"warden_approvals_answered_total", []string{"outcome", "denied"}, 1},
		{"warden_approvals_answered_total", []string{"outcome", "approved"}, 0},
		{"warden_approvals_answered_total", []string{"outcome", "timeout"}, 0},
	} {
		if v, ok := metric(m, c.name, c.labels...); !ok || v != c.want {
			t.Errorf("%s%v = %g (present: %v), want %g", c.name, c.labels, v, ok, c.want)
		}
	}
}
