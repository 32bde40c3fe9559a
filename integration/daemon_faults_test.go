package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// daemonPids lists the processes serving this root as `warden daemon`.
func (r *wardenRoot) daemonPids() []int {
	var pids []int
	for _, pid := range r.processes() {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		args := bytes.Split(bytes.TrimRight(cmdline, "\x00"), []byte{0})
		if len(args) > 0 && string(args[len(args)-1]) == "daemon" {
			pids = append(pids, pid)
		}
	}
	return pids
}

// theDaemon is the one daemon of this root; the test fails if there is
// not exactly one. A daemon a CLI call started on a served root refuses
// and exits: on a loaded machine it may take a moment to be gone.
func (r *wardenRoot) theDaemon() int {
	r.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids := r.daemonPids()
		if len(pids) == 1 {
			return pids[0]
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("want one daemon serving %s, found %v", r.root, pids)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stopProcess sends pid SIGSTOP and waits until every thread of it has
// stopped. kill returns when the stop is only pending: each thread stops
// when it next runs, and on a loaded machine a daemon thread may first
// take a connection, read a request and run the command (~100ms seen).
func stopProcess(t *testing.T, pid int) {
	t.Helper()
	start := time.Now()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %d: %v", pid, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		// Twice: a thread may have started one more before it stopped,
		// after the first listing; once all are stopped none can.
		running := runningThreads(pid)
		if len(running) == 0 {
			if running = runningThreads(pid); len(running) == 0 {
				t.Logf("%d stopped %s after SIGSTOP", pid, time.Since(start).Round(time.Millisecond))
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d: threads %v still not stopped 10s after SIGSTOP", pid, running)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// runningThreads lists the threads of pid that are not stopped (State T)
// or gone (Z, X), with their state.
func runningThreads(pid int) []string {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return []string{err.Error()}
	}
	var running []string
	for _, task := range tasks {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, task.Name()))
		if err != nil {
			continue // the thread ended
		}
		for _, line := range strings.Split(string(status), "\n") {
			if state, ok := strings.CutPrefix(line, "State:"); ok {
				if f := strings.Fields(state); len(f) == 0 || !strings.Contains("TZX", f[0]) {
					running = append(running, task.Name()+":"+strings.TrimSpace(state))
				}
			}
		}
	}
	return running
}

// timedExec runs argv in a session and says how long it took.
func (r *wardenRoot) timedExec(id string, argv ...string) (sandboxResult, time.Duration) {
	r.t.Helper()
	start := time.Now()
	res := r.exec(id, nil, argv...)
	return res, time.Since(start)
}

// TestDaemonSocketRemoved: a tmp cleaner removes the daemon's socket (and
// daemon.lock, which a daemon of an earlier warden locked). The daemon
// makes its socket again at once, so the next call works without waiting,
// and no second daemon ever starts: the session stays visible to exec,
// create and gc. A daemon started by hand on the served root says why it
// cannot serve and exits non-zero.
func TestDaemonSocketRemoved(t *testing.T) {
	r := newRoot(t)
	ws := tempDir(t)
	policy := r.policy("name = \"sock\"\n[fs]\nwrite = [\"$WORK_DIR\"]\n[exec]\nallow = [\"sh\", \"cat\"]\n")
	id := r.create("sock", policy, ws)
	daemon := r.theDaemon()
	sock := filepath.Join(r.root, "warden.sock")

	os.Remove(sock)
	res, took := r.timedExec(id, "sh", "-c", "echo one > /workspace/one")
	if res.Exit != 0 || took > 3*time.Second {
		t.Fatalf("exec after the socket was removed: exit %d in %s, stderr %q; want 0 within 3s", res.Exit, took.Round(time.Millisecond), res.Stderr)
	}
	t.Logf("exec right after the socket was removed took %s", took.Round(time.Millisecond))
	if _, err := os.Stat(sock); err != nil {
		t.Errorf("the socket was not made again: %v", err)
	}

	for _, f := range []string{"warden.sock", "daemon.lock"} {
		os.Remove(filepath.Join(r.root, f))
	}
	if res := r.warden("session", "create", "--id", id, "--policy", policy, "--workspace", ws); res.Exit == 0 || !strings.Contains(res.Stderr, "exists") {
		t.Errorf("create of the same id after the socket and lock were removed: exit %d, %q; want it refused as existing", res.Exit, res.Stderr)
	}
	if res := r.warden("gc"); res.Exit != 0 {
		t.Errorf("gc: exit %d, %s", res.Exit, res.Stderr)
	}
	if out := r.sh(id, "cat /workspace/one"); out != "one\n" {
		t.Errorf("the session after gc: %q", out)
	}
	if ids := r.list(); len(ids) != 1 || ids[0].ID != id {
		t.Errorf("session ls: %+v; want only %s", ids, id)
	}
	if pid := r.theDaemon(); pid != daemon {
		t.Errorf("the daemon is now pid %d, was %d", pid, daemon)
	}

	// A second daemon started by hand refuses, and the first goes on.
	start := time.Now()
	res = r.warden("daemon")
	if res.Exit == 0 || !strings.Contains(res.Stderr, "already serves") {
		t.Errorf("a daemon started by hand on a served root: exit %d, stderr %q; want non-zero and why", res.Exit, res.Stderr)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("the refused daemon took %s to exit", took)
	}
	r.expectAlive(id)
	if pid := r.theDaemon(); pid != daemon {
		t.Errorf("the daemon is now pid %d, was %d", pid, daemon)
	}
}

// TestDaemonConnectionFlood: far more idle connections than the daemon's
// descriptors (its limit lowered to 512 for the test), on both its
// sockets, neither make it spin nor keep a real client out: exec and a
// stream ping still work at once, the daemon stays
// near idle, and a connection that sends nothing is closed by the daemon.
func TestDaemonConnectionFlood(t *testing.T) {
	r := newRoot(t)
	if err := os.MkdirAll(r.root, 0o711); err != nil {
		t.Fatal(err)
	}
	daemon := exec.Command("prlimit", "--nofile=512:512", wardenBinary, "--root", r.root, "daemon")
	daemon.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	go daemon.Wait() // the root's teardown stops it
	sock := filepath.Join(r.root, "warden.sock")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if c, err := net.Dial("unixpacket", sock); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the daemon did not come up")
		}
	}
	id := r.create("flood", r.policy("name = \"flood\"\n[exec]\nallow = [\"true\"]\n"), tempDir(t))

	const flood = 1000
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < flood; i++ {
		// Half on the stream socket: both share the daemon's limits.
		c, err := net.DialTimeout("unixpacket", sock, time.Second)
		if i%2 == 1 {
			c, err = net.DialTimeout("unix", filepath.Join(r.root, "warden.stream.sock"), time.Second)
		}
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
	}
	pid := r.theDaemon()
	cpu0 := cpuTime(t, pid)
	time.Sleep(2 * time.Second)
	if used := cpuTime(t, pid) - cpu0; used > 300*time.Millisecond {
		t.Errorf("with %d idle connections the daemon used %s of CPU in 2s; want it near idle", flood, used)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, wardenBinary, "--root", r.root, "exec", "--session", id, "--", "true")
	cmd.WaitDelay = time.Second // a request never read holds the output pipe
	out, err := cmd.CombinedOutput()
	if err != nil || time.Since(start) > 3*time.Second {
		t.Fatalf("exec among %d idle connections: %v after %s, %s; want it to run within 3s", flood, err, time.Since(start).Round(time.Millisecond), out)
	}
	t.Logf("exec among %d idle connections took %s", flood, time.Since(start).Round(time.Millisecond))
	start = time.Now()
	if got := r.streamCall(message(`{"v":1,"op":"ping"}`)); jsonText(got.last) != `{"v":1}` || time.Since(start) > 3*time.Second {
		t.Errorf("a stream ping among %d idle connections: %+v after %s; want {v: 1} within 3s", flood, got.last, time.Since(start).Round(time.Millisecond))
	}
	// The newest idle connection is still open; the daemon closes it
	// when it has sent nothing for a while, or sooner for a newer one:
	// which of the two sockets' connections the daemon took last is its
	// accept order, not the order they were made in. Either way it says
	// why.
	last := conns[len(conns)-1]
	last.SetReadDeadline(time.Now().Add(8 * time.Second))
	buf := make([]byte, 4096)
	n, err := last.Read(buf)
	if said := string(buf[:n]); err != nil || !strings.Contains(said, "within") && !strings.Contains(said, "sent no request and was closed") {
		t.Errorf("an idle connection: read %q, %v; want the daemon to say it sent no request in time", buf[:n], err)
	}
	if n, err := last.Read(buf); err == nil && n > 0 {
		t.Errorf("the idle connection was left open")
	}
}

// cpuTime is the CPU time a process has used (user and system).
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+2:]))
	utime, _ := strconv.Atoi(fields[11])
	stime, _ := strconv.Atoi(fields[12])
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ
}

// TestExecSignalWhileDaemonAway: `warden exec` stops at SIGTERM (exit
// 143) while the daemon does not take its request, whether it waits for
// the daemon to come up (its socket gone, the daemon stopped) or has sent
// the request to a daemon that does not read it, on the C fast path and
// the Go one; and nothing runs. Once the daemon goes on, exec works.
func TestExecSignalWhileDaemonAway(t *testing.T) {
	r := newRoot(t)
	ws := tempDir(t)
	id := r.create("sig", r.policy("name = \"sig\"\n[fs]\nwrite = [\"$WORK_DIR\"]\n[exec]\nallow = [\"sh\", \"true\", \"touch\", \"sleep\"]\n"), ws)
	daemon := r.theDaemon()
	stopped := true
	defer func() {
		if stopped {
			syscall.Kill(daemon, syscall.SIGCONT)
		}
	}()
	stopProcess(t, daemon)
	term := func(name string, env []string, flags ...string) {
		t.Helper()
		cmd := r.command(append(append([]string{"exec", "--session", id}, flags...), "--", "sh", "-c", "echo ran > /workspace/"+name)...)
		cmd.Env = append(cmd.Env, env...)
		// A file, not a pipe: the request carries the caller's stdio to
		// the stopped daemon, which would hold a pipe open.
		stderrFile := filepath.Join(tempDir(t), "stderr")
		f, err := os.Create(stderrFile)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd.Stderr = f
		stderr := func() string { b, _ := os.ReadFile(stderrFile); return string(b) }
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		time.Sleep(time.Second)
		sent := time.Now()
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 143 || !strings.Contains(stderr(), "SIGTERM") {
				t.Errorf("%s: %v, stderr %q; want exit 143 and why", name, err, stderr())
			}
			t.Logf("%s: ended %s after SIGTERM", name, time.Since(sent).Round(time.Millisecond))
		case <-time.After(3 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Errorf("%s: still waiting 3s after SIGTERM; stderr %q", name, stderr())
		}
	}
	term("fast-path", nil)
	term("go-path", []string{"WARDEN_FASTPATH=off"})
	// --result says so: interrupted, nothing ran.
	resultFile := filepath.Join(tempDir(t), "result.json")
	term("result", nil, "--result", resultFile)
	if data, _ := os.ReadFile(resultFile); !strings.Contains(string(data), `"exit":143`) || !strings.Contains(string(data), `"code":"interrupted"`) {
		t.Errorf("--result of an exec stopped by SIGTERM: %q; want exit 143, code interrupted", data)
	}
	os.Remove(filepath.Join(r.root, "warden.sock"))
	term("coming-up", nil)

	syscall.Kill(daemon, syscall.SIGCONT)
	stopped = false
	if res, took := r.timedExec(id, "true"); res.Exit != 0 || took > 3*time.Second {
		t.Errorf("exec once the daemon went on: exit %d in %s, %q", res.Exit, took, res.Stderr)
	}
	// The other half: a signal to an exec the daemon has taken goes to
	// the command, which decides (here: exit 7).
	for _, env := range [][]string{nil, {"WARDEN_FASTPATH=off"}} {
		cmd := r.command("exec", "--session", id, "--", "sh", "-c", "trap 'exit 7' TERM; touch /workspace/trap; while :; do sleep 0.05; done")
		cmd.Env = append(cmd.Env, env...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(ws, "trap")); err == nil {
				break
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				t.Fatalf("%v: the command did not start", env)
			}
		}
		os.Remove(filepath.Join(ws, "trap"))
		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); cmd.ProcessState.ExitCode() != 7 {
			t.Errorf("%v: SIGTERM to an exec in flight: %v; want the command's trap to exit 7", env, err)
		}
	}
	for _, name := range []string{"fast-path", "go-path", "result", "coming-up"} {
		if _, err := os.Stat(filepath.Join(ws, name)); err == nil {
			t.Errorf("%s: the command ran after its caller had gone", name)
		}
	}
	if pid := r.theDaemon(); pid != daemon {
		t.Errorf("the daemon is now pid %d, was %d", pid, daemon)
	}
}

// TestExecSessionRemoved: a command cut off by `session rm --force` says
// its session was removed, not that warden lost its agent.
func TestExecSessionRemoved(t *testing.T) {
	r := newRoot(t)
	id := r.create("rm", r.policy("name = \"rm\"\n[exec]\nallow = [\"sleep\"]\n"), tempDir(t))
	cmd := r.command("exec", "--session", id, "--", "sleep", "30")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.waitStarted(id, "sleep")
	if res := r.warden("session", "rm", "--force", id); res.Exit != 0 {
		t.Fatalf("session rm --force: exit %d, %s", res.Exit, res.Stderr)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 || !strings.Contains(stderr.String(), "was removed") || strings.Contains(stderr.String(), "lost the agent") {
		t.Errorf("exec cut off by session rm --force: %v, stderr %q; want it to say the session was removed", err, stderr.String())
	}
}

// TestDaemonTooManyDescriptors: a request carrying more descriptors than
// a message may is refused as such, not as a message too large; one with
// three goes through.
func TestDaemonTooManyDescriptors(t *testing.T) {
	r := newRoot(t)
	r.create("fds", r.policy("name = \"fds\"\n[exec]\nallow = [\"true\"]\n"), tempDir(t))
	client := `
import array, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.settimeout(10)
s.connect(sys.argv[1])
fds = array.array("i", [0] * int(sys.argv[2]))
s.sendmsg([b'{"op":"ping"}'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
print(s.recv(65536).decode())
`
	for n, want := range map[string]string{"5": "more than 4 file descriptors", "3": `{"v":1}`} {
		out, err := exec.Command("/usr/bin/python3", "-c", client, filepath.Join(r.root, "warden.sock"), n).CombinedOutput()
		if err != nil || !strings.Contains(string(out), want) || strings.Contains(string(out), "larger") {
			t.Errorf("a request with %s descriptors: %v, %s; want %q", n, err, out, want)
		}
	}
}

// TestExecAuditSurvivesDaemonKill: a command the daemon started has its
// audit line even when the daemon is killed (-9) before the command ends:
// the exec.start line written as it starts. A command that ends has both.
func TestExecAuditSurvivesDaemonKill(t *testing.T) {
	r := newRoot(t)
	id := r.create("auditkill", r.policy("name = \"auditkill\"\n[exec]\nallow = [\"sleep\", \"true\", \"cat\"]\n"), tempDir(t))
	if res := r.exec(id, nil, "true"); res.Exit != 0 {
		t.Fatalf("exec: exit %d, %s", res.Exit, res.Stderr)
	}
	cmd := r.command("exec", "--session", id, "--", "sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go cmd.Wait()
	r.waitStarted(id, "sleep")
	r.killDaemon(syscall.SIGKILL)
	recs, text := r.logs("--session", id)
	var lines []string
	for _, rec := range recs {
		if strings.HasPrefix(rec.Event, "exec") {
			lines = append(lines, rec.Event+" "+strings.Join(rec.Argv, " "))
		}
	}
	if want := "exec.start true|exec true|exec.start sleep 30"; strings.Join(lines, "|") != want {
		t.Errorf("exec lines after the daemon was killed mid-command: %q, want %q\n%s", strings.Join(lines, "|"), want, text)
	}
	r.expectAlive(id) // a new daemon re-adopts the session
}

// The daemon's main thread never enters a sandbox's namespaces: starting
// a container, libcontainer sets a thread of its own into the container's
// mount namespace, and when that was the main thread the daemon's
// /proc/PID showed the container and held its mounts after its removal.
func TestDaemonMainThreadStaysHome(t *testing.T) {
	r := newRoot(t)
	policy := r.policy(`name = "home"
[exec]
allow = ["true"]
`)
	for i := 0; i < 12; i++ {
		id := r.create(fmt.Sprintf("home-%d", i), policy, tempDir(t))
		if res := r.exec(id, nil, "true"); res.Exit != 0 {
			t.Fatalf("exec in %s: %+v", id, res)
		}
		if res := r.warden("session", "rm", id); res.Exit != 0 {
			t.Fatalf("session rm %s: %+v", id, res)
		}
	}
	pids := r.daemonPids()
	if len(pids) != 1 {
		t.Fatalf("%d daemons, want 1", len(pids))
	}
	for _, p := range []string{"ns/mnt", "ns/net", "ns/pid", "ns/user"} {
		self, _ := os.Readlink("/proc/self/" + p)
		got, err := os.Readlink(fmt.Sprintf("/proc/%d/%s", pids[0], p))
		if err != nil || got != self {
			t.Errorf("the daemon's main thread is in %s %q (%v), this test's in %q", p, got, err, self)
		}
	}
}
