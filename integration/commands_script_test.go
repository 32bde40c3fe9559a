package integration

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Command rules on a program that is a script (docs/policy.md#command-rules):
// npm is npm-cli.js, "#!/usr/bin/env node", reached through the symlink
// /usr/bin/npm, loading its package's files by relative paths. The rules
// hold however it is started; an allowed or approved call runs the real
// npm, which finds its files.

const scriptRulesPolicy = `name = "script-rules"
[fs]
write = ["$WORK_DIR"]
[exec]
workspace = true   # a copy in the workspace could run: it must not run npm
[commands]
deny = ["npm publish **", "npm version **"]
allow = ["npm publish --dry-run **"]
ask = ["npm pack **"]
timeout = "20s"
`

// npmStartedBy are the ways a sandboxed command could start npm; ARGS
// stands for its arguments.
var npmStartedBy = []struct{ name, script string }{
	{"sh -c", "npm ARGS"},
	{"a script", "echo 'npm ARGS' > /tmp/s.sh; sh /tmp/s.sh"},
	{"make", "printf 'all:\\n\\tnpm ARGS\\n' > /tmp/Makefile; make -s -f /tmp/Makefile"},
	{"env", "env npm ARGS"},
	{"xargs", "echo ARGS | xargs npm"},
	{"absolute path", "/usr/bin/npm ARGS"},
	{"the script's own path", `"$(readlink -f /usr/bin/npm)" ARGS`},
	{"a symlink to npm", "ln -sf /usr/bin/npm /tmp/l; /tmp/l ARGS"},
	{"a symlink to the script", `ln -sf "$(readlink -f /usr/bin/npm)" /tmp/l2; /tmp/l2 ARGS`},
	{"python execv", "python3 -c 'import os,sys; os.execv(\"/usr/bin/npm\", [\"npm\"] + sys.argv[1:])' ARGS"},
	{"bash exec -a", "bash -c 'exec -a other npm \"$@\"' x ARGS"},
	{"dynamic loader", "/lib64/ld-linux-x86-64.so.2 /usr/bin/npm ARGS"},
}

// npmText is where the script's text is readable in the sandbox.
const npmText = `"$(dirname "$(readlink -f /usr/bin/npm)")/.warden.$(basename "$(readlink -f /usr/bin/npm)")"`

// npmNotRun are ways to get npm running some other way: each must fail
// without running it.
var npmNotRun = []struct{ name, script string }{
	{"its text, executed", npmText + " --version"},
	{"its text, through a descriptor", "exec 3<" + npmText + "; /dev/fd/3 --version"},
	{"its text, through the loader", "/lib64/ld-linux-x86-64.so.2 " + npmText + " --version"},
	{"a copy of npm", "cp /usr/bin/npm /workspace/n && /workspace/n --version"},
	{"its text, copied", "cp " + npmText + " /workspace/x.js && chmod +x /workspace/x.js && /workspace/x.js --version"},
	{"node on the script's path", `node "$(readlink -f /usr/bin/npm)" --version`},
	{"binfmt_misc", "mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc && echo ':n:E::js::/usr/bin/node:' > /proc/sys/fs/binfmt_misc/register"},
	{"a user namespace", `unshare -Urm sh -c 'mount --bind ` + npmText + ` "$(readlink -f /usr/bin/npm)" && npm --version'`},
}

func TestCommandRulesScript(t *testing.T) {
	npmPath, err := exec.LookPath("npm")
	if err != nil {
		t.Fatal("npm is not installed on this host; run `make deps`")
	}
	want, err := hostRun(npmPath, "--version")
	if err != nil {
		t.Fatalf("npm --version on the host: %v: %s", err, want)
	}
	r := newRoot(t)
	ws := tempDir(t)
	pkg := filepath.Join(ws, "pkg")
	os.MkdirAll(pkg, 0o755)
	os.WriteFile(filepath.Join(pkg, "package.json"), []byte(`{"name": "warden-probe", "version": "1.2.3", "description": "probe"}`+"\n"), 0o644)
	os.WriteFile(filepath.Join(pkg, "index.js"), []byte("module.exports = 1\n"), 0o644)
	id := r.create("script-rules", r.policy(scriptRulesPolicy), ws)
	exec := func(script string) sandboxResult {
		return r.exec(id, []string{"--cwd", "/workspace/pkg"}, "sh", "-c", script)
	}
	tarball := filepath.Join(pkg, "warden-probe-1.2.3.tgz")
	unchanged := func(what string) {
		t.Helper()
		if data, _ := os.ReadFile(filepath.Join(pkg, "package.json")); !strings.Contains(string(data), `"1.2.3"`) {
			t.Errorf("%s: a denied npm version ran: %s", what, data)
		}
		if _, err := os.Stat(tarball); err == nil {
			t.Errorf("%s: a refused npm pack ran", what)
		}
	}

	t.Run("allowed", func(t *testing.T) {
		// No rule matches, or the allow does: the real npm runs and finds
		// its package's files, however it is started.
		for _, how := range npmStartedBy {
			res := exec(strings.ReplaceAll(how.script, "ARGS", "--version"))
			if res.Exit != 0 || res.Stdout != want {
				t.Errorf("%s: npm --version: exit %d, stdout %q (want %q), stderr %q", how.name, res.Exit, res.Stdout, want, res.Stderr)
			}
			res = exec(strings.ReplaceAll(how.script, "ARGS", "publish --dry-run --offline"))
			if res.Exit != 0 || !strings.Contains(res.Stdout, "+ warden-probe@1.2.3") || !strings.Contains(res.Stderr, "package size") {
				t.Errorf("%s: npm publish --dry-run: exit %d, stdout %q, stderr %q", how.name, res.Exit, res.Stdout, res.Stderr)
			}
		}
		res := r.exec(id, []string{"--cwd", "/workspace/pkg"}, "npm", "publish", "--dry-run", "--offline")
		if res.Exit != 0 || !strings.Contains(res.Stdout, "+ warden-probe@1.2.3") {
			t.Errorf("top level: npm publish --dry-run: exit %d, stdout %q, stderr %q", res.Exit, res.Stdout, res.Stderr)
		}
	})

	t.Run("deny", func(t *testing.T) {
		rule := `: denied by commands.deny "npm version **"`
		if res := r.exec(id, []string{"--cwd", "/workspace/pkg"}, "npm", "version", "patch", "--no-git-tag-version"); res.Exit != 126 ||
			!singleLine(res.Stderr, "warden: npm version patch --no-git-tag-version"+rule) {
			t.Errorf("top level: exit %d, stderr %q", res.Exit, res.Stderr)
		}
		for _, how := range npmStartedBy {
			res := exec(strings.ReplaceAll(how.script, "ARGS", "version patch --no-git-tag-version") + "; echo status $?")
			if !strings.Contains(res.Stderr, " version patch --no-git-tag-version"+rule) {
				t.Errorf("%s: exit %d, stderr %q; want a refusal naming the rule", how.name, res.Exit, res.Stderr)
			}
			// The shell passes on the stub's status; make and xargs
			// put their own on a failed command.
			if how.name != "make" && how.name != "xargs" && !strings.HasSuffix(res.Stdout, "status 126\n") {
				t.Errorf("%s: stdout %q; want status 126", how.name, res.Stdout)
			}
			res = exec(strings.ReplaceAll(how.script, "ARGS", "publish"))
			if res.Exit == 0 || !strings.Contains(res.Stderr, ` publish: denied by commands.deny "npm publish **"`) {
				t.Errorf("%s: npm publish: exit %d, stderr %q", how.name, res.Exit, res.Stderr)
			}
		}
		unchanged("deny")
	})

	t.Run("not run", func(t *testing.T) {
		for _, how := range npmNotRun {
			res := exec(how.script)
			if res.Exit == 0 || strings.Contains(res.Stdout, want) {
				t.Errorf("%s: exit %d, stdout %q, stderr %q; want npm not to run", how.name, res.Exit, res.Stdout, res.Stderr)
			}
		}
		// A copy of the stub says what it is.
		if res := exec("cp /usr/bin/npm /workspace/n && /workspace/n --version"); res.Exit != 126 || !strings.Contains(res.Stderr, "not a program warden's command rules know") {
			t.Errorf("a copy of the stub: exit %d, stderr %q", res.Exit, res.Stderr)
		}
		// The documented limit: an allowed interpreter reads the text
		// and runs it as npm would.
		if res := exec("node " + npmText + " --version"); res.Exit != 0 || res.Stdout != want {
			t.Errorf("node on the script's text: exit %d, stdout %q, stderr %q", res.Exit, res.Stdout, res.Stderr)
		}
	})

	t.Run("no code loaded into the interpreter", func(t *testing.T) {
		// As for a compiled ruled program, the loader's variables do not
		// reach the interpreter the agent starts (the control shows the
		// library works elsewhere).
		r.sh(id, `cd /workspace && printf '#include <unistd.h>\n__attribute__((constructor)) static void f(void) { write(2, "INJECTED\\n", 9); }\n' > x.c && gcc -shared -fPIC -o x.so x.c && rm x.c`)
		if res := exec("LD_PRELOAD=/workspace/x.so /usr/bin/env true"); !strings.Contains(res.Stderr, "INJECTED") {
			t.Fatalf("the control: the library was not loaded into env: exit %d, stderr %q", res.Exit, res.Stderr)
		}
		if res := exec("LD_PRELOAD=/workspace/x.so npm --version"); res.Exit != 0 || strings.Contains(res.Stderr, "INJECTED") || res.Stdout != want {
			t.Errorf("LD_PRELOAD npm --version: exit %d, stdout %q, stderr %q", res.Exit, res.Stdout, res.Stderr)
		}
		os.Remove(filepath.Join(ws, "x.so"))
	})

	t.Run("ask", func(t *testing.T) {
		// Every way of starting it waits in the queue; denied, it is
		// refused with its line and nothing runs.
		for _, how := range npmStartedBy {
			bg, stderr := r.backgroundIn(id, "/workspace/pkg", strings.ReplaceAll(how.script, "ARGS", "pack")+"; echo status $? >&2")
			a, ok := r.waitApproval(t, id, "pack")
			if !ok {
				t.Errorf("%s: npm pack did not wait for an answer", how.name)
				continue
			}
			if a.Rule != `commands.ask "npm pack **"` || a.Cwd != "/workspace/pkg" || a.Session != id {
				t.Errorf("%s: listed as %+v", how.name, a)
			}
			if res := r.warden("approvals", "deny", a.ID, "--reason", "not now"); res.Exit != 0 {
				t.Fatalf("approvals deny: exit %d, stderr %q", res.Exit, res.Stderr)
			}
			bg.Wait()
			if !strings.Contains(stderr.String(), "waiting for approval "+a.ID) ||
				!strings.Contains(stderr.String(), ` pack: refused (commands.ask "npm pack **", denied by uid 0: not now)`) ||
				how.name != "make" && how.name != "xargs" && !strings.HasSuffix(stderr.String(), "status 126\n") {
				t.Errorf("%s: stderr %q", how.name, stderr.String())
			}
		}
		unchanged("ask")
	})

	t.Run("approve", func(t *testing.T) {
		// Top level, then from a shell through the symlink: approved, the
		// real npm packs the package into the workspace.
		for _, argv := range [][]string{{"npm", "pack"}, {"sh", "-c", "/usr/bin/npm pack --pack-destination /workspace; echo packed $?"}} {
			os.Remove(tarball)
			cmd := r.command(append([]string{"exec", "--session", id, "--cwd", "/workspace/pkg", "--"}, argv...)...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			a, ok := r.waitApproval(t, id, "pack")
			if !ok {
				cmd.Process.Kill()
				cmd.Wait()
				t.FailNow()
			}
			if res := r.warden("approvals", "approve", a.ID); res.Exit != 0 {
				t.Fatalf("approvals approve: exit %d, stderr %q", res.Exit, res.Stderr)
			}
			err := cmd.Wait()
			if exitCode(err) != 0 || !strings.Contains(stdout.String(), "warden-probe-1.2.3.tgz") || argv[0] == "sh" && !strings.HasSuffix(stdout.String(), "packed 0\n") {
				t.Errorf("%v approved: exit %d, stdout %q, stderr %q", argv, exitCode(err), stdout.String(), stderr.String())
			}
			dest := tarball
			if argv[0] == "sh" {
				dest = filepath.Join(ws, "warden-probe-1.2.3.tgz")
			}
			if out, err := hostRun("tar", "-tzf", dest); err != nil || !strings.Contains(out, "package/index.js") {
				t.Errorf("%v approved: the tarball %s: %q %v", argv, dest, out, err)
			}
		}
	})
	if res := r.warden("approvals", "ls"); res.Exit != 0 || strings.Count(res.Stdout, "\n") != 1 {
		t.Errorf("approvals left waiting: %q", res.Stdout)
	}

	t.Run("adopted by a restarted daemon", func(t *testing.T) {
		// The new daemon hands the agent the script's interpreter line
		// again: npm still runs, and is still held.
		r.killDaemon(syscall.SIGKILL)
		r.warden("pool", "drain") // starts the daemon again, which adopts the session
		if res := exec("npm --version"); res.Exit != 0 || res.Stdout != want {
			t.Errorf("npm --version: exit %d, stdout %q, stderr %q", res.Exit, res.Stdout, res.Stderr)
		}
		if res := exec("/usr/bin/npm version patch --no-git-tag-version"); res.Exit != 126 || !strings.Contains(res.Stderr, `denied by commands.deny "npm version **"`) {
			t.Errorf("npm version: exit %d, stderr %q", res.Exit, res.Stderr)
		}
		unchanged("after the restart")
	})
}

// TestCommandRulesScriptExecAllow: under exec.allow the stub is npm's one
// allowed place, the script itself is read where it is, and runs only
// through the stub.
func TestCommandRulesScriptExecAllow(t *testing.T) {
	npmPath, err := exec.LookPath("npm")
	if err != nil {
		t.Fatal("npm is not installed on this host; run `make deps`")
	}
	script, err := filepath.EvalSymlinks(npmPath)
	if err != nil {
		t.Fatal(err)
	}
	r := newRoot(t)
	id := r.create("script-allow", r.policy(`name = "script-allow"
[exec]
allow = ["npm", "node", "env"]
[commands]
deny = ["npm publish **"]
`), tempDir(t))
	for _, script := range []string{"npm publish", "/usr/bin/npm publish", "/lib64/ld-linux-x86-64.so.2 /usr/bin/npm publish"} {
		if res := r.exec(id, nil, "sh", "-c", script); res.Exit != 126 || !strings.Contains(res.Stderr, `publish: denied by commands.deny "npm publish **"`) {
			t.Errorf("%s: exit %d, stderr %q", script, res.Exit, res.Stderr)
		}
	}
	if res := r.exec(id, nil, "sh", "-c", "npm --version"); res.Exit != 0 || !strings.Contains(res.Stdout, ".") {
		t.Errorf("npm --version: exit %d, stdout %q, stderr %q", res.Exit, res.Stdout, res.Stderr)
	}
	if res := r.exec(id, nil, "sh", "-c", script+" --version"); res.Exit != 126 || !strings.Contains(res.Stderr, "Permission denied") {
		t.Errorf("the script itself under exec.allow: exit %d, stdout %q, stderr %q", res.Exit, res.Stdout, res.Stderr)
	}
}

// TestCommandRulesSymlinkedProgram: a ruled program reached through a
// symlink (/usr/bin/python3 -> python3.11) is held where it really is:
// its allowed calls run by either name, a denied one is refused.
func TestCommandRulesSymlinkedProgram(t *testing.T) {
	if target, err := os.Readlink("/usr/bin/python3"); err != nil {
		t.Fatalf("this test wants /usr/bin/python3 to be a symlink, as Debian's is: %v", err)
	} else if !strings.HasPrefix(target, "python3.") {
		t.Fatalf("/usr/bin/python3 leads to %s", target)
	}
	r := newRoot(t)
	id := r.create("symlinked", r.policy("name = \"symlinked\"\n[commands]\ndeny = [\"python3 -c **\"]\n"), tempDir(t))
	for _, script := range []string{"python3 --version", `"$(readlink -f /usr/bin/python3)" --version`} {
		if res := r.exec(id, nil, "sh", "-c", script); res.Exit != 0 || !strings.HasPrefix(res.Stdout, "Python 3.") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", script, res.Exit, res.Stdout, res.Stderr)
		}
	}
	for _, script := range []string{"python3 -c 'print(1)'", `"$(readlink -f /usr/bin/python3)" -c 'print(1)'`} {
		if res := r.exec(id, nil, "sh", "-c", script); res.Exit != 126 || res.Stdout != "" || !strings.Contains(res.Stderr, `denied by commands.deny "python3 -c **"`) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", script, res.Exit, res.Stdout, res.Stderr)
		}
	}
}

// TestCommandRulesScriptInterpreter: rules on a ruled script's interpreter
// hold for the run of an allowed call too (the agent starts the
// interpreter as any program is started), and for the interpreter itself.
func TestCommandRulesScriptInterpreter(t *testing.T) {
	if _, err := exec.LookPath("npm"); err != nil {
		t.Fatal("npm is not installed on this host; run `make deps`")
	}
	r := newRoot(t)
	id := r.create("script-interp", r.policy(`name = "script-interp"
[commands]
deny = ["npm publish **", "node -e **", "node * access **"]
`), tempDir(t))
	if res := r.exec(id, nil, "sh", "-c", "npm --version"); res.Exit != 0 || !strings.Contains(res.Stdout, ".") {
		t.Errorf("npm --version: exit %d, stdout %q, stderr %q", res.Exit, res.Stdout, res.Stderr)
	}
	for script, rule := range map[string]string{
		"npm publish":     `denied by commands.deny "npm publish **"`,
		"node -e 1":       `node -e 1: denied by commands.deny "node -e **"`,
		"npm access list": `/.warden.npm-cli.js access list: denied by commands.deny "node * access **"`,
	} {
		if res := r.exec(id, nil, "sh", "-c", script); res.Exit != 126 || !strings.Contains(res.Stderr, rule) {
			t.Errorf("%s: exit %d, stderr %q; want %q", script, res.Exit, res.Stderr, rule)
		}
	}
}
