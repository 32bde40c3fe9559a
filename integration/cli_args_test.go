package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCLIArgsEnvCommas: an --env value holding commas (a list, JSON) and
// spaces reaches the command as written, through exec's fast path, exec's
// Go CLI and do.
func TestCLIArgsEnvCommas(t *testing.T) {
	r := newRoot(t)
	ws := tempDir(t)
	policy := r.policy(sessionPolicy)
	id := r.create("env", policy, ws)
	const value = ` a,b {"k": [1, 2]} `
	const script = `printf '[%s]' "$LANG"`
	for _, mode := range []string{"on", "off"} {
		cmd := r.command("exec", "--session", id, "--env", "LANG="+value, "--", "sh", "-c", script)
		cmd.Env = append(cmd.Env, "WARDEN_FASTPATH="+mode, "GODEBUG=inittrace=1")
		res := runCmd(t, cmd)
		if res.Exit != 0 || res.Stdout != "["+value+"]" {
			t.Errorf("exec --env (fast path %s): exit %d, stdout %q, stderr %q", mode, res.Exit, res.Stdout, withoutInitTrace(res.Stderr))
		}
		if goStarted(res.Stderr) != (mode == "off") {
			t.Errorf("exec --env (fast path %s): Go runtime started: %v", mode, goStarted(res.Stderr))
		}
	}
	res := r.warden("do", "--policy", policy, "--workspace", ws, "-e", "LANG="+value, "--", "sh", "-c", script)
	if res.Exit != 0 || res.Stdout != "["+value+"]" {
		t.Errorf("do -e: exit %d, stdout %q, stderr %q", res.Exit, res.Stdout, res.Stderr)
	}
}

// TestCLIArgsListVariables: the operator's lists in the environment
// (WARDEN_BIND_ALLOW) are comma-separated; a flag's value is one pattern,
// commas and all.
func TestCLIArgsListVariables(t *testing.T) {
	dir := tempDir(t)
	for _, c := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"variable", []string{"PATH=/usr/bin:/bin", "WARDEN_BIND_ALLOW=/a/*, /b/*"}, nil, `"--bind-allow", "/a/*", "--bind-allow", "/b/*"`},
		{"flag", []string{"PATH=/usr/bin:/bin", "WARDEN_BIND_ALLOW=/c/*"}, []string{"--bind-allow", "/a/x,y", "--bind-allow", "/b/*"}, `"--bind-allow", "/a/x,y", "--bind-allow", "/b/*"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			daemonJSON := writeFile(t, dir, c.name+".json", "{}\n")
			args := append(c.args, "--policy", examplePath("inspector"), "install", "docker", "--config", daemonJSON)
			expectOK(t, runWarden(t, c.env, args...))
			data, _ := os.ReadFile(daemonJSON)
			if got := strings.Join(strings.Fields(string(data)), " "); !strings.Contains(got, c.want) {
				t.Errorf("daemon.json: %s\nwant %s", data, c.want)
			}
		})
	}
}

// TestCLIArgsShortFlagsAfterFile: short names of flags given after the
// file count as the long ones do.
func TestCLIArgsShortFlagsAfterFile(t *testing.T) {
	dir := tempDir(t)
	out := filepath.Join(dir, "out.toml")
	skill, _ := filepath.Abs(filepath.Join("..", "policies", "testdata", "web_fetch.SKILL.md"))
	res := runWarden(t, nil, "policy", "import", skill, "-o", out)
	expectOK(t, res)
	if data, err := os.ReadFile(out); err != nil || !strings.Contains(string(data), `name = "web-fetch"`) || res.Stdout != "" {
		t.Errorf("policy import -o: file %q (%v), stdout %q", data, err, res.Stdout)
	}
	ws := filepath.Join(dir, "ws")
	os.Mkdir(ws, 0o755)
	res = runWarden(t, nil, "policy", "explain", examplePath("web-fetch"), "-w", ws)
	expectOK(t, res)
	if !strings.Contains(res.Stdout, ws) {
		t.Errorf("policy explain -w %s: the workspace is not in\n%s", ws, res.Stdout)
	}
}

// TestCLIArgsDaemonConfigError: a daemon the CLI starts that refuses its
// configuration file is reported at once, in one line naming the key and
// the valid ones; daemon.log keeps the error as a line of its own.
func TestCLIArgsDaemonConfigError(t *testing.T) {
	for _, c := range []struct{ name, config, want string }{
		{"top", "bogus = 1\n", `unknown key "bogus"; valid: cgroup_favordynmods`},
		{"pool", "[[pool]]\nbogus = 1\n", `pool 1: unknown key "bogus"; valid: policy, size, skill_dir, home`},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := filepath.Join(tempDir(t), "root")
			os.Mkdir(root, 0o711)
			writeFile(t, root, "config.toml", c.config)
			start := time.Now()
			res := runWarden(t, nil, "--root", root, "session", "ls")
			expectFailure(t, res, "the warden daemon did not start: config "+filepath.Join(root, "config.toml"), c.want)
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("took %s to report it", took)
			}
			if data, _ := os.ReadFile(filepath.Join(root, "daemon.log")); !strings.Contains(string(data), c.want) || !strings.HasSuffix(string(data), "\n") {
				t.Errorf("daemon.log: %q", data)
			}
		})
	}
}

// TestCLIArgsSkillAsPolicy: a SKILL.md given where a policy belongs is
// named as one, with the command that converts it, and nothing runs.
func TestCLIArgsSkillAsPolicy(t *testing.T) {
	dir := tempDir(t)
	skill := writeFile(t, dir, "SKILL.md", "---\nname: x\npermissions:\n  exec: [sh]\n---\n# X\n")
	want := "a SKILL.md, not a warden policy (TOML); convert it first: warden policy import " + skill + " -o policy.toml"
	expectFailure(t, runWarden(t, nil, "policy", "check", skill), want)
	root := filepath.Join(dir, "root")
	expectFailure(t, runWarden(t, nil, "--root", root, "do", "-p", skill, "--", "sh", "-c", "true"), want)
	assertAbsent(t, root)
}

// TestCLIArgsFlagErrors: a bad flag value names the flag as it is typed,
// the value and the format wanted, in one line.
func TestCLIArgsFlagErrors(t *testing.T) {
	root := filepath.Join(tempDir(t), "root")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"exec", "--session", "s", "--timeout", "abc", "--", "true"}, `--timeout "abc": not a duration; use e.g. 30s, 5m; see 'warden exec --help'`},
		{[]string{"do", "--timeout", "5", "-p", "x", "--", "true"}, `--timeout "5": not a duration; use e.g. 30s, 5m; see 'warden do --help'`},
		{[]string{"session", "ls", "--bogus"}, "unknown flag --bogus; see 'warden session ls --help'"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			expectFailure(t, runWarden(t, nil, append([]string{"--root", root}, c.args...)...), c.want)
		})
	}
	assertAbsent(t, root)
}

// TestCLIArgsAfterDashes: after "--" every argument is positional, right
// after the command too (where the CLI library swallows the "--"); --help
// after the arguments shows the help and runs nothing; ---flag is bad
// syntax. A session named by a flag is refused and the real one stays.
func TestCLIArgsAfterDashes(t *testing.T) {
	r := newRoot(t)
	ws := tempDir(t)
	p := r.policy(sessionPolicy)
	id := r.create("dashes", p, ws)
	for _, args := range [][]string{{"--", "--force"}, {"--", "-f=true"}} {
		res := r.warden(append([]string{"session", "rm"}, args...)...)
		oneLine(t, "session rm "+strings.Join(args, " "), res, `session id "`+args[1]+`"`)
	}
	for _, h := range []string{"--help", "-h"} {
		if res := r.warden("session", "rm", id, h); res.Exit != 0 || !strings.Contains(res.Stdout, "USAGE:\n   warden session rm") {
			t.Errorf("session rm ID %s: exit %d, stdout %q, stderr %q", h, res.Exit, res.Stdout, res.Stderr)
		}
	}
	if l := r.list(); len(l) != 1 || l[0].ID != id {
		t.Fatalf("sessions after the refused removals: %+v", l)
	}
	if res := r.warden("session", "rm", "--", id); res.Exit != 0 {
		t.Errorf("session rm -- %s: exit %d, stderr %q", id, res.Exit, res.Stderr)
	}
	if l := r.list(); len(l) != 0 {
		t.Errorf("session rm -- %s left %+v", id, l)
	}

	dash := filepath.Join(filepath.Dir(p), "-dash.toml")
	if err := os.Rename(p, dash); err != nil {
		t.Fatal(err)
	}
	explain := exec.Command(wardenBinary, "policy", "explain", "-w", ws, "--", "-dash.toml")
	explain.Dir = filepath.Dir(dash)
	if res := runCmd(t, explain); res.Exit != 0 || !strings.HasPrefix(res.Stdout, "policy session-test") {
		t.Errorf("policy explain -- -dash.toml: exit %d, stdout %q, stderr %q", res.Exit, res.Stdout, res.Stderr)
	}
	for _, h := range []string{"--help", "-h"} {
		res := runWarden(t, nil, "policy", "explain", dash, h)
		if res.Exit != 0 || !strings.Contains(res.Stdout, "USAGE:\n   warden policy explain") || strings.Contains(res.Stdout, "session-test") {
			t.Errorf("policy explain FILE %s: exit %d, stdout %q, stderr %q", h, res.Exit, res.Stdout, res.Stderr)
		}
	}
	oneLine(t, "policy explain FILE ---workspace", runWarden(t, nil, "policy", "explain", "-w", ws, dash, "---workspace=x"), "bad flag syntax: ---workspace=x")
}
