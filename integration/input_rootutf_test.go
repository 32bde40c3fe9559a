package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const inputPolicy = `name = "input-test"
[fs]
write = ["$WORK_DIR"]
[exec]
allow = ["rm", "ls", "true", "sleep"]
[env]
allow = ["LANG"]
[limits]
timeout = "30s"
`

// TestExecMissingCwd: a working folder that does not exist is named as the
// reason the command cannot run (126), not reported as a missing command.
func TestExecMissingCwd(t *testing.T) {
	r := newRoot(t)
	ws := tempDir(t)
	os.Mkdir(filepath.Join(ws, "sub"), 0o755)
	policy := r.policy(inputPolicy)
	id := r.create("cwd", policy, ws)
	expectOK(t, r.exec(id, []string{"--cwd", "sub"}, "ls"))
	for _, mode := range []string{"on", "off"} {
		cmd := r.command("exec", "--session", id, "--cwd", "nosub", "--", "ls")
		cmd.Env = append(cmd.Env, "WARDEN_FASTPATH="+mode)
		res := runCmd(t, cmd)
		if res.Exit != 126 || strings.TrimSpace(res.Stderr) != "warden: working folder /workspace/nosub does not exist in the sandbox; create it first or pass another --cwd" {
			t.Errorf("fast path %s: exit %d, stderr %q", mode, res.Exit, res.Stderr)
		}
	}
	res := r.warden("do", "--policy", policy, "--workspace", ws, "--cwd", "nosub", "--", "ls")
	if res.Exit != 126 || !strings.Contains(res.Stderr, "working folder /workspace/nosub does not exist") {
		t.Errorf("do: exit %d, stderr %q", res.Exit, res.Stderr)
	}
}
