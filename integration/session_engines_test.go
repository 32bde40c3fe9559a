package integration

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The session suite that runs on both engines: one table, each case run
// against a container session and a gVisor one. Where gVisor cannot give
// the same (stated in docs/engines.md and policy explain), the case pins
// what it gives instead.

var sessionEngines = []string{"container", "gvisor"}

// requireRunsc fails (never skips) when runsc is missing: `make deps`
// installs it, and the gVisor half of the suite was asked for.
func requireRunsc(t *testing.T) {
	t.Helper()
	res := run(t, nil, wardenBinary, "check", "--format", "json")
	if !strings.Contains(res.Stdout, `"name": "gvisor",
    "ok": true`) {
		t.Fatalf("runsc is not available (run `make deps`): warden check says:\n%s", res.Stdout)
	}
}

// enginePolicy is a policy's text under an engine.
func enginePolicy(engine, text string) string {
	return text + fmt.Sprintf("\n[sandbox]\nengine = %q\n", engine)
}

type engineCase struct {
	name string
	run  func(t *testing.T, r *wardenRoot, engine string)
}

func TestSessionEngines(t *testing.T) {
	requireRunsc(t)
	for _, engine := range sessionEngines {
		for _, c := range engineCases {
			t.Run(engine+"/"+c.name, func(t *testing.T) {
				r := newRoot(t)
				c.run(t, r, engine)
			})
		}
	}
}

var engineCases = []engineCase{
	{"files", engineFiles},
	{"identity and exit", engineIdentityAndExit},
	{"stdio", engineStdio},
	{"stdio to files", engineStdioFiles},
	{"limits", engineLimits},
	{"exec.allow", engineExecAllow},
	{"audit and readoption", engineAuditAndReadoption},
	{"terminal", engineTerminal},
	{"freeze", engineFreeze},
	{"system calls", engineSyscalls},
	{"exec.workspace", engineExecWorkspace},
}

// engineSyscalls: the policy's seccomp refusals hold on both engines (the
// agent loads the filter under gVisor, which applies none of its own):
// no setuid bits on the host, no memfd to run a program from, no user
// namespace, no signal to the agent (which runs on afterwards); threads
// still start (clone3's
// refusal reads as unimplemented, and libc falls back to clone).
func engineSyscalls(t *testing.T, r *wardenRoot, engine string) {
	p := r.policy(enginePolicy(engine, `name = "syscalls"
[fs]
write = ["$WORK_DIR"]
[exec]
allow = ["sh", "python3", "chmod", "true", "cat"]
`))
	ws := workspace(t, 0)
	id := r.create("syscalls", p, ws)
	py := func(code string) string {
		res := r.exec(id, nil, "python3", "-c", code)
		if res.Exit != 0 {
			t.Fatalf("python3 %q: exit %d, %s", code, res.Exit, res.Stderr)
		}
		return strings.TrimSpace(res.Stdout)
	}
	if res := r.exec(id, nil, "sh", "-c", "echo x > /workspace/f && chmod 4755 /workspace/f"); res.Exit == 0 {
		t.Errorf("chmod 4755 in the workspace: exit 0")
	}
	if fi, err := os.Stat(filepath.Join(ws, "f")); err != nil || fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
		t.Errorf("the workspace file on the host: %v, %v; want it there, without setuid or setgid", fi.Mode(), err)
	}
	for what, code := range map[string]string{
		"memfd_create":         "import os\ntry:\n os.memfd_create('x'); print('allowed')\nexcept OSError as e: print(e.errno)",
		"a user namespace":     "import ctypes\nl = ctypes.CDLL(None, use_errno=True)\nprint('allowed' if l.unshare(0x10000000) == 0 else ctypes.get_errno())",
		"SIGSTOP to the agent": "import os, signal\ntry:\n os.kill(1, signal.SIGSTOP); print('allowed')\nexcept OSError as e: print(e.errno)",
		"SIGSEGV to the agent": "import os, signal\ntry:\n os.kill(1, signal.SIGSEGV); print('allowed')\nexcept OSError as e: print(e.errno)",
	} {
		got := py(code)
		// The host's kernel drops a signal to a namespace's init quietly.
		quiet := engine == "container" && strings.HasPrefix(what, "SIG") && got == "allowed"
		if got != "1" && !quiet {
			t.Errorf("%s: %s, want EPERM (1)", what, got)
		}
	}
	if got := py("import threading\nt = threading.Thread(target=lambda: print('thread'))\nt.start(); t.join()"); got != "thread" {
		t.Errorf("a thread: %q", got)
	}
	r.expectAlive(id)
}

// engineExecWorkspace: exec.workspace lets programs in the workspace run,
// on both engines; exec.allow still holds for the system's.
func engineExecWorkspace(t *testing.T, r *wardenRoot, engine string) {
	p := r.policy(enginePolicy(engine, `name = "exec-ws"
[fs]
write = ["$WORK_DIR"]
[exec]
allow = ["sh", "cp"]
workspace = true
`))
	id := r.create("execws", p, workspace(t, 0))
	if out := r.sh(id, "cp /bin/sh /workspace/mysh && /workspace/mysh -c 'echo ran'"); out != "ran\n" {
		t.Errorf("a program in the workspace: %q", out)
	}
	if res := r.exec(id, nil, "sh", "-c", "id"); res.Exit == 0 {
		t.Errorf("id ran: exec.allow does not list it")
	}
}

// engineFreeze: a frozen session refuses commands until thawed; session
// kill ends every process but the agent (under gVisor the agent kills them
// from inside: the host cannot signal them one by one), running commands
// end with 137 and say why, the session goes on, a frozen one stays frozen.
func engineFreeze(t *testing.T, r *wardenRoot, engine string) {
	p := r.policy(enginePolicy(engine, `name = "freeze"`))
	id := r.create("freeze", p, workspace(t, 0))
	if res := r.warden("session", "freeze", id); res.Exit != 0 {
		t.Fatalf("freeze: exit %d, %s", res.Exit, res.Stderr)
	}
	if res := r.exec(id, nil, "true"); res.Exit != 125 || !strings.Contains(res.Stderr, "session is frozen") {
		t.Errorf("exec in a frozen session: exit %d, %q", res.Exit, res.Stderr)
	}
	if res := r.warden("session", "thaw", id); res.Exit != 0 {
		t.Fatalf("thaw: exit %d, %s", res.Exit, res.Stderr)
	}
	r.expectAlive(id)
	if engine != "gvisor" {
		return // killswitch_test.go covers kill on containers, from the host's side
	}
	// sleeps counts the sandbox's sleep processes, seen from inside.
	sleeps := func() string {
		res := r.exec(id, nil, "python3", "-c", `import os
n = 0
for p in os.listdir("/proc"):
    try:
        n += p.isdigit() and open(f"/proc/{p}/cmdline").read().startswith("sleep")
    except OSError:
        pass
print(n)`)
		return strings.TrimSpace(res.Stdout)
	}
	waitSleeps := func(n string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); sleeps() != n; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("want %s sleeps in the sandbox, see %s", n, sleeps())
			}
		}
	}
	bg := r.command("exec", "--session", id, "--", "sh", "-c", "sleep 101 & sleep 102; echo not reached")
	var stderr strings.Builder
	bg.Stderr = &stderr
	if err := bg.Start(); err != nil {
		t.Fatal(err)
	}
	waitSleeps("2")
	if res := r.warden("session", "kill", id); res.Exit != 0 || !strings.Contains(res.Stdout, "killed 3 process(es)") {
		t.Fatalf("session kill: exit %d, stdout %q, stderr %q; want 3 (sh and two sleeps)", res.Exit, res.Stdout, res.Stderr)
	}
	if bg.Wait(); bg.ProcessState.ExitCode() != 137 || !strings.Contains(stderr.String(), "warden session kill") {
		t.Errorf("the killed command: exit %d, stderr %q; want 137 and a line saying the session was killed", bg.ProcessState.ExitCode(), stderr.String())
	}
	if n := sleeps(); n != "0" {
		t.Errorf("%s sleeps left after session kill", n)
	}
	r.expectAlive(id)
	// A frozen session: the kill ends its processes and it stays frozen.
	bg = r.command("exec", "--session", id, "--", "sleep", "100")
	if err := bg.Start(); err != nil {
		t.Fatal(err)
	}
	waitSleeps("1")
	if res := r.warden("session", "freeze", id); res.Exit != 0 {
		t.Fatalf("freeze: exit %d, %s", res.Exit, res.Stderr)
	}
	if res := r.warden("session", "kill", id); res.Exit != 0 || !strings.Contains(res.Stdout, "killed 1 process(es)") {
		t.Fatalf("session kill of a frozen session: exit %d, stdout %q, stderr %q", res.Exit, res.Stdout, res.Stderr)
	}
	if bg.Wait(); bg.ProcessState.ExitCode() != 137 {
		t.Errorf("the command of the frozen session: exit %d, want 137", bg.ProcessState.ExitCode())
	}
	if st := r.stateOf(id); st != "frozen" {
		t.Errorf("a frozen session after kill: state %q, want frozen", st)
	}
	if res := r.warden("session", "thaw", id); res.Exit != 0 {
		t.Fatalf("thaw: exit %d, %s", res.Exit, res.Stderr)
	}
	r.expectAlive(id)
}

// engineFiles: grants, masks, the read-only root, noexec writes and the
// owner of what the sandbox writes, on both engines.
func engineFiles(t *testing.T, r *wardenRoot, engine string) {
	data := tempDir(t)
	os.WriteFile(filepath.Join(data, "note.txt"), []byte("host note\n"), 0o644)
	os.Mkdir(filepath.Join(data, "secret"), 0o755)
	os.WriteFile(filepath.Join(data, "secret", "key"), []byte("k"), 0o600)
	ws := workspace(t, 1000)
	p := r.policy(enginePolicy(engine, fmt.Sprintf(`name = "files"
[fs]
read = [%q]
write = ["$WORK_DIR"]
deny = [%q]
`, data, filepath.Join(data, "secret"))))
	id := r.create("files", p, ws)

	// The allowed half.
	if out := r.sh(id, "cat "+data+"/note.txt; echo written > /workspace/out.txt"); out != "host note\n" {
		t.Errorf("read grant: %q", out)
	}
	fi, err := os.Stat(filepath.Join(ws, "out.txt"))
	if err != nil {
		t.Fatalf("the sandbox's write did not reach the workspace: %v", err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 1000 || st.Gid != 1000 {
		t.Errorf("a file the sandbox wrote is owned by %d:%d on the host, want the workspace's owner 1000:1000", st.Uid, st.Gid)
	}
	// The forbidden half.
	for _, c := range []struct{ what, script string }{
		{"write to a read grant", "echo x > " + data + "/note.txt"},
		{"a denied folder", "cat " + data + "/secret/key"},
		{"write to the root", "touch /usr/warden-was-here"},
		{"run what it wrote", "cp /bin/true /workspace/t && /workspace/t"},
		{"see the host's other folders", "ls /root"},
	} {
		if res := r.exec(id, nil, "sh", "-c", c.script); res.Exit == 0 {
			t.Errorf("%s: exit 0, want a refusal (stdout %q)", c.what, res.Stdout)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(data, "note.txt")); string(got) != "host note\n" {
		t.Errorf("the host's read-only file changed: %q", got)
	}
	if _, err := os.Stat("/usr/warden-was-here"); err == nil {
		os.Remove("/usr/warden-was-here")
		t.Errorf("the sandbox wrote into the host's /usr")
	}
}

func engineIdentityAndExit(t *testing.T, r *wardenRoot, engine string) {
	p := r.policy(enginePolicy(engine, `name = "ident"`))
	id := r.create("ident", p, workspace(t, 0))
	if out := r.sh(id, "id -u; id -g"); out != "0\n0\n" {
		t.Errorf("identity inside: %q, want the sandbox's root", out)
	}
	if res := r.exec(id, nil, "sh", "-c", "exit 7"); res.Exit != 7 {
		t.Errorf("exit 7: got %d", res.Exit)
	}
	if res := r.exec(id, nil, "sh", "-c", "kill -TERM $$"); res.Exit != 128+15 {
		t.Errorf("a command killed by SIGTERM: exit %d, want 143", res.Exit)
	}
	if res := r.exec(id, nil, "no-such-program"); res.Exit != 127 {
		t.Errorf("a missing program: exit %d, want 127 (%s)", res.Exit, res.Stderr)
	}
	if res := r.exec(id, []string{"--timeout", "1s"}, "sleep", "30"); res.Exit != 128+9 || !strings.Contains(res.Stderr, "timeout 1s exceeded") {
		t.Errorf("timeout: exit %d, stderr %q", res.Exit, res.Stderr)
	}
	// Failures in the command's process before its execve come back as
	// warden's errors, one line each, many times over (the agent's spawn
	// must not leave anything behind them).
	for i := 0; i < 20; i++ {
		if res := r.exec(id, []string{"--cwd", "/no-such-folder"}, "true"); res.Exit != 126 || !strings.Contains(res.Stderr, "working folder /no-such-folder does not exist in the sandbox") {
			t.Fatalf("a missing working folder: exit %d, stderr %q", res.Exit, res.Stderr)
		}
		if res := r.exec(id, nil, "/etc/hostname"); res.Exit != 126 {
			t.Fatalf("a file that cannot run: exit %d, stderr %q", res.Exit, res.Stderr)
		}
	}
	r.expectAlive(id)
}

// engineStdio: 10 MB through stdin and back, byte for byte, and stderr
// apart from stdout.
func engineStdio(t *testing.T, r *wardenRoot, engine string) {
	p := r.policy(enginePolicy(engine, `name = "stdio"`))
	id := r.create("stdio", p, workspace(t, 0))
	in := make([]byte, 10<<20)
	rand.Read(in)
	cmd := r.command("exec", "--session", id, "--", "sh", "-c", "cat; echo to-stderr >&2")
	var out, errOut bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(in), &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("exec: %v: %s", err, errOut.String())
	}
	if !bytes.Equal(out.Bytes(), in) {
		t.Errorf("10 MB through stdin and stdout: got %d bytes back, not the same", out.Len())
	}
	if errOut.String() != "to-stderr\n" {
		t.Errorf("stderr: %q", errOut.String())
	}
}

// engineStdioFiles: output into a regular file lands where the caller's
// open file is, appended after what is there, and 2>&1 keeps its order.
func engineStdioFiles(t *testing.T, r *wardenRoot, engine string) {
	p := r.policy(enginePolicy(engine, `name = "files-out"`))
	id := r.create("out", p, workspace(t, 0))
	path := filepath.Join(tempDir(t), "out.log")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteString("before\n")
	cmd := r.command("exec", "--session", id, "--", "sh", "-c", "echo one; echo two >&2; echo three")
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Run(); err != nil {
		t.Fatalf("exec: %v", err)
	}
	f.WriteString("after\n")
	if got, _ := os.ReadFile(path); string(got) != "before\none\ntwo\nthree\nafter\n" {
		t.Errorf("a file as stdout and stderr holds %q", got)
	}
}

func engineLimits(t *testing.T, r *wardenRoot, engine string) {
	p := r.policy(enginePolicy(engine, `name = "limits"
[limits]
memory = "128MiB"
pids = 32
`))
	id := r.create("limits", p, workspace(t, 0))
	// The host's cgroup holds the sandbox (under gVisor, runsc's own
	// processes too, and room for them).
	if limit, err := os.ReadFile(filepath.Join(r.cgroup("memory", id), "memory.limit_in_bytes")); err != nil || strings.TrimSpace(string(limit)) == "9223372036854771712" {
		t.Errorf("the session's memory cgroup: limit %q, %v; want the policy's", limit, err)
	}
	// pids: the 33rd process cannot start; the session goes on.
	res := r.exec(id, nil, "sh", "-c", "for i in $(seq 60); do sleep 5 & done; echo all-started")
	if strings.Contains(res.Stdout, "all-started") && res.Exit == 0 {
		t.Errorf("60 processes started under pids = 32")
	}
	r.expectAlive(id)
	// memory: the command is killed and that is said.
	res = r.exec(id, nil, "sh", "-c", `x=$(head -c 300000000 /dev/zero | tr "\0" a); echo ${#x}`)
	if res.Exit != 128+9 || !strings.Contains(res.Stderr, "memory limit 128MiB exceeded") {
		t.Errorf("300 MB under memory = 128MiB: exit %d, stderr %q", res.Exit, res.Stderr)
	}
	switch engine {
	case "container":
		r.expectAlive(id) // only the command was killed
	case "gvisor":
		// The limit is the whole sandbox's: it ended, and says so.
		res := r.exec(id, nil, "true")
		if res.Exit == 0 {
			t.Errorf("a gvisor session ran a command after its sandbox exceeded its memory limit")
		}
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			stopped := true
			for _, s := range r.list() {
				if s.ID == id && s.State == "running" {
					stopped = false
				}
			}
			if stopped {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("session %s is still listed as running after its sandbox ended", id)
	}
}

// engineExecAllow: exec.allow holds by name, by path, through the dynamic
// loader and after a copy, on both engines (Landlock on one, the file
// view on the other).
func engineExecAllow(t *testing.T, r *wardenRoot, engine string) {
	p := r.policy(enginePolicy(engine, `name = "allow"
[fs]
write = ["$WORK_DIR"]
[exec]
allow = ["sh", "cat", "cp", "echo"]
`))
	ws := workspace(t, 0)
	id := r.create("allow", p, ws)
	if out := r.sh(id, "echo allowed | cat"); out != "allowed\n" {
		t.Errorf("allowed programs: %q", out)
	}
	for _, c := range []string{
		"id",
		"/usr/bin/id",
		"/lib64/ld-linux-x86-64.so.2 /usr/bin/id",
		"cp /usr/bin/id /workspace/id && /workspace/id",
		"cp /usr/bin/id /tmp/id && /lib64/ld-linux-x86-64.so.2 /tmp/id",
		"cp /bin/cat /workspace/c && /workspace/c /dev/null",
		"cp /bin/cat /tmp/c && /lib64/ld-linux-x86-64.so.2 /tmp/c /dev/null",
	} {
		res := r.exec(id, nil, "sh", "-c", c)
		if res.Exit == 0 || strings.Contains(res.Stdout, "uid=") {
			t.Errorf("%q ran under exec.allow: exit %d, stdout %q", c, res.Exit, res.Stdout)
		}
	}
	if _, err := os.Stat(filepath.Join(ws, "id")); err == nil {
		t.Errorf("a program exec.allow does not list could be copied out of the system folders")
	}
}

// engineAuditAndReadoption: every command has its audit line, and a
// daemon killed -9 leaves sessions the next one serves.
func engineAuditAndReadoption(t *testing.T, r *wardenRoot, engine string) {
	p := r.policy(enginePolicy(engine, `name = "audit"`))
	id := r.create("audit", p, workspace(t, 0))
	r.sh(id, "echo first")
	r.killDaemon(syscall.SIGKILL)
	if out := r.sh(id, "echo second"); out != "second\n" {
		t.Errorf("after the daemon's kill -9: %q", out)
	}
	recs, _ := r.logs("--session", id)
	var argvs []string
	for _, rec := range recs {
		if rec.Event == "exec" {
			argvs = append(argvs, strings.Join(rec.Argv, " "))
		}
	}
	if want := []string{"sh -c echo first", "sh -c echo second"}; strings.Join(argvs, "|") != strings.Join(want, "|") {
		t.Errorf("audit lines of the session: %q, want %q", argvs, want)
	}
}

// engineTerminal: -t gives the command a terminal of the caller's window
// size, which follows the caller's resizes, that it reads the user's
// typing from, and its output reaches the caller through warden's filter,
// on both engines (under gVisor the agent relays the terminal, which
// cannot be passed out of gVisor).
func engineTerminal(t *testing.T, r *wardenRoot, engine string) {
	p := r.policy(enginePolicy(engine, `name = "tty"`))
	id := r.create("tty", p, workspace(t, 0))
	script := `import os, signal, sys
signal.signal(signal.SIGWINCH, lambda *a: print("resized", os.get_terminal_size(), flush=True))
print("tty", os.isatty(0), os.isatty(1), os.isatty(2), os.get_terminal_size(), flush=True)
print("got", input(), flush=True)
sys.exit(7)`
	term := startOnCallerTerminal(t, r.command("exec", "-t", "--session", id, "--", "python3", "-c", script), &unix.Winsize{Row: 33, Col: 101})
	term.waitFor("tty True True True os.terminal_size(columns=101, lines=33)")
	if err := unix.IoctlSetWinsize(int(term.master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 40, Col: 120}); err != nil {
		t.Fatal(err)
	}
	term.waitFor("resized os.terminal_size(columns=120, lines=40)")
	term.master.Write([]byte("typed by the user\r"))
	term.waitFor("got typed by the user")
	var exit *exec.ExitError
	if err := term.wait(); !errors.As(err, &exit) || exit.ExitCode() != 7 {
		t.Errorf("exec -t: %v, want exit 7; terminal %q", err, term.output())
	}
	out, err := onCallerTerminal(t, r.command("exec", "-t", "--session", id, "--", "sh", "-c", escapesScript))
	if err != nil {
		t.Fatalf("exec -t: %v; terminal %q", err, out)
	}
	checkEscapes(t, "exec -t", out)
	r.expectAlive(id)
}

// TestGVisorEngineChoice: the engine a policy asks for can only be
// strengthened, and a session under gVisor runs on gVisor's kernel.
func TestGVisorEngineChoice(t *testing.T) {
	requireRunsc(t)
	r := newRoot(t)
	plain := r.policy(`name = "plain"`)
	ws := workspace(t, 0)
	kernel := func(args ...string) string {
		res := r.warden(append(args, "--", "cat", "/proc/version")...)
		if res.Exit != 0 {
			t.Fatalf("%v: exit %d, %s", args, res.Exit, res.Stderr)
		}
		return res.Stdout
	}
	if v := kernel("do", "--policy", plain, "--workspace", ws); strings.Contains(v, "gvisor") {
		t.Errorf("a plain policy ran under gVisor: %s", v)
	}
	if v := kernel("do", "--engine", "gvisor", "--policy", plain, "--workspace", ws); !strings.Contains(v, "gvisor") {
		t.Errorf("do --engine gvisor ran on the host's kernel: %s", v)
	}
	gv := r.policy(enginePolicy("gvisor", `name = "gv"`))
	if v := kernel("do", "--engine", "container", "--policy", gv, "--workspace", ws); !strings.Contains(v, "gvisor") {
		t.Errorf("--engine container weakened a gvisor policy: %s", v)
	}
	if v := kernel("do", "--policy", gv, "--policy", plain, "--workspace", ws); !strings.Contains(v, "gvisor") {
		t.Errorf("a merge with a plain policy weakened a gvisor one: %s", v)
	}
	res := r.warden("do", "--engine", "kvm", "--policy", plain, "--workspace", ws, "--", "true")
	if res.Exit != 125 || !strings.Contains(res.Stderr, `unknown engine "kvm"; use one of "container", "gvisor"`) {
		t.Errorf("--engine kvm: exit %d, %q", res.Exit, res.Stderr)
	}
	// Warm pools keep the engine: a session asking for gVisor never takes
	// a container's pooled sandbox, however alike their specs, and a
	// gVisor policy's pool serves its sessions on gVisor.
	r.fill(plain, 1)
	r.waitPool(1)
	id := r.id("strengthened")
	if res := r.warden("session", "create", "--engine", "gvisor", "--policy", plain, "--workspace", ws, "--id", id); res.Exit != 0 {
		t.Fatalf("session create --engine gvisor: exit %d, %s", res.Exit, res.Stderr)
	}
	if v := r.sh(id, "cat /proc/version"); !strings.Contains(v, "gvisor") {
		t.Errorf("session create --engine gvisor claimed a container's pooled sandbox: %s", v)
	}
	if st := r.poolStatus()[0]; st.Hits != 0 || st.Ready != 1 {
		t.Errorf("the container pool served a gVisor session: %+v", st)
	}
	if res := r.warden("pool", "drain"); res.Exit != 0 {
		t.Fatal(res.Stderr)
	}
	r.fill(gv, 1)
	r.waitPool(1)
	id = r.create("warm-gvisor", gv, ws)
	if v := r.sh(id, "cat /proc/version"); !strings.Contains(v, "gvisor") || r.container(id) == id {
		t.Errorf("a gvisor policy's session from its pool: container %s, kernel %s", r.container(id), v)
	}
	if res := r.warden("pool", "drain"); res.Exit != 0 {
		t.Fatal(res.Stderr)
	}
	ruled := r.policy(enginePolicy("gvisor", "name = \"ruled\"\n[commands]\ndeny = [\"git push **\"]\n"))
	res = r.warden("session", "create", "--policy", ruled, "--workspace", ws)
	if res.Exit == 0 || !strings.Contains(res.Stderr, "[commands] rules are not available under engine \"gvisor\" yet") {
		t.Errorf("a gvisor policy with command rules: exit %d, %q", res.Exit, res.Stderr)
	}
	if out, err := exec.Command(wardenBinary, "policy", "explain", gv).CombinedOutput(); err != nil || !strings.Contains(string(out), "engine gvisor") ||
		!strings.Contains(string(out), "warm pools as on engine container") || strings.Contains(string(out), "no warm pool") {
		t.Errorf("policy explain of a gvisor policy: %v\n%s", err, out)
	}
}

// TestGVisorViewsShared: the views that hold exec.allow under gVisor are
// shared by every process on a root (the daemon, `warden do`), and none
// of them may take a view away from a sandbox another is starting or
// running, nor gc: no sandbox ever sees the hidden program.
func TestGVisorViewsShared(t *testing.T) {
	requireRunsc(t)
	r := newRoot(t)
	hidden := ""
	for _, p := range []string{"/usr/lib/apt/methods/http", "/usr/lib/git-core/git", "/usr/lib/openssh/ssh-keysign"} {
		if _, err := os.Stat(p); err == nil {
			hidden = p
			break
		}
	}
	if hidden == "" {
		t.Fatal("no program under /usr/lib to hide on this host")
	}
	p := r.policy(enginePolicy("gvisor", "name = \"views\"\n[exec]\nallow = [\"sh\", \"true\"]\n"))
	ws := workspace(t, 0)
	check := fmt.Sprintf("if [ -e %s ]; then echo VISIBLE; fi", hidden)
	const rounds = 30
	var wg sync.WaitGroup
	errs := make(chan string, 3*rounds)
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				var res sandboxResult
				if w == 0 {
					id := fmt.Sprintf("views-%d-%s", i, randomHex(3))
					if c := r.warden("session", "create", "--policy", p, "--workspace", ws, "--id", id); c.Exit != 0 {
						errs <- "session create: " + c.Stderr
						continue
					}
					res = r.exec(id, nil, "sh", "-c", check)
					r.warden("session", "rm", id)
				} else {
					res = r.warden("do", "--policy", p, "--workspace", ws, "--", "sh", "-c", check)
				}
				if res.Exit != 0 || strings.Contains(res.Stdout, "VISIBLE") {
					errs <- fmt.Sprintf("worker %d round %d: exit %d, stdout %q, stderr %q", w, i, res.Exit, res.Stdout, res.Stderr)
				}
			}
		}(w)
	}
	// And gc, which removes the views no sandbox uses, all the while.
	done := make(chan struct{})
	gcDone := make(chan struct{})
	go func() {
		defer close(gcDone)
		for {
			select {
			case <-done:
				return
			default:
			}
			r.warden("gc")
		}
	}()
	wg.Wait()
	close(done)
	<-gcDone
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestGVisorReadyProcess: under gVisor the agent clones the next command's
// process while it is idle (a clone of the filtered agent costs gVisor
// milliseconds). That process is as restricted as a command: the policy's
// seccomp filter, no capability (also in a sandbox claimed from a pool,
// whose agent held CAP_SYS_ADMIN until its claim). A command that stops or
// kills it does not keep the next command from starting at once, and
// `session kill` does not count it.
func TestGVisorReadyProcess(t *testing.T) {
	requireRunsc(t)
	r := newRoot(t)
	p := r.policy(enginePolicy("gvisor", "name = \"ready\"\n[exec]\nallow = [\"sh\", \"cat\", \"sleep\", \"true\"]\n"))
	ws := workspace(t, 0)
	// The agent's other child than this shell (the process the next
	// command will run in), waited for: it is made once the agent is
	// idle, while the shell starts. Its status, then what to do to it.
	check := func(id, how, then string) {
		t.Helper()
		script := `i=0; while [ $i -lt 100 ]; do
  for p in $(cat /proc/1/task/1/children); do [ "$p" != $$ ] && ready=$p; done
  [ -n "$ready" ] && break; sleep 0.05; i=$((i+1))
done
[ -n "$ready" ] || { echo no ready process; exit 1; }
cat /proc/$ready/status
` + then
		res := r.exec(id, nil, "sh", "-c", script)
		if res.Exit != 0 {
			t.Fatalf("%s: exit %d, stdout %q, stderr %q", how, res.Exit, res.Stdout, res.Stderr)
		}
		for _, want := range []string{"Seccomp:\t2", "CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "CapBnd:\t0000000000000000"} {
			if !strings.Contains(res.Stdout, want+"\n") {
				t.Errorf("%s: the ready process's status lacks %q:\n%s", how, want, res.Stdout)
			}
		}
	}
	id := r.create("ready", p, ws)
	run := func(how string) {
		t.Helper()
		start := time.Now()
		res := r.exec(id, nil, "sh", "-c", "echo ran")
		// A stopped process kept ready would be waited for 5 s.
		if took := time.Since(start); res.Exit != 0 || res.Stdout != "ran\n" || took > 3*time.Second {
			t.Errorf("a command %s: exit %d, stdout %q, stderr %q, took %s", how, res.Exit, res.Stdout, res.Stderr, took)
		}
	}
	r.exec(id, nil, "true")
	check(id, "a cold session", "kill -STOP $ready")
	run("after the ready process was stopped")
	check(id, "after a stop", "kill -KILL $ready")
	run("after the ready process was killed")
	check(id, "after a kill", "")
	if res := r.warden("session", "kill", id); res.Exit != 0 || !strings.Contains(res.Stdout, "killed 0 process(es)") {
		t.Errorf("session kill with only the ready process: exit %d, stdout %q, stderr %q; want 0 killed", res.Exit, res.Stdout, res.Stderr)
	}
	run("after session kill")
	// Claimed from a pool: made after the claim dropped the agent's
	// capabilities and loaded the claim's filter.
	r.fill(p, 1)
	r.waitPool(1)
	pooled := r.create("ready", p, ws)
	if st := r.poolStatus(); len(st) != 1 || st[0].Hits != 1 {
		t.Fatalf("the session was not claimed from the pool: %+v", st)
	}
	r.exec(pooled, nil, "true")
	check(pooled, "a claimed session", "")
}
