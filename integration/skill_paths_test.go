package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// skillFolder makes a skill folder holding policy.toml and an executable
// scripts/process.sh, and returns the folder and the policy file.
func skillFolder(t *testing.T, policy string) (string, string) {
	t.Helper()
	dir := tempDir(t)
	os.MkdirAll(filepath.Join(dir, "scripts"), 0o755)
	writeFile(t, dir, "scripts/process.sh", "#!/bin/sh\necho processed by $0 in $(pwd): $*\n")
	os.Chmod(filepath.Join(dir, "scripts", "process.sh"), 0o755)
	return dir, writeFile(t, dir, "policy.toml", policy)
}

// The sandbox says where the policy's folders are: $WORK_DIR, $SKILL_DIR
// and $DATA_DIR hold their sandbox paths for a policy that grants them, and
// a host path inside one of them works as --cwd. A folder the policy does
// not grant has no variable, and a host path outside every grant is no
// working folder.
func TestSkillFolderPaths(t *testing.T) {
	r := newRoot(t)
	skill, policy := skillFolder(t, `name = "paths"
[fs]
read = ["$SKILL_DIR", "$DATA_DIR"]
write = ["$WORK_DIR"]
[exec]
allow = ["cat"]
`)
	ws, data := tempDir(t), tempDir(t)
	os.MkdirAll(filepath.Join(ws, "sub", "deeper"), 0o755)
	writeFile(t, data, "table.csv", "a,b\n")
	id := r.id("paths")
	if res := r.warden("session", "create", "--policy", policy, "--workspace", ws, "--data-dir", data, "--id", id); res.Exit != 0 {
		t.Fatalf("session create: %d %s", res.Exit, res.Stderr)
	}
	if got := r.sh(id, `echo "$WORK_DIR $SKILL_DIR $DATA_DIR"`); got != "/workspace /skill /data\n" {
		t.Errorf("folder variables: %q", got)
	}
	if got := r.sh(id, `cat "$SKILL_DIR/scripts/process.sh" "$DATA_DIR/table.csv" >/dev/null && echo read`); got != "read\n" {
		t.Errorf("reading through the variables: %q", got)
	}
	for _, c := range []struct{ cwd, want string }{
		{filepath.Join(ws, "sub", "deeper"), "/workspace/sub/deeper"},
		{ws, "/workspace"},
		{filepath.Join(skill, "scripts"), "/skill/scripts"},
		{data, "/data"},
		{"sub", "/workspace/sub"},
		{"/workspace/sub", "/workspace/sub"},
	} {
		res := r.exec(id, []string{"--cwd", c.cwd}, "sh", "-c", "pwd")
		if res.Exit != 0 || res.Stdout != c.want+"\n" {
			t.Errorf("--cwd %s: exit %d, %q %q; want %s", c.cwd, res.Exit, res.Stdout, res.Stderr, c.want)
		}
	}
	// The forbidden half: a host folder no grant shows is no working
	// folder, and is not quietly replaced by another.
	outside := tempDir(t)
	if res := r.exec(id, []string{"--cwd", outside}, "sh", "-c", "pwd"); res.Exit == 0 || res.Stdout != "" {
		t.Errorf("--cwd %s outside every grant: exit %d, %q", outside, res.Exit, res.Stdout)
	}

	// Folders given but not granted have no variable.
	_, bare := skillFolder(t, "name = \"bare\"\n[fs]\nwrite = [\"$WORK_DIR\"]\n")
	id2 := r.id("bare")
	if res := r.warden("session", "create", "--policy", bare, "--workspace", tempDir(t), "--data-dir", data, "--id", id2); res.Exit != 0 {
		t.Fatalf("session create: %d %s", res.Exit, res.Stderr)
	}
	if got := r.sh(id2, `echo "${WORK_DIR-unset} ${SKILL_DIR-unset} ${DATA_DIR-unset}"`); got != "/workspace unset unset\n" {
		t.Errorf("variables of a policy granting only the workspace: %q", got)
	}
	if res := r.exec(id2, []string{"--cwd", skill}, "sh", "-c", "pwd"); res.Exit == 0 || strings.Contains(res.Stdout, "/skill") {
		t.Errorf("--cwd into an ungranted skill folder: exit %d, %q", res.Exit, res.Stdout)
	}
}
