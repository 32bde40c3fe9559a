package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestDashboardBrowser drives warden serve's pages in a real headless
// browser (Debian's chromium, which `make deps` installs): sign in with
// the printed link, see a session and its running command appear, click
// freeze and find the session frozen on the host, click kill and find
// its processes gone, thaw, and freeze them all with one button.
// WARDEN_UPDATE_SCREENSHOTS=1 writes the pages' screenshots to docs/img.
func TestDashboardBrowser(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("no chromium on PATH: the dashboard's browser test needs Debian's chromium; `make deps` installs it")
	}
	r := newRoot(t)
	pol := r.policy(sleeperPolicy)
	d := r.serve()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium),
		chromedp.NoSandbox, // root, in a machine of its own: chromium refuses its sandbox as root
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1280, 760))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	browser, cancelBrowser := chromedp.NewContext(allocCtx)
	defer cancelBrowser()
	failed := func(what string, err error) {
		t.Helper()
		loc, _ := chromedp.Run(browser, chromedp.Location())
		text, terr := chromedp.Run(browser, chromedp.Evaluate[string]("document.documentElement.outerHTML"))
		t.Fatalf("%s: %v\npage %s (%v):\n%s", what, err, loc, terr, text)
	}
	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(browser, steps...); err != nil {
			failed(what, err)
		}
	}
	// click clicks what sel finds and waits for the page it loads.
	click := func(what, sel string) {
		t.Helper()
		resp, err := chromedp.RunResponse(browser, chromedp.Click(chromedp.CSS(sel)))
		if err != nil {
			failed(what, err)
		}
		if resp.Status != http.StatusOK {
			failed(what, fmt.Errorf("status %d from %s", resp.Status, resp.URL))
		}
	}
	// waitFor waits until the JavaScript condition holds on the page.
	waitFor := func(what, cond string) {
		t.Helper()
		if _, err := chromedp.Run(browser, chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
			failed(what, err)
		}
	}
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(browser, chromedp.CaptureScreenshot())
		if err != nil {
			failed("screenshot "+name, err)
		}
		dir := t.TempDir()
		if os.Getenv("WARDEN_UPDATE_SCREENSHOTS") == "1" {
			dir = filepath.Join("..", "docs", "img")
		}
		if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	run("sign in with the printed link", chromedp.Navigate(d.url+"/login?token="+d.token), chromedp.WaitVisible(chromedp.CSS("h1")))
	loc, err := chromedp.Run(browser, chromedp.Location())
	if err != nil || loc != d.url+"/" {
		t.Fatalf("signed in, the browser is at %s, want %s/", loc, d.url)
	}

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
