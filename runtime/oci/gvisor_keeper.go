package oci

import (
	"bufio"
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
	"strings"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/runtime/sandbox"
)

// A Kubernetes pod's containers on the gVisor engine are sub-containers:
// runsc runs them inside the pod sandbox's gVisor kernel, and has no host
// process of their own. Two things runc's callers rely on then break
// (containerd's runc shim hangs in start and never sees the container end):
//
//   - `runsc create` writes the sandbox's pid, the pod's, into --pid-file,
//     so the shim waits for the pod, not the container, to end;
//   - `runsc start` hands its own stdio to the container's process, not
//     create's: the shim's pipe for start's output then stays open as long
//     as the container runs (the shim waits for it before start returns),
//     and the container's output never reaches its log.
//
// So warden gives a sub-container a keeper: a host process made at create
// that holds create's stdio and stands for the container's process. Its
// pid is the one create writes; start asks it (over keeper.sock in the
// container's folder) to run `runsc start` with that stdio; it then waits
// for the container's process (`runsc wait`) and exits with its status,
// as the container's init would. Signalled before start, it dies of the
// signal, as a created container's init does under runc.

// GVisorKeeperCommand is the hidden command a keeper runs as.
const GVisorKeeperCommand = "gvisor-keeper"

const keeperSocket = "keeper.sock"

// subcontainer reports whether runsc runs s inside another container's
// sandbox: the container types CRI runtimes annotate (runsc's own test,
// specutils.IsRootContainer).
func subcontainer(s *specs.Spec) bool {
	return s.Annotations["io.kubernetes.cri.container-type"] == "container" ||
		(s.Annotations["io.kubernetes.cri.container-type"] == "" && s.Annotations["io.kubernetes.cri-o.ContainerType"] == "container")
}

// gvisorSandboxID is the sandbox a sub-container joins (specutils.SandboxID).
func gvisorSandboxID(s *specs.Spec) string {
	if id, ok := s.Annotations["io.kubernetes.cri.sandbox-id"]; ok {
		return id
	}
	return s.Annotations["io.kubernetes.cri-o.SandboxID"]
}

// startKeeper starts the container's keeper with warden's stdio and waits
// until it listens.
func (c *gvisorContainer) startKeeper() error {
	pid, start, err := c.spawnKeeper(c.id)
	if err != nil {
		return fmt.Errorf("the container's keeper: %w", err)
	}
	c.rec.Keeper, c.rec.KeeperStart = pid, start
	return nil
}

// spawnKeeper starts warden's hidden keeper command with args, warden's
// stdio and a pipe on fd 3, and waits until the keeper says it is ready
// there (or why it is not). It returns the keeper's pid and start time.
func (c *gvisorContainer) spawnKeeper(args ...string) (int, uint64, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, 0, err
	}
	global := []string{"--root", c.o.Root}
	if c.o.LogFile != "" {
		global = append(global, "--log", absPath(c.o.LogFile), "--log-format", c.o.LogFormat)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return 0, 0, err
	}
	defer r.Close()
	cmd := exec.Command(exe, append(append(global, GVisorKeeperCommand), args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{w}
	cmd.Dir = "/"
	// Its own session: a terminal's signals for warden are not the
	// container's. Its parent is whoever reaps warden's children (the
	// shim, a subreaper) once warden returns.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	w.Close()
	if err != nil {
		return 0, 0, err
	}
	// Read while it cannot have been reaped: it is never waited for here.
	// The caller's reaper (the shim) must see its exit status, even when
	// it ends before warden does.
	start, err := sandbox.ProcessStart(cmd.Process.Pid)
	if err != nil {
		cmd.Process.Kill()
		return 0, 0, err
	}
	msg := make(chan string, 1)
	go func() {
		data, _ := io.ReadAll(io.LimitReader(r, 4096))
		msg <- string(data)
	}()
	select {
	case m := <-msg:
		if m != "ready" {
			cmd.Process.Kill()
			if m == "" {
				m = "it exited"
			}
			return 0, 0, errors.New(m)
		}
	case <-time.After(gvisorTimeout):
		cmd.Process.Kill()
		return 0, 0, fmt.Errorf("not ready within %s; it was killed", gvisorTimeout)
	}
	return cmd.Process.Pid, start, nil
}

// keeperAlive reports whether the container's keeper still runs (its pid
// not taken by another process since).
func (c *gvisorContainer) keeperAlive() bool {
	if c.rec.Keeper <= 0 {
		return false
	}
	start, err := sandbox.ProcessStart(c.rec.Keeper)
	return err == nil && start == c.rec.KeeperStart
}

// signalKeeper sends sig to the keeper of a container not yet started: it
// ends of it, as runc's waiting init would.
func (c *gvisorContainer) signalKeeper(sig unix.Signal) error {
	if !c.keeperAlive() {
		return notRunning(c.id)
	}
	return unix.Kill(c.rec.Keeper, sig)
}

// waitingKeeper reports whether the container is a sub-container whose
// keeper waits for start.
func (c *gvisorContainer) waitingKeeper() bool {
	if c.rec.Keeper == 0 {
		return false
	}
	_, err := os.Lstat(filepath.Join(c.dir, keeperSocket))
	return err == nil && c.keeperAlive()
}

// startByKeeper asks the keeper to start the container.
func (c *gvisorContainer) startByKeeper() error {
	if !c.waitingKeeper() {
		st, err := c.state()
		if err == nil && st.Status != "created" {
			return fmt.Errorf("cannot start a container that is %s", st.Status)
		}
		return fmt.Errorf("container %s: its keeper process is gone; delete the container and create it again", c.id)
	}
	conn, err := dialInDir(c.dir, keeperSocket)
	if err != nil {
		return fmt.Errorf("container %s: reaching its keeper: %w", c.id, err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(gvisorTimeout + 5*time.Second))
	if _, err := conn.Write([]byte("start\n")); err != nil {
		return fmt.Errorf("container %s: asking its keeper to start it: %w", c.id, err)
	}
	reply, err := bufio.NewReader(io.LimitReader(conn, 64<<10)).ReadString('\n')
	if err != nil {
		return fmt.Errorf("container %s: its keeper did not answer: %w", c.id, err)
	}
	reply = strings.TrimSuffix(reply, "\n")
	if reply == "ok" {
		return nil
	}
	return errors.New(strings.TrimPrefix(reply, "error "))
}

// destroyKeeper ends a keeper still running after its container was
// deleted.
func (c *gvisorContainer) destroyKeeper() {
	if c.keeperAlive() {
		unix.Kill(c.rec.Keeper, unix.SIGKILL)
	}
}

// loadKept is the record of the container a keeper keeps.
func (o *Runtime) loadKept(id string) (*gvisorContainer, error) {
	c, ok, err := o.loadGVisor(id)
	if !ok || err != nil {
		return nil, fmt.Errorf("container %s: no record (%v)", id, err)
	}
	return c, nil
}

// keeperFailed tells whoever waits on ready why the keeper cannot keep,
// and is the keeper's exit status: warden's own failure.
func keeperFailed(ready *os.File, err error) int {
	ready.WriteString(err.Error())
	ready.Close()
	return 125
}

// KeepGVisor is the keeper of sub-container id (see above): it tells
// create it listens by writing "ready" to ready (or why it cannot), runs
// `runsc start` when asked, and returns the container's exit status.
// Its stdio is the container's: nothing of warden's is written there.
func (o *Runtime) KeepGVisor(id string, ready *os.File) int {
	fail := func(err error) int { return keeperFailed(ready, err) }
	c, err := o.loadKept(id)
	if err != nil {
		return fail(err)
	}
	l, err := listenInDir(c.dir, keeperSocket)
	if err != nil {
		return fail(err)
	}
	ready.WriteString("ready")
	ready.Close()
	for {
		conn, err := l.Accept()
		if err != nil {
			logrus.Errorf("container %s: keeper: %v", id, err)
			return 125
		}
		started := c.serveStart(conn)
		conn.Close()
		if started {
			break
		}
	}
	l.Close()
	os.Remove(filepath.Join(c.dir, keeperSocket))
	// The container's process holds the stdio now: its end is what ends
	// the caller's copies of it.
	if null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0); err == nil {
		for fd := 0; fd <= 2; fd++ {
			unix.Dup2(int(null.Fd()), fd)
		}
		null.Close()
	}
	return c.waitExit()
}

// serveStart answers one request to the keeper; true once the container
// started.
func (c *gvisorContainer) serveStart(conn net.Conn) bool {
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(io.LimitReader(conn, 64)).ReadString('\n')
	if err != nil || line != "start\n" {
		fmt.Fprintf(conn, "error container %s: its keeper takes only \"start\"\n", c.id)
		return false
	}
	conn.SetDeadline(time.Time{})
	// runsc start hands the keeper's stdio (call's nil: the process's
	// own descriptors, not pipes of its own) to the container's process.
	if err := c.call(nil, "start", c.id); err != nil {
		fmt.Fprintf(conn, "error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		return false
	}
	conn.Write([]byte("ok\n"))
	return true
}

// waitExit waits for the container's process and returns its status
// (128+N for a signal, as runc's shim reports a killed init). A sandbox
// that went away took the process with it: 137.
func (c *gvisorContainer) waitExit() int {
	cmd, err := c.command(context.Background(), "wait", c.id)
	if err != nil {
		logrus.Errorf("container %s: keeper: %v", c.id, err)
		return 137
	}
	var out bytes.Buffer
	cmd.Stdout = &out
	// It ends with the keeper, whatever kills it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		logrus.Warnf("container %s: runsc wait: %v; taken as killed", c.id, err)
		return 137
	}
	var res struct {
		ExitStatus int `json:"exitStatus"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		logrus.Warnf("container %s: runsc wait printed %q; taken as killed", c.id, out.String())
		return 137
	}
	return res.ExitStatus
}

// listenInDir and dialInDir reach a unix socket in dir through a
// descriptor of dir: a container's folder can be longer than a socket
// address may be (108 bytes).
func listenInDir(dir, name string) (net.Listener, error) {
	var l net.Listener
	err := inDir(dir, name, func(addr string) (err error) {
		if l, err = net.Listen("unix", addr); err == nil {
			// The address names a descriptor that is closed by then.
			l.(*net.UnixListener).SetUnlinkOnClose(false)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(filepath.Join(dir, name), 0o600); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

func dialInDir(dir, name string) (net.Conn, error) {
	var conn net.Conn
	err := inDir(dir, name, func(addr string) (err error) {
		conn, err = net.DialTimeout("unix", addr, 5*time.Second)
		return err
	})
	return conn, err
}

func inDir(dir, name string, f func(addr string) error) error {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	defer unix.Close(fd)
	return f(fmt.Sprintf("/proc/self/fd/%d/%s", fd, name))
}
