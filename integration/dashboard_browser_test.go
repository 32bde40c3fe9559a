package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// browserTab is one page of a headless chromium (Debian's, which `make
// deps` installs), closed when the test ends.
type browserTab struct {
	t   *testing.T
	ctx context.Context
}

func newBrowser(t *testing.T) *browserTab {
	t.Helper()
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("no chromium on PATH: the dashboard's browser test needs Debian's chromium; `make deps` installs it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium),
		chromedp.NoSandbox, // root, in a machine of its own: chromium refuses its sandbox as root
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1280, 760))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	browser, cancelBrowser := chromedp.NewContext(allocCtx)
	t.Cleanup(func() { cancelBrowser(); cancelAlloc(); cancel() })
	return &browserTab{t: t, ctx: browser}
}

// failed ends the test with what went wrong and the page as it was.
func (b *browserTab) failed(what string, err error) {
	b.t.Helper()
	loc, _ := chromedp.Run(b.ctx, chromedp.Location())
	text, terr := chromedp.Run(b.ctx, chromedp.Evaluate[string]("document.documentElement.outerHTML"))
	b.t.Fatalf("%s: %v\npage %s (%v):\n%s", what, err, loc, terr, text)
}

func (b *browserTab) run(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.failed(what, err)
	}
}

// click clicks what sel finds and waits for the page it loads.
func (b *browserTab) click(what, sel string) {
	b.t.Helper()
	resp, err := chromedp.RunResponse(b.ctx, chromedp.Click(chromedp.CSS(sel)))
	if err != nil {
		b.failed(what, err)
	}
	if resp.Status != http.StatusOK {
		b.failed(what, fmt.Errorf("status %d from %s", resp.Status, resp.URL))
	}
}

// waitFor waits until the JavaScript condition holds on the page.
func (b *browserTab) waitFor(what, cond string) {
	b.t.Helper()
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		b.failed(what, err)
	}
}

// shot takes a screenshot; WARDEN_UPDATE_SCREENSHOTS=1 keeps it in
// docs/img.
func (b *browserTab) shot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.failed("screenshot "+name, err)
	}
	dir := b.t.TempDir()
	if os.Getenv("WARDEN_UPDATE_SCREENSHOTS") == "1" {
		dir = filepath.Join("..", "docs", "img")
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// signIn opens the sign-in link warden serve prints.
func (b *browserTab) signIn(d *dashboard) {
	b.t.Helper()
	b.run("sign in with the printed link", chromedp.Navigate(d.url+"/login?token="+d.token), chromedp.WaitVisible(chromedp.CSS("h1")))
	loc, err := chromedp.Run(b.ctx, chromedp.Location())
	if err != nil || loc != d.url+"/" {
		b.t.Fatalf("signed in, the browser is at %s, want %s/", loc, d.url)
	}
}

// TestDashboardBrowser drives warden serve's pages in a real headless
// browser (Debian's chromium, which `make deps` installs): sign in with
// the printed link, see a session and its running command appear, click
// freeze and find the session frozen on the host, click kill and find
// its processes gone, thaw, and freeze them all with one button.
// WARDEN_UPDATE_SCREENSHOTS=1 writes the pages' screenshots to docs/img.
func TestDashboardBrowser(t *testing.T) {
	r := newRoot(t)
	pol := r.policy(sleeperPolicy)
	d := r.serve()
	b := newBrowser(t)
	click, waitFor, shot := b.click, b.waitFor, b.shot

	b.signIn(d)

	// A session and a command started now appear on the open page.
	id := r.create("browser", pol, tempDir(t))
	bg := r.startSleeper(id, "sh", "-c", "sleep 300; echo done")
	row := fmt.Sprintf(`document.querySelector('tr[data-id="%s"]')`, id)
	waitFor("the running command appears", row+`?.querySelector('.argv')?.textContent.includes("sleep 300")`)
	shot("dashboard-sessions.png")

	click("click freeze", fmt.Sprintf(`tr[data-id="%s"] button.freeze`, id))
	waitFor("the session shows frozen", row+`?.querySelector('td.state')?.textContent === "frozen"`)
	if st := r.freezerState(id); st != "FROZEN" {
		t.Fatalf("the page says frozen, the freezer cgroup says %q", st)
	}

	click("open the session's page", fmt.Sprintf(`a[href="/sessions/%s"]`, id))
	waitFor("the session page shows the command", `document.querySelector('#commands .argv')?.textContent.includes("sleep 300")`)
	waitFor("and its audit lines", `document.querySelector('#audit')?.textContent.includes("session.freeze")`)
	shot("dashboard-session.png")
	if n := len(commandProcesses(id, "300")); n == 0 {
		t.Fatalf("before the kill no sleep runs in the session")
	}
	click("click kill", `.actions button.kill`)
	waitFor("the kill is reported", `document.getElementById('flash')?.textContent.includes("killed 2 process(es)")`)
	waitFor("the running commands are gone from the page", `document.getElementById('commands')?.textContent === "none"`)
	if left := commandProcesses(id, "300"); len(left) > 0 {
		t.Errorf("after the kill, processes %v still run in the session", left)
	}
	if err := bg.Wait(); bg.ProcessState == nil || bg.ProcessState.ExitCode() != 137 {
		t.Errorf("the killed command's caller: %v, want exit 137", err)
	}
	if st := r.freezerState(id); st != "FROZEN" {
		t.Errorf("a kill of a frozen session left it %q, want FROZEN", st)
	}

	click("click thaw", `.actions button.thaw`)
	waitFor("the session runs again", `document.getElementById('state')?.textContent === "running"`)
	if st := r.freezerState(id); st != "THAWED" {
		t.Errorf("after thaw the freezer says %q", st)
	}
	r.expectAlive(id)

	click("back to the sessions", `nav a[href="/"]`)
	click("click freeze all", "#freeze-all")
	waitFor("freeze all is reported", fmt.Sprintf(`document.getElementById('flash')?.textContent === "froze 1 session(s): %s"`, id))
	waitFor("the session shows frozen", row+`?.querySelector('td.state')?.textContent === "frozen"`)
	if st := r.freezerState(id); st != "FROZEN" {
		t.Errorf("after freeze all the freezer says %q", st)
	}

	if res := r.warden("pool", "fill", "--policy", pol, "--size", "1"); res.Exit != 0 {
		t.Fatalf("pool fill: %s", res.Stderr)
	}
	t.Cleanup(func() { r.warden("pool", "drain") })
	click("the pools page", `nav a[href="/pools"]`)
	waitFor("the pool", `[...document.querySelectorAll('tr.pool td')].some(td => td.textContent === "dash-test")`)
	shot("dashboard-pools.png")
	r.warden("session", "thaw", "--all")
}

// TestDashboardBrowserApprovals answers asks from the approvals page in a
// real browser: a `warden exec` waiting for approval appears on the open
// page, and a second one too while a reason is being typed for the first
// (which stays typed); approve lets the first run (its caller ends with
// the command's exit code and output), deny refuses the second (exit
// 126, the login named); each answer's audit line names the login.
func TestDashboardBrowserApprovals(t *testing.T) {
	r := newRoot(t)
	id, bare := r.askSession("browser-ask")
	d := r.serve()
	b := newBrowser(t)
	b.signIn(d)
	b.click("the approvals page", `nav a[href="/approvals"]`)
	b.waitFor("no command waits", `document.getElementById('none') !== null`)
	login, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS("#login")))
	if err != nil || !strings.HasPrefix(login, "dashboard login ") {
		b.failed("the page names the login answers are recorded as", fmt.Errorf("%q, %v", login, err))
	}
	row := func(approval string) string { return fmt.Sprintf(`tr.approval[data-id="%s"]`, approval) }

	push, pushOut, pushErr := r.waitingExec(id, "git", "push", "origin", "HEAD:main")
	first, ok := r.waitApproval(t, id, "HEAD:main")
	if !ok {
		t.FailNow()
	}
	b.waitFor("the waiting push appears", fmt.Sprintf(`document.querySelector('%s .argv')?.textContent === "git push origin HEAD:main"`, row(first.ID)))
	b.run("type a reason", chromedp.SendKeys(chromedp.CSS("#reason-"+first.ID), "reviewed the branch"))
	force, _, forceErr := r.waitingExec(id, "sh", "-c", "git push --force origin HEAD:release")
	second, ok := r.waitApproval(t, id, "--force")
	if !ok {
		t.FailNow()
	}
	b.waitFor("the second push appears, started by its shell", fmt.Sprintf(`document.querySelector('%s .parent')?.textContent.startsWith("sh -c")`, row(second.ID)))
	b.waitFor("the reason typed stays", fmt.Sprintf(`document.getElementById('reason-%s')?.value === "reviewed the branch"`, first.ID))
	b.shot("dashboard-approvals.png")

	b.click("click approve", row(first.ID)+" button.approve")
	b.waitFor("the approval is reported", fmt.Sprintf(`document.getElementById('flash')?.textContent === "%s approved: git push origin HEAD:main in session %s"`, first.ID, id))
	err, done := exited(push)
	if !done {
		t.Fatalf("the approved push's caller did not end")
	}
	if code := exitCode(err); code != 0 || !strings.Contains(pushErr.String(), "[new branch]      HEAD -> main") || pushOut.Len() != 0 {
		t.Errorf("the approved push: exit %d, stdout %q, stderr %q; want 0 and git's report of the new branch", code, pushOut.String(), pushErr.String())
	}
	if out, err := hostRun("git", "--git-dir", bare, "branch", "--list"); err != nil || strings.TrimSpace(out) != "main" {
		t.Errorf("after the approved push the origin has branches %q (%v), want main", out, err)
	}

	b.run("type a reason", chromedp.SendKeys(chromedp.CSS("#reason-"+second.ID), "no force pushes"))
	b.click("click deny", row(second.ID)+" button.deny")
	b.waitFor("the denial is reported", fmt.Sprintf(`document.getElementById('flash')?.textContent.startsWith("%s denied")`, second.ID))
	err, done = exited(force)
	if !done {
		t.Fatalf("the denied push's caller did not end")
	}
	wantLine := `git push --force origin HEAD:release: refused (commands.ask "git push **", denied by ` + login + ` (uid 0): no force pushes)`
	if code := exitCode(err); code != 126 || !strings.Contains(forceErr.String(), wantLine) {
		t.Errorf("the denied push: exit %d, stderr %q; want 126 and %q", code, forceErr.String(), wantLine)
	}
	b.waitFor("nothing waits any more", `document.getElementById('none') !== null`)

	for approval, want := range map[string]answerRecord{
		first.ID:  {Decision: "approved", Reason: "reviewed the branch"},
		second.ID: {Decision: "denied", Reason: "no force pushes"},
	} {
		rec, found := r.answerOf(approval)
		if !found || rec.Decision != want.Decision || rec.Reason != want.Reason || rec.AnsweredBy != login || rec.UID == nil || *rec.UID != 0 || time.Since(rec.Time) > time.Minute {
			t.Errorf("the audit line of %s: %+v (found %v); want %s by %s (uid 0), %q, now", approval, rec, found, want.Decision, login, want.Reason)
		}
	}
}
