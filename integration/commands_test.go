package integration

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Command rules ([commands], docs/policy.md#command-rules): deny, ask and
// allow hold however the ruled program is started inside the sandbox, an
// ask waits for `warden approvals approve|deny`, and every decision is an
// audit line.

const rulesPolicy = `name = "rules"
[fs]
write = ["$WORK_DIR"]
[exec]
workspace = true   # copies in the workspace and /tmp could run: they must not run git
[commands]
deny = ["git config --global **"]
ask = ["git push **"]
allow = ["git push --dry-run **"]
timeout = "4s"
`

// startedBy are the ways a sandboxed command could start git; ARGS
// stands for git's arguments. Each must meet the rules.
var startedBy = []struct{ name, script string }{
	{"sh -c", "git ARGS"},
	{"a script", "echo 'git ARGS' > s.sh; sh s.sh"},
	{"make", "printf 'all:\\n\\tgit ARGS\\n' > Makefile; make -s"},
	{"env", "env git ARGS"},
	{"xargs", "echo ARGS | xargs git"},
	{"absolute path", "/usr/bin/git ARGS"},
	{"the /bin link", "/bin/git ARGS"},
	{"git's other copy", "/usr/lib/git-core/git ARGS"},
	{"dynamic loader", "/lib64/ld-linux-x86-64.so.2 /usr/bin/git ARGS"},
	{"loader, other copy", "/lib64/ld-linux-x86-64.so.2 /usr/lib/git-core/git ARGS"},
	{"a symlink", "ln -sf /usr/bin/git /tmp/l; /tmp/l ARGS"},
	{"python execv", "python3 -c 'import os,sys; os.execv(\"/usr/bin/git\", [\"git\"] + sys.argv[1:])' ARGS"},
	{"bash exec -a", "bash -c 'exec -a other git \"$@\"' x ARGS"},
	{"git alias", "git -c alias.x='!git ARGS' x"},
}

// notRun are ways to get git's bytes running some other way: each must
// fail without running git at all.
var notRun = []struct{ name, script string }{
	{"a copy in /tmp", "cp /usr/bin/git /tmp/g && /tmp/g --version"},
	{"a copy of the other", "cp /usr/lib/git-core/git ./g2 && ./g2 --version"},
	{"a copy, by the loader", "cp /usr/bin/git ./g3 && /lib64/ld-linux-x86-64.so.2 ./g3 --version"},
	{"the running program's /proc/PID/exe", "git -c alias.x='!/proc/$PPID/exe --version' x"},
	{"reading /proc/PID/exe", "git -c alias.x='!cat /proc/$PPID/exe > ./g4 && chmod +x ./g4 && ./g4 --version' x"},
}

func TestCommandRules(t *testing.T) {
	r := newRoot(t)
	ws := tempDir(t)
	id := r.create("rules", r.policy(rulesPolicy), ws)
	r.sh(id, `cd /workspace && git init -q --bare bare.git && git init -q r && cd r &&
		git -c user.email=a@example.com -c user.name=a commit -q --allow-empty -m one && git remote add origin /workspace/bare.git`)
	exec := func(script string) sandboxResult {
		return r.exec(id, []string{"--cwd", "/workspace/r"}, "sh", "-c", script)
	}

	t.Run("allowed", func(t *testing.T) {
		// No rule matches: git runs as before, however started.
		for _, how := range startedBy {
			res := exec(strings.ReplaceAll(how.script, "ARGS", "--version"))
			if res.Exit != 0 || !strings.Contains(res.Stdout, "git version") {
				t.Errorf("%s: git --version: exit %d, stdout %q, stderr %q", how.name, res.Exit, res.Stdout, res.Stderr)
			}
		}
		// An allow more specific than the ask runs at once.
		start := time.Now()
		res := r.exec(id, []string{"--cwd", "/workspace/r"}, "git", "push", "--dry-run", "origin", "HEAD:dry")
		if res.Exit != 0 || strings.Contains(res.Stderr, "waiting") || time.Since(start) > 3*time.Second {
			t.Errorf("git push --dry-run: exit %d after %s, stderr %q", res.Exit, time.Since(start), res.Stderr)
		}
		if res := exec("sh -c 'git push --dry-run origin HEAD:dry'"); res.Exit != 0 || strings.Contains(res.Stderr, "waiting") {
			t.Errorf("git push --dry-run from a shell: exit %d, stderr %q", res.Exit, res.Stderr)
		}
	})

	t.Run("deny", func(t *testing.T) {
		rule := `denied by commands.deny "git config --global **"`
		if res := r.exec(id, nil, "git", "config", "--global", "user.name", "evil"); res.Exit != 126 || !singleLine(res.Stderr, rule) {
			t.Errorf("top level: exit %d, stderr %q", res.Exit, res.Stderr)
		}
		for _, how := range startedBy {
			res := exec(strings.ReplaceAll(how.script, "ARGS", "config --global user.name evil"))
			if res.Exit == 0 || !strings.Contains(res.Stderr, rule) {
				t.Errorf("%s: exit %d, stderr %q; want a refusal naming the rule", how.name, res.Exit, res.Stderr)
			}
		}
		// Nothing got through: no global configuration was written.
		if out := r.sh(id, `cat "$HOME/.gitconfig" 2>/dev/null; echo end`); out != "end\n" {
			t.Errorf("a denied git config wrote %q", out)
		}
		// git config without --global is no rule's: it runs.
		if res := exec("git config user.name fine && git config user.name"); res.Exit != 0 || res.Stdout != "fine\n" {
			t.Errorf("git config (local): exit %d, stdout %q, stderr %q", res.Exit, res.Stdout, res.Stderr)
		}
	})

	t.Run("not run", func(t *testing.T) {
		for _, how := range notRun {
			res := exec(how.script)
			if res.Exit == 0 || strings.Contains(res.Stdout, "git version") {
				t.Errorf("%s: exit %d, stdout %q, stderr %q; want git not to run", how.name, res.Exit, res.Stdout, res.Stderr)
			}
		}
	})

	t.Run("no code loaded into the program", func(t *testing.T) {
		// exec.workspace lets the sandbox build a library; loaded into the
		// real git it could read git's bytes out of its memory. The loader
		// variables never reach a ruled program (they reach others: the
		// control line shows the library works).
		r.sh(id, `cd /workspace && printf '#include <unistd.h>\n__attribute__((constructor)) static void f(void) { write(2, "INJECTED\\n", 9); }\n' > x.c && gcc -shared -fPIC -o x.so x.c`)
		if res := exec("LD_PRELOAD=/workspace/x.so /usr/bin/env true"); !strings.Contains(res.Stderr, "INJECTED") {
			t.Fatalf("the control: the library was not loaded into env: exit %d, stderr %q", res.Exit, res.Stderr)
		}
		for _, script := range []string{"LD_PRELOAD=/workspace/x.so git --version", "env LD_AUDIT=/workspace/x.so LD_PRELOAD=/workspace/x.so git --version"} {
			if res := exec(script); res.Exit != 0 || strings.Contains(res.Stderr, "INJECTED") || !strings.Contains(res.Stdout, "git version") {
				t.Errorf("%s: exit %d, stdout %q, stderr %q", script, res.Exit, res.Stdout, res.Stderr)
			}
		}
	})

	t.Run("ask", func(t *testing.T) {
		// Every way of starting it waits in the queue; denied, it exits 126.
		for i, how := range startedBy {
			script := strings.ReplaceAll(how.script, "ARGS", "push origin HEAD:b"+string(rune('a'+i)))
			bg, stderr := r.background(id, script)
			a, ok := r.waitApproval(t, id, "push")
			if !ok {
				t.Errorf("%s: the push did not wait for an answer", how.name)
				continue
			}
			if a.Rule != `commands.ask "git push **"` || a.Cwd != "/workspace/r" || a.Session != id || a.Policy != "rules" || a.Since.IsZero() {
				t.Errorf("%s: listed as %+v", how.name, a)
			}
			if res := r.warden("approvals", "deny", a.ID, "--reason", "not now"); res.Exit != 0 {
				t.Fatalf("approvals deny: exit %d, stderr %q", res.Exit, res.Stderr)
			}
			err := bg.Wait()
			if code := exitCode(err); code == 0 || !strings.Contains(stderr.String(), "waiting for approval "+a.ID) ||
				!strings.Contains(stderr.String(), `(commands.ask "git push **", denied by uid 0: not now)`) {
				t.Errorf("%s: exit %d, stderr %q", how.name, code, stderr.String())
			}
		}
		if out, err := hostRun("git", "--git-dir", filepath.Join(ws, "bare.git"), "branch", "--list"); err != nil || strings.TrimSpace(out) != "" {
			t.Errorf("a denied push pushed: %q %v", out, err)
		}
	})

	t.Run("approve", func(t *testing.T) {
		// Top level, then from a shell: approved, the push runs and its
		// caller gets its output.
		for _, argv := range [][]string{{"git", "push", "origin", "HEAD:main"}, {"sh", "-c", "git push origin HEAD:second; echo pushed $?"}} {
			cmd := r.command(append([]string{"exec", "--session", id, "--cwd", "/workspace/r", "--"}, argv...)...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			a, ok := r.waitApproval(t, id, "push")
			if !ok {
				t.FailNow()
			}
			if wantParent := argv[0] == "sh"; (a.Parent != "") != wantParent {
				t.Errorf("%v: parent %q", argv, a.Parent)
			}
			if res := r.warden("approvals", "approve", a.ID); res.Exit != 0 || res.Stdout != a.ID+" approved\n" {
				t.Fatalf("approvals approve: exit %d, stdout %q, stderr %q", res.Exit, res.Stdout, res.Stderr)
			}
			err := cmd.Wait()
			if exitCode(err) != 0 || !strings.Contains(stderr.String(), "[new branch]") || argv[0] == "sh" && stdout.String() != "pushed 0\n" {
				t.Errorf("%v approved: exit %d, stdout %q, stderr %q", argv, exitCode(err), stdout.String(), stderr.String())
			}
		}
		out, err := hostRun("git", "--git-dir", filepath.Join(ws, "bare.git"), "branch", "--list")
		if err != nil || !strings.Contains(out, "main") || !strings.Contains(out, "second") {
			t.Errorf("approved pushes did not land: %q %v", out, err)
		}
		if res := r.warden("approvals", "approve", "ap-0000000000"); res.Exit != 125 || !singleLine(res.Stderr, "waits for nothing") {
			t.Errorf("approve of an unknown id: exit %d, stderr %q", res.Exit, res.Stderr)
		}
	})

	t.Run("timeout", func(t *testing.T) {
		start := time.Now()
		res := r.exec(id, []string{"--cwd", "/workspace/r"}, "sh", "-c", "git push origin HEAD:late")
		if res.Exit != 126 || !strings.Contains(res.Stderr, `(commands.ask "git push **", no answer within 4s)`) || time.Since(start) < 4*time.Second {
			t.Errorf("unanswered: exit %d after %s, stderr %q", res.Exit, time.Since(start), res.Stderr)
		}
	})

	t.Run("audit", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join(r.root, "audit.log"))
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var rec struct {
				Event, Session, Rule, Decision, Approval, Reason string
				UID                                              *int
				Time                                             time.Time
			}
			json.Unmarshal([]byte(line), &rec)
			if rec.Event != "command" {
				continue
			}
			seen[rec.Decision]++
			answered := rec.Decision == "approved" || rec.Decision == "denied"
			if rec.Session != id || rec.Rule == "" || rec.Time.IsZero() || answered && (rec.UID == nil || *rec.UID != 0 || rec.Approval == "") {
				t.Errorf("audit line %s", line)
			}
		}
		if seen["deny"] < len(startedBy)+1 || seen["denied"] != len(startedBy) || seen["approved"] != 2 || seen["timeout"] != 1 || seen["allow"] < 2 {
			t.Errorf("decisions in the audit log: %v", seen)
		}
	})

	t.Run("flood", func(t *testing.T) {
		// A sandbox cannot flood the queue: past 32 waiting, an ask is
		// refused at once.
		bg, stderr := r.background(id, "for i in $(seq 40); do git push origin HEAD:f$i & done; wait")
		deadline := time.Now().Add(10 * time.Second)
		var listed []approvalInfo
		for time.Now().Before(deadline) && len(listed) < 32 {
			json.Unmarshal([]byte(r.warden("approvals", "ls", "--format", "json").Stdout), &listed)
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(200 * time.Millisecond)
		json.Unmarshal([]byte(r.warden("approvals", "ls", "--format", "json").Stdout), &listed)
		bg.Wait()
		if len(listed) != 32 || strings.Count(stderr.String(), "more than 32 commands of the session wait for approval") != 8 {
			t.Errorf("40 asks at once: %d listed, stderr %q", len(listed), stderr.String())
		}
	})
	if res := r.warden("approvals", "ls"); res.Exit != 0 || strings.Count(res.Stdout, "\n") != 1 {
		t.Errorf("approvals left waiting: %q", res.Stdout)
	}
}

// TestCommandRulesExecAllow: under exec.allow, the rules hold at the
// allowed program's one place, and git's other copy stays unreadable.
func TestCommandRulesExecAllow(t *testing.T) {
	r := newRoot(t)
	id := r.create("rules-allow", r.policy(`name = "rules-allow"
[exec]
allow = ["git", "sh", "cat"]
[commands]
deny = ["git config --global **"]
`), tempDir(t))
	for _, script := range []string{"git config --global a.b c", "/usr/bin/git config --global a.b c", "/lib64/ld-linux-x86-64.so.2 /usr/bin/git config --global a.b c"} {
		if res := r.exec(id, nil, "sh", "-c", script); res.Exit == 0 || !strings.Contains(res.Stderr, "denied by commands.deny") {
			t.Errorf("%s: exit %d, stderr %q", script, res.Exit, res.Stderr)
		}
	}
	if res := r.exec(id, nil, "sh", "-c", "git --version"); res.Exit != 0 || !strings.Contains(res.Stdout, "git version") {
		t.Errorf("git --version: exit %d, stdout %q, stderr %q", res.Exit, res.Stdout, res.Stderr)
	}
	if res := r.exec(id, nil, "cat", "/usr/lib/git-core/git"); res.Exit == 0 {
		t.Errorf("git's other copy is readable under exec.allow")
	}
}

// background starts a script in a session, its stderr collected.
func (r *wardenRoot) background(id, script string) (*exec.Cmd, *bytes.Buffer) {
	r.t.Helper()
	return r.backgroundIn(id, "/workspace/r", script)
}

// backgroundIn starts a script in a session's folder cwd.
func (r *wardenRoot) backgroundIn(id, cwd, script string) (*exec.Cmd, *bytes.Buffer) {
	r.t.Helper()
	cmd := r.command("exec", "--session", id, "--cwd", cwd, "--", "sh", "-c", script)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, &stderr
}

type approvalInfo struct {
	ID, Session, Policy, Cwd, Parent, Rule string
	Argv                                   []string
	Since                                  time.Time
}

// waitApproval waits until one command of session id whose argv holds
// word is listed by `warden approvals ls`; false when none is within 5s.
func (r *wardenRoot) waitApproval(t *testing.T, id, word string) (approvalInfo, bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		res := r.warden("approvals", "ls", "--format", "json")
		var list []approvalInfo
		if err := json.Unmarshal([]byte(res.Stdout), &list); err != nil {
			t.Fatalf("approvals ls: %v: %q %q", err, res.Stdout, res.Stderr)
		}
		for _, a := range list {
			if a.Session == id && strings.Contains(strings.Join(a.Argv, " "), word) {
				return a, true
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("no approval for %q listed within 5s", word)
	return approvalInfo{}, false
}

func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// singleLine: s is one line holding want.
func singleLine(s, want string) bool {
	return strings.Count(s, "\n") == 1 && strings.HasSuffix(s, "\n") && strings.Contains(s, want)
}

// hostRun runs a host command.
func hostRun(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}

// TestCommandRulesPoolAndRestart: a session claimed from a warm pool holds
// the rules, and so does one a restarted daemon adopted (it opens the
// rules channel again); an ask waiting when the daemon dies is refused.
func TestCommandRulesPoolAndRestart(t *testing.T) {
	r := newRoot(t)
	policy := r.policy(rulesPolicy)
	if res := r.warden("pool", "fill", "--policy", policy, "--size", "1"); res.Exit != 0 {
		t.Fatalf("pool fill: exit %d, stderr %q", res.Exit, res.Stderr)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(r.warden("pool", "status").Stdout, " 1 ") && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	ws := tempDir(t)
	id := r.create("rules-pooled", policy, ws)
	if ls := r.warden("session", "ls", "--format", "json").Stdout; !strings.Contains(ls, `"pool": "`) {
		t.Fatalf("the session was not claimed from the pool: %s", ls)
	}
	check := func(when string) {
		t.Helper()
		if res := r.exec(id, nil, "sh", "-c", "git config --global a.b c"); res.Exit != 126 || !strings.Contains(res.Stderr, "denied by commands.deny") {
			t.Errorf("%s: git config --global: exit %d, stderr %q", when, res.Exit, res.Stderr)
		}
		if res := r.exec(id, nil, "sh", "-c", "git --version"); res.Exit != 0 || !strings.Contains(res.Stdout, "git version") {
			t.Errorf("%s: git --version: exit %d, stdout %q, stderr %q", when, res.Exit, res.Stdout, res.Stderr)
		}
	}
	check("claimed from the pool")

	// A push waiting in the background, detached from any caller: when
	// the daemon dies nobody can answer it, and it is refused.
	r.sh(id, "setsid sh -c 'git push /nowhere HEAD 2>/workspace/push.err; echo $? >/workspace/push.exit' </dev/null >/dev/null 2>&1 &")
	if _, ok := r.waitApproval(t, id, "push"); !ok {
		t.FailNow()
	}
	r.killDaemon(syscall.SIGKILL)
	deadline = time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if data, _ := os.ReadFile(filepath.Join(ws, "push.exit")); len(data) > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	exit, _ := os.ReadFile(filepath.Join(ws, "push.exit"))
	msg, _ := os.ReadFile(filepath.Join(ws, "push.err"))
	if string(exit) != "126\n" || !strings.Contains(string(msg), "warden stopped answering for this session's command rules") {
		t.Errorf("an ask waiting when the daemon died: exit %q, stderr %q", exit, msg)
	}
	r.warden("pool", "drain") // starts the daemon again, which adopts the session
	check("adopted by a restarted daemon")
}
