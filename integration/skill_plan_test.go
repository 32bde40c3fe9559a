package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// planSkill is the front matter of the integration plan, as a skill author
// copies it.
const planSkill = `---
name: plan-skill
description: fetch and shape data
permissions:
  fs:
    read: ["$SKILL_DIR/**"]
    write: ["$WORK_DIR/**"]
  network:
    allow: ["*:443", "*:80"]
  exec: [curl, jq]
  env: [LANG]
---
# plan skill
`

// The plan's skill format works as written: DIR/** grants the folder (the
// session sees the skill's files and writes the workspace), a command
// string runs under exec: [curl, jq] and its shell can start only those,
// and "*:443" is accepted. Imports that would grant nothing silently (no
// permissions, a glob taken as a file name) and a program the host lacks
// are refused in one line.
func TestSkillPlanFormat(t *testing.T) {
	skill := tempDir(t)
	writeFile(t, skill, "SKILL.md", planSkill)
	writeFile(t, skill, "data.json", `{"a": 41}`+"\n")
	policy := filepath.Join(tempDir(t), "plan.toml")
	expectOK(t, runWarden(t, nil, "policy", "import", filepath.Join(skill, "SKILL.md"), "-o", policy))
	// The policy beside the skill's files: $SKILL_DIR is its folder.
	inSkill := filepath.Join(skill, "plan.toml")
	data, err := os.ReadFile(policy)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`read = ["$SKILL_DIR"]`, `write = ["$WORK_DIR"]`, `"*:443"`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("imported policy lacks %s:\n%s", want, data)
		}
	}
	os.WriteFile(inSkill, data, 0o644)
	expectOK(t, runWarden(t, nil, "policy", "check", inSkill))

	r := newRoot(t)
	ws := tempDir(t)
	id := r.id("plan")
	if res := r.warden("session", "create", "--policy", inSkill, "--workspace", ws, "--id", id); res.Exit != 0 {
		t.Fatalf("session create: %s", res.Stderr)
	}
	res := r.warden("exec", "--session", id, "--", "sh", "-c", `jq '.a + 1' /skill/data.json > /workspace/out.txt && read x < /workspace/out.txt && echo "got $x"`)
	if res.Exit != 0 || strings.TrimSpace(res.Stdout) != "got 42" {
		t.Fatalf("a command string under exec: [curl, jq]: exit %d, %q %q", res.Exit, res.Stdout, res.Stderr)
	}
	if out, err := os.ReadFile(filepath.Join(ws, "out.txt")); err != nil || strings.TrimSpace(string(out)) != "42" {
		t.Fatalf("the workspace on the host: %q, %v", out, err)
	}
	// The shell starts only the listed programs, however it is asked.
	for _, cmd := range []string{"cat /skill/data.json", "/bin/cat /skill/data.json", "env cat /skill/data.json", "busybox cat /skill/data.json"} {
		if res := r.warden("exec", "--session", id, "--", "sh", "-c", cmd); res.Exit != 126 && res.Exit != 127 || strings.Contains(res.Stdout, "41") {
			t.Errorf("%s from the shell: exit %d, %q %q; want it refused", cmd, res.Exit, res.Stdout, res.Stderr)
		}
	}
	if res := r.warden("exec", "--session", id, "--", "cat", "/skill/data.json"); res.Exit != 127 || strings.Contains(res.Stdout, "41") {
		t.Errorf("cat directly: exit %d, %q %q; want 127", res.Exit, res.Stdout, res.Stderr)
	}

	for name, tc := range map[string]struct{ front, want string }{
		"no permissions": {"---\nname: bare\ndescription: x\n---\n", "declares no permissions"},
		"a glob":         {"---\nname: globbed\npermissions:\n  fs:\n    read: [\"$SKILL_DIR/*.json\"]\n---\n", "no glob patterns"},
	} {
		dir := tempDir(t)
		out := filepath.Join(dir, "out.toml")
		res := runWarden(t, nil, "policy", "import", writeFile(t, dir, "SKILL.md", tc.front), "-o", out)
		if res.Exit != 125 || !strings.Contains(res.Stderr, tc.want) || strings.Count(res.Stderr, "\n") != 1 {
			t.Errorf("%s: exit %d, %q, want 125 and one line with %q", name, res.Exit, res.Stderr, tc.want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%s: a policy file was written", name)
		}
	}
	missing := writeFile(t, tempDir(t), "p.toml", "name = \"p\"\n[exec]\nallow = [\"curl\", \"warden-no-such-program\"]\n")
	expectFailure(t, runWarden(t, nil, "policy", "check", missing), `"warden-no-such-program" is not installed`)
}
