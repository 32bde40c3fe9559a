package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
