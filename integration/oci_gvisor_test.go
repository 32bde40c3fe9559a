package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/runtime/sandbox"
)

// A stopped container on the gVisor engine answers kill as runc does:
// --all succeeds and one signal says it is not running. containerd's runc
// shim kills --all before every delete and takes any other error for a
// failed stop: a pod's sandbox then never ended (critest hung).
func TestOCIGVisorKillStopped(t *testing.T) {
	requireRunsc(t)
	o := newOCIEnv(t)
	id := "oci-" + randomHex(4)
	if r := o.warden(t, "--engine", "gvisor", "run", "--detach", "--bundle", busyboxBundle(t, id, nil), id); r.Exit != 0 {
		t.Fatalf("run --detach on gVisor: %s", r.Stderr)
	}
	o.waitStatus(t, id, "running")
	if r := o.warden(t, "kill", id, "KILL"); r.Exit != 0 {
		t.Fatalf("kill of a running container: %s", r.Stderr)
	}
	o.waitStatus(t, id, "stopped")
	if r := o.warden(t, "kill", "--all", id, "9"); r.Exit != 0 {
		t.Errorf("kill --all of a stopped container: exit %d %q; runc succeeds", r.Exit, r.Stderr)
	}
	// runc's words, which containerd's shim takes for an ended process.
	if r := o.warden(t, "kill", id, "9"); r.Exit == 0 || !strings.Contains(r.Stderr, "container not running") {
		t.Errorf("kill of a stopped container: exit %d %q; want runc's %q", r.Exit, r.Stderr, "container not running")
	}
	if held := runscStateOf(o, id); len(held) == 0 {
		t.Error("runsc holds no state file of the stopped container: runscStateOf looks in the wrong place")
	}
	if r := o.warden(t, "delete", id); r.Exit != 0 {
		t.Fatalf("delete: %s", r.Stderr)
	}
	if left := runscStateOf(o, id); len(left) > 0 {
		t.Errorf("runsc still holds state of the deleted container: %v", left)
	}
}

// A container run in the foreground on the gVisor engine gives its exit
// status and leaves nothing: no state of warden's, none of runsc's.
func TestOCIGVisorRunLeavesNothing(t *testing.T) {
	requireRunsc(t)
	o := newOCIEnv(t)
	id := "oci-" + randomHex(4)
	bundle := busyboxBundle(t, id, func(s *specs.Spec) { s.Process.Args = []string{"sh", "-c", "echo ran; exit 3"} })
	r := o.warden(t, "--engine", "gvisor", "run", "--bundle", bundle, id)
	if r.Exit != 3 || !strings.Contains(r.Stdout, "ran") {
		t.Fatalf("run on gVisor: exit %d, stdout %q, stderr %q; want exit 3 and \"ran\"", r.Exit, r.Stdout, r.Stderr)
	}
	if left := runscStateOf(o, id); len(left) > 0 {
		t.Errorf("runsc still holds state of the ended container: %v", left)
	}
	if ents, _ := os.ReadDir(filepath.Join(o.root, "oci-gvisor", "containers")); len(ents) != 0 {
		t.Errorf("warden still holds %d gVisor containers", len(ents))
	}
	if r := o.warden(t, "state", id); r.Exit == 0 {
		t.Errorf("state of the ended container answers: %s", r.Stdout)
	}
}

// runscStateOf lists the state files runsc keeps of container id.
func runscStateOf(o *ociEnv, id string) []string {
	files, _ := filepath.Glob(filepath.Join(o.root, "oci-gvisor", "runsc", id+"_sandbox:*"))
	return files
}

// Under a policy runsc gets only the seccomp rules that can decide a call
// (runtime/oci's runscSeccomp leaves the others out), stated the other
// way round (allowed by default, every syscall not allowed refused by
// name). The probe of every refused family and the controls answers
// exactly as it does under the whole profile run by runsc itself, and so
// does every syscall number 0-511 (with and without the x32 bit), but
// for those gVisor implements none of (ENOSYS, where the whole profile
// refused them with EPERM).
// gvisorHasNo: x86-64 syscall number n has no entry in the table of the
// gVisor warden pins (pkg/sentry/syscalls/linux/linux64.go: 0-334,
// 424-439 and 441), so runsc knows no name for it and gVisor answers
// ENOSYS. Numbers with the x32 bit are not x86-64's. Update it with the
// pin (RUNSC_VERSION in the Makefile).
func gvisorHasNo(n int64) bool {
	return n&0x40000000 != 0 || n >= 335 && n <= 423 || n == 440 || n > 441
}

func TestOCIGVisorSeccompAsWhole(t *testing.T) {
	requireRunsc(t)
	o := newOCIEnv(t)
	id := "oci-" + randomHex(4)
	bundle := busyboxBundle(t, id, func(s *specs.Spec) { s.Process.Args = []string{"/bin/probe"} })
	gcc := exec.Command("gcc", "-static", "-O1", "-o", filepath.Join(bundle, "rootfs", "bin", "probe"), "testdata/seccomp_probe.c")
	if out, err := gcc.CombinedOutput(); err != nil {
		t.Fatalf("compiling the probe (needs gcc and libc6-dev): %v\n%s", err, out)
	}
	policy := filepath.Join(tempDir(t), "p.toml")
	if err := os.WriteFile(policy, []byte("name = \"p\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The whole profile the policy makes, with runsc's one change
	// (clone3 allowed: see docs/engines.md), run by runsc.
	whole := tightenedBundle(t, bundle, policy)
	var s specs.Spec
	readJSON(t, filepath.Join(whole, "config.json"), &s)
	for i := range s.Linux.Seccomp.Syscalls {
		s.Linux.Seccomp.Syscalls[i].Names = slices.DeleteFunc(s.Linux.Seccomp.Syscalls[i].Names, func(n string) bool { return n == "clone3" })
	}
	s.Linux.Seccomp.Syscalls = append(s.Linux.Seccomp.Syscalls, specs.LinuxSyscall{Names: []string{"clone3"}, Action: specs.ActAllow})
	s.Linux.CgroupsPath += "-whole"
	writeJSON(t, filepath.Join(whole, "config.json"), &s)
	runsc, err := (&sandbox.Runtime{Binary: wardenBinary}).Runsc()
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(tempDir(t), "runsc")
	t.Cleanup(func() { unix.Unmount(filepath.Join(state, "null-netns"), unix.MNT_DETACH) })

	// probe runs the probe with args under warden, under runsc with the
	// whole profile, and under runsc with none (gVisor's own answers).
	probe := func(args ...string) (got, want, own map[string]string) {
		for _, b := range []string{bundle, whole} {
			var s specs.Spec
			readJSON(t, filepath.Join(b, "config.json"), &s)
			s.Process.Args = append([]string{"/bin/probe"}, args...)
			writeJSON(t, filepath.Join(b, "config.json"), &s)
		}
		tag := strings.Join(append([]string{id}, args...), "-")
		res := map[string]sandboxResult{
			"warden":                       o.warden(t, "--engine", "gvisor", "--policy", policy, "run", "--bundle", bundle, tag),
			"runsc with the whole profile": runTB(t, nil, runsc, "--root", state, sandbox.RunscSidecarFlag, "--oci-seccomp", "--network=none", "run", "--bundle", whole, tag+"-whole"),
			"runsc without a profile":      runTB(t, nil, runsc, "--root", state, sandbox.RunscSidecarFlag, "--network=none", "run", "--bundle", whole, tag+"-bare"),
		}
		for what, r := range res {
			if r.Exit != 0 {
				t.Fatalf("the probe %v under %s: exit %d, %q %q", args, what, r.Exit, r.Stdout, r.Stderr)
			}
		}
		return probeLines(t, res["warden"].Stdout), probeLines(t, res["runsc with the whole profile"].Stdout), probeLines(t, res["runsc without a profile"].Stdout)
	}
	// compare holds warden's answers to the whole profile's; for a
	// number gVisor has no syscall of (gvisorHasNo, or the named attempts
	// below; ENOSYS without a profile) the whole profile's EPERM may be
	// ENOSYS. It returns the
	// attempts the whole profile refused that gVisor answers otherwise,
	// and those ENOSYS.
	gvisorLacks := map[string]bool{
		"arch i386_getpid": true, "arch x32_getpid": true, // not x86-64's
		"allowed landlock_create_ruleset": true, // 444
	}
	compare := func(got, want, own map[string]string) (refused int, unimplemented []string) {
		const eperm, enosys = "errno=1", "errno=38"
		for attempt, w := range want {
			if w == eperm && own[attempt] != eperm && own[attempt] != enosys {
				refused++
			}
			n, err := strconv.ParseInt(strings.TrimPrefix(attempt, "sweep "), 10, 64)
			switch g := got[attempt]; {
			case g == w:
			case w == eperm && g == enosys && own[attempt] == enosys && (err == nil && gvisorHasNo(n) || gvisorLacks[attempt]):
				unimplemented = append(unimplemented, attempt)
			default:
				t.Errorf("%s: %s under warden, %s under the whole profile (%s without one)", attempt, g, w, own[attempt])
			}
		}
		if len(got) != len(want) || len(own) != len(want) {
			t.Errorf("probe lines: %d under warden, %d under the whole profile, %d without one", len(got), len(want), len(own))
		}
		return refused, unimplemented
	}

	got, want, own := probe()
	refused, unimplemented := compare(got, want, own)
	// The comparison means something: the whole profile refuses the
	// families and lets the controls through.
	if refused < 15 || want["memfd memfd_create"] == probeOK || want["allowed getpid"] != probeOK || want["allowed socket_af_inet"] != probeOK {
		t.Errorf("the whole profile under runsc refused %d attempts (memfd_create %s, getpid %s, AF_INET %s): not the profile the test means", refused, want["memfd memfd_create"], want["allowed getpid"], want["allowed socket_af_inet"])
	}
	t.Logf("families: %d refused; ENOSYS where gVisor implements nothing: %v", refused, unimplemented)

	got, want, own = probe("sweep")
	if len(want) != 1024 {
		t.Errorf("%d sweep lines, want 1024", len(want))
	}
	refused, unimplemented = compare(got, want, own)
	native := 0
	for _, nr := range unimplemented {
		if n, _ := strconv.Atoi(strings.TrimPrefix(nr, "sweep ")); n < 0x40000000 {
			native++
		}
	}
	// The whole profile refuses many numbers gVisor implements, and the
	// native numbers gVisor implements nothing for are few (x32's are
	// all of them).
	if refused < 30 || native > 200 {
		t.Errorf("the sweep: the whole profile refused %d numbers gVisor implements; %d native numbers were ENOSYS under warden: not the sweep the test means", refused, native)
	}
	t.Logf("sweep: %d numbers refused that gVisor implements; ENOSYS where gVisor implements nothing: %d native, %d x32", refused, native, len(unimplemented)-native)
}
