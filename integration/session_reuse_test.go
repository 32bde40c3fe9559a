package integration

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// oneLine checks a refusal: exit 125, one line on stderr naming each of want.
func oneLine(t *testing.T, what string, res sandboxResult, want ...string) {
	t.Helper()
	if res.Exit != 125 || strings.Count(res.Stderr, "\n") != 1 {
		t.Errorf("%s: exit %d, stderr %q; want 125 and one line", what, res.Exit, res.Stderr)
		return
	}
	for _, w := range want {
		if !strings.Contains(res.Stderr, w) {
			t.Errorf("%s: stderr %q does not say %q", what, res.Stderr, w)
		}
	}
}

// TestSessionGetOrCreateDiffers: exec with --policy (get-or-create) on an
// existing session runs only when the session has that policy and those
// folders. Another policy or workspace is refused in one line and nothing
// runs; the session stays as it was.
func TestSessionGetOrCreateDiffers(t *testing.T) {
	r := newRoot(t)
	p := r.policy(sessionPolicy)
	ws, otherWS := tempDir(t), tempDir(t)
	id := r.create("reuse", p, ws)
	// The same content in another file of the same skill folder is the
	// same policy.
	same := filepath.Join(filepath.Dir(p), "same.toml")
	data, _ := os.ReadFile(p)
	if err := os.WriteFile(same, data, 0o644); err != nil {
		t.Fatal(err)
	}
	narrower := r.policy(`name = "narrower"
[fs]
read = ["$WORK_DIR"]
[exec]
allow = ["touch"]
`)
	for i, flags := range [][]string{
		{"--policy", p, "--workspace", ws},
		{"--policy", same, "--workspace", ws},
		{"--workspace", ws},
	} {
		marker := "same" + string(rune('a'+i))
		if res := r.exec(id, flags, "touch", "/workspace/"+marker); res.Exit != 0 {
			t.Errorf("exec %v on its own session: exit %d, stderr %q", flags, res.Exit, res.Stderr)
		}
		if _, err := os.Stat(filepath.Join(ws, marker)); err != nil {
			t.Errorf("exec %v: the command did not run: %v", flags, err)
		}
	}
	for _, c := range []struct {
		name  string
		flags []string
		want  []string
	}{
		{"another policy", []string{"--policy", narrower, "--workspace", ws},
			[]string{"session " + id + " exists with policy session-test (sha256:", "asks for policy narrower (sha256:", "leave out --policy"}},
		{"another workspace", []string{"--policy", p, "--workspace", otherWS},
			[]string{"exists with workspace " + ws, "asks for workspace " + otherWS, "--policy and --workspace"}},
		{"no workspace", []string{"--policy", p},
			[]string{"exists with workspace " + ws, "asks for no workspace"}},
		{"another workspace alone", []string{"--workspace", otherWS},
			[]string{"asks for workspace " + otherWS, "leave out --workspace"}},
		{"both", []string{"-p", narrower, "-w", otherWS},
			[]string{"policy session-test", "and workspace " + ws, "asks for policy narrower", "and workspace " + otherWS}},
	} {
		res := r.exec(id, c.flags, "touch", "/workspace/refused", "/tmp/refused")
		oneLine(t, c.name, res, append(c.want, "use another --session id")...)
		for _, dir := range []string{ws, otherWS} {
			if _, err := os.Stat(filepath.Join(dir, "refused")); err == nil {
				t.Errorf("%s: the command ran (%s/refused exists)", c.name, dir)
			}
		}
	}
	if out := r.sh(id, "ls /tmp"); out != "" {
		t.Errorf("a refused command ran in the session: /tmp holds %q", out)
	}
	// session create on an existing id is refused whatever it asks for.
	for _, flags := range [][]string{{"--policy", p, "--workspace", ws}, {"--policy", narrower, "--workspace", otherWS}} {
		if res := r.warden(append([]string{"session", "create", "--id", id}, flags...)...); res.Exit != 125 || !strings.Contains(res.Stderr, "already exists") {
			t.Errorf("session create --id %s %v again: exit %d, stderr %q", id, flags, res.Exit, res.Stderr)
		}
	}
	if s := r.list(); len(s) != 1 || s[0].Policy != "session-test" || s[0].Workspace != ws {
		t.Errorf("sessions after the refusals: %+v", s)
	}
}

// TestSessionDeadSandbox: a session whose agent was killed from the host
// says so on exec (and how to get rid of it), gc removes it and nothing of
// its sandbox is left, its workspace keeps every file, another session
// stays, and the id can be used again.
func TestSessionDeadSandbox(t *testing.T) {
	r := newRoot(t)
	p := r.policy(sessionPolicy)
	ws := tempDir(t)
	id := r.create("dead", p, ws)
	alive := r.create("alive", p, tempDir(t))
	r.sh(id, "echo kept > /workspace/kept.txt")
	agent := r.agentPid(id)
	if !slices.Contains(cgroupProcesses(id), agent) {
		t.Fatalf("pid %d is not in session %s's cgroup (%v)", agent, id, cgroupProcesses(id))
	}
	if err := syscall.Kill(agent, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if s := r.list(); slices.ContainsFunc(s, func(s sessionInfo) bool { return s.ID == id && s.State == "stopped" }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %s is not listed as stopped 10 s after its agent was killed: %+v", id, r.list())
		}
	}
	res := r.exec(id, nil, "true")
	oneLine(t, "exec in the dead session", res, "session "+id+": its sandbox has stopped", "warden session rm "+id)
	if strings.Contains(res.Stderr, "agent.sock") {
		t.Errorf("exec in the dead session: stderr %q names the agent's socket", res.Stderr)
	}
	gc := r.warden("gc")
	if gc.Exit != 0 || !strings.Contains(gc.Stdout, "removed session "+id+"\n") {
		t.Fatalf("gc: exit %d, stdout %q, stderr %q; want the dead session removed", gc.Exit, gc.Stdout, gc.Stderr)
	}
	if strings.Contains(gc.Stdout, alive) {
		t.Errorf("gc removed the live session %s: %q", alive, gc.Stdout)
	}
	for _, s := range r.list() {
		if s.ID == id {
			t.Errorf("session %s still listed after gc: %+v", id, s)
		}
	}
	r.expectAlive(alive)
	for _, d := range []string{"sessions", "containers"} {
		if _, err := os.Lstat(filepath.Join(r.root, d, id)); err == nil {
			t.Errorf("%s/%s left after gc", d, id)
		}
	}
	if dirs, _ := filepath.Glob("/sys/fs/cgroup/*/warden/*/" + id); len(dirs) > 0 {
		t.Errorf("cgroups of %s left after gc: %v", id, dirs)
	}
	if data, err := os.ReadFile(filepath.Join(ws, "kept.txt")); string(data) != "kept\n" {
		t.Errorf("the workspace's file after gc: %q, %v", data, err)
	}
	if res := r.warden("gc"); res.Exit != 0 || strings.TrimSpace(res.Stdout) != "nothing to remove" {
		t.Errorf("a second gc: exit %d, stdout %q", res.Exit, res.Stdout)
	}
	if res := r.warden("session", "create", "--policy", p, "--workspace", ws, "--id", id); res.Exit != 0 {
		t.Fatalf("session create %s again: exit %d, stderr %q", id, res.Exit, res.Stderr)
	}
	if out := r.sh(id, "cat /workspace/kept.txt"); out != "kept\n" {
		t.Errorf("the new session reads %q", out)
	}
}

// TestSessionDoAudit: `do` writes its command's exec line to the audit log
// (session do-…, argv, exit), as a session's exec does; the log stays one
// JSON object per line with a session's lines beside it.
func TestSessionDoAudit(t *testing.T) {
	r := newRoot(t)
	p := r.policy(sessionPolicy)
	ws := tempDir(t)
	id := r.create("audit-beside-do", p, ws)
	if res := r.warden("do", "--policy", p, "--workspace", ws, "--", "sh", "-c", "exit 4"); res.Exit != 4 {
		t.Fatalf("do: exit %d, stderr %q", res.Exit, res.Stderr)
	}
	r.exec(id, nil, "cat", "/dev/null")
	if res := r.warden("do", "--policy", p, "--workspace", ws, "--", "python3", "-c", "1"); res.Exit != 127 {
		t.Errorf("do with a program outside exec.allow: exit %d", res.Exit)
	}
	recs, text := r.logs()
	var do []auditRecord
	sessionLines := 0
	for _, rec := range recs {
		switch {
		case rec.Event == "exec" && strings.HasPrefix(rec.Session, "do-"):
			do = append(do, rec)
		case rec.Event == "exec" && rec.Session == id:
			sessionLines++
		}
	}
	if len(do) != 2 || sessionLines != 1 {
		t.Fatalf("%d exec lines of do and %d of the session, want 2 and 1:\n%s", len(do), sessionLines, text)
	}
	for i, want := range []struct {
		argv string
		exit int
	}{{"sh -c exit 4", 4}, {"python3 -c 1", 127}} {
		rec := do[i]
		if strings.Join(rec.Argv, " ") != want.argv || rec.Exit == nil || *rec.Exit != want.exit {
			t.Errorf("do line %d: %+v, want argv %q exit %d", i, rec, want.argv, want.exit)
		}
		if rec.Policy != "session-test" || !strings.HasPrefix(rec.PolicyHash, "sha256:") || rec.Cwd != "/workspace" || rec.Time.IsZero() {
			t.Errorf("do line %d: policy %q hash %q cwd %q time %v", i, rec.Policy, rec.PolicyHash, rec.Cwd, rec.Time)
		}
	}
	if do[0].Session == do[1].Session {
		t.Errorf("two do runs share the session %s", do[0].Session)
	}
	if res := r.warden("logs", "--session", do[0].Session); res.Exit != 0 || !strings.Contains(res.Stdout, `"argv":["sh","-c","exit 4"]`) {
		t.Errorf("logs --session %s: exit %d, stdout %q", do[0].Session, res.Exit, res.Stdout)
	}
}

// TestSessionGetOrCreateSameFolder: exec's folders are compared with the
// session's as folders, not as paths. A path spelled otherwise (a symlink,
// a trailing slash, relative) that names the session's folder runs; a
// symlink moved to another folder since the session was made does not,
// though its text is the session's, and the refusal names both folders.
// The same for a cold session and one claimed from the pool, also once a
// restarted daemon has taken them over.
func TestSessionGetOrCreateSameFolder(t *testing.T) {
	for _, pooled := range []bool{false, true} {
		name := "cold"
		if pooled {
			name = "pooled"
		}
		t.Run(name, func(t *testing.T) { testSameFolder(t, pooled) })
	}
}

func testSameFolder(t *testing.T, pooled bool) {
	r := newRoot(t)
	p := r.policy(sessionPolicy)
	base := tempDir(t)
	wsA, wsB, link := filepath.Join(base, "wsA"), filepath.Join(base, "wsB"), filepath.Join(base, "link")
	for _, d := range []string{wsA, wsB} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "who"), []byte(filepath.Base(d)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	relink := func(target string) {
		os.Remove(link)
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	relink("wsA")
	skillLink := filepath.Join(base, "skill")
	if err := os.Symlink(filepath.Dir(p), skillLink); err != nil {
		t.Fatal(err)
	}
	if pooled {
		r.fill(p, 1)
		r.waitPool(1)
	}
	id := r.create("same-folder", p, link)
	if pooled && r.poolStatus()[0].Hits != 1 {
		t.Fatalf("the session did not come from the pool: %+v", r.poolStatus())
	}
	runs := func(when string, dir string, flags ...string) {
		t.Helper()
		cmd := r.command(append(append([]string{"exec", "--session", id}, flags...), "--", "cat", "/workspace/who")...)
		cmd.Dir = dir
		if res := runCmd(t, cmd); res.Exit != 0 || res.Stdout != "wsA" {
			t.Errorf("%s: exec %v: exit %d, stdout %q, stderr %q; want it to run in wsA", when, flags, res.Exit, res.Stdout, res.Stderr)
		}
	}
	refused := func(when string, flags []string, want ...string) {
		t.Helper()
		res := r.exec(id, flags, "touch", "/workspace/refused")
		oneLine(t, when+": exec "+strings.Join(flags, " "), res, append(want, "use another --session id")...)
		for _, d := range []string{wsA, wsB} {
			if _, err := os.Stat(filepath.Join(d, "refused")); err == nil {
				t.Errorf("%s: exec %v ran (%s/refused exists)", when, flags, d)
			}
		}
	}
	// The link still leads to the session's folder: every spelling of it
	// runs.
	for _, flags := range [][]string{
		{"--policy", p, "--workspace", link},
		{"--policy", p, "--workspace", wsA},
		{"--workspace", wsA + "/"},
		{"--workspace", "wsA"},
		{"--workspace", "link/"},
		{"--policy", p, "--workspace", wsA, "--skill-dir", skillLink},
	} {
		runs("before the link moves", base, flags...)
	}
	// The link now leads elsewhere: its text is the session's, its folder
	// is not.
	relink("wsB")
	refused("after the link moved", []string{"--policy", p, "--workspace", link},
		"exists with workspace "+wsA+" (created as "+link+")", "asks for workspace "+link+" (now "+wsB+")")
	refused("after the link moved", []string{"--workspace", wsB},
		"exists with workspace "+wsA+" (created as "+link+")", "asks for workspace "+wsB+":", "leave out --workspace")
	runs("after the link moved", base, "--policy", p, "--workspace", wsA)
	runs("after the link moved", wsA, "--workspace", ".")
	// A restarted daemon knows the session from its state file, and finds
	// its folder in the sandbox as before.
	r.killDaemon(syscall.SIGKILL)
	refused("after a daemon restart", []string{"--policy", p, "--workspace", link},
		"exists with workspace "+wsA+" (created as "+link+")", "asks for workspace "+link+" (now "+wsB+")")
	runs("after a daemon restart", base, "--workspace", "wsA")
	if s := r.list(); len(s) != 1 || s[0].Workspace != link {
		t.Errorf("sessions after the refusals: %+v", s)
	}
}
