package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The kill switch (docs/sessions.md#the-kill-switch): session freeze,
// thaw, kill, and freeze --all / thaw --all.

// counterLoop appends a line to the workspace's count file every 10 ms.
const counterLoop = "while :; do echo x >> /workspace/count; sleep 0.01; done"

// startCounter runs counterLoop in a session in the background and waits
// until it has made progress.
func (r *wardenRoot) startCounter(id, ws string) *exec.Cmd {
	r.t.Helper()
	bg := r.command("exec", "--session", id, "--", "sh", "-c", counterLoop)
	if err := bg.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { bg.Process.Kill(); bg.Wait() })
	if !advancing(ws) {
		r.t.Fatalf("session %s: the counter never started", id)
	}
	return bg
}

// advancing reports whether the workspace's count file grows within a
// second.
func advancing(ws string) bool {
	size := func() int64 {
		fi, err := os.Stat(filepath.Join(ws, "count"))
		if err != nil {
			return 0
		}
		return fi.Size()
	}
	before := size()
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		if size() > before {
			return true
		}
	}
	return false
}

// freezerState is the freezer cgroup's state of a session: FROZEN,
// THAWED, or "" when the cgroup is gone.
func (r *wardenRoot) freezerState(id string) string {
	data, err := os.ReadFile(filepath.Join(r.cgroup("freezer", id), "freezer.state"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}

// stateOf is a session's state in `session ls`, "" when it is not listed.
func (r *wardenRoot) stateOf(id string) string {
	r.t.Helper()
	for _, s := range r.list() {
		if s.ID == id {
			return s.State
		}
	}
	return ""
}

// refused checks a call failed the way bad input must: exit 125, one line
// on stderr holding want.
func refused(t *testing.T, what string, res sandboxResult, want string) {
	t.Helper()
	if res.Exit != 125 || strings.Count(strings.TrimSpace(res.Stderr), "\n") != 0 || !strings.Contains(res.Stderr, want) {
		t.Errorf("%s: exit %d, stderr %q; want exit 125 and one line saying %q", what, res.Exit, res.Stderr, want)
	}
}

// switchRecords are the freeze, thaw and kill audit lines of a session.
func (r *wardenRoot) switchRecords(id string) []switchRecord {
	r.t.Helper()
	_, out := r.logs("--session", id)
	var recs []switchRecord
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var rec switchRecord
		if json.Unmarshal([]byte(line), &rec) == nil && strings.HasPrefix(rec.Event, "session.") &&
			slices.Contains([]string{"session.freeze", "session.thaw", "session.kill"}, rec.Event) {
			recs = append(recs, rec)
		}
	}
	return recs
}

// named keeps the pids whose /proc comm is comm.
func named(pids []int, comm string) []int {
	return slices.DeleteFunc(pids, func(pid int) bool {
		name, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm"))
		return strings.TrimSpace(string(name)) != comm
	})
}

type switchRecord struct {
	Event  string `json:"event"`
	UID    *int   `json:"uid"`
	Pid    int    `json:"pid"`
	Killed int    `json:"killed"`
	Error  string `json:"error"`
}

// TestSessionFreeze: a frozen session's running command stops making
// progress and goes on after the thaw; a new command is refused (exit
// 125) and never runs; idle expiry keeps a frozen session; a daemon
// restart keeps it frozen; bad input changes nothing; removing a frozen
// session leaves no cgroup behind.
func TestSessionFreeze(t *testing.T) {
	r := newRoot(t)
	p := r.policy(sessionPolicy)
	ws, wsOther := tempDir(t), tempDir(t)
	id := r.create("freeze", p, ws)
	other := r.create("other", p, wsOther)
	bg := r.startCounter(id, ws)

	if res := r.warden("session", "freeze", id); res.Exit != 0 || res.Stdout != "" {
		t.Fatalf("session freeze: exit %d, stdout %q, stderr %q", res.Exit, res.Stdout, res.Stderr)
	}
	if advancing(ws) {
		t.Errorf("the counter still advances in the frozen session")
	}
	if st := r.freezerState(id); st != "FROZEN" {
		t.Errorf("freezer.state of the frozen session: %q", st)
	}
	if st := r.stateOf(id); st != "frozen" {
		t.Errorf("session ls: state %q, want frozen", st)
	}
	// The other session is not touched.
	if st := r.stateOf(other); st != "running" {
		t.Errorf("session ls: the other session's state %q, want running", st)
	}
	r.expectAlive(other)

	// A new command is refused and does not run, not even after the thaw.
	refused(t, "exec in a frozen session", r.exec(id, nil, "touch", "/workspace/ran"), "frozen")
	// Bad input: one line, exit 125, nothing changed.
	refused(t, "freeze of a frozen session", r.warden("session", "freeze", id), "frozen already")
	refused(t, "thaw of a running session", r.warden("session", "thaw", other), "not frozen")
	refused(t, "freeze of an unknown session", r.warden("session", "freeze", "nope-"+randomHex(4)), "no such session")
	refused(t, "thaw of an unknown session", r.warden("session", "thaw", "nope-"+randomHex(4)), "no such session")
	refused(t, "freeze without an id", r.warden("session", "freeze"), "one session id, or --all")
	refused(t, "freeze of an id and --all", r.warden("session", "freeze", "--all", id), "no session id with --all")
	if st := r.stateOf(other); st != "running" {
		t.Errorf("the refused thaw changed the other session: %q", st)
	}
	if st := r.stateOf(id); st != "frozen" {
		t.Errorf("the refused calls changed the frozen session: %q", st)
	}

	if res := r.warden("session", "thaw", id); res.Exit != 0 || res.Stdout != "" {
		t.Fatalf("session thaw: exit %d, stdout %q, stderr %q", res.Exit, res.Stdout, res.Stderr)
	}
	if !advancing(ws) {
		t.Errorf("the counter does not advance after the thaw")
	}
	if st := r.freezerState(id); st != "THAWED" {
		t.Errorf("freezer.state after the thaw: %q", st)
	}
	if _, err := os.Stat(filepath.Join(ws, "ran")); err == nil {
		t.Errorf("the command refused while frozen ran after all")
	}
	r.expectAlive(id)

	recs := r.switchRecords(id)
	if len(recs) != 2 || recs[0].Event != "session.freeze" || recs[1].Event != "session.thaw" {
		t.Errorf("audit lines of freeze and thaw: %+v; want one session.freeze, one session.thaw (refusals write none)", recs)
	}
	for _, rec := range recs {
		if rec.UID == nil || *rec.UID != os.Geteuid() || rec.Pid <= 0 {
			t.Errorf("audit line %s does not name the caller: %+v", rec.Event, rec)
		}
	}

	// Idle expiry: a frozen session is kept past its limits.idle, and
	// expires once thawed and idle again.
	idle := r.create("idle", r.policy(sessionPolicy+"idle = \"1s\"\n"), tempDir(t))
	if res := r.warden("session", "freeze", idle); res.Exit != 0 {
		t.Fatalf("session freeze: exit %d: %s", res.Exit, res.Stderr)
	}
	time.Sleep(3 * time.Second)
	if st := r.stateOf(idle); st != "frozen" {
		t.Errorf("a frozen session past its idle limit: state %q, want frozen (kept)", st)
	}
	if res := r.warden("session", "thaw", idle); res.Exit != 0 {
		t.Fatalf("session thaw: exit %d: %s", res.Exit, res.Stderr)
	}
	deadline := time.Now().Add(10 * time.Second)
	for r.stateOf(idle) != "" && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if st := r.stateOf(idle); st != "" {
		t.Errorf("a thawed session idle past its limit was not expired: state %q", st)
	}

	// A daemon restart keeps a frozen session frozen.
	bg.Process.Kill()
	bg.Wait()
	if res := r.warden("session", "freeze", id); res.Exit != 0 {
		t.Fatalf("session freeze: exit %d: %s", res.Exit, res.Stderr)
	}
	r.killDaemon(syscall.SIGKILL)
	if st := r.stateOf(id); st != "frozen" {
		t.Errorf("after a daemon restart: state %q, want frozen", st)
	}
	refused(t, "exec in a frozen session after a daemon restart", r.exec(id, nil, "cat", "/dev/null"), "frozen")

	// Removing a frozen session works and leaves no cgroup frozen.
	if res := r.warden("session", "rm", id); res.Exit != 0 {
		t.Fatalf("session rm of a frozen session: exit %d: %s", res.Exit, res.Stderr)
	}
	if st := r.stateOf(id); st != "" {
		t.Errorf("session ls after rm: %q", st)
	}
	if dirs, _ := filepath.Glob(r.cgroup("*", id)); len(dirs) > 0 {
		t.Errorf("cgroups left after removing a frozen session: %v", dirs)
	}
	r.expectAlive(other)
}

// TestSessionKill: kill ends every process of the sandbox at once, its
// agent excepted; running commands end with 137 and say why; the session
// runs new commands afterwards; a frozen session stays frozen.
func TestSessionKill(t *testing.T) {
	r := newRoot(t)
	p := r.policy(sessionPolicy)
	ws := tempDir(t)
	id := r.create("kill", p, ws)
	agent := r.agentPid(id)

	bg := r.command("exec", "--session", id, "--", "sleep", "100")
	var stderr strings.Builder
	bg.Stderr = &stderr
	if err := bg.Start(); err != nil {
		t.Fatal(err)
	}
	// A second command with a child of its own.
	bg2 := r.command("exec", "--session", id, "--", "sh", "-c", "sleep 101 & sleep 102; echo not reached")
	if err := bg2.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(named(cgroupProcesses(id), "sleep")) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the three sleeps never started: %v", cgroupProcesses(id))
		}
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	res := r.warden("session", "kill", id)
	if res.Exit != 0 || !strings.Contains(res.Stdout, "killed 4 process(es)") {
		t.Fatalf("session kill: exit %d, stdout %q, stderr %q; want 4 processes (sleep, sh and two sleeps) killed", res.Exit, res.Stdout, res.Stderr)
	}
	done := make(chan error, 1)
	go func() { done <- bg.Wait() }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		bg.Process.Kill()
		t.Fatalf("sleep 100 still runs 2 s after session kill")
	}
	took := time.Since(start)
	if code := bg.ProcessState.ExitCode(); code != 137 || !strings.Contains(stderr.String(), "warden session kill") {
		t.Errorf("the killed command: exit %d, stderr %q; want 137 and a line saying the session was killed", code, stderr.String())
	}
	bg2.Wait()
	if code := bg2.ProcessState.ExitCode(); code != 137 {
		t.Errorf("the second killed command: exit %d, want 137", code)
	}
	// Dead, they may wait a moment as zombies for the agent to reap them.
	if pids := running(cgroupProcesses(id)); len(pids) != 1 || pids[0] != agent {
		t.Errorf("processes in the sandbox after kill: %v; want only the agent %d", pids, agent)
	}
	t.Logf("session kill to the command's end: %s", took)
	// The session goes on.
	if out := r.sh(id, "echo again > /workspace/after; cat /workspace/after"); out != "again\n" {
		t.Errorf("exec after kill: %q", out)
	}
	if st := r.stateOf(id); st != "running" {
		t.Errorf("session ls after kill: %q, want running", st)
	}

	// A frozen session: the kill ends its processes and it stays frozen.
	bg = r.command("exec", "--session", id, "--", "sleep", "100")
	if err := bg.Start(); err != nil {
		t.Fatal(err)
	}
	r.waitStarted(id, "sleep")
	if res := r.warden("session", "freeze", id); res.Exit != 0 {
		t.Fatalf("session freeze: exit %d: %s", res.Exit, res.Stderr)
	}
	if res := r.warden("session", "kill", id); res.Exit != 0 || !strings.Contains(res.Stdout, "killed 1 process(es)") {
		t.Fatalf("session kill of a frozen session: exit %d, stdout %q, stderr %q", res.Exit, res.Stdout, res.Stderr)
	}
	if err := bg.Wait(); bg.ProcessState.ExitCode() != 137 {
		t.Errorf("the command of the frozen session: %v, want exit 137", err)
	}
	if pids := running(cgroupProcesses(id)); len(pids) != 1 || pids[0] != agent {
		t.Errorf("processes in the frozen sandbox after kill: %v; want only the agent %d", pids, agent)
	}
	if st, fs := r.stateOf(id), r.freezerState(id); st != "frozen" || fs != "FROZEN" {
		t.Errorf("a frozen session after kill: state %q, freezer %q; want it frozen still", st, fs)
	}
	if res := r.warden("session", "thaw", id); res.Exit != 0 {
		t.Fatalf("session thaw: exit %d: %s", res.Exit, res.Stderr)
	}
	r.expectAlive(id)

	refused(t, "kill of an unknown session", r.warden("session", "kill", "nope-"+randomHex(4)), "no such session")
	refused(t, "kill without an id", r.warden("session", "kill"), "one session id")

	recs := r.switchRecords(id)
	var kills []switchRecord
	for _, rec := range recs {
		if rec.Event == "session.kill" {
			kills = append(kills, rec)
		}
	}
	if len(kills) != 2 || kills[0].Killed != 4 || kills[1].Killed != 1 || kills[0].UID == nil || *kills[0].UID != os.Geteuid() {
		t.Errorf("audit lines of the kills: %+v; want two, 4 and 1 processes, naming uid %d", kills, os.Geteuid())
	}
}

// TestSessionFreezeAll: freeze --all freezes every session of the root
// and says which; a second call has nothing to do; thaw --all thaws them
// all and each runs commands again.
func TestSessionFreezeAll(t *testing.T) {
	r := newRoot(t)
	p := r.policy(sessionPolicy)
	var ids, wss []string
	for i := 0; i < 3; i++ {
		ws := tempDir(t)
		id := r.create("all", p, ws)
		ids, wss = append(ids, id), append(wss, ws)
		r.startCounter(id, ws)
	}
	slices.Sort(ids)
	res := r.warden("session", "freeze", "--all")
	if got := strings.Fields(res.Stdout); res.Exit != 0 || !slices.Equal(got, ids) {
		t.Fatalf("freeze --all: exit %d, stdout %q, stderr %q; want the ids %v", res.Exit, res.Stdout, res.Stderr, ids)
	}
	for _, id := range ids {
		if st := r.stateOf(id); st != "frozen" {
			t.Errorf("session %s after freeze --all: %q", id, st)
		}
	}
	for _, ws := range wss {
		if advancing(ws) {
			t.Errorf("a counter advances after freeze --all (%s)", ws)
		}
	}
	if res := r.warden("session", "freeze", "--all"); res.Exit != 0 || res.Stdout != "" {
		t.Errorf("a second freeze --all: exit %d, stdout %q, stderr %q; want nothing to do", res.Exit, res.Stdout, res.Stderr)
	}
	res = r.warden("session", "thaw", "--all")
	if got := strings.Fields(res.Stdout); res.Exit != 0 || !slices.Equal(got, ids) {
		t.Fatalf("thaw --all: exit %d, stdout %q, stderr %q; want the ids %v", res.Exit, res.Stdout, res.Stderr, ids)
	}
	for _, ws := range wss {
		if !advancing(ws) {
			t.Errorf("a counter does not advance after thaw --all (%s)", ws)
		}
	}
	for _, id := range ids {
		r.expectAlive(id)
	}
}
