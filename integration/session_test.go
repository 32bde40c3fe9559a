package integration

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// sessionPolicy is what most session tests run under: a short exec list
// without python3, the workspace writable, the skill folder readable.
const sessionPolicy = `name = "session-test"
[fs]
read = ["$SKILL_DIR"]
write = ["$WORK_DIR"]
[exec]
allow = ["sh", "cat", "ls", "id", "cp", "chmod", "grep", "head", "tr", "cut", "tail", "wc", "sleep", "touch", "mkdir", "env", "find"]
[env]
allow = ["LANG"]
[limits]
memory = "128MiB"
pids = 64
timeout = "30s"
`

// usrLibExecutable is an ELF executable under /usr/lib, which the sandbox
// must be able to read (shared libraries live there) but not execute.
func usrLibExecutable(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat("/usr/lib/git-core/git"); err == nil {
		return "/usr/lib/git-core/git"
	}
	var found string
	filepath.WalkDir("/usr/lib", func(p string, d os.DirEntry, err error) error {
		if err != nil || found != "" || !d.Type().IsRegular() || strings.Contains(p, ".so") {
			return nil
		}
		if fi, err := d.Info(); err == nil && fi.Mode()&0o111 == 0o111 {
			if head, err := os.ReadFile(p); err == nil && bytes.HasPrefix(head, []byte("\x7fELF")) {
				found = p
				return filepath.SkipAll
			}
		}
		return nil
	})
	if found == "" {
		t.Fatal("no ELF executable under /usr/lib to try: the Landlock exec check needs one")
	}
	return found
}

// TestSessionExecAllowList: listed binaries run; any other cannot run
// however it is invoked.
func TestSessionExecAllowList(t *testing.T) {
	r := newRoot(t)
	ws := tempDir(t)
	id := r.create("exec", r.policy(sessionPolicy), ws)
	usrLib := usrLibExecutable(t)

	for _, c := range []struct {
		name string
		argv []string
		exit int    // 0 means "any failure" when fail is set
		fail bool   // the command must not run
		msg  string // on stderr
	}{
		{name: "allowed", argv: []string{"cat", "/dev/null"}},
		{name: "allowed_abs", argv: []string{"/usr/bin/cat", "/dev/null"}},
		{name: "allowed_sh", argv: []string{"sh", "-c", "cat /dev/null && ls / >/dev/null"}},
		{name: "abs", argv: []string{"/usr/bin/python3", "-c", "1"}, fail: true, exit: 127},
		{name: "path", argv: []string{"python3", "-c", "1"}, fail: true, exit: 127},
		{name: "via_sh", argv: []string{"sh", "-c", "python3 -c 1"}, fail: true, exit: 127},
		{name: "via_sh_abs", argv: []string{"sh", "-c", "/usr/bin/python3.11 -c 1"}, fail: true},
		{name: "loader", argv: []string{"/lib64/ld-linux-x86-64.so.2", "/usr/bin/python3.11", "-c", "1"}, fail: true, exit: 127},
		{name: "loader_via_sh", argv: []string{"sh", "-c", "/lib64/ld-linux-x86-64.so.2 /usr/bin/python3.11 -c 1"}, fail: true},
		{name: "copied", argv: []string{"sh", "-c", "cp /usr/bin/cat /workspace/mycat && chmod 755 /workspace/mycat && /workspace/mycat /dev/null"}, fail: true, exit: 126},
		{name: "copied_direct", argv: []string{"/workspace/mycat", "/dev/null"}, fail: true},
		{name: "copied_loader", argv: []string{"sh", "-c", "/lib64/ld-linux-x86-64.so.2 /workspace/mycat /dev/null"}, fail: true},
		{name: "copied_tmp", argv: []string{"sh", "-c", "cp /usr/bin/cat /tmp/c && chmod 755 /tmp/c && /tmp/c /dev/null"}, fail: true, exit: 126},
		{name: "usr_lib_direct", argv: []string{usrLib, "--version"}, fail: true, exit: 127},
		// Landlock's EXECUTE rule is what stops this one: the file is
		// readable, executable on disk, and on a mount without noexec.
		{name: "usr_lib_via_sh", argv: []string{"sh", "-c", usrLib + " --version"}, fail: true, exit: 126, msg: "Permission denied"},
	} {
		res := r.exec(id, nil, c.argv...)
		switch {
		case !c.fail && res.Exit != 0:
			t.Errorf("%s: %q should run: exit %d, stderr %q", c.name, c.argv, res.Exit, res.Stderr)
		case c.fail && res.Exit == 0:
			t.Errorf("%s: %q ran (stdout %q)", c.name, c.argv, res.Stdout)
		case c.fail && c.exit != 0 && res.Exit != c.exit:
			t.Errorf("%s: %q: exit %d, want %d (stderr %q)", c.name, c.argv, res.Exit, c.exit, res.Stderr)
		case c.msg != "" && !strings.Contains(res.Stderr, c.msg):
			t.Errorf("%s: stderr %q does not say %q", c.name, res.Stderr, c.msg)
		}
	}
	// The copy stayed a plain file in the workspace: visible on the host,
	// never run.
	if _, err := os.Stat(filepath.Join(ws, "mycat")); err != nil {
		t.Errorf("the copied binary is not in the workspace on the host: %v", err)
	}
	// The dynamic loader maps a program instead of executing it, so
	// Landlock's EXECUTE rule does not see `ld.so PROGRAM`; programs under
	// the exec-capable library folders are unreadable instead, while the
	// folders stay listable and their other files readable.
	for _, c := range []struct {
		script string
		ok     bool
	}{
		{"/lib64/ld-linux-x86-64.so.2 " + usrLib + " --version", false},
		{"cat " + usrLib + " >/dev/null", false},
		{"cp " + usrLib + " /workspace/copied", false},
		{"ls /usr/lib >/dev/null && ls " + filepath.Dir(usrLib) + " >/dev/null", true},
		{"cat /usr/lib/os-release >/dev/null", true},
		{"/lib64/ld-linux-x86-64.so.2 --list /usr/bin/cat >/dev/null", true},
	} {
		res := r.exec(id, nil, "sh", "-c", c.script)
		if (res.Exit == 0) != c.ok {
			t.Errorf("%q: exit %d (stderr %q), want success %v", c.script, res.Exit, res.Stderr, c.ok)
		}
	}
}

// procMemAttack patches the shell's own code through /proc/PID/mem with
// nothing but sh and tail: a background subshell waits until its parent
// sits in wait4, opens the parent's mem, lets tail move the shared offset
// to the parent's instruction pointer (tail reads one 8 KiB buffer, then
// dies writing to /dev/full) and writes machine code there with printf.
// The code prints PWNED and exits 42.
func procMemAttack() string {
	msg := "PWNED\n"
	code := []byte{0x48, 0x8d, 0x35, 29, 0, 0, 0, // lea rsi, [rip+29]: msg
		0xbf, 1, 0, 0, 0, // mov edi, 1
		0xba, byte(len(msg)), 0, 0, 0, // mov edx, len
		0xb8, 1, 0, 0, 0, // mov eax, write
		0x0f, 0x05, // syscall
		0xbf, 42, 0, 0, 0, // mov edi, 42
		0xb8, 231, 0, 0, 0, // mov eax, exit_group
		0x0f, 0x05}
	var octal strings.Builder
	for _, b := range append(code, msg...) {
		fmt.Fprintf(&octal, "\\%03o", b)
	}
	return `pid=$$
(
  i=0
  while [ $i -lt 20000 ]; do read sc rest < /proc/$pid/syscall; case "$sc" in 61|130) break;; esac; i=$((i+1)); done
  read sc a b c d e f sp pc < /proc/$pid/syscall
  exec 3<>/proc/$pid/mem
  tail -c +$(( pc - 8192 + 1 )) <&3 >/dev/full 2>/dev/null
  printf '` + octal.String() + `' >&3
) &
wait
echo "not reached"
`
}

// TestProcMemNotWritable: no command may write a process's memory
// through /proc/PID/mem, its own or another's: with a shell and a tool
// that seeks, that runs any machine code, past exec.allow and noexec. The
// allowed half: writes through /proc/self/fd and /dev/stdout still work.
func TestProcMemNotWritable(t *testing.T) {
	r := newRoot(t)
	ws := tempDir(t)
	if err := os.WriteFile(filepath.Join(ws, "attack.sh"), []byte(procMemAttack()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, policy := range []string{sessionPolicy, "name = \"no-allow-list\"\n[fs]\nwrite = [\"$WORK_DIR\"]\n"} {
		id := r.create("procmem", r.policy(policy), ws)
		if runtime.GOARCH == "amd64" {
			res := r.exec(id, []string{"--timeout", "20s"}, "sh", "/workspace/attack.sh")
			if strings.Contains(res.Stdout, "PWNED") || res.Exit != 0 || !strings.Contains(res.Stdout, "not reached") {
				t.Errorf("the shell's code was patched through /proc/PID/mem: exit %d, stdout %q, stderr %q", res.Exit, res.Stdout, res.Stderr)
			}
		}
		for _, c := range []struct {
			script string
			ok     bool
		}{
			{"exec 3<>/proc/self/mem", false},
			{"exec 3>/proc/self/mem", false},
			{"sleep 5 & exec 3<>/proc/$!/mem", false},
			{"exec 3</proc/self/status && cat /proc/self/maps >/dev/null", true},
		} {
			res := r.exec(id, nil, "sh", "-c", c.script)
			if (res.Exit == 0) != c.ok {
				t.Errorf("%q: exit %d (stdout %q, stderr %q), want success %v", c.script, res.Exit, res.Stdout, res.Stderr, c.ok)
			}
		}
		// (a pipe made in the sandbox: the caller's belongs to a user the
		// sandbox does not map, whose pipes it cannot open by name)
		script := "(echo a >/dev/stdout; echo b >/proc/self/fd/1) | cat; exec 4>/workspace/via-fd && echo c >/proc/self/fd/4 && cat /workspace/via-fd"
		if res := r.exec(id, nil, "sh", "-c", script); res.Exit != 0 || res.Stdout != "a\nb\nc\n" {
			t.Errorf("writes through /proc/self/fd: exit %d, stdout %q, stderr %q", res.Exit, res.Stdout, res.Stderr)
		}
	}
}

// TestSessionFilesystemAndEnv: the workspace is writable and its files
// belong to the workspace's owner on the host; everything else is
// invisible or read-only; only allowed variables get in.
func TestSessionFilesystemAndEnv(t *testing.T) {
	r := newRoot(t)
	const owner = 1234
	ws := workspace(t, owner)
	os.WriteFile(filepath.Join(ws, "input.txt"), []byte("input"), 0o644)
	policyFile := r.policy(sessionPolicy)
	skill := filepath.Dir(policyFile)
	os.WriteFile(filepath.Join(skill, "hello.txt"), []byte("hello"), 0o644)
	skillBefore := listTree(t, skill)
	id := r.create("fs", policyFile, ws)

	out := r.sh(id, probeScript+`
p read_ws cat /workspace/input.txt
p write_ws sh -c 'echo out > /workspace/out.txt'
p mkdir_ws mkdir /workspace/sub
p write_sub sh -c 'echo deep > /workspace/sub/f'
p read_skill cat /skill/hello.txt
p write_skill touch /skill/new
p write_usr touch /usr/x
p write_etc touch /etc/x
p write_root touch /x
p shadow cat /etc/shadow
p host_root ls /root
p host_home ls /home
p host_var ls /var
p host_run ls /run
p host_tmp_root ls `+r.root+`
echo "root=$(ls / | tr '\n' ' ')"
echo "lang=$LANG"
echo "secret=$SECRET"
echo "home=$HOME"
`)
	got := probes(out)
	expectProbes(t, got, map[string]string{
		"read_ws": "ok", "write_ws": "ok", "mkdir_ws": "ok", "write_sub": "ok", "read_skill": "ok",
		"write_skill": "fail", "write_usr": "fail", "write_etc": "fail", "write_root": "fail",
		"shadow": "fail", "host_root": "fail", "host_home": "fail", "host_var": "fail", "host_run": "fail",
		"host_tmp_root": "fail", "secret": "",
	})
	for _, name := range strings.Fields(got["root"]) {
		switch name {
		case "bin", "dev", "etc", "lib", "lib64", "proc", "sbin", "skill", "tmp", "usr", "workspace", "lib32", "libx32":
		default:
			t.Errorf("unexpected entry /%s in the sandbox's root (root: %s)", name, got["root"])
		}
	}

	// On the host: the sandbox's writes belong to the workspace's owner,
	// the skill folder and the host's own directories are unchanged.
	for _, f := range []string{"out.txt", "sub", "sub/f"} {
		fi, err := os.Stat(filepath.Join(ws, f))
		if err != nil {
			t.Errorf("workspace write missing on the host: %v", err)
			continue
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != owner || st.Gid != owner {
			t.Errorf("%s is owned by %d:%d on the host, want %d:%d", f, st.Uid, st.Gid, owner, owner)
		}
	}
	if data, _ := os.ReadFile(filepath.Join(ws, "out.txt")); string(data) != "out\n" {
		t.Errorf("out.txt on the host holds %q", data)
	}
	if after := listTree(t, skill); strings.Join(after, "\n") != strings.Join(skillBefore, "\n") {
		t.Errorf("skill folder changed:\nbefore %q\nafter  %q", skillBefore, after)
	}
	for _, p := range []string{"/usr/x", "/etc/x", "/x"} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s appeared on the host", p)
		}
	}

	// Environment: a secret in the caller's environment never gets in; an
	// allowed name given with --env does; a name outside env.allow is
	// refused before anything runs.
	env := []string{"PATH=/usr/bin:/bin", "HOME=/root", "SECRET=hunter2", "LANG=C.UTF-8"}
	res := r.wardenEnv(env, "exec", "--session", id, "--", "env")
	if res.Exit != 0 {
		t.Fatalf("env: exit %d: %s", res.Exit, res.Stderr)
	}
	if strings.Contains(res.Stdout, "hunter2") || strings.Contains(res.Stdout, "SECRET") {
		t.Errorf("the caller's SECRET is visible in the sandbox:\n%s", res.Stdout)
	}
	if !strings.Contains(res.Stdout, "LANG=C.UTF-8") {
		t.Logf("the caller's LANG (in env.allow) is not passed through by exec; env:\n%s", res.Stdout)
	}
	res = r.wardenEnv(env, "exec", "--session", id, "--env", "LANG=fr_FR.UTF-8", "--", "sh", "-c", `echo "lang=$LANG"`)
	if res.Exit != 0 || strings.TrimSpace(res.Stdout) != "lang=fr_FR.UTF-8" {
		t.Errorf("--env LANG=fr_FR.UTF-8: exit %d, stdout %q, stderr %q", res.Exit, res.Stdout, res.Stderr)
	}
	res = r.wardenEnv(env, "exec", "--session", id, "--env", "SECRET=x", "--", "sh", "-c", "echo ran")
	if res.Exit != 125 || strings.Contains(res.Stdout, "ran") {
		t.Errorf("--env SECRET=x: exit %d, stdout %q; want exit 125 and nothing run", res.Exit, res.Stdout)
	}
}

// TestSessionConfinement: no capabilities, no_new_privs, a seccomp filter
// and only the loopback interface.
func TestSessionConfinement(t *testing.T) {
	r := newRoot(t)
	id := r.create("conf", r.policy(sessionPolicy), tempDir(t))
	got := probes(r.sh(id, `
echo "caps=$(grep ^CapEff /proc/self/status | tr -d '\t' | cut -d: -f2)"
echo "prm=$(grep ^CapPrm /proc/self/status | tr -d '\t' | cut -d: -f2)"
echo "bnd=$(grep ^CapBnd /proc/self/status | tr -d '\t' | cut -d: -f2)"
echo "amb=$(grep ^CapAmb /proc/self/status | tr -d '\t' | cut -d: -f2)"
echo "nnp=$(grep ^NoNewPrivs /proc/self/status | tr -d '\t' | cut -d: -f2)"
echo "seccomp=$(grep ^Seccomp: /proc/self/status | tr -d '\t' | cut -d: -f2)"
echo "ifaces=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\n' ' ')"
`+probeScript+`
p own_environ cat /proc/self/environ
p agent_environ cat /proc/1/environ
p agent_maps cat /proc/1/maps
p agent_binary head -c 4 /.warden/warden
`))
	// The agent (PID 1) runs as the same user as its commands but is not
	// dumpable: its memory and environment are out of their reach; and
	// its binary is hidden like every program exec.allow does not list.
	expectProbes(t, got, map[string]string{
		"caps": "0000000000000000", "prm": "0000000000000000", "bnd": "0000000000000000", "amb": "0000000000000000",
		"nnp": "1", "seccomp": "2", "ifaces": "lo ",
		"own_environ": "ok", "agent_environ": "fail", "agent_maps": "fail", "agent_binary": "fail",
	})
}

// TestSessionMemoryLimit: going over limits.memory kills the command with
// 137 and says so; the session keeps working.
func TestSessionMemoryLimit(t *testing.T) {
	r := newRoot(t)
	id := r.create("mem", r.policy(`name = "mem"
[fs]
write = ["$WORK_DIR"]
[exec]
allow = ["python3", "cat"]
[limits]
memory = "64MiB"
`), tempDir(t))
	if res := r.exec(id, nil, "python3", "-c", "b = bytearray(16 << 20); print(len(b))"); res.Exit != 0 {
		t.Errorf("16 MiB under a 64 MiB limit: exit %d, stderr %q", res.Exit, res.Stderr)
	}
	res := r.exec(id, nil, "python3", "-c", "b = bytearray(200 << 20)")
	if res.Exit != 137 || !strings.Contains(res.Stderr, "memory limit") {
		t.Errorf("200 MiB under a 64 MiB limit: exit %d, stderr %q; want 137 and a memory limit message", res.Exit, res.Stderr)
	}
	r.expectAlive(id)
}

// TestSessionPidsLimit: a fork bomb hits limits.pids; the session survives.
func TestSessionPidsLimit(t *testing.T) {
	r := newRoot(t)
	id := r.create("pids", r.policy(sessionPolicy), tempDir(t))
	start := time.Now()
	res := r.exec(id, []string{"--timeout", "5s"}, "sh", "-c", `f() { f | f & }; f; sleep 2; echo survived`)
	t.Logf("fork bomb: exit %d after %s", res.Exit, time.Since(start).Round(time.Millisecond))
	if time.Since(start) > 10*time.Second {
		t.Errorf("fork bomb took %s", time.Since(start))
	}
	pids, err := os.ReadFile(r.cgroup("pids", id) + "/pids.events")
	if err != nil || !strings.Contains(string(pids), "max") || strings.Contains(string(pids), "max 0") {
		t.Errorf("pids limit was never hit: pids.events %q (%v)", pids, err)
	}
	// The bomb's leftovers die with the command (timeout kills the tree),
	// and new commands get pids again.
	deadline := time.Now().Add(5 * time.Second)
	for {
		res := r.exec(id, nil, "sh", "-c", "ls /proc | grep -c '^[0-9]'")
		if res.Exit == 0 {
			if n, _ := strconv.Atoi(strings.TrimSpace(res.Stdout)); n <= 5 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("session did not recover from the fork bomb: exit %d, stdout %q, stderr %q", res.Exit, res.Stdout, res.Stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.expectAlive(id)
}

// TestSessionTimeout: --timeout kills the command's whole process tree and
// says so; the session survives.
func TestSessionTimeout(t *testing.T) {
	r := newRoot(t)
	id := r.create("timeout", r.policy(sessionPolicy), tempDir(t))
	// ls alone (no pipeline, whose second process may or may not exist
	// yet when ls reads /proc): the agent and ls.
	procs := func() int {
		res := r.exec(id, nil, "ls", "/proc")
		n := 0
		for _, name := range strings.Fields(res.Stdout) {
			if _, err := strconv.Atoi(name); err == nil {
				n++
			}
		}
		return n
	}
	base := procs()
	start := time.Now()
	res := r.exec(id, []string{"--timeout", "1s"}, "sh", "-c", "sleep 30 & sleep 30")
	took := time.Since(start)
	if res.Exit != 137 || !strings.Contains(res.Stderr, "timeout") {
		t.Errorf("exit %d, stderr %q; want 137 and a timeout message", res.Exit, res.Stderr)
	}
	// well before the 30 s the sleeps would take
	if took > 10*time.Second || took < time.Second {
		t.Errorf("timeout 1s returned after %s", took)
	}
	// The background sleep died too: the sandbox holds as many processes
	// as before (the agent, and the counting shell's own).
	if after := procs(); after != base || base != 2 {
		t.Errorf("processes in the sandbox: %d before, %d after the timeout (want 2: the agent and ls)", base, after)
	}
	if n := sleeps(r, id); n != "0" {
		t.Errorf("%s sleeps survived the timeout", n)
	}
	// More than the policy's timeout is refused.
	if res := r.exec(id, []string{"--timeout", "1h"}, "cat", "/dev/null"); res.Exit != 125 {
		t.Errorf("--timeout above limits.timeout: exit %d, want 125", res.Exit)
	}
}

// TestSessionKillAll: `kill -9 -1` inside kills only the sandbox's own
// processes.
func TestSessionKillAll(t *testing.T) {
	r := newRoot(t)
	id := r.create("killall", r.policy(sessionPolicy), tempDir(t))
	host := exec.Command("sleep", "300")
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	defer host.Process.Kill()
	bg := r.command("exec", "--session", id, "--", "sleep", "60")
	if err := bg.Start(); err != nil {
		t.Fatal(err)
	}
	r.waitStarted(id, "sleep")
	// kill(-1, ...) spares the caller itself and the namespace's init
	// (the agent): the shell goes on.
	res := r.exec(id, nil, "sh", "-c", "kill -9 -1; echo still")
	if res.Exit != 0 || res.Stdout != "still\n" {
		t.Errorf("kill -9 -1: exit %d, stdout %q, stderr %q", res.Exit, res.Stdout, res.Stderr)
	}
	done := make(chan error, 1)
	go func() { done <- bg.Wait() }()
	select {
	case <-done:
		if bg.ProcessState.ExitCode() != 137 {
			t.Errorf("the sandbox's other command ended with %d, want 137", bg.ProcessState.ExitCode())
		}
	case <-time.After(5 * time.Second):
		bg.Process.Kill()
		t.Errorf("kill -9 -1 did not kill the sandbox's other command")
	}
	if err := host.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the host's sleep died: %v", err)
	}
	if pids := r.processes(); len(pids) == 0 {
		t.Errorf("the daemon died")
	}
	r.expectAlive(id)
}

// TestSessionIsolation: two sessions see neither each other's workspace
// nor each other's processes.
func TestSessionIsolation(t *testing.T) {
	r := newRoot(t)
	p := r.policy(sessionPolicy)
	wsA, wsB := tempDir(t), tempDir(t)
	a := r.create("a", p, wsA)
	b := r.create("b", p, wsB)
	marker := "marker-" + randomHex(8)
	r.sh(a, "echo secret > /workspace/"+marker)
	bg := r.command("exec", "--session", a, "--", "sleep", "30")
	if err := bg.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { bg.Process.Kill(); bg.Wait() }()
	r.waitStarted(a, "sleep")
	if n := sleeps(r, a); n != "1" {
		t.Fatalf("session a sees %s sleeps, want its own one", n)
	}
	got := probes(r.sh(b, probeScript+`
p own_ws sh -c 'echo b > /workspace/b.txt'
p ls_marker sh -c 'ls -A /workspace | grep -q `+marker+`'
p find_marker sh -c 'find / -name `+marker+` 2>/dev/null | grep -q .'
p a_sleep sh -c 'cat /proc/[0-9]*/comm | grep -qx sleep'
`))
	expectProbes(t, got, map[string]string{"own_ws": "ok", "ls_marker": "fail", "find_marker": "fail", "a_sleep": "fail"})
	if _, err := os.Stat(filepath.Join(wsA, "b.txt")); err == nil {
		t.Errorf("session b's write landed in a's workspace")
	}
	if _, err := os.Stat(filepath.Join(wsB, marker)); err == nil {
		t.Errorf("session a's write landed in b's workspace")
	}
}

// TestSessionRemoveAndGC: rm --force kills a running command and keeps the
// workspace; after the daemon is SIGKILLed mid-exec the next call restarts
// it and re-adopts the session; gc removes orphans and nothing else.
func TestSessionRemoveAndGC(t *testing.T) {
	r := newRoot(t)
	p := r.policy(sessionPolicy)
	ws := tempDir(t)
	os.WriteFile(filepath.Join(ws, "keep.txt"), []byte("keep"), 0o644)

	// rm --force while a command runs.
	id := r.create("rm", p, ws)
	bg := r.command("exec", "--session", id, "--", "sh", "-c", "echo started > /workspace/started; sleep 60")
	if err := bg.Start(); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(ws, "started"))
	if res := r.warden("session", "rm", id); res.Exit == 0 {
		t.Errorf("session rm without --force removed a session with a running command")
	}
	if res := r.warden("session", "rm", "--force", id); res.Exit != 0 {
		t.Fatalf("session rm --force: exit %d: %s", res.Exit, res.Stderr)
	}
	done := make(chan struct{})
	go func() { bg.Wait(); close(done) }()
	select {
	case <-done:
		if bg.ProcessState.Success() {
			t.Errorf("the running command succeeded after rm --force")
		}
	case <-time.After(5 * time.Second):
		bg.Process.Kill()
		t.Errorf("the running command survived rm --force")
	}
	expectWorkspace(t, ws, "keep.txt", "started")
	if len(r.list()) != 0 {
		t.Errorf("session ls after rm: %v", r.list())
	}
	if res := r.exec(id, nil, "cat", "/dev/null"); res.Exit != 125 {
		t.Errorf("exec in a removed session: exit %d, want 125", res.Exit)
	}
	r.assertClean(false)

	// The daemon dies with SIGKILL while a command runs.
	id2 := r.create("adopt", p, ws)
	bg = r.command("exec", "--session", id2, "--", "sh", "-c", "echo started > /workspace/started2; sleep 60")
	if err := bg.Start(); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(ws, "started2"))
	r.killDaemon(syscall.SIGKILL)
	bg.Wait()
	if res := r.exec(id2, nil, "cat", "/workspace/keep.txt"); res.Exit != 0 || res.Stdout != "keep" {
		t.Fatalf("session not re-adopted after the daemon was killed: exit %d, stdout %q, stderr %q", res.Exit, res.Stdout, res.Stderr)
	}
	if s := r.list(); len(s) != 1 || s[0].ID != id2 || s[0].State != "running" {
		t.Errorf("session ls after re-adoption: %+v", s)
	}
	// gc leaves the live session alone.
	if res := r.warden("gc"); res.Exit != 0 || strings.Contains(res.Stdout, id2) {
		t.Errorf("gc with one live session: exit %d, stdout %q, stderr %q", res.Exit, res.Stdout, res.Stderr)
	}
	r.expectAlive(id2)

	// An orphan: a running container whose session state is gone (its
	// daemon crashed while removing it). The next daemon kills and
	// removes it as it starts, before any gc.
	id3 := r.create("orphan", p, ws)
	r.killDaemon(syscall.SIGKILL)
	if err := os.RemoveAll(filepath.Join(r.root, "sessions", id3)); err != nil {
		t.Fatal(err)
	}
	if len(cgroupProcesses(id3)) == 0 {
		t.Fatalf("the orphan's sandbox is not running")
	}
	r.list()
	r.assertGone(id3, id3, 0, "an orphan container, after the daemon's start")
	if recs, _ := r.logs("--session", id3); len(recs) == 0 || recs[len(recs)-1].Event != "container.reap" {
		t.Errorf("audit records of the orphan %s: %+v; want container.reap last", id3, recs)
	}
	res := r.warden("gc")
	if res.Exit != 0 || strings.Contains(res.Stdout, id3) {
		t.Errorf("gc after the orphan was reaped: exit %d, stdout %q, stderr %q", res.Exit, res.Stdout, res.Stderr)
	}
	if strings.Contains(res.Stdout, id2) {
		t.Errorf("gc removed the live session %s: %s", id2, res.Stdout)
	}
	r.expectAlive(id2)
	if res := r.warden("session", "rm", "--force", id2); res.Exit != 0 {
		t.Errorf("session rm --force: exit %d: %s", res.Exit, res.Stderr)
	}
	if res := r.warden("gc"); res.Exit != 0 || strings.TrimSpace(res.Stdout) != "nothing to remove" {
		t.Errorf("gc after rm: exit %d, stdout %q, stderr %q", res.Exit, res.Stdout, res.Stderr)
	}
	r.assertClean(false)
	expectWorkspace(t, ws, "keep.txt", "started", "started2")
}

// TestSessionIdleSurvivesRestart: a daemon that restarts takes up each
// session's idle time where it was, so a session expires when its policy
// says, not an idle limit after the restart.
func TestSessionIdleSurvivesRestart(t *testing.T) {
	r := newRoot(t)
	id := r.create("idle", r.policy(sessionPolicy), tempDir(t))
	time.Sleep(1100 * time.Millisecond) // the create's own touch is a second old
	used := time.Now()
	r.sh(id, "true")
	time.Sleep(2500 * time.Millisecond)
	r.killDaemon(syscall.SIGKILL)
	for _, s := range r.list() { // starts a new daemon, which adopts it
		if s.ID != id {
			continue
		}
		if d := s.LastUsed.Sub(used); d < -time.Second || d > time.Second {
			t.Errorf("after the restart the session was last used at %s, %s after its last command", s.LastUsed, d)
		}
		return
	}
	t.Fatalf("the session was not adopted after the restart")
}

// sleeps counts the sleep processes a session's sandbox holds.
func sleeps(r *wardenRoot, id string) string {
	r.t.Helper()
	res := r.exec(id, nil, "sh", "-c", "cat /proc/[0-9]*/comm | grep -cx sleep")
	return strings.TrimSpace(res.Stdout)
}

func waitFile(t *testing.T, p string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(p); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", p)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func expectWorkspace(t *testing.T, ws string, files ...string) {
	t.Helper()
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(ws, f)); err != nil {
			t.Errorf("workspace file lost: %v", err)
		}
	}
	if data, _ := os.ReadFile(filepath.Join(ws, "keep.txt")); string(data) != "keep" {
		t.Errorf("keep.txt holds %q", data)
	}
}

// TestSessionStdio: the caller's stdin, stdout and stderr are passed
// through: pipes work, large outputs arrive whole, the streams stay apart.
func TestSessionStdio(t *testing.T) {
	r := newRoot(t)
	ws := tempDir(t)
	id := r.create("stdio", r.policy(sessionPolicy), ws)

	cmd := r.command("exec", "--session", id, "--", "cat")
	cmd.Stdin = strings.NewReader("data\nmore data\n")
	out, err := cmd.Output()
	if err != nil || string(out) != "data\nmore data\n" {
		t.Errorf("stdin to cat: %q, %v", out, err)
	}

	if res := r.exec(id, nil, "sh", "-c", "head -c 10000000 /dev/zero | wc -c"); res.Exit != 0 || strings.TrimSpace(res.Stdout) != "10000000" {
		t.Errorf("10 MB through a pipe inside: exit %d, stdout %q", res.Exit, res.Stdout)
	}

	const size = 10_000_000
	if err := os.WriteFile(filepath.Join(ws, "big"), make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	// Into a host pipe, read by a host process.
	wc := exec.Command("sh", "-c", "'"+wardenBinary+"' --root '"+r.root+"' exec --session "+id+" -- cat /workspace/big | wc -c")
	out, err = wc.Output()
	if err != nil || strings.TrimSpace(string(out)) != strconv.Itoa(size) {
		t.Errorf("10 MB to a host pipe: %q, %v", out, err)
	}
	// Into a Go pipe, byte for byte.
	cmd = r.command("exec", "--session", id, "--", "cat", "/workspace/big")
	var cw countingWriter
	cmd.Stdout = &cw
	if err := cmd.Run(); err != nil || cw.n != size || cw.nonZero {
		t.Errorf("10 MB to the caller: %d bytes (non-zero bytes: %v), %v", cw.n, cw.nonZero, err)
	}
	// From stdin, through the sandbox, to a file in the workspace.
	cmd = r.command("exec", "--session", id, "--", "sh", "-c", "cat > /workspace/copy")
	cmd.Stdin = bytes.NewReader(make([]byte, size))
	if err := cmd.Run(); err != nil {
		t.Errorf("10 MB from stdin: %v", err)
	} else if fi, err := os.Stat(filepath.Join(ws, "copy")); err != nil || fi.Size() != size {
		t.Errorf("10 MB from stdin arrived as %v, %v", fi, err)
	}

	res := r.exec(id, nil, "sh", "-c", "echo to-out; echo to-err >&2; exit 3")
	if res.Exit != 3 || res.Stdout != "to-out\n" || res.Stderr != "to-err\n" {
		t.Errorf("separate streams: exit %d, stdout %q, stderr %q", res.Exit, res.Stdout, res.Stderr)
	}
	// A closed pipe ends a writer the usual way (SIGPIPE).
	if res := r.exec(id, nil, "sh", "-c", "cat /dev/zero | head -c 10 | wc -c"); res.Exit != 0 || strings.TrimSpace(res.Stdout) != "10" {
		t.Errorf("SIGPIPE: exit %d, stdout %q, stderr %q", res.Exit, res.Stdout, res.Stderr)
	}
}

// TestDevStdoutIsTheCallersPipe: a command writes to /dev/stdout and
// /dev/stderr (the caller's pipes, opened again by name), as scripts and
// Makefiles do, through a session and through do; a named pipe the
// caller passes keeps its mode.
func TestDevStdoutIsTheCallersPipe(t *testing.T) {
	r := newRoot(t)
	policy := r.policy(sessionPolicy)
	id := r.create("devstdout", policy, tempDir(t))
	script := "echo out >/dev/stdout && echo err >/dev/stderr && echo fd >/dev/fd/1"
	for _, res := range []sandboxResult{
		r.exec(id, nil, "sh", "-c", script),
		r.warden("do", "--policy", policy, "--workspace", tempDir(t), "--", "sh", "-c", script),
	} {
		if res.Exit != 0 || res.Stdout != "out\nfd\n" || res.Stderr != "err\n" {
			t.Errorf("writes to /dev/stdout and /dev/stderr: exit %d, stdout %q, stderr %q", res.Exit, res.Stdout, res.Stderr)
		}
	}
	// Only in the direction it was passed: no writing into the caller's
	// stdin, no reading what others write into its stdout.
	in, feed, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer feed.Close()
	cmd := r.command("exec", "--session", id, "--", "sh", "-c",
		"echo INJECTED >/dev/stdin && echo wrote-stdin; exec 3</dev/stdout && echo read-stdout; cat >/dev/null; echo still")
	var out, errOut strings.Builder
	cmd.Stdin, cmd.Stdout, cmd.Stderr = in, &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	in.Close()
	feed.Write([]byte("from the caller\n"))
	feed.Close()
	cmd.Wait()
	if strings.Contains(out.String(), "wrote-stdin") || strings.Contains(out.String(), "read-stdout") {
		t.Errorf("the sandbox opened the caller's pipes the other way: stdout %q, stderr %q", out.String(), errOut.String())
	}
	fifo := filepath.Join(tempDir(t), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	reader := make(chan []byte, 1)
	go func() {
		data, _ := os.ReadFile(fifo)
		reader <- data
	}()
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	cmd = r.command("exec", "--session", id, "--", "sh", "-c", "echo via-fd")
	cmd.Stdout = w
	if err := cmd.Run(); err != nil {
		t.Errorf("exec with a named pipe as stdout: %v", err)
	}
	w.Close()
	if got := string(<-reader); got != "via-fd\n" {
		t.Errorf("through the named pipe: %q", got)
	}
	if fi, err := os.Stat(fifo); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the named pipe's mode changed: %v, %v", fi.Mode(), err)
	}
}

// TestSessionExitCodes: the command's own status, and warden's 126, 127
// and 128+N.
func TestSessionExitCodes(t *testing.T) {
	r := newRoot(t)
	ws := tempDir(t)
	os.WriteFile(filepath.Join(ws, "plain.txt"), []byte("not a program"), 0o644)
	id := r.create("codes", r.policy(sessionPolicy), ws)
	open := r.create("codes-open", r.policy(`name = "open"
[fs]
write = ["$WORK_DIR"]
`), ws)
	for _, c := range []struct {
		id   string
		argv []string
		exit int
	}{
		{id, []string{"cat", "/dev/null"}, 0},
		{id, []string{"sh", "-c", "exit 7"}, 7},
		{id, []string{"no-such-command"}, 127},
		{id, []string{"/usr/bin/no-such-command"}, 127},
		{id, []string{"python3", "-c", "1"}, 127},
		{id, []string{"sh", "-c", "/workspace/plain.txt"}, 126},
		{open, []string{"/workspace/plain.txt"}, 126},
		{open, []string{"/etc/hostname"}, 126},
		{id, []string{"sh", "-c", "kill -TERM $$; sleep 5"}, 128 + 15},
		{id, []string{"sh", "-c", "kill -INT $$; sleep 5"}, 128 + 2},
		{id, []string{"sh", "-c", "kill -KILL $$"}, 128 + 9},
	} {
		if res := r.exec(c.id, nil, c.argv...); res.Exit != c.exit {
			t.Errorf("%q: exit %d, want %d (stderr %q)", c.argv, res.Exit, c.exit, res.Stderr)
		}
	}
}

// TestSessionAuditLog: one JSON line per command with its argv, status
// and the policy's name and hash.
func TestSessionAuditLog(t *testing.T) {
	r := newRoot(t)
	id := r.create("audit", r.policy(sessionPolicy), tempDir(t))
	other := r.create("audit-other", r.policy(sessionPolicy), tempDir(t))
	r.exec(id, nil, "sh", "-c", "exit 3")
	r.exec(id, nil, "cat", "/dev/null")
	r.exec(other, nil, "cat", "/dev/null")
	recs, text := r.logs("--session", id)
	var execs []auditRecord
	for _, rec := range recs {
		if rec.Session != id {
			t.Errorf("logs --session %s printed a line of %s", id, rec.Session)
		}
		if rec.Event == "exec" {
			execs = append(execs, rec)
		}
	}
	if len(execs) != 2 {
		t.Fatalf("%d exec lines, want 2:\n%s", len(execs), text)
	}
	want := []struct {
		argv string
		exit int
	}{{"sh -c exit 3", 3}, {"cat /dev/null", 0}}
	for i, rec := range execs {
		if strings.Join(rec.Argv, " ") != want[i].argv || rec.Exit == nil || *rec.Exit != want[i].exit {
			t.Errorf("line %d: %+v, want argv %q exit %d", i, rec, want[i].argv, want[i].exit)
		}
		if rec.Policy != "session-test" || len(rec.PolicyHash) < 16 {
			t.Errorf("line %d: policy %q hash %q", i, rec.Policy, rec.PolicyHash)
		}
	}
}

// TestSessionDo: a one-shot sandbox runs the command and leaves nothing.
func TestSessionDo(t *testing.T) {
	r := newRoot(t)
	ws := tempDir(t)
	p := r.policy(sessionPolicy)
	cgroupsBefore := map[string]bool{}
	for _, d := range doCgroups() {
		cgroupsBefore[d] = true
	}
	res := r.warden("do", "--policy", p, "--workspace", ws, "--", "sh", "-c", "echo hi > /workspace/do.txt; cat /workspace/do.txt; exit 5")
	if res.Exit != 5 || res.Stdout != "hi\n" {
		t.Errorf("do: exit %d, stdout %q, stderr %q", res.Exit, res.Stdout, res.Stderr)
	}
	if res := r.warden("do", "--policy", p, "--workspace", ws, "--", "python3", "-c", "1"); res.Exit != 127 {
		t.Errorf("do with a binary outside exec.allow: exit %d, want 127", res.Exit)
	}
	if data, _ := os.ReadFile(filepath.Join(ws, "do.txt")); string(data) != "hi\n" {
		t.Errorf("do's write on the host: %q", data)
	}
	entries, _ := os.ReadDir(filepath.Join(r.root, "sessions"))
	containers, _ := os.ReadDir(filepath.Join(r.root, "containers"))
	if len(entries)+len(containers) > 0 {
		t.Errorf("do left state: sessions %v, containers %v", entries, containers)
	}
	for _, d := range doCgroups() {
		if !cgroupsBefore[d] {
			t.Errorf("do left a cgroup: %s", d)
		}
	}
}

func doCgroups() []string {
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*/warden/*/do-*")
	return dirs
}

// TestSessionList: ls --format json lists each session's id, policy,
// workspace and state.
func TestSessionList(t *testing.T) {
	r := newRoot(t)
	if s := r.list(); len(s) != 0 {
		t.Errorf("a fresh root lists sessions: %v", s)
	}
	p := r.policy(sessionPolicy)
	wsA, wsB := tempDir(t), tempDir(t)
	a := r.create("ls-a", p, wsA)
	b := r.id("ls-b")
	// exec --policy creates a missing session.
	if res := r.warden("exec", "--session", b, "--policy", p, "--workspace", wsB, "--", "cat", "/dev/null"); res.Exit != 0 {
		t.Fatalf("exec --policy creating %s: exit %d: %s", b, res.Exit, res.Stderr)
	}
	got := map[string]sessionInfo{}
	for _, s := range r.list() {
		got[s.ID] = s
	}
	for id, ws := range map[string]string{a: wsA, b: wsB} {
		s, ok := got[id]
		if !ok {
			t.Errorf("session %s not listed: %v", id, got)
			continue
		}
		if s.Policy != "session-test" || s.Workspace != ws || s.State != "running" {
			t.Errorf("session %s listed as %+v, want policy session-test, workspace %s, state running", id, s, ws)
		}
	}
	if len(got) != 2 {
		t.Errorf("%d sessions listed, want 2: %v", len(got), got)
	}
	if res := r.warden("session", "create", "--policy", p, "--workspace", wsA, "--id", a); res.Exit == 0 {
		t.Errorf("a second session with the id %s was created", a)
	}
}

// TestSessionStoppedBeforeExec: code in the sandbox stops each new process
// (SIGSTOP to the newest pid) before or after it reaches execve. A command
// then fails (126) or runs into its timeout, but the agent never waits on
// it: every call returns, and the session works once the attacker is gone.
func TestSessionStoppedBeforeExec(t *testing.T) {
	r := newRoot(t)
	id := r.create("stop", r.policy(`name = "stop"
[exec]
allow = ["python3", "true"]
`), tempDir(t))
	attacker := r.command("exec", "--session", id, "--", "python3", "-c", `
import os, signal, time
end = time.time() + 60
me = os.getpid()
print("ready", flush=True)
while time.time() < end:
    with open("/proc/sys/kernel/ns_last_pid") as f:
        n = int(f.read())
    if n != me:
        try:
            os.kill(n, signal.SIGSTOP)
        except OSError:
            pass
`)
	out, err := attacker.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := attacker.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		attacker.Process.Kill()
		attacker.Wait()
	}()
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		ready <- line
	}()
	select {
	case line := <-ready:
		if line != "ready\n" {
			t.Fatalf("the attacker did not start: %q", line)
		}
	case <-time.After(cliTimeout):
		t.Fatal("the attacker did not start")
	}
	// Until three were stopped: the attacker's race with a fast spawn is
	// won more or less often with the machine's load.
	stopped, calls := 0, 0
	for ; calls < 30 && stopped < 3; calls++ {
		i := calls
		// r.exec fails the test if a call gets no answer (cliTimeout).
		res := r.exec(id, []string{"--timeout", "2s"}, "true")
		switch res.Exit {
		case 0:
		case 126, 137:
			stopped++
		default:
			t.Errorf("exec %d: exit %d, stderr %q", i, res.Exit, res.Stderr)
		}
	}
	t.Logf("%d of %d commands were stopped by the attacker", stopped, calls)
	if stopped == 0 {
		t.Error("the attacker stopped no command: the test did not test anything")
	}
	attacker.Process.Kill()
	attacker.Wait()
	// The client's end reaches the command through the daemon: it is
	// killed soon after, not before the next call can arrive.
	r.waitGone(func() []int { return commandProcesses(id, "ns_last_pid") }, "the attacker, after its client was killed,")
	if res := r.exec(id, nil, "true"); res.Exit != 0 {
		t.Errorf("after the attack: exit %d, stderr %q", res.Exit, res.Stderr)
	}
}

// TestAgentOutOfDescriptors: a command that lowers its agent's open-file
// limit (same user, so the kernel lets it) stops new commands until the
// limit is raised again, and the agent neither spins on the listener nor
// stops for good: the command queued meanwhile runs once descriptors are
// back, without waiting for any connection to end.
func TestAgentOutOfDescriptors(t *testing.T) {
	r := newRoot(t)
	id := r.create("nofile", r.policy(`name = "nofile"
[exec]
allow = ["python3", "true"]
`), tempDir(t))
	agent := r.agentPid(id)
	// Lower the agent's limit until the test says so on stdin, then raise
	// it and stay 5 s more (this command's own connection does not end
	// meanwhile).
	squeezer := r.command("exec", "--session", id, "--", "python3", "-c", `
import resource, sys, time
soft, hard = resource.prlimit(1, resource.RLIMIT_NOFILE)
resource.prlimit(1, resource.RLIMIT_NOFILE, (1, hard))
print("low", flush=True)
sys.stdin.readline()
resource.prlimit(1, resource.RLIMIT_NOFILE, (soft, hard))
time.sleep(5)
`)
	release, _ := squeezer.StdinPipe()
	out, _ := squeezer.StdoutPipe()
	if err := squeezer.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		squeezer.Process.Kill()
		squeezer.Wait()
	}()
	line := make([]byte, 4)
	if _, err := io.ReadFull(out, line); err != nil || string(line) != "low\n" {
		t.Fatalf("the squeezer did not lower the limit: %q, %v", line, err)
	}
	queued := r.command("exec", "--session", id, "--", "true")
	if err := queued.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- queued.Wait() }()
	time.Sleep(200 * time.Millisecond)
	before := cpuTicks(t, agent)
	time.Sleep(800 * time.Millisecond)
	if spent := cpuTicks(t, agent) - before; spent > 10 {
		t.Errorf("the agent used %d clock ticks of CPU in 0.8 s while it could not accept: it spins", spent)
	}
	select {
	case err := <-done:
		t.Fatalf("a command ran while the agent had no descriptors: %v", err)
	default:
	}
	if _, err := io.WriteString(release, "raise\n"); err != nil {
		t.Fatal(err)
	}
	raised := time.Now()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the queued command: %v", err)
		}
		if took := time.Since(raised); took > 2*time.Second {
			t.Errorf("the queued command ran %.1f s after the limit was raised", took.Seconds())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the queued command never ran after the limit was raised")
	}
	if res := r.exec(id, nil, "true"); res.Exit != 0 {
		t.Errorf("afterwards: exit %d, stderr %q", res.Exit, res.Stderr)
	}
}

// cpuTicks is the user and system CPU time of a process, in clock ticks.
func cpuTicks(t *testing.T, pid int) int {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name, which is in parentheses: utime and
	// stime are the 14th and 15th of the line.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	utime, _ := strconv.Atoi(fields[11])
	stime, _ := strconv.Atoi(fields[12])
	return utime + stime
}

// TestDaemonRunsFromSealedCopy: the daemon runs from a sealed in-memory
// copy of its binary (so libcontainer need not seal one per sandbox
// start), which nobody can write, while sandboxes still mount the binary
// from its place on disk as their agent.
func TestDaemonRunsFromSealedCopy(t *testing.T) {
	r := newRoot(t)
	id := r.create("sealed", r.policy(`name = "sealed"
[exec]
allow = ["true"]
`), tempDir(t))
	if res := r.exec(id, nil, "true"); res.Exit != 0 {
		t.Fatalf("exec: exit %d, stderr %q", res.Exit, res.Stderr)
	}
	daemon := 0
	for _, pid := range r.processes() {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.HasSuffix(string(cmdline), "\x00daemon\x00") {
			daemon = pid
		}
	}
	if daemon == 0 {
		t.Fatal("no daemon process found")
	}
	exe := fmt.Sprintf("/proc/%d/exe", daemon)
	f, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seals, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0)
	if err != nil {
		target, _ := os.Readlink(exe)
		t.Fatalf("the daemon runs from %s, not a sealed memfd: %v", target, err)
	}
	if want := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE; seals&want != want {
		t.Errorf("the daemon's binary has seals %#x, want at least %#x", seals, want)
	}
	if w, err := os.OpenFile(exe, os.O_WRONLY, 0); err == nil {
		_, err = w.Write([]byte("x"))
		w.Close()
		if err == nil {
			t.Error("the daemon's binary could be written")
		}
	}
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", daemon))
	for _, task := range tasks {
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/comm", daemon, task.Name())); strings.TrimSpace(string(comm)) != filepath.Base(wardenBinary) {
			t.Errorf("the daemon's thread %s is named %q, want %q (ps, top, pgrep)", task.Name(), comm, filepath.Base(wardenBinary))
		}
	}
	if len(tasks) < 2 {
		t.Errorf("the daemon has %d threads", len(tasks))
	}
	bin, err := filepath.EvalSymlinks(wardenBinary)
	if err != nil {
		t.Fatal(err)
	}
	bin, _ = filepath.Abs(bin)
	config, err := os.ReadFile(filepath.Join(r.root, "sessions", id, "bundle", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(config), `"source":"`+bin+`"`) && !strings.Contains(string(config), `"source": "`+bin+`"`) {
		t.Errorf("the sandbox's agent is not mounted from %s:\n%s", bin, config)
	}
}

// TestDaemonWithoutExecutableMemfd: where no executable memfd can be made
// (vm.memfd_noexec=2, set here in a pid namespace of the daemon's own),
// the daemon says so once, runs from its binary on disk (libcontainer
// then seals a copy per start) and serves sessions; it must not re-execute
// itself over and over.
func TestDaemonWithoutExecutableMemfd(t *testing.T) {
	r := newRoot(t)
	if err := os.MkdirAll(r.root, 0o711); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(tempDir(t), "daemon.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	daemon := exec.Command("unshare", "--pid", "--fork", "--mount-proc", "sh", "-c",
		`sysctl -q -w vm.memfd_noexec=2 && exec "$0" --root "$1" daemon`, wardenBinary, r.root)
	daemon.Stdout, daemon.Stderr = logFile, logFile
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		daemon.Process.Kill()
		daemon.Wait()
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(r.root, "warden.sock")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logPath)
			t.Fatalf("the daemon did not start:\n%s", log)
		}
	}
	id := r.create("nomemfd", r.policy(`name = "nomemfd"
[exec]
allow = ["true"]
`), tempDir(t))
	if res := r.exec(id, nil, "true"); res.Exit != 0 {
		t.Fatalf("exec: exit %d, stderr %q", res.Exit, res.Stderr)
	}
	log, _ := os.ReadFile(logPath)
	if n := strings.Count(string(log), "no executable sealed memfd"); n != 1 {
		t.Errorf("the daemon said %d times that it has no sealed memfd, want once:\n%s", n, log)
	}
}
