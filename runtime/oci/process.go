package oci

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/utils"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/runtime/sandbox"
)

// inherited reports whether fd was inherited by warden rather than opened
// by it: Go opens every descriptor close-on-exec (the runtime's own too,
// such as the cgroup cpu files it watches from before main), and an
// inherited descriptor cannot be.
func inherited(fd int) bool {
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	return err == nil && flags&unix.FD_CLOEXEC == 0
}

// processRun starts one process in a container (its init or an exec) the
// way runc does: stdio inherited when detached, a terminal through the
// console socket, signals forwarded while attached.
type processRun struct {
	container     *libcontainer.Container
	init          bool
	detach        bool
	pidFile       string
	consoleSocket string
	preserveFDs   int
	destroyOnExit bool
	// afterDestroy runs once a run's container is destroyed.
	afterDestroy func()
	// afterStart runs once the init exists, before its process starts.
	afterStart func(pid int) error
	// seccomp, for an init, is its filter, loaded by its first program
	// (seccompexec.go).
	seccomp *initSeccomp
}

func (r *processRun) run(sp *specs.Process, start bool) (int, error) {
	if r.detach && sp.Terminal && r.consoleSocket == "" {
		return -1, errors.New("cannot allocate a terminal for a detached process without --console-socket")
	}
	if (!r.detach || !sp.Terminal) && r.consoleSocket != "" {
		return -1, errors.New("--console-socket needs a detached process with terminal: true")
	}
	p, err := ociProcess(sp)
	if err != nil {
		return -1, err
	}
	p.Init = r.init
	p.LogLevel = strconv.Itoa(int(logrus.GetLevel()))
	for i := 0; i < r.preserveFDs; i++ {
		fd := 3 + i
		if !inherited(fd) {
			return -1, fmt.Errorf("--preserve-fds %d: fd %d was not open when warden started; pass it open, or lower the count", r.preserveFDs, fd)
		}
		p.ExtraFiles = append(p.ExtraFiles, os.NewFile(uintptr(fd), "preserved-fd-"+strconv.Itoa(fd)))
	}
	var term *hostTerminal
	var closeAfter []*os.File
	if r.seccomp != nil {
		p.Args, p.ExtraFiles = r.seccomp.wrap(p.Args, p.ExtraFiles)
		closeAfter = append(closeAfter, r.seccomp.program)
	}
	switch {
	case sp.Terminal && r.detach:
		sock, err := dialConsoleSocket(r.consoleSocket)
		if err != nil {
			return -1, err
		}
		p.ConsoleSocket = sock
		closeAfter = append(closeAfter, sock)
	case sp.Terminal:
		parent, child, err := utils.NewSockPair("console")
		if err != nil {
			return -1, err
		}
		p.ConsoleSocket = child
		closeAfter = append(closeAfter, child)
		term = &hostTerminal{socket: parent}
	default:
		p.Stdin, p.Stdout, p.Stderr = os.Stdin, os.Stdout, os.Stderr
	}
	var signals chan os.Signal
	notified := make(chan struct{})
	if !r.detach {
		// The process is forked twice by libcontainer: as a subreaper
		// warden stays its parent and gets its exit status.
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			return -1, fmt.Errorf("set child subreaper: %w", err)
		}
		signals = make(chan os.Signal, 32)
		// Go enables (and disables) each signal with a handshake with
		// its signal thread, which for all of them takes as long as a
		// good part of the start (docs/oci.md): the ones that would end
		// warden are enabled at once, the rest while the container
		// starts (its process is released only once all reach it), and
		// all are disabled after, off the caller's path.
		signal.Notify(signals, terminating...)
		go func() {
			signal.Notify(signals)
			close(notified)
		}()
		defer func() {
			go func() {
				<-notified
				signal.Stop(signals)
			}()
		}()
	} else {
		close(notified)
	}
	if r.init {
		err = r.container.Start(p)
		if err == nil && r.afterStart != nil {
			if pid, perr := p.Pid(); perr != nil {
				err = perr
			} else {
				err = r.afterStart(pid)
			}
			if err != nil {
				p.Signal(unix.SIGKILL)
				p.Wait()
			}
		}
		if err == nil && start {
			<-notified
			err = r.container.Exec()
		}
	} else {
		<-notified
		err = r.container.Run(p)
	}
	for _, f := range closeAfter {
		f.Close()
	}
	if err != nil {
		return -1, err
	}
	if term != nil {
		if err := term.attach(); err != nil {
			p.Signal(unix.SIGKILL)
			p.Wait()
			return -1, err
		}
		defer term.restore()
	}
	if r.pidFile != "" {
		if err := writePidFile(r.pidFile, p); err != nil {
			p.Signal(unix.SIGKILL)
			p.Wait()
			return -1, err
		}
	}
	if r.detach {
		return 0, nil
	}
	status := forwardUntilExit(p, signals, term)
	if r.destroyOnExit {
		if err := r.container.Destroy(); err != nil {
			logrus.Warn(err)
		} else if r.afterDestroy != nil {
			r.afterDestroy()
		}
	}
	return status, nil
}

// terminating are the signals a supervisor sends whose default action
// would end warden, leaving its container behind.
var terminating = []os.Signal{unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGTERM, unix.SIGUSR1, unix.SIGUSR2, unix.SIGALRM}

// forwardUntilExit passes signals to the process until it exits and
// returns its status: its code, or 128+N when killed by signal N.
func forwardUntilExit(p *libcontainer.Process, signals chan os.Signal, term *hostTerminal) int {
	done := make(chan *os.ProcessState, 1)
	go func() {
		ps, err := p.Wait()
		if err != nil {
			logrus.Debugf("wait: %v", err)
		}
		done <- ps
	}()
	for {
		select {
		case ps := <-done:
			if term != nil {
				term.drain()
			}
			if ps == nil {
				return 255
			}
			if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				return 128 + int(ws.Signal())
			}
			return ps.ExitCode()
		case sig := <-signals:
			switch sig {
			case unix.SIGCHLD, unix.SIGURG, unix.SIGPIPE:
				continue
			case unix.SIGWINCH:
				if term != nil {
					term.resize()
				}
				continue
			}
			p.Signal(sig)
		}
	}
}

func writePidFile(path string, p *libcontainer.Process) error {
	pid, err := p.Pid()
	if err != nil {
		return err
	}
	return writePid(path, pid)
}

func writePid(path string, pid int) error {
	// A fresh temporary file, never one that exists (a symlink planted
	// there would be followed and its target truncated), renamed over the
	// pid file (which replaces a symlink there, never its target).
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = f.WriteString(strconv.Itoa(pid))
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// ociProcess converts a spec process the way runc does.
func ociProcess(p *specs.Process) (*libcontainer.Process, error) {
	lp := &libcontainer.Process{
		Args: p.Args, Env: p.Env, UID: int(p.User.UID), GID: int(p.User.GID), Cwd: p.Cwd,
		Label: p.SelinuxLabel, NoNewPrivileges: &p.NoNewPrivileges, AppArmorProfile: p.ApparmorProfile,
		Scheduler: p.Scheduler, IOPriority: p.IOPriority,
	}
	if p.ConsoleSize != nil {
		lp.ConsoleWidth, lp.ConsoleHeight = uint16(p.ConsoleSize.Width), uint16(p.ConsoleSize.Height)
	}
	if c := p.Capabilities; c != nil {
		lp.Capabilities = &configs.Capabilities{Bounding: c.Bounding, Effective: c.Effective,
			Inheritable: c.Inheritable, Permitted: c.Permitted, Ambient: c.Ambient}
	}
	for _, g := range p.User.AdditionalGids {
		lp.AdditionalGroups = append(lp.AdditionalGroups, int(g))
	}
	for _, r := range p.Rlimits {
		rl, err := sandbox.Rlimit(r)
		if err != nil {
			return nil, err
		}
		lp.Rlimits = append(lp.Rlimits, rl)
	}
	aff, err := configs.ConvertCPUAffinity(p.ExecCPUAffinity)
	if err != nil {
		return nil, err
	}
	lp.CPUAffinity = aff
	return lp, nil
}
