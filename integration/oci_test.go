package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// ociCgroupParent holds the cgroups of the containers these tests make.
const ociCgroupParent = "/warden-oci-test"

// ociEnv is a private state root for warden's OCI face.
type ociEnv struct {
	root string
}

func newOCIEnv(t *testing.T) *ociEnv {
	t.Helper()
	o := &ociEnv{root: tempDir(t)}
	t.Cleanup(func() {
		out := o.warden(t, "list", "-q")
		for _, id := range strings.Fields(out.Stdout) {
			o.warden(t, "delete", "--force", id)
		}
		if ents, _ := os.ReadDir(filepath.Join(o.root, "oci")); len(ents) != 0 {
			t.Errorf("containers left in the state root: %d", len(ents))
		}
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*" + ociCgroupParent)
		for _, d := range dirs {
			if err := syscall.Rmdir(d); err != nil {
				t.Errorf("cgroup %s left behind: %v", d, err)
			}
		}
	})
	return o
}

func (o *ociEnv) warden(t *testing.T, args ...string) sandboxResult {
	t.Helper()
	return o.wardenIn(t, "", args...)
}

// wardenIn runs warden with stdin. A detached container inherits warden's
// stdout and stderr (as with runc, engines pass it fifos), so the output
// pipes are closed shortly after warden itself exits.
func (o *ociEnv) wardenIn(t *testing.T, stdin string, args ...string) sandboxResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, wardenBinary, append([]string{"--root", o.root}, args...)...)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/root"}
	cmd.Stdin = strings.NewReader(stdin)
	cmd.WaitDelay = 200 * time.Millisecond
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("warden %s: no answer within %s", strings.Join(args, " "), cliTimeout)
	}
	res := sandboxResult{Stdout: stdout.String(), Stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		res.Exit = ee.ExitCode()
	case err != nil && !errors.Is(err, exec.ErrWaitDelay):
		t.Fatal(err)
	}
	return res
}

// busyboxBundle writes a bundle with a busybox root and the default
// config of `warden spec`, edited by change.
func busyboxBundle(t testing.TB, id string, change func(*specs.Spec)) string {
	t.Helper()
	dir := tempDir(t)
	rootfs := filepath.Join(dir, "rootfs")
	for _, d := range []string{"bin", "etc", "tmp", "proc", "sys", "dev", "hooks", "work"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatalf("busybox-static: %v", err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "bin/busybox"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"sh", "echo", "cat", "sleep", "id", "true", "ls", "grep", "touch", "pwd", "env", "tty", "stty"} {
		os.Symlink("busybox", filepath.Join(rootfs, "bin", a))
	}
	if r := runTB(t, nil, wardenBinary, "spec", "--bundle", dir); r.Exit != 0 {
		t.Fatalf("warden spec: %s", r.Stderr)
	}
	var s specs.Spec
	readJSON(t, filepath.Join(dir, "config.json"), &s)
	s.Process.Terminal = false
	s.Process.Args = []string{"sleep", "300"}
	s.Linux.CgroupsPath = ociCgroupParent + "/" + id
	if change != nil {
		change(&s)
	}
	writeJSON(t, filepath.Join(dir, "config.json"), &s)
	return dir
}

func readJSON(t testing.TB, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func writeJSON(t testing.TB, path string, v any) {
	t.Helper()
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

type ociState struct {
	ID          string            `json:"id"`
	Pid         int               `json:"pid"`
	Status      string            `json:"status"`
	Bundle      string            `json:"bundle"`
	Annotations map[string]string `json:"annotations"`
	Policy      string            `json:"wardenPolicy"`
}

func (o *ociEnv) state(t *testing.T, id string) ociState {
	t.Helper()
	r := o.warden(t, "state", id)
	if r.Exit != 0 {
		t.Fatalf("state %s: %s", id, r.Stderr)
	}
	var st ociState
	if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil {
		t.Fatalf("state %s: %v: %q", id, err, r.Stdout)
	}
	return st
}

// waitStatus waits for a container to exist and reach a status.
func (o *ociEnv) waitStatus(t *testing.T, id, want string) {
	t.Helper()
	last := ""
	for i := 0; i < 250; i++ {
		r := o.warden(t, "state", id)
		var st ociState
		if r.Exit == 0 && json.Unmarshal([]byte(r.Stdout), &st) == nil {
			if st.Status == want {
				return
			}
			last = st.Status
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("container %s never reached %s (last seen %q)", id, want, last)
}

func TestOCILifecycle(t *testing.T) {
	o := newOCIEnv(t)
	id := "oci-" + randomHex(4)
	bundle := busyboxBundle(t, id, func(s *specs.Spec) {
		s.Annotations = map[string]string{"org.example.note": "kept"}
	})
	// Symlinks planted where the pid file and its temporary file go are
	// replaced, never followed: the file they point at stays as it was.
	pidDir := tempDir(t)
	pidFile, victim := filepath.Join(pidDir, "init.pid"), filepath.Join(pidDir, "victim")
	os.WriteFile(victim, []byte("keep"), 0o644)
	os.Symlink(victim, pidFile)
	os.Symlink(victim, filepath.Join(pidDir, ".init.pid"))
	if r := o.warden(t, "create", "--bundle", bundle, "--pid-file", pidFile, id); r.Exit != 0 {
		t.Fatalf("create: %s", r.Stderr)
	}
	if data, _ := os.ReadFile(victim); string(data) != "keep" {
		t.Errorf("the pid file was written through a symlink: the file it pointed at holds %q", data)
	}
	st := o.state(t, id)
	pidText, _ := os.ReadFile(pidFile)
	if st.Status != "created" || st.Bundle != bundle || strconv.Itoa(st.Pid) != string(pidText) || st.Annotations["org.example.note"] != "kept" {
		t.Fatalf("after create: %+v, pid file %q", st, pidText)
	}
	if r := o.warden(t, "create", "--bundle", bundle, id); r.Exit == 0 || !strings.Contains(r.Stderr, "already exists") {
		t.Fatalf("second create with the same id: exit %d %q", r.Exit, r.Stderr)
	}
	if r := o.warden(t, "start", id); r.Exit != 0 {
		t.Fatalf("start: %s", r.Stderr)
	}
	if o.state(t, id).Status != "running" {
		t.Fatal("not running after start")
	}
	if r := o.warden(t, "start", id); r.Exit == 0 {
		t.Fatal("a second start succeeded")
	}
	var list []ociState
	r := o.warden(t, "list", "--format", "json")
	if err := json.Unmarshal([]byte(r.Stdout), &list); err != nil || len(list) != 1 || list[0].ID != id {
		t.Fatalf("list --format json: %v %q", err, r.Stdout)
	}
	var pids []int
	r = o.warden(t, "ps", "--format", "json", id)
	if err := json.Unmarshal([]byte(r.Stdout), &pids); err != nil || len(pids) != 1 || pids[0] != st.Pid {
		t.Fatalf("ps --format json: %v %q (init %d)", err, r.Stdout, st.Pid)
	}
	if r := o.warden(t, "ps", id); !strings.Contains(r.Stdout, "sleep 300") {
		t.Fatalf("ps table: %q %q", r.Stdout, r.Stderr)
	}
	if r := o.warden(t, "pause", id); r.Exit != 0 || o.state(t, id).Status != "paused" {
		t.Fatalf("pause: %s", r.Stderr)
	}
	if r := o.warden(t, "exec", id, "true"); r.Exit == 0 {
		t.Fatal("exec into a paused container succeeded")
	}
	if r := o.warden(t, "resume", id); r.Exit != 0 || o.state(t, id).Status != "running" {
		t.Fatalf("resume: %s", r.Stderr)
	}
	if r := o.warden(t, "delete", id); r.Exit == 0 {
		t.Fatal("delete of a running container without --force succeeded")
	}
	if r := o.warden(t, "kill", id, "NOSUCHSIG"); r.Exit == 0 || !strings.Contains(r.Stderr, "unknown signal") {
		t.Fatalf("kill with a bad signal: %d %q", r.Exit, r.Stderr)
	}
	// sleep as PID 1 ignores TERM; KILL by name ends it.
	if r := o.warden(t, "kill", id, "SIGKILL"); r.Exit != 0 {
		t.Fatalf("kill: %s", r.Stderr)
	}
	o.waitStatus(t, id, "stopped")
	if r := o.warden(t, "delete", id); r.Exit != 0 {
		t.Fatalf("delete: %s", r.Stderr)
	}
	if r := o.warden(t, "state", id); r.Exit == 0 || !strings.Contains(r.Stderr, "does not exist") {
		t.Fatalf("state after delete: %d %q", r.Exit, r.Stderr)
	}
	if stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(st.Pid), "stat")); err == nil && !strings.Contains(string(stat), ") Z ") {
		t.Fatalf("init %d still alive: %s", st.Pid, stat)
	}

	// Numeric signals, kill --all, delete --force of a created container.
	id2 := "oci-" + randomHex(4)
	bundle2 := busyboxBundle(t, id2, func(s *specs.Spec) { s.Process.Args = []string{"sh", "-c", "trap 'exit 3' TERM; sleep 300 & wait"} })
	if r := o.warden(t, "run", "--detach", "--bundle", bundle2, id2); r.Exit != 0 {
		t.Fatalf("run -d: %s", r.Stderr)
	}
	o.waitStatus(t, id2, "running")
	// The shell sets its trap before it starts sleep: two processes, and
	// SIGTERM no longer falls on an init without a handler.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var pids []int
		json.Unmarshal([]byte(o.warden(t, "ps", "--format", "json", id2).Stdout), &pids)
		if len(pids) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the container's shell did not start sleep: pids %v", pids)
		}
	}
	if r := o.warden(t, "kill", "--all", id2, "15"); r.Exit != 0 {
		t.Fatalf("kill --all 15: %s", r.Stderr)
	}
	o.waitStatus(t, id2, "stopped")
	if r := o.warden(t, "delete", id2); r.Exit != 0 {
		t.Fatalf("delete: %s", r.Stderr)
	}
	id3 := "oci-" + randomHex(4)
	if r := o.warden(t, "create", "--bundle", busyboxBundle(t, id3, nil), id3); r.Exit != 0 {
		t.Fatalf("create: %s", r.Stderr)
	}
	if r := o.warden(t, "delete", "--force", id3); r.Exit != 0 {
		t.Fatalf("delete --force: %s", r.Stderr)
	}
	if r := o.warden(t, "delete", "--force", id3); r.Exit != 0 {
		t.Fatalf("delete --force of a missing container must succeed (engines retry it): %s", r.Stderr)
	}
}

func TestOCIRunExitStatus(t *testing.T) {
	o := newOCIEnv(t)
	for _, tc := range []struct {
		argv []string
		exit int
		out  string
	}{
		{[]string{"echo", "hello"}, 0, "hello\n"},
		{[]string{"sh", "-c", "exit 7"}, 7, ""},
	} {
		id := "oci-" + randomHex(4)
		bundle := busyboxBundle(t, id, func(s *specs.Spec) { s.Process.Args = tc.argv })
		r := o.warden(t, "run", "--bundle", bundle, id)
		if r.Exit != tc.exit || r.Stdout != tc.out {
			t.Errorf("run %v: exit %d stdout %q (stderr %q), want %d %q", tc.argv, r.Exit, r.Stdout, r.Stderr, tc.exit, tc.out)
		}
		if r := o.warden(t, "state", id); r.Exit == 0 {
			t.Errorf("run %v: container left after it ended", tc.argv)
		}
	}
	// Killed by a signal: 128+N, as a shell reports it.
	id := "oci-" + randomHex(4)
	cmd := exec.Command(wardenBinary, "--root", o.root, "run", "--bundle", busyboxBundle(t, id, nil), id)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	o.waitStatus(t, id, "running")
	if r := o.warden(t, "kill", id, "KILL"); r.Exit != 0 {
		t.Fatalf("kill: %s", r.Stderr)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 137 {
		t.Fatalf("run killed by SIGKILL: %v, want exit 137", err)
	}
}

func TestOCIExec(t *testing.T) {
	o := newOCIEnv(t)
	id := "oci-" + randomHex(4)
	bundle := busyboxBundle(t, id, nil)
	if r := o.warden(t, "run", "-d", "--bundle", bundle, id); r.Exit != 0 {
		t.Fatalf("run -d: %s", r.Stderr)
	}
	// Inline form, with the flags shared with the session form.
	r := o.warden(t, "exec", "--cwd", "/tmp", "--env", "GREETING=hi", "--user", "65534:65534", id, "sh", "-c", "echo $GREETING $(pwd) $(id -u):$(id -g)")
	if r.Exit != 0 || strings.TrimSpace(r.Stdout) != "hi /tmp 65534:65534" {
		t.Fatalf("inline exec: exit %d %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	if r := o.warden(t, "exec", id, "sh", "-c", "exit 9"); r.Exit != 9 {
		t.Fatalf("exec exit status: %d", r.Exit)
	}
	// --tty with warden's own terminal (script(1) gives it one): the
	// process gets a new terminal and its output comes back.
	tty := run(t, nil, "script", "-qec", fmt.Sprintf("%s --root %s exec --tty %s sh -c 'tty; exit 3'", wardenBinary, o.root, id), "/dev/null")
	if tty.Exit != 3 || !strings.Contains(tty.Stdout, "/dev/pts/") {
		t.Fatalf("exec --tty: exit %d, %q %q", tty.Exit, tty.Stdout, tty.Stderr)
	}
	// --process FILE, detached, with a pid file (the shim's form).
	dir := tempDir(t)
	proc := specs.Process{Args: []string{"sh", "-c", "echo detached > /tmp/out; sleep 300"}, Cwd: "/", Env: []string{"PATH=/bin"}}
	writeJSON(t, filepath.Join(dir, "process.json"), &proc)
	pidFile := filepath.Join(dir, "exec.pid")
	if r := o.warden(t, "exec", "--process", filepath.Join(dir, "process.json"), "--detach", "--pid-file", pidFile, id); r.Exit != 0 {
		t.Fatalf("exec --process --detach: %s", r.Stderr)
	}
	pidText, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/proc/" + string(pidText)); err != nil {
		t.Fatalf("detached exec %s is not running: %v", pidText, err)
	}
	var pids []int
	json.Unmarshal([]byte(o.warden(t, "ps", "--format", "json", id).Stdout), &pids)
	if len(pids) < 2 {
		t.Fatalf("ps after a detached exec: %v", pids)
	}
	// The two forms of exec do not mix.
	if r := o.warden(t, "exec", "--timeout", "1s", id, "true"); r.Exit != 125 || !strings.Contains(r.Stderr, "needs --session") {
		t.Fatalf("session flag in the OCI form: %d %q", r.Exit, r.Stderr)
	}
	if r := o.warden(t, "exec", "--session", "s1", "--process", "x.json", "--", "true"); r.Exit != 125 || !strings.Contains(r.Stderr, "OCI form") {
		t.Fatalf("OCI flag in the session form: %d %q", r.Exit, r.Stderr)
	}
	if r := o.warden(t, "exec"); r.Exit != 125 || !strings.Contains(r.Stderr, "--session") {
		t.Fatalf("exec without arguments: %d %q", r.Exit, r.Stderr)
	}
}

// TestOCIHooks runs every hook of the runtime spec and checks each ran
// once, in order, with the container's state on stdin.
func TestOCIHooks(t *testing.T) {
	o := newOCIEnv(t)
	id := "oci-" + randomHex(4)
	shared := tempDir(t)
	logPath := filepath.Join(shared, "hooks.log")
	hook := func(name string, inContainer bool) specs.Hook {
		path := logPath
		if inContainer {
			path = "/hooks/hooks.log"
		}
		// The state arrives on stdin: the hook records the id in it.
		script := fmt.Sprintf(`read -r state; case "$state" in *'"%s"'*) echo %s >> %s;; *) echo %s-nostate >> %s;; esac`, id, name, path, name, path)
		return specs.Hook{Path: "/bin/sh", Args: []string{"sh", "-c", script}}
	}
	bundle := busyboxBundle(t, id, func(s *specs.Spec) {
		s.Process.Args = []string{"sh", "-c", "echo process >> /hooks/hooks.log"}
		s.Mounts = append(s.Mounts, specs.Mount{Destination: "/hooks", Type: "bind", Source: shared, Options: []string{"rbind", "rw"}})
		s.Hooks = &specs.Hooks{
			//lint:ignore SA1019 docker 20.10 still sends prestart hooks: warden must run them
			Prestart:      []specs.Hook{hook("prestart", false)},
			CreateRuntime: []specs.Hook{hook("createRuntime", false)},
			// createContainer runs in the container's mount namespace
			// before pivot_root: the host's paths are still the ones seen.
			CreateContainer: []specs.Hook{hook("createContainer", false)},
			StartContainer:  []specs.Hook{hook("startContainer", true)},
			Poststart:       []specs.Hook{hook("poststart", false)},
			Poststop:        []specs.Hook{hook("poststop", false)},
		}
	})
	if r := o.warden(t, "create", "--bundle", bundle, id); r.Exit != 0 {
		t.Fatalf("create: %s", r.Stderr)
	}
	if r := o.warden(t, "start", id); r.Exit != 0 {
		t.Fatalf("start: %s", r.Stderr)
	}
	o.waitStatus(t, id, "stopped")
	if r := o.warden(t, "delete", id); r.Exit != 0 {
		t.Fatalf("delete: %s", r.Stderr)
	}
	got, _ := os.ReadFile(logPath)
	lines := strings.Fields(string(got))
	// poststart (run by start) races startContainer and the process
	// (run by the container's init); the rest is ordered.
	want := []string{"prestart", "createRuntime", "createContainer"}
	if len(lines) != 7 || strings.Join(lines[:3], " ") != strings.Join(want, " ") || lines[6] != "poststop" {
		t.Fatalf("hooks ran as %v", lines)
	}
	mid := strings.Join(lines[3:6], " ")
	if !slices.Contains([]string{"startContainer process poststart", "startContainer poststart process", "poststart startContainer process"}, mid) {
		t.Fatalf("hooks ran as %v", lines)
	}
	// A failing prestart hook fails create and leaves nothing behind.
	id2 := "oci-" + randomHex(4)
	bundle2 := busyboxBundle(t, id2, func(s *specs.Spec) {
		//lint:ignore SA1019 docker 20.10 still sends prestart hooks: warden must run them
		s.Hooks = &specs.Hooks{Prestart: []specs.Hook{{Path: "/bin/false"}}}
	})
	if r := o.warden(t, "create", "--bundle", bundle2, id2); r.Exit == 0 {
		t.Fatal("create with a failing prestart hook succeeded")
	}
	if r := o.warden(t, "state", id2); r.Exit == 0 {
		t.Fatal("a container whose hook failed was left behind")
	}
}

// TestOCIConsoleSocket receives the terminal's master side the way
// containerd's shim does and reads the container's output from it.
func TestOCIConsoleSocket(t *testing.T) {
	o := newOCIEnv(t)
	id := "oci-" + randomHex(4)
	bundle := busyboxBundle(t, id, func(s *specs.Spec) {
		s.Process.Terminal = true
		s.Process.Args = []string{"sh", "-c", "tty; echo size $(stty size)"}
		s.Process.ConsoleSize = &specs.Box{Height: 33, Width: 111}
	})
	sock := filepath.Join(tempDir(t), "console.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	masterc := make(chan *os.File, 1)
	go func() {
		conn, err := ln.AcceptUnix()
		if err != nil {
			masterc <- nil
			return
		}
		defer conn.Close()
		buf, oob := make([]byte, 256), make([]byte, unix.CmsgSpace(4))
		_, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
		if err != nil {
			masterc <- nil
			return
		}
		msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
		if len(msgs) != 1 {
			masterc <- nil
			return
		}
		fds, _ := unix.ParseUnixRights(&msgs[0])
		masterc <- os.NewFile(uintptr(fds[0]), "master")
	}()
	if r := o.warden(t, "create", "--bundle", bundle, "--console-socket", sock, id); r.Exit != 0 {
		t.Fatalf("create --console-socket: %s", r.Stderr)
	}
	master := <-masterc
	if master == nil {
		t.Fatal("no terminal received on the console socket")
	}
	defer master.Close()
	if r := o.warden(t, "start", id); r.Exit != 0 {
		t.Fatalf("start: %s", r.Stderr)
	}
	var out bytes.Buffer
	buf := make([]byte, 1024)
	master.SetReadDeadline(time.Now().Add(10 * time.Second))
	for !strings.Contains(out.String(), "size") || !strings.Contains(out.String(), "\n") {
		n, err := master.Read(buf)
		out.Write(buf[:n])
		if err != nil {
			break
		}
		if strings.Count(out.String(), "\n") >= 2 {
			break
		}
	}
	if !strings.Contains(out.String(), "/dev/pts/") || !strings.Contains(out.String(), "size 33 111") {
		t.Fatalf("terminal output %q", out.String())
	}
	o.waitStatus(t, id, "stopped")
	o.warden(t, "delete", id)
	// A terminal without a console socket cannot be detached.
	id2 := "oci-" + randomHex(4)
	bundle2 := busyboxBundle(t, id2, func(s *specs.Spec) { s.Process.Terminal = true })
	if r := o.warden(t, "create", "--bundle", bundle2, id2); r.Exit == 0 || !strings.Contains(r.Stderr, "console-socket") {
		t.Fatalf("create with a terminal and no socket: %d %q", r.Exit, r.Stderr)
	}
}

func TestOCIUpdate(t *testing.T) {
	o := newOCIEnv(t)
	id := "oci-" + randomHex(4)
	if r := o.warden(t, "run", "-d", "--bundle", busyboxBundle(t, id, nil), id); r.Exit != 0 {
		t.Fatalf("run -d: %s", r.Stderr)
	}
	cg := ociCgroupParent + "/" + id
	for i, form := range [][]string{{"update", "--resources", "-", id}, {"update", "--resources=-", id}} {
		limit := (64 + 16*i) << 20
		r := o.wardenIn(t, fmt.Sprintf(`{"memory":{"limit":%d,"swap":%d},"pids":{"limit":%d}}`, limit, limit, 50+i), form...)
		if r.Exit != 0 {
			t.Fatalf("%v: %s", form, r.Stderr)
		}
		if got := readCgroup(t, "memory", cg, "memory.limit_in_bytes"); got != strconv.Itoa(limit) {
			t.Fatalf("%v: memory.limit_in_bytes %s, want %d", form, got, limit)
		}
		if got := readCgroup(t, "pids", cg, "pids.max"); got != strconv.Itoa(50+i) {
			t.Fatalf("%v: pids.max %s", form, got)
		}
	}
	if r := o.wardenIn(t, `{"memory": 12`, "update", "--resources", "-", id); r.Exit != 125 || !strings.Contains(r.Stderr, "resources") {
		t.Fatalf("update with bad JSON: %d %q", r.Exit, r.Stderr)
	}
}

// TestOCIPolicy runs one bundle under runc and under warden with a
// policy: the policy takes capabilities, root writes, ungranted binds and
// memfd_create away, and caps the limits, where runc leaves them.
func TestOCIPolicy(t *testing.T) {
	o := newOCIEnv(t)
	grant, other := writableGrant(t), tempDir(t)
	policy := filepath.Join(tempDir(t), "p.toml")
	os.WriteFile(policy, []byte(fmt.Sprintf("name = \"p\"\n[fs]\nwrite = [%q]\nread = [%q]\n[limits]\nmemory = \"64MiB\"\npids = 20\n", grant, other)), 0o644)
	script := "echo w > /work/f && echo granted; echo x > /other/f || echo other-refused; echo x > /etc/x || echo root-refused; grep CapEff /proc/self/status"
	mk := func(id string) string {
		return busyboxBundle(t, id, func(s *specs.Spec) {
			s.Root.Readonly = false
			s.Process.Args = []string{"sh", "-c", script}
			s.Process.Capabilities.Bounding = append(s.Process.Capabilities.Bounding, "CAP_SYS_ADMIN")
			s.Process.Capabilities.Effective = append(s.Process.Capabilities.Effective, "CAP_SYS_ADMIN")
			s.Process.Capabilities.Permitted = append(s.Process.Capabilities.Permitted, "CAP_SYS_ADMIN")
			s.Mounts = append(s.Mounts,
				specs.Mount{Destination: "/work", Type: "bind", Source: grant, Options: []string{"rbind", "rw"}},
				specs.Mount{Destination: "/other", Type: "bind", Source: other, Options: []string{"rbind", "rw"}})
		})
	}
	refID := "ref-" + randomHex(4)
	ref := run(t, nil, runcBinary, "--root", runcRoot, "run", "--bundle", mk(refID), refID)
	if !strings.Contains(ref.Stdout, "granted") || strings.Contains(ref.Stdout, "refused") || strings.Contains(ref.Stdout, "CapEff:\t0000000000000000") {
		t.Fatalf("under runc: %q %q", ref.Stdout, ref.Stderr)
	}
	os.Remove(filepath.Join(other, "f"))
	os.Remove(filepath.Join(grant, "f"))
	id := "oci-" + randomHex(4)
	r := o.warden(t, "--policy", policy, "run", "--bundle", mk(id), id)
	if !strings.Contains(r.Stdout, "granted") || !strings.Contains(r.Stdout, "other-refused") || !strings.Contains(r.Stdout, "root-refused") || !strings.Contains(r.Stdout, "CapEff:\t0000000000000000") {
		t.Fatalf("under warden --policy: exit %d %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	if _, err := os.Stat(filepath.Join(other, "f")); err == nil {
		t.Fatal("a write into an ungranted bind reached the host")
	}
	// The limits hold against update, and exec gets no capabilities.
	id2 := "oci-" + randomHex(4)
	if r := o.warden(t, "--policy", policy, "--cap-allow", "CAP_CHOWN", "run", "-d", "--bundle", busyboxBundle(t, id2, nil), id2); r.Exit != 0 {
		t.Fatalf("run -d under policy: %s", r.Stderr)
	}
	if st := o.state(t, id2); st.Policy != "p" || st.Annotations["dev.warden.policy"] != "p" {
		t.Fatalf("state does not name the policy: %+v", st)
	}
	if r := o.wardenIn(t, `{"memory":{"limit":1073741824,"swap":1073741824},"pids":{"limit":-1}}`, "update", "--resources", "-", id2); r.Exit != 0 {
		t.Fatalf("update: %s", r.Stderr)
	}
	cg := ociCgroupParent + "/" + id2
	if got := readCgroup(t, "memory", cg, "memory.limit_in_bytes"); got != strconv.Itoa(64<<20) {
		t.Fatalf("update raised memory above the policy: %s", got)
	}
	if got := readCgroup(t, "pids", cg, "pids.max"); got != "20" {
		t.Fatalf("update raised pids above the policy: %s", got)
	}
	dir := tempDir(t)
	proc := specs.Process{Args: []string{"grep", "CapEff", "/proc/self/status"}, Cwd: "/", Env: []string{"PATH=/bin"},
		Capabilities: &specs.LinuxCapabilities{Effective: []string{"CAP_SYS_ADMIN", "CAP_CHOWN"}, Permitted: []string{"CAP_SYS_ADMIN", "CAP_CHOWN"}, Bounding: []string{"CAP_SYS_ADMIN", "CAP_CHOWN"}}}
	writeJSON(t, filepath.Join(dir, "p.json"), &proc)
	if r := o.warden(t, "exec", "--process", filepath.Join(dir, "p.json"), id2); !strings.Contains(r.Stdout, "CapEff:\t0000000000000001") {
		t.Fatalf("exec under policy kept more than CAP_CHOWN: %q %q", r.Stdout, r.Stderr)
	}
	// A config joining the host's network namespace is refused.
	id3 := "oci-" + randomHex(4)
	b3 := busyboxBundle(t, id3, func(s *specs.Spec) {
		for i := range s.Linux.Namespaces {
			if s.Linux.Namespaces[i].Type == specs.NetworkNamespace {
				s.Linux.Namespaces[i].Path = fmt.Sprintf("/proc/%d/ns/net", os.Getpid())
			}
		}
	})
	if r := o.warden(t, "--policy", policy, "run", "--bundle", b3, id3); r.Exit != 125 || !strings.Contains(r.Stderr, "host's own") {
		t.Fatalf("host network under a policy: %d %q", r.Exit, r.Stderr)
	}
}

func TestOCIErrorsAndInfo(t *testing.T) {
	o := newOCIEnv(t)
	logPath := filepath.Join(tempDir(t), "log.json")
	r := o.warden(t, "--log", logPath, "--log-format", "json", "start", "no-such-container")
	if r.Exit != 125 {
		t.Fatalf("start of a missing container: exit %d", r.Exit)
	}
	data, _ := os.ReadFile(logPath)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	var last struct{ Level, Msg string }
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.Level != "error" || !strings.Contains(last.Msg, "no-such-container does not exist") {
		t.Fatalf("last log line %q (%v)", lines[len(lines)-1], err)
	}
	if r := o.warden(t, "--systemd-cgroup", "list"); r.Exit != 125 || !strings.Contains(r.Stderr, "no systemd") {
		t.Fatalf("--systemd-cgroup: %d %q", r.Exit, r.Stderr)
	}
	if r := o.warden(t, "--log-format", "xml", "list"); r.Exit != 125 || !strings.Contains(r.Stderr, "text or json") {
		t.Fatalf("--log-format xml: %d %q", r.Exit, r.Stderr)
	}
	for _, bad := range []string{"../x", "a/b", ""} {
		if r := o.warden(t, "create", "--bundle", "/nonexistent", bad); r.Exit != 125 {
			t.Errorf("create with id %q: exit %d", bad, r.Exit)
		}
	}
	// --version in the form dockerd parses: "NAME version X" and "commit: Y".
	v := o.warden(t, "--version")
	if !strings.HasPrefix(v.Stdout, "warden version ") || !strings.Contains(v.Stdout, "\ncommit: ") {
		t.Fatalf("--version: %q", v.Stdout)
	}
	var feat struct {
		OCIVersionMax string   `json:"ociVersionMax"`
		Hooks         []string `json:"hooks"`
		Linux         struct {
			Seccomp struct {
				Enabled bool `json:"enabled"`
			} `json:"seccomp"`
		} `json:"linux"`
	}
	f := o.warden(t, "features")
	if err := json.Unmarshal([]byte(f.Stdout), &feat); err != nil || feat.OCIVersionMax != specs.Version || len(feat.Hooks) < 6 || !feat.Linux.Seccomp.Enabled {
		t.Fatalf("features: %v %+v", err, feat)
	}
	dir := tempDir(t)
	if r := o.warden(t, "spec", "--bundle", dir); r.Exit != 0 {
		t.Fatalf("spec: %s", r.Stderr)
	}
	var s specs.Spec
	readJSON(t, filepath.Join(dir, "config.json"), &s)
	if s.Process == nil || s.Root.Path != "rootfs" {
		t.Fatalf("spec wrote %+v", s)
	}
	if r := o.warden(t, "spec", "--bundle", dir); r.Exit != 125 || !strings.Contains(r.Stderr, "exists") {
		t.Fatalf("spec over an existing config.json: %d %q", r.Exit, r.Stderr)
	}
}

// TestOCIPreserveFDs passes a file to the container as its fd 3.
func TestOCIPreserveFDs(t *testing.T) {
	o := newOCIEnv(t)
	id := "oci-" + randomHex(4)
	bundle := busyboxBundle(t, id, func(s *specs.Spec) { s.Process.Args = []string{"sh", "-c", "echo through-fd3 >&3"} })
	out := filepath.Join(tempDir(t), "fd3")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(wardenBinary, "--root", o.root, "run", "--preserve-fds", "1", "--bundle", bundle, id)
	cmd.ExtraFiles = []*os.File{f}
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("run --preserve-fds 1: %v: %s", err, msg)
	}
	if data, _ := os.ReadFile(out); string(data) != "through-fd3\n" {
		t.Fatalf("fd 3 got %q", data)
	}
	// Without the fd open, the flag is an error, not a silent skip.
	id2 := "oci-" + randomHex(4)
	b2 := busyboxBundle(t, id2, func(s *specs.Spec) { s.Process.Args = []string{"true"} })
	if r := o.warden(t, "run", "--preserve-fds", "1", "--bundle", b2, id2); r.Exit != 125 || !strings.Contains(r.Stderr, "not open") {
		t.Fatalf("run --preserve-fds without fd 3: %d %q", r.Exit, r.Stderr)
	}
}

// TestOCIRunForwardsSignals: `warden run` in the foreground passes the
// signals it gets to the container's process, as runc does, with a policy
// and without: the process's trap runs and warden exits with the status
// the trap chose. The signal is sent as soon as the process says it is
// running, so a forwarding that were not in place by then would leave the
// signal to kill warden instead.
func TestOCIRunForwardsSignals(t *testing.T) {
	o := newOCIEnv(t)
	policy := filepath.Join(tempDir(t), "p.toml")
	if err := os.WriteFile(policy, []byte("name = \"p\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{nil, {"--policy", policy}} {
		id := "signals-" + randomHex(4)
		bundle := busyboxBundle(t, id, func(s *specs.Spec) {
			s.Process.Args = []string{"sh", "-c", "trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.05; done"}
		})
		cmd := exec.Command(wardenBinary, append(append([]string{"--root", o.root}, args...), "run", "--bundle", bundle, id)...)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len("ready\n"))
		if _, err := io.ReadFull(out, buf); err != nil || string(buf) != "ready\n" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("%v: the container did not start: %q %v %s", args, buf, err, stderr.String())
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		done := make(chan []byte, 1)
		go func() {
			rest, _ := io.ReadAll(out)
			done <- rest
		}()
		var rest []byte
		select {
		case rest = <-done:
		case <-time.After(20 * time.Second):
			// warden is gone and the container runs on, holding the pipe.
			o.warden(t, "delete", "--force", id)
			rest = <-done
		}
		err = cmd.Wait()
		if code := cmd.ProcessState.ExitCode(); code != 7 || string(rest) != "got-term\n" {
			t.Errorf("%v: SIGTERM to warden run: exit %d (%v), output after ready %q, stderr %q", args, code, err, rest, stderr.String())
		}
	}
}
