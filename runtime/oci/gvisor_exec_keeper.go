package oci

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// A detached exec (containerd's shim runs every exec that way) has the
// same trouble under runc's shim as a sub-container's process: the pid
// `runsc exec --detach` writes is a runsc process waiting for the one in
// gVisor, and the shim signals that pid itself. It does not pass signals
// on, so an exec the CRI plugin kills at its timeout (kubelet's probes,
// ExecSync) goes on running in gVisor, holding the exec's output open.
//
// So warden writes the pid of an exec keeper instead: it runs `runsc exec`
// in the foreground with the exec's stdio, passes each signal it gets to
// the process in gVisor (`runsc kill --pid`), and exits with its status.
// SIGKILL cannot be passed on: a guard process, holding a pipe from the
// keeper, kills the process in gVisor when the keeper dies before it.

// execKeeperSignals are the signals an exec keeper passes on; the others
// keep their default (and SIGKILL, SIGSTOP cannot be caught).
var execKeeperSignals = []os.Signal{unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGTERM, unix.SIGUSR1, unix.SIGUSR2,
	unix.SIGALRM, unix.SIGCONT, unix.SIGTSTP, unix.SIGWINCH, unix.SIGPWR, unix.SIGABRT}

// execByKeeper starts the process of processFile through an exec keeper
// and writes the keeper's pid into opts.PidFile.
func (c *gvisorContainer) execByKeeper(processFile string, opts ExecOptions) error {
	args := []string{"--exec", processFile}
	if opts.ConsoleSocket != "" {
		args = append(args, "--console-socket", absPath(opts.ConsoleSocket))
	}
	pid, _, err := c.spawnKeeper(append(args, c.id)...)
	if err != nil {
		return err
	}
	if opts.PidFile != "" {
		return writePid(absPath(opts.PidFile), pid)
	}
	return nil
}

// KeepGVisorExec is an exec keeper (see above): it runs the process of
// processFile in container id, writes "ready" to ready once it runs (or
// why it does not), and returns its exit status.
func (o *Runtime) KeepGVisorExec(id, processFile, consoleSocket string, ready *os.File) int {
	fail := func(err error) int { return keeperFailed(ready, err) }
	c, err := o.loadKept(id)
	if err != nil {
		return fail(err)
	}
	defer os.Remove(processFile)
	internal := strings.TrimSuffix(processFile, ".json") + ".pid"
	defer os.Remove(internal)
	cmd, err := c.command(context.Background(), "exec", "--process", processFile, "--internal-pid-file", internal, id)
	if err != nil {
		return fail(err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if consoleSocket != "" {
		// runsc exec makes a terminal for --console-socket only when it
		// detaches: in the foreground its own terminal is the process's.
		tty, err := newTerminal(consoleSocket)
		if err != nil {
			return fail(err)
		}
		defer tty.Close()
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	}
	signals := make(chan os.Signal, 16)
	signal.Notify(signals, execKeeperSignals...)
	offset := fileSize(c.logPath())
	if err := cmd.Start(); err != nil {
		return fail(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// runsc exec writes the pid once the process runs; a short process
	// may have ended by the time it is read.
	var pid string
	var waitErr error
	ended := false
	for deadline := time.Now().Add(gvisorTimeout); pid == "" && !ended; {
		select {
		case waitErr = <-exited:
			ended = true
		case <-time.After(5 * time.Millisecond):
		}
		if data, err := os.ReadFile(internal); err == nil {
			pid = strings.TrimSpace(string(data))
		}
		if pid == "" && !ended && time.Now().After(deadline) {
			cmd.Process.Kill()
			return fail(fmt.Errorf("runsc exec did not start the process within %s; it was killed", gvisorTimeout))
		}
	}
	if pid == "" {
		if waitErr == nil {
			waitErr = errors.New("it ended without starting the process")
		}
		return fail(fmt.Errorf("runsc exec: %s", c.runscError(offset, waitErr)))
	}
	var done *os.File
	if !ended {
		if done, err = c.guardExec(pid); err != nil {
			cmd.Process.Kill()
			return fail(fmt.Errorf("the exec's guard: %w", err))
		}
	}
	ready.WriteString("ready")
	ready.Close()
	// runsc exec and the process hold the stdio now.
	if null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0); err == nil {
		for fd := 0; fd <= 2; fd++ {
			unix.Dup2(int(null.Fd()), fd)
		}
		null.Close()
	}
	for !ended {
		select {
		case sig := <-signals:
			if err := c.call(io.Discard, "kill", "--pid", pid, id, strconv.Itoa(int(sig.(syscall.Signal)))); err != nil {
				logrus.Debugf("container %s: passing %v on to pid %s: %v", id, sig, pid, err)
			}
		case waitErr = <-exited:
			ended = true
			// The process ended: the guard has nothing left to kill.
			done.WriteString("done")
			done.Close()
		}
	}
	var ee *exec.ExitError
	switch {
	case waitErr == nil:
		return 0
	case errors.As(waitErr, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	logrus.Errorf("container %s: runsc exec: %v", id, waitErr)
	return 125
}

// guardExec starts the guard of the process pid (in gVisor): it kills the
// process unless the keeper writes "done" on the pipe it returns before
// the pipe closes.
func (c *gvisorContainer) guardExec(pid string) (*os.File, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	global := []string{"--root", c.o.Root}
	if c.o.LogFile != "" {
		global = append(global, "--log", c.o.LogFile, "--log-format", c.o.LogFormat)
	}
	cmd := exec.Command(exe, append(global, GVisorKeeperCommand, "--guard", pid, c.id)...)
	cmd.Stdin = r // nothing of the exec's stdio
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, err
	}
	go cmd.Wait()
	return w, nil
}

// GuardGVisorExec is an exec's guard (see above): it reads its stdin to
// the end and kills pid in container id unless the keeper said "done".
func (o *Runtime) GuardGVisorExec(id, pid string, keeper io.Reader) error {
	data, _ := io.ReadAll(io.LimitReader(keeper, 16))
	if string(data) == "done" {
		return nil
	}
	c, ok, err := o.loadGVisor(id)
	if !ok || err != nil {
		return fmt.Errorf("container %s: no record (%v)", id, err)
	}
	return c.call(io.Discard, "kill", "--pid", pid, id, strconv.Itoa(int(unix.SIGKILL)))
}
