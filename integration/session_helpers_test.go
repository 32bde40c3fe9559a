package integration

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// wardenRoot is one private state root with its own daemon. Its cleanup
// removes every session, stops the daemon and checks nothing is left: no
// process, cgroup, mount or state of the root's sessions.
type wardenRoot struct {
	t    *testing.T
	root string
	ids  []string // every session id the test used
}

func newRoot(t *testing.T) *wardenRoot {
	t.Helper()
	r := &wardenRoot{t: t, root: filepath.Join(tempDir(t), "root")}
	t.Cleanup(r.teardown)
	return r
}

// id makes a session id unique on the host (cgroups are named by id) and
// remembers it for the leak checks.
func (r *wardenRoot) id(name string) string {
	id := name + "-" + randomHex(4)
	r.ids = append(r.ids, id)
	return id
}

// warden runs the CLI against this root with a minimal environment.
func (r *wardenRoot) warden(args ...string) sandboxResult {
	r.t.Helper()
	return r.wardenEnv(nil, args...)
}

// wardenEnv runs the CLI against this root with an exact environment.
func (r *wardenRoot) wardenEnv(env []string, args ...string) sandboxResult {
	r.t.Helper()
	return run(r.t, env, wardenBinary, append([]string{"--root", r.root}, args...)...)
}

// command prepares a CLI call against this root for tests that need
// stdin, pipes or a background process.
func (r *wardenRoot) command(args ...string) *exec.Cmd {
	cmd := exec.Command(wardenBinary, append([]string{"--root", r.root}, args...)...)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/root"}
	return cmd
}

// policy writes a policy into a fresh skill folder and returns its path.
func (r *wardenRoot) policy(text string) string {
	r.t.Helper()
	dir := tempDir(r.t)
	p := filepath.Join(dir, "policy.toml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		r.t.Fatal(err)
	}
	return p
}

// create starts a session and fails the test if it cannot.
func (r *wardenRoot) create(name, policyFile, workspace string) string {
	r.t.Helper()
	id := r.id(name)
	res := r.warden("session", "create", "--policy", policyFile, "--workspace", workspace, "--id", id)
	if res.Exit != 0 || strings.TrimSpace(res.Stdout) != id {
		r.t.Fatalf("session create %s: exit %d, stdout %q, stderr %q", id, res.Exit, res.Stdout, res.Stderr)
	}
	return id
}

// agentPid is the host pid of a session's PID 1, its agent.
func (r *wardenRoot) agentPid(id string) int {
	r.t.Helper()
	state, err := os.ReadFile(filepath.Join(r.root, "containers", r.container(id), "state.json"))
	if err != nil {
		r.t.Fatal(err)
	}
	var st struct {
		Pid int `json:"init_process_pid"`
	}
	if err := json.Unmarshal(state, &st); err != nil || st.Pid <= 0 {
		r.t.Fatalf("state of %s: pid %d, %v", id, st.Pid, err)
	}
	return st.Pid
}

// exec runs argv in a session; flags go before the `--`.
func (r *wardenRoot) exec(id string, flags []string, argv ...string) sandboxResult {
	r.t.Helper()
	args := append([]string{"exec", "--session", id}, flags...)
	args = append(append(args, "--"), argv...)
	return r.warden(args...)
}

// sh runs a shell script in a session and fails the test unless it exits 0.
func (r *wardenRoot) sh(id, script string) string {
	r.t.Helper()
	res := r.exec(id, nil, "sh", "-c", script)
	if res.Exit != 0 {
		r.t.Fatalf("exec %q: exit %d\nstdout:\n%s\nstderr:\n%s", script, res.Exit, res.Stdout, res.Stderr)
	}
	return res.Stdout
}

// expectAlive checks a session still runs commands.
func (r *wardenRoot) expectAlive(id string) {
	r.t.Helper()
	if res := r.exec(id, nil, "cat", "/dev/null"); res.Exit != 0 {
		r.t.Fatalf("session %s no longer works: exit %d, stderr %q", id, res.Exit, res.Stderr)
	}
}

type sessionInfo struct {
	ID        string    `json:"id"`
	Policy    string    `json:"policy"`
	Workspace string    `json:"workspace"`
	State     string    `json:"state"`
	LastUsed  time.Time `json:"lastUsed"`
}

func (r *wardenRoot) list() []sessionInfo {
	r.t.Helper()
	res := r.warden("session", "ls", "--format", "json")
	if res.Exit != 0 {
		r.t.Fatalf("session ls: exit %d: %s", res.Exit, res.Stderr)
	}
	var out []sessionInfo
	if err := json.Unmarshal([]byte(res.Stdout), &out); err != nil {
		r.t.Fatalf("session ls --format json: %v\n%s", err, res.Stdout)
	}
	return out
}

// hostPIDs lists every process on the host.
func hostPIDs() []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// processes finds the daemon of this root and any other process whose
// command line names the root.
func (r *wardenRoot) processes() []int {
	var pids []int
	for _, pid := range hostPIDs() {
		if pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if err != nil {
			continue
		}
		for _, arg := range bytes.Split(cmdline, []byte{0}) {
			if string(arg) == r.root || strings.HasPrefix(string(arg), r.root+"/") {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// killDaemon stops the daemon with sig and waits until it is gone.
func (r *wardenRoot) killDaemon(sig syscall.Signal) {
	r.t.Helper()
	// The daemon and its clients, which name the root too; not runsc's
	// processes of a gVisor sandbox, which a daemon's death leaves running.
	var pids []int
	for _, pid := range r.processes() {
		if argv0, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); !bytes.HasPrefix(argv0, []byte("runsc")) {
			pids = append(pids, pid)
		}
	}
	for _, pid := range pids {
		syscall.Kill(pid, sig)
	}
	// A dying process loses its command line before its descriptors, and
	// its main thread turns zombie while other threads still hold them:
	// wait until only a zombie main thread is left, or nothing, so its
	// socket no longer takes calls.
	r.waitGone(func() []int { return running(pids) }, "the daemon of "+r.root)
}

// running lists the pids whose descriptors may still be open: neither
// gone nor a zombie main thread without other threads.
func running(pids []int) []int {
	var out []int
	for _, pid := range pids {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' && len(tasks) <= 1 {
			continue
		}
		out = append(out, pid)
	}
	return out
}

func (r *wardenRoot) waitGone(pids func() []int, what string) {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(pids()) > 0 {
		if time.Now().After(deadline) {
			r.t.Errorf("%s still running: pids %v", what, pids())
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *wardenRoot) teardown() {
	if _, err := os.Stat(r.root); err == nil {
		ids := map[string]bool{}
		for _, id := range r.ids {
			ids[id] = true
		}
		if res := r.warden("session", "ls", "--format", "json"); res.Exit == 0 {
			var live []sessionInfo
			json.Unmarshal([]byte(res.Stdout), &live)
			for _, s := range live {
				ids[s.ID] = true
			}
		}
		for id := range ids {
			r.warden("session", "rm", "--force", id)
		}
		r.warden("pool", "drain")
		for _, pid := range r.processes() {
			syscall.Kill(pid, syscall.SIGTERM)
		}
		r.waitGone(r.processes, "the daemon of "+r.root)
	}
	r.assertClean(true)
}

// assertClean checks nothing of the root's sessions is left on the host;
// with stopped, not even its daemon.
func (r *wardenRoot) assertClean(stopped bool) {
	t := r.t
	t.Helper()
	if pids := r.processes(); stopped && len(pids) > 0 {
		t.Errorf("processes naming %s are left: %v", r.root, pids)
	}
	for _, id := range r.ids {
		if pids := cgroupProcesses(id); len(pids) > 0 {
			t.Errorf("session %s: processes left in its cgroup: %v", id, pids)
		}
		if dirs, _ := filepath.Glob("/sys/fs/cgroup/*/warden/*/" + id); len(dirs) > 0 {
			t.Errorf("session %s: cgroups left: %v", id, dirs)
		}
		for _, d := range []string{"sessions", "containers"} {
			if _, err := os.Lstat(filepath.Join(r.root, d, id)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("session %s: %s/%s left under the root", id, d, id)
			}
		}
	}
	if m := mountsBelow(r.root); len(m) > 0 {
		t.Errorf("mounts left under %s: %v", r.root, m)
	}
	if dirs, _ := filepath.Glob(filepath.Dir(r.cgroup("*", "x"))); stopped && len(dirs) > 0 {
		t.Errorf("the root's cgroup folders are left: %v", dirs)
	}
}

// cgroupProcesses lists the host processes in a session's cgroup.
func cgroupProcesses(id string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, ":/warden/") && strings.HasSuffix(line, "/"+id) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// commandProcesses lists the host processes in a session's cgroup whose
// command line holds text.
func commandProcesses(id, text string) []int {
	var pids []int
	for _, pid := range cgroupProcesses(id) {
		cmdline, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if bytes.Contains(cmdline, []byte(text)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitStarted waits until a program named comm runs in the session (by
// its /proc comm, not its command line: the agent's own command line
// names the programs the policy allows): a client that was started has
// not necessarily reached the sandbox yet.
func (r *wardenRoot) waitStarted(id, comm string) {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, pid := range cgroupProcesses(id) {
			name, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm"))
			if strings.TrimSpace(string(name)) == comm {
				return
			}
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("no %s started in session %s", comm, id)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// cgroup is a container's cgroup folder in one hierarchy: warden names
// them /warden/<root tag>/<container>, the tag a hash of the state root.
func (r *wardenRoot) cgroup(controller, container string) string {
	sum := sha256.Sum256([]byte(r.root))
	return filepath.Join("/sys/fs/cgroup", controller, "warden", hex.EncodeToString(sum[:6]), container)
}

func mountsBelow(dir string) []string {
	data, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			out = append(out, f[4])
		}
	}
	return out
}

// workspace makes a workspace folder owned by an ordinary user.
func workspace(t *testing.T, owner int) string {
	t.Helper()
	ws := tempDir(t)
	if err := os.Chown(ws, owner, owner); err != nil {
		t.Fatal(err)
	}
	return ws
}

// countingWriter counts bytes and checks they are all zero.
type countingWriter struct {
	n       int64
	nonZero bool
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	if !w.nonZero && len(bytes.Trim(p, "\x00")) > 0 {
		w.nonZero = true
	}
	return len(p), nil
}

var _ io.Writer = (*countingWriter)(nil)

// auditRecord is the part of an audit line the tests read.
type auditRecord struct {
	Event      string    `json:"event"`
	Session    string    `json:"session"`
	Policy     string    `json:"policy"`
	PolicyHash string    `json:"policyHash"`
	Argv       []string  `json:"argv"`
	Cwd        string    `json:"cwd"`
	Exit       *int      `json:"exit"`
	Time       time.Time `json:"time"`
}

// logs runs `warden logs` with args and decodes its lines.
func (r *wardenRoot) logs(args ...string) ([]auditRecord, string) {
	r.t.Helper()
	res := r.warden(append([]string{"logs"}, args...)...)
	if res.Exit != 0 {
		r.t.Fatalf("logs: exit %d: %s", res.Exit, res.Stderr)
	}
	var recs []auditRecord
	for _, line := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
		var rec auditRecord
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			r.t.Fatalf("not a JSON line: %q: %v", line, err)
		}
		recs = append(recs, rec)
	}
	return recs, res.Stdout
}
