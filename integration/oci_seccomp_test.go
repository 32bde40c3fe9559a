package integration

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Under a policy a container's first process loads the policy's seccomp
// filter from the program warden compiled once for it, not compiled again
// by libcontainer in every start (runtime/oci/seccompexec.go). The test
// holds it to what libcontainer gives:
//   - the seccomp probe under `warden --policy run` answers every attempt
//     as in a session and as runc running the same tightened config, where
//     libcontainer's init compiles the profile itself: refusals refused,
//     the controls working;
//   - the first process is the command itself (its argv, no descriptor of
//     warden's), filtered; a process exec'd into the container is filtered
//     as libcontainer filters it (the config keeps the profile): the probe
//     again;
//   - so is a first process that is not the container's root;
//   - nothing is exec'd into the container before its first process has
//     started, and its filter's flags are libcontainer's;
//   - a create that died before the profile was back in the container's
//     state leaves a container exec refuses;
//   - a command that is not in the image fails create, as under runc, and
//     leaves no container;
//   - a warden binary of mode 0700, which the container's user may not
//     execute, is not made its first program;
//   - a cached program that is not a program is not loaded: the container
//     is filtered all the same (libcontainer compiles the profile).
func TestOCIPolicySeccompFirstProcess(t *testing.T) {
	o := newOCIEnv(t)
	probe := filepath.Join(tempDir(t), "probe")
	if out, err := exec.Command("gcc", "-static", "-O1", "-o", probe, "testdata/seccomp_probe.c").CombinedOutput(); err != nil {
		t.Fatalf("compiling the probe (needs gcc and libc6-dev): %v\n%s", err, out)
	}
	policy := filepath.Join(tempDir(t), "p.toml")
	if err := os.WriteFile(policy, []byte("name = \"p\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	probeBundle := func(id string) string {
		bundle := busyboxBundle(t, id, func(s *specs.Spec) { s.Process.Args = []string{"/bin/probe"} })
		data, err := os.ReadFile(probe)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bundle, "rootfs/bin/probe"), data, 0o755); err != nil {
			t.Fatal(err)
		}
		return bundle
	}
	runProbe := func(id string) map[string]string {
		t.Helper()
		r := o.warden(t, "--policy", policy, "run", "--bundle", probeBundle(id), id)
		if r.Exit != 0 {
			t.Fatalf("probe under warden --policy run: exit %d\n%s\n%s", r.Exit, r.Stdout, r.Stderr)
		}
		return probeLines(t, r.Stdout)
	}

	got := runProbe("scfirst-" + randomHex(4))
	if !maps.Equal(got, probeWant) {
		t.Errorf("the probe under warden --policy run:\n got %v\nwant %v", got, probeWant)
	}
	programs, _ := filepath.Glob(filepath.Join(o.root, "seccomp", "*.bpf"))
	if len(programs) != 1 {
		t.Fatalf("compiled programs in the root: %v, want one", programs)
	}
	id := "scrunc-" + randomHex(4)
	tightened := tightenedBundle(t, probeBundle(id), policy)
	out, err := exec.Command(runcBinary, "--root", tempDir(t), "run", "--bundle", tightened, id).CombinedOutput()
	if err != nil {
		t.Fatalf("the probe under runc, tightened config: %v\n%s", err, out)
	}
	if byRunc := probeLines(t, string(out)); !maps.Equal(got, byRunc) {
		t.Errorf("warden's program and libcontainer's decide differently:\nwarden %v\n runc  %v", got, byRunc)
	}

	id = "scexec-" + randomHex(4)
	bundle := probeBundle(id)
	var sp specs.Spec
	readJSON(t, filepath.Join(bundle, "config.json"), &sp)
	sp.Process.Args = []string{"sleep", "300"}
	writeJSON(t, filepath.Join(bundle, "config.json"), &sp)
	if r := o.warden(t, "--policy", policy, "create", "--bundle", bundle, id); r.Exit != 0 {
		t.Fatalf("create: %s", r.Stderr)
	}
	// Before it starts, nothing joins the first process.
	if r := o.warden(t, "exec", id, "true"); r.Exit == 0 || !strings.Contains(r.Stderr, "before it starts") {
		t.Errorf("exec before start: exit %d, stderr %q", r.Exit, r.Stderr)
	}
	if r := o.warden(t, "start", id); r.Exit != 0 {
		t.Fatalf("start: %s", r.Stderr)
	}
	o.waitStatus(t, id, "running")
	script := "grep Seccomp: /proc/1/status /proc/self/status; tr '\\0' ' ' < /proc/1/cmdline; echo; ls /proc/1/fd"
	r := o.warden(t, "exec", id, "sh", "-c", script)
	want := "/proc/1/status:Seccomp:\t2\n/proc/self/status:Seccomp:\t2\nsleep 300 \n0\n1\n2\n"
	if r.Exit != 0 || r.Stdout != want {
		t.Errorf("exec into the container: exit %d\n got %q\nwant %q\n%s", r.Exit, r.Stdout, want, r.Stderr)
	}
	// The filter's flags are libcontainer's (SPEC_ALLOW): the speculation
	// mitigations the first process has are an exec'd process's.
	r = o.warden(t, "exec", id, "sh", "-c", "grep Speculation_Store_Bypass: /proc/1/status; grep Speculation_Store_Bypass: /proc/self/status")
	if lines := strings.Split(strings.TrimSpace(r.Stdout), "\n"); r.Exit != 0 || len(lines) != 2 || lines[0] != lines[1] {
		t.Errorf("speculation mitigations, first and exec'd process: exit %d %q", r.Exit, r.Stdout)
	}
	if r = o.warden(t, "exec", id, "/bin/probe"); r.Exit != 0 || !maps.Equal(probeLines(t, r.Stdout), probeWant) {
		t.Errorf("the probe exec'd into the container: exit %d\n%s\n%s", r.Exit, r.Stdout, r.Stderr)
	}
	// A create that died between the init's start and putting the
	// profile back leaves a state without it: exec refuses the container.
	statePath := filepath.Join(o.root, "oci", id, "state.json")
	whole, err := os.ReadFile(statePath)
	if err != nil {
		t.Fatal(err)
	}
	var state map[string]any
	readJSON(t, statePath, &state)
	state["config"].(map[string]any)["seccomp"] = nil
	writeJSON(t, statePath, state)
	if r = o.warden(t, "exec", id, "touch", "/tmp/ran"); r.Exit == 0 || !strings.Contains(r.Stderr, "holds no seccomp profile") {
		t.Errorf("exec with no profile in the state: exit %d, stderr %q", r.Exit, r.Stderr)
	}
	if err := os.WriteFile(statePath, whole, 0o600); err != nil {
		t.Fatal(err)
	}
	if r = o.warden(t, "exec", id, "ls", "/tmp/ran"); r.Exit == 0 {
		t.Error("the refused exec ran")
	}
	o.warden(t, "delete", "--force", id)

	// A first process that is not the container's root starts the same way.
	id = "scuser-" + randomHex(4)
	r = o.warden(t, "--policy", policy, "run", "--bundle", busyboxBundle(t, id, func(s *specs.Spec) {
		s.Process.User = specs.User{UID: 1000, GID: 1000}
		s.Process.Args = []string{"sh", "-c", "id -u; grep Seccomp: /proc/self/status"}
	}), id)
	if r.Exit != 0 || r.Stdout != "1000\nSeccomp:\t2\n" {
		t.Errorf("as uid 1000: exit %d, stdout %q, stderr %q", r.Exit, r.Stdout, r.Stderr)
	}

	id = "scmissing-" + randomHex(4)
	r = o.warden(t, "--policy", policy, "run", "--bundle", busyboxBundle(t, id, func(s *specs.Spec) { s.Process.Args = []string{"no-such-command"} }), id)
	if r.Exit == 0 || !strings.Contains(r.Stderr, `"no-such-command": executable file not found in $PATH`) {
		t.Errorf("a command not in the image: exit %d, stderr %q", r.Exit, r.Stderr)
	}
	if ents, _ := os.ReadDir(filepath.Join(o.root, "oci")); len(ents) != 0 {
		t.Errorf("a failed create left %d containers", len(ents))
	}

	// A warden binary only root may execute cannot be the container's
	// first program: libcontainer loads the profile, uid 1000 runs.
	private := filepath.Join(tempDir(t), "warden")
	data, err := os.ReadFile(wardenBinary)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(private, data, 0o700); err != nil {
		t.Fatal(err)
	}
	privateRoot := tempDir(t)
	id = "scprivate-" + randomHex(4)
	out, err = exec.Command(private, "--root", privateRoot, "--policy", policy, "run", "--bundle", busyboxBundle(t, id, func(s *specs.Spec) {
		s.Process.User = specs.User{UID: 1000, GID: 1000}
		s.Process.Args = []string{"grep", "Seccomp:", "/proc/self/status"}
	}), id).CombinedOutput()
	if err != nil || string(out) != "Seccomp:\t2\n" {
		t.Errorf("a private warden binary, as uid 1000: %v %q", err, out)
	}
	if p, _ := filepath.Glob(filepath.Join(privateRoot, "seccomp", "*")); len(p) != 0 {
		t.Errorf("a private warden binary compiled a program for its first process: %v", p)
	}

	if err := os.WriteFile(programs[0], []byte("not a program"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := runProbe("scbroken-" + randomHex(4)); !maps.Equal(got, probeWant) {
		t.Errorf("with a broken cached program:\n got %v\nwant %v", got, probeWant)
	}
}
