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

// A skill's own program runs directly when exec.allow names it under
// $SKILL_DIR: by its sandbox path, through $SKILL_DIR in a command string,
// and as ./process.sh from its folder given as a host path. The rest of the
// skill folder stays noexec and outside the exec rules, and a copy of the
// allowed program elsewhere does not run.
func TestSkillProgramRuns(t *testing.T) {
	r := newRoot(t)
	skill, policy := skillFolder(t, `name = "scripted"
[fs]
read = ["$SKILL_DIR"]
write = ["$WORK_DIR"]
[exec]
allow = ["$SKILL_DIR/scripts/process.sh", "cat", "cp", "chmod"]
`)
	writeFile(t, skill, "scripts/other.sh", "#!/bin/sh\necho other ran\n")
	os.Chmod(filepath.Join(skill, "scripts", "other.sh"), 0o755)
	id := r.create("scripted", policy, tempDir(t))

	if res := r.exec(id, nil, "/skill/scripts/process.sh", "a"); res.Exit != 0 || res.Stdout != "processed by /skill/scripts/process.sh in /workspace: a\n" {
		t.Errorf("direct run: exit %d, %q %q", res.Exit, res.Stdout, res.Stderr)
	}
	if got := r.sh(id, `"$SKILL_DIR/scripts/process.sh" b`); got != "processed by /skill/scripts/process.sh in /workspace: b\n" {
		t.Errorf("through $SKILL_DIR: %q", got)
	}
	if res := r.exec(id, []string{"--cwd", filepath.Join(skill, "scripts")}, "sh", "-c", "./process.sh c"); res.Exit != 0 || res.Stdout != "processed by ./process.sh in /skill/scripts: c\n" {
		t.Errorf("./process.sh from its host folder: exit %d, %q %q", res.Exit, res.Stdout, res.Stderr)
	}

	// The forbidden half.
	if res := r.exec(id, nil, "/skill/scripts/other.sh"); res.Exit == 0 || strings.Contains(res.Stdout, "other ran") {
		t.Errorf("an unlisted script of the skill ran: exit %d, %q", res.Exit, res.Stdout)
	}
	for _, script := range []string{
		`"$SKILL_DIR/scripts/other.sh"`,
		`cp "$SKILL_DIR/scripts/process.sh" /workspace/p && chmod +x /workspace/p && /workspace/p`,
		`cp "$SKILL_DIR/scripts/process.sh" /tmp/p && chmod +x /tmp/p && /tmp/p`,
	} {
		if res := r.exec(id, nil, "sh", "-c", script); res.Exit == 0 || strings.Contains(res.Stdout, "ran") || strings.Contains(res.Stdout, "processed") {
			t.Errorf("%s: exit %d, %q", script, res.Exit, res.Stdout)
		}
	}

	// A program the fs rules do not show is refused before anything starts,
	// and exec.allow takes no other variable.
	_, hidden := skillFolder(t, "name = \"hidden\"\n[exec]\nallow = [\"$SKILL_DIR/scripts/process.sh\"]\n")
	res := r.warden("session", "create", "--policy", hidden, "--workspace", tempDir(t), "--id", r.id("hidden"))
	if res.Exit == 0 || !strings.Contains(res.Stderr, "fs.read") {
		t.Errorf("a skill program without a read grant: exit %d, %q", res.Exit, res.Stderr)
	}
	_, work := skillFolder(t, "name = \"work\"\n[exec]\nallow = [\"$WORK_DIR/run.sh\"]\n")
	if res := r.warden("policy", "check", work); res.Exit == 0 || !strings.Contains(res.Stderr, "exec.allow[0]") || !strings.Contains(res.Stderr, "workspace = true") {
		t.Errorf("$WORK_DIR in exec.allow: exit %d, %q", res.Exit, res.Stderr)
	}
}

// Several skills in one sandbox each get their own folder: the first
// one's $SKILL_DIR is /skill, every other one's folder appears at its host
// path, and each policy's $SKILL_DIR rules name its own folder. What no
// skill grants stays invisible.
func TestSeveralSkills(t *testing.T) {
	r := newRoot(t)
	a, pa := skillFolder(t, "name = \"a\"\n[fs]\nread = [\"$SKILL_DIR\"]\nwrite = [\"$WORK_DIR\"]\n[exec]\nallow = [\"cat\"]\n")
	b, pb := skillFolder(t, "name = \"b\"\n[fs]\nread = [\"$SKILL_DIR/notes\"]\n[exec]\nallow = [\"cat\", \"ls\"]\n")
	writeFile(t, a, "note.txt", "note of a\n")
	os.MkdirAll(filepath.Join(b, "notes"), 0o755)
	writeFile(t, b, "notes/note.txt", "note of b\n")
	writeFile(t, b, "secret.txt", "not granted\n")
	ws := tempDir(t)
	res := r.warden("do", "--policy", pa, "--policy", pb, "--workspace", ws, "--", "sh", "-c",
		`cat "$SKILL_DIR/note.txt" /skill/note.txt `+filepath.Join(b, "notes", "note.txt")+`; echo "$SKILL_DIR"`)
	if res.Exit != 0 || res.Stdout != "note of a\nnote of a\nnote of b\n/skill\n" {
		t.Errorf("two skills: exit %d, %q %q", res.Exit, res.Stdout, res.Stderr)
	}
	for _, denied := range []string{filepath.Join(b, "secret.txt"), filepath.Join(b, "policy.toml"), "/skill/notes/note.txt"} {
		if res := r.warden("do", "--policy", pa, "--policy", pb, "--workspace", ws, "--", "cat", denied); res.Exit == 0 || strings.Contains(res.Stdout, "not granted") {
			t.Errorf("cat %s: exit %d, %q", denied, res.Exit, res.Stdout)
		}
	}
	// A second skill's own program cannot run from its folder: one clear
	// line, nothing runs.
	_, pc := skillFolder(t, "name = \"c\"\n[fs]\nread = [\"$SKILL_DIR\"]\n[exec]\nallow = [\"$SKILL_DIR/scripts/process.sh\"]\n")
	if res := r.warden("do", "--policy", pa, "--policy", pc, "--workspace", ws, "--", "true"); res.Exit == 0 || !strings.Contains(res.Stderr, "only the first skill") {
		t.Errorf("a second skill's program: exit %d, %q", res.Exit, res.Stderr)
	}
}
