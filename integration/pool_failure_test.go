package integration

import (
	"os"
	"path/filepath"
	"testing"
)

// TestExecAllowUnderTmp: a program allowed from the host's /tmp cannot be
// placed in the sandbox (its /tmp is its own tmpfs): policy check, do and
// pool fill refuse it in one line saying so, and no pool is kept. A
// program outside /tmp runs.
func TestExecAllowUnderTmp(t *testing.T) {
	r := newRoot(t)
	dir, err := os.MkdirTemp("/tmp", "warden-pol-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	tool := filepath.Join(dir, "tool")
	data, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tool, data, 0o755); err != nil {
		t.Fatal(err)
	}
	policy := filepath.Join(dir, "policy.toml")
	if err := os.WriteFile(policy, []byte("name = \"tmp-tool\"\n[exec]\nallow = [\""+tool+"\", \"sh\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := `exec.allow "` + tool + `": /tmp inside the sandbox is its own tmpfs; install the program outside /tmp`
	oneLine(t, "policy check", r.warden("policy", "check", policy), want)
	oneLine(t, "policy explain", r.warden("policy", "explain", policy), want)
	oneLine(t, "do", r.warden("do", "--policy", policy, "--", tool), want)
	oneLine(t, "pool fill", r.warden("pool", "fill", "--policy", policy, "--size", "1"), want)
	if st := r.poolStatus(); len(st) != 0 {
		t.Errorf("a refused fill kept a pool: %+v", st)
	}
	// A program outside /tmp runs.
	if res := r.warden("do", "--policy", r.policy("name = \"tool\"\n[exec]\nallow = [\"/bin/true\"]\n"), "--", "/bin/true"); res.Exit != 0 {
		t.Errorf("do with a program outside /tmp: exit %d, stderr %q", res.Exit, res.Stderr)
	}
}
