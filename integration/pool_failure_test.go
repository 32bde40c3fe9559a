package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
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

// TestPoolStartFailureBacksOff: a pool whose sandbox cannot start (here:
// the root's container state folder is immutable) fails the fill with the reason, says so
// in pool status, and retries less and less often instead of every
// second; a new fill once the cause is gone fills it at once.
func TestPoolStartFailureBacksOff(t *testing.T) {
	r := newRoot(t)
	policy := r.policy(poolPolicy)
	r.fill(policy, 0)
	// (not the pool folder: a fill whose pools.json cannot be written
	// fails before any start)
	poolDir := filepath.Join(r.root, "containers")
	if out, err := exec.Command("chattr", "+i", poolDir).CombinedOutput(); err != nil {
		t.Fatalf("chattr +i %s (the test needs an immutable folder): %v: %s", poolDir, err, out)
	}
	t.Cleanup(func() { exec.Command("chattr", "-i", poolDir).Run() })
	start := time.Now()
	oneLine(t, "pool fill of a pool that cannot start", r.warden("pool", "fill", "--policy", policy, "--size", "1"),
		"the first sandbox did not start", "operation not permitted")
	time.Sleep(6*time.Second - time.Since(start))
	st := r.poolStatus()
	if len(st) != 1 || st[0].Ready != 0 || !strings.Contains(st[0].Error, "operation not permitted") || !strings.Contains(st[0].Error, "failed starts in a row; next try in") {
		t.Errorf("pool status of a pool that cannot start: %+v", st)
	}
	log, _ := os.ReadFile(filepath.Join(r.root, "daemon.log"))
	if n := strings.Count(string(log), "operation not permitted"); n < 2 || n > 4 {
		t.Errorf("%d failed starts logged in 6 s, want 2-4 (1 s, 2 s, 4 s apart):\n%s", n, log)
	}
	if out, err := exec.Command("chattr", "-i", poolDir).CombinedOutput(); err != nil {
		t.Fatalf("chattr -i: %v: %s", err, out)
	}
	r.fill(policy, 1)
	if st := r.poolStatus(); len(st) != 1 || st[0].Ready != 1 || st[0].Error != "" {
		t.Errorf("pool after the cause is gone and a new fill: %+v", st)
	}
}

// TestPoolMismatchBacksOff: a pool whose skill folder moves away after the
// fill starts sandboxes that no longer match it. That counts as a failed
// start, said in pool status and backed off, not a sandbox thrown away
// and started again at once, forever.
func TestPoolMismatchBacksOff(t *testing.T) {
	r := newRoot(t)
	skill := tempDir(t)
	policy := r.policy("name = \"moved\"\n[fs]\nread = [\"$SKILL_DIR\"]\nwrite = [\"$WORK_DIR\"]\n[exec]\nallow = [\"sh\"]\n")
	if res := r.warden("pool", "fill", "--policy", policy, "--size", "1", "--skill-dir", skill); res.Exit != 0 {
		t.Fatalf("pool fill: exit %d: %s", res.Exit, res.Stderr)
	}
	r.waitPool(1)
	// A claim makes the pool refill; the folder goes meanwhile.
	if res := r.warden("session", "create", "--policy", policy, "--workspace", tempDir(t), "--skill-dir", skill); res.Exit != 0 {
		t.Fatalf("session create: exit %d: %s", res.Exit, res.Stderr)
	}
	moved := skill + ".moved"
	if err := os.Rename(skill, moved); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Rename(moved, skill) })
	time.Sleep(4 * time.Second)
	st := r.poolStatus()
	if len(st) != 1 || !strings.Contains(st[0].Error, "no longer matches the pool") {
		t.Fatalf("pool status after the skill folder moved: %+v; want the mismatch as its error", st)
	}
	log, _ := os.ReadFile(filepath.Join(r.root, "daemon.log"))
	if n := strings.Count(string(log), "no longer matches the pool"); n < 1 || n > 4 {
		t.Errorf("%d failed starts logged in 4 s, want 1 to 4 (backed off):\n%s", n, log)
	}
}
