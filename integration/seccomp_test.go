package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Results the seccomp probe prints.
const (
	probeEPERM  = "errno=1"
	probeENOSYS = "errno=38"
	probeEAFNO  = "errno=97"
	probeOK     = "errno=0"
	probeSIGSYS = "signal=31"
)

// probeWant is what each line of testdata/seccomp_probe.c must report inside
// the sandbox, keyed "FAMILY NAME". Where the seccomp filter decides, the
// errno is the filter's: EPERM for the denied families, clone with
// CLONE_NEW* flags and refused personalities (as Docker), EAFNOSUPPORT for
// refused socket families (as the kernel for a family it lacks), ENOSYS for
// what the allow list merely leaves out; i386 and x32 entry kill the caller.
var probeWant = map[string]string{
	"mount mount":                     probeEPERM,
	"mount umount2":                   probeEPERM,
	"mount pivot_root":                probeEPERM,
	"mount chroot":                    probeEPERM,
	"mount fsopen":                    probeEPERM,
	"mount open_tree":                 probeEPERM,
	"mount move_mount":                probeEPERM,
	"namespaces unshare_newuser":      probeEPERM,
	"namespaces unshare_newns":        probeEPERM,
	"namespaces setns":                probeEPERM,
	"namespaces clone_newuser":        probeEPERM,
	"namespaces clone3":               probeENOSYS,
	"bpf bpf":                         probeEPERM,
	"perf perf_event_open":            probeEPERM,
	"keyring keyctl":                  probeEPERM,
	"keyring add_key":                 probeEPERM,
	"keyring request_key":             probeEPERM,
	"ptrace ptrace_traceme":           probeEPERM,
	"ptrace process_vm_readv":         probeEPERM,
	"kexec kexec_load":                probeEPERM,
	"modules init_module":             probeEPERM,
	"modules finit_module":            probeEPERM,
	"modules delete_module":           probeEPERM,
	"io_uring io_uring_setup":         probeEPERM,
	"userfaultfd userfaultfd":         probeEPERM,
	"file-handles open_by_handle_at":  probeEPERM,
	"file-handles name_to_handle_at":  probeEPERM,
	"reboot reboot":                   probeEPERM,
	"swap swapon":                     probeEPERM,
	"accounting acct":                 probeEPERM,
	"quota quotactl":                  probeEPERM,
	"syslog syslog":                   probeEPERM,
	"clock settimeofday":              probeEPERM,
	"clock clock_settime":             probeEPERM,
	"clock adjtimex":                  probeEPERM,
	"personality read_implies_exec":   probeEPERM,
	"personality addr_no_randomize":   probeEPERM,
	"socket af_packet":                probeEAFNO,
	"socket af_vsock":                 probeEAFNO,
	"socket af_alg":                   probeEAFNO,
	"memfd memfd_create":              probeEPERM,
	"ioctl tiocsti":                   probeEPERM,
	"ioctl tiocsti_high_bits":         probeEPERM,
	"arch i386_getpid":                probeSIGSYS,
	"arch x32_getpid":                 probeSIGSYS,
	"allowed getpid":                  probeOK,
	"allowed socket_af_inet":          probeOK,
	"allowed socket_af_inet6":         probeOK,
	"allowed socket_af_unix":          probeOK,
	"allowed socket_af_netlink":       probeOK,
	"allowed socketpair_af_unix":      probeOK,
	"allowed clone_fork":              probeOK,
	"allowed personality_query":       probeOK,
	"allowed ioctl_fionread":          probeOK,
	"allowed landlock_create_ruleset": probeOK,
}

// TestSeccompProbe runs a static probe that tries a representative syscall
// of every denied family, the 32-bit entry points and a few controls, and
// checks each answer: the denied ones fail with the filter's errno (never
// succeed), the 32-bit ones are killed, the controls work.
func TestSeccompProbe(t *testing.T) {
	skill := tempDir(t)
	probe := filepath.Join(skill, "probe")
	gcc := exec.Command("gcc", "-static", "-O1", "-o", probe, "testdata/seccomp_probe.c")
	if out, err := gcc.CombinedOutput(); err != nil {
		t.Fatalf("compiling the probe (needs gcc and libc6-dev): %v\n%s", err, out)
	}
	res := runSandbox(t, sandboxRun{
		Policy: `name = "seccomp-probe"
[fs]
read = ["$SKILL_DIR"]
`,
		SkillDir: skill,
		Argv:     []string{"/skill/probe"},
		Env:      []string{"PATH=/usr/bin:/bin"},
	})
	if res.Exit != 0 {
		t.Fatalf("probe exited %d\nstdout:\n%s\nstderr:\n%s", res.Exit, res.Stdout, res.Stderr)
	}
	got := probeLines(t, res.Stdout)
	for attempt, want := range probeWant {
		switch g, found := got[attempt]; {
		case !found:
			t.Errorf("%s: no line from the probe", attempt)
		case g != want:
			t.Errorf("%s: %s, want %s", attempt, g, want)
		}
	}
	for attempt := range got {
		if _, known := probeWant[attempt]; !known {
			t.Errorf("%s: the probe tries it but the test expects nothing (add it to probeWant)", attempt)
		}
	}
}

// probeLines reads testdata/seccomp_probe.c's output: "FAMILY NAME" to
// its result.
func probeLines(t *testing.T, out string) map[string]string {
	t.Helper()
	lines := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Errorf("probe line %q: want FAMILY NAME RESULT", line)
			continue
		}
		lines[f[0]+" "+f[1]] = f[2]
	}
	return lines
}

// TestSeccompOrdinaryPrograms checks that the profile, strict as it is,
// leaves everyday tools working: a shell, python with threads and
// subprocesses, curl, a compiler, coreutils.
func TestSeccompOrdinaryPrograms(t *testing.T) {
	for _, tool := range []string{"sh", "python3", "curl", "gcc", "ls", "cat"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing on the host; the sandbox runs the host's binaries (install it)", tool)
		}
	}
	skill := tempDir(t)
	if err := os.WriteFile(filepath.Join(skill, "hello.txt"), []byte("hello from the skill\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(skill, "hello.c"), []byte("int main(void) { return 0; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := probeScript + `
p sh sh -c 'echo ok'
p python3 python3 -c 'import os, socket, subprocess, threading; print(subprocess.run(["true"]).returncode)'
p python_threads python3 -c 'import threading; ts = [threading.Thread(target=sum, args=([1, 2],)) for _ in range(8)]; [t.start() for t in ts]; [t.join() for t in ts]'
p python_socket python3 -c 'import socket; a, b = socket.socketpair(); a.send(b"x"); assert b.recv(1) == b"x"; socket.socket(socket.AF_INET6).close()'
p curl_version curl --version
p curl_file curl -sf file:///skill/hello.txt
p gcc gcc -o /tmp/hello /skill/hello.c
p ls ls /
p proc_status cat /proc/self/status
echo "python_out=$(python3 -c 'import os, socket, subprocess, threading; print(subprocess.run(["true"]).returncode)')"
echo "curl_out=$(curl -sf file:///skill/hello.txt)"
echo "seccomp=$(grep ^Seccomp: /proc/self/status | tr -d '\t' | cut -d: -f2)"
`
	res := runSandbox(t, sandboxRun{
		Policy: `name = "seccomp-ordinary"
[fs]
read = ["$SKILL_DIR"]
`,
		SkillDir: skill,
		Argv:     []string{"sh", "-c", script},
		Env:      []string{"PATH=/usr/bin:/bin"},
	})
	if res.Exit != 0 {
		t.Fatalf("sandbox exited %d\nstdout:\n%s\nstderr:\n%s", res.Exit, res.Stdout, res.Stderr)
	}
	expectProbes(t, probes(res.Stdout), map[string]string{
		"sh": "ok", "python3": "ok", "python_threads": "ok", "python_socket": "ok",
		"curl_version": "ok", "curl_file": "ok", "gcc": "ok", "ls": "ok", "proc_status": "ok",
		"python_out": "0", "curl_out": "hello from the skill", "seccomp": "2",
	})
}
