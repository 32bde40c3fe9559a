package runtime

import (
	"debug/elf"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"runtime/debug"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// agentListenerFD is the listening socket the host passes to the agent. The
// socket's file lives on the host only, so nothing in the sandbox can reach
// or replace it.
const agentListenerFD = 3

// AgentConfig is what the agent needs to know about its sandbox.
type AgentConfig struct {
	// ExecAllow lists the executables that may run; nil means every
	// executable the sandbox can see.
	ExecAllow []string
	// Writable lists the paths writes are allowed beneath.
	Writable []string
	// HiddenPrograms may not even be read: with ExecAllow, Landlock stops
	// execve of them, and this stops the dynamic loader (see programs.go).
	HiddenPrograms []string
	// Pooled defers Landlock until the host has bound the session's
	// folders (a warm pool's claim) and says so with a seal request, or
	// until the first command, whichever comes first. Landlock's rules
	// attach to the files present when they are made, so they must see
	// the late mounts; the host sends no command before them.
	Pooled bool
}

// RunAgent is the sandbox's PID 1: it applies Landlock as a second wall,
// reaps every zombie, and runs each command it is sent with the caller's
// own file descriptors. It returns only on a fatal error.
func RunAgent(cfg AgentConfig) error {
	if os.Getpid() != 1 {
		return errors.New("the agent runs only as a sandbox's PID 1")
	}
	f := os.NewFile(agentListenerFD, "agent-listener")
	unix.CloseOnExec(agentListenerFD)
	l, err := net.FileListener(f)
	if err != nil {
		return fmt.Errorf("agent listener: %w", err)
	}
	f.Close()
	ln, ok := l.(*net.UnixListener)
	if !ok {
		return errors.New("agent listener is not a unix socket")
	}
	a := &agent{cfg: cfg, waiters: map[int]chan unix.WaitStatus{}, forked: make(chan struct{}, 1)}
	if cfg.ExecAllow != nil {
		a.allowed = map[string]bool{}
		for _, p := range cfg.ExecAllow {
			a.allowed[p] = true
		}
	}
	// PID 1 of a namespace only dies of what it chooses to; the host stops
	// it with SIGKILL. These are caught and dropped, not ignored: an ignored
	// signal stays ignored in every command the agent starts (a command
	// could then not be stopped with SIGTERM or SIGINT, and would not die of
	// SIGPIPE), while a caught one is reset to its default by execve.
	signal.Notify(make(chan os.Signal, 1), unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGPIPE)
	sigchld := make(chan os.Signal, 1)
	signal.Notify(sigchld, unix.SIGCHLD)
	go a.reap(sigchld)
	if !cfg.Pooled {
		if err := restrictLandlock(cfg); err != nil {
			return fmt.Errorf("landlock: %w", err)
		}
		a.sealed = true
	}
	go trimMemory()
	for {
		conn, err := ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			continue
		}
		go a.serve(conn)
	}
}

type agent struct {
	cfg     AgentConfig
	allowed map[string]bool // nil: everything visible may run

	mu      sync.Mutex
	waiters map[int]chan unix.WaitStatus
	forked  chan struct{} // wakes the reaper when it found no child
	sealed  bool          // Landlock is in place: commands may run
}

// seal applies Landlock once, for a pooled sandbox whose session folders
// are now bound.
func (a *agent) seal() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.sealed {
		return nil
	}
	if err := restrictLandlock(a.cfg); err != nil {
		return fmt.Errorf("landlock: %w", err)
	}
	a.sealed = true
	return nil
}

// reap collects every child, its own commands and reparented orphans, and
// hands each command's status to whoever waits for it. Registration happens
// under the same lock as the fork, so no status is lost. It blocks in wait4
// on a thread of its own: an exit reaches the waiter without a detour
// through signal delivery.
func (a *agent) reap(sigchld <-chan os.Signal) {
	goruntime.LockOSThread()
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			// ECHILD: nothing runs. Wait for the next fork, or for an
			// orphan that the kernel hands to PID 1 as it dies.
			select {
			case <-a.forked:
			case <-sigchld:
			}
			continue
		}
		a.mu.Lock()
		if ch, ok := a.waiters[pid]; ok {
			ch <- ws
			delete(a.waiters, pid)
		}
		a.mu.Unlock()
	}
}

func (a *agent) serve(conn *net.UnixConn) {
	defer conn.Close()
	var req execRequest
	files, err := receive(conn, &req)
	if err != nil {
		send(conn, execEvent{Error: "bad request: " + err.Error(), Code: 125})
		return
	}
	defer closeAll(files)
	if req.Seal {
		ev := execEvent{}
		if err := a.seal(); err != nil {
			ev = execEvent{Error: err.Error(), Code: 125}
		}
		send(conn, ev)
		return
	}
	// A pooled sandbox seals before its first command at the latest.
	if err := a.seal(); err != nil {
		send(conn, execEvent{Error: err.Error(), Code: 125})
		return
	}
	pid, master, done, ev := a.start(&req, files)
	if pid == 0 {
		send(conn, ev)
		return
	}
	// Only a terminal needs a message at start (its master side); without
	// one, the single reply is how the command ended.
	if master != nil {
		send(conn, execEvent{Started: true, Pid: pid}, int(master.Fd()))
		master.Close()
	}
	go a.control(conn, pid)
	ws := <-done
	ev = execEvent{Exited: true, Code: ws.ExitStatus()}
	if ws.Signaled() {
		ev.Signal = int(ws.Signal())
		ev.Code = 128 + ev.Signal
	}
	send(conn, ev)
}

// control applies what the client sends while a command runs. A client
// that goes away takes its command's process tree with it.
func (a *agent) control(conn *net.UnixConn, pid int) {
	for {
		var c execControl
		files, err := receive(conn, &c)
		closeAll(files)
		if err != nil {
			unix.Kill(-pid, unix.SIGKILL)
			return
		}
		switch {
		case c.Kill:
			unix.Kill(-pid, unix.SIGKILL)
		case c.Signal > 0 && c.Signal < 65:
			unix.Kill(-pid, unix.Signal(c.Signal))
		case c.Rows > 0 && c.Cols > 0:
			// resize is applied by the client on the master side
		}
	}
}

// start forks and execs one command in a session of its own (so its whole
// process group can be signalled), wired to the caller's descriptors or to
// a new terminal. The status arrives on the returned channel, which is
// registered with the fork: a command that ends at once is reaped (and its
// waiter removed) before start's caller could look it up.
func (a *agent) start(req *execRequest, files []*os.File) (int, *os.File, <-chan unix.WaitStatus, execEvent) {
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return 0, nil, nil, execEvent{Error: "no command given", Code: 125}
	}
	path, ev := a.lookup(req.Argv[0], req.Env)
	if path == "" {
		return 0, nil, nil, ev
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = "/"
	}
	attr := &syscall.ProcAttr{Dir: cwd, Env: req.Env, Sys: &syscall.SysProcAttr{Setsid: true}}
	var master *os.File
	if req.Tty {
		m, slave, err := openPty(req.Rows, req.Cols)
		if err != nil {
			return 0, nil, nil, execEvent{Error: "terminal: " + err.Error(), Code: 125}
		}
		defer slave.Close()
		master = m
		attr.Files = []uintptr{slave.Fd(), slave.Fd(), slave.Fd()}
		attr.Sys.Setctty = true
		attr.Sys.Ctty = 0
	} else {
		if len(files) != 3 {
			return 0, nil, nil, execEvent{Error: fmt.Sprintf("want stdin, stdout and stderr, got %d descriptors", len(files)), Code: 125}
		}
		attr.Files = []uintptr{files[0].Fd(), files[1].Fd(), files[2].Fd()}
	}
	done := make(chan unix.WaitStatus, 1)
	a.mu.Lock()
	pid, err := syscall.ForkExec(path, req.Argv, attr)
	if err == nil {
		a.waiters[pid] = done
	}
	a.mu.Unlock()
	if err == nil {
		select {
		case a.forked <- struct{}{}:
		default:
		}
	}
	if err != nil {
		if master != nil {
			master.Close()
		}
		return 0, nil, nil, execError(req.Argv[0], path, err)
	}
	return pid, master, done, execEvent{}
}

func execError(name, path string, err error) execEvent {
	switch {
	case errors.Is(err, unix.ENOENT):
		return execEvent{Error: name + ": command not found", Code: 127}
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return execEvent{Error: name + ": permission denied (" + whyNotExecutable(path) + ")", Code: 126}
	case errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ENOEXEC), errors.Is(err, unix.EISDIR):
		return execEvent{Error: name + ": cannot run: " + err.Error(), Code: 126}
	default:
		return execEvent{Error: name + ": " + err.Error(), Code: 126}
	}
}

// whyNotExecutable names the likely reason execve refused path.
func whyNotExecutable(path string) string {
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o111 == 0 {
		return "the file has no execute permission"
	}
	var st unix.Statfs_t
	if unix.Statfs(path, &st) == nil && st.Flags&unix.ST_NOEXEC != 0 {
		return "it is on a noexec mount: nothing written in the sandbox can run"
	}
	return "the sandbox's exec rules refuse it"
}

// lookup resolves a command like a shell would, and refuses what the
// policy's exec.allow does not list.
func (a *agent) lookup(name string, env []string) (string, execEvent) {
	path := name
	if !strings.Contains(name, "/") {
		path = ""
		for _, dir := range filepath.SplitList(envValue(env, "PATH")) {
			if dir == "" {
				continue
			}
			candidate := filepath.Join(dir, name)
			if fi, err := os.Stat(candidate); err == nil && fi.Mode().IsRegular() {
				path = candidate
				break
			}
		}
		if path == "" {
			return "", execEvent{Error: name + ": command not found", Code: 127}
		}
	}
	if a.allowed != nil && filepath.IsAbs(path) {
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			return "", execEvent{Error: name + ": command not found", Code: 127}
		}
		if !a.allowed[real] {
			return "", execEvent{Error: name + ": not allowed by the policy's exec.allow", Code: 127}
		}
	}
	return path, execEvent{}
}

func envValue(env []string, name string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], name+"="); ok {
			return v
		}
	}
	return ""
}

// openPty makes a new terminal in the sandbox's own devpts.
func openPty(rows, cols uint16) (master, slave *os.File, err error) {
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		unix.Close(m)
		return nil, nil, err
	}
	// The slave opens read-write and never as the agent's own controlling
	// terminal (the agent leads a session with none): the command's
	// TIOCSCTTY would fail with EPERM otherwise.
	s, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(m), unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC)
	if errno != 0 {
		unix.Close(m)
		return nil, nil, errno
	}
	if rows > 0 && cols > 0 {
		unix.IoctlSetWinsize(m, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	}
	return os.NewFile(uintptr(m), "pty-master"), os.NewFile(uintptr(s), "pty-slave"), nil
}

// restrictLandlock confines the agent, and so every command it starts, to
// the policy's view a second time, enforced by the kernel: executables
// outside exec.allow cannot be executed even where a mount shows them,
// and nothing outside the writable places can be written.
func restrictLandlock(cfg AgentConfig) error {
	const (
		read  = ll.AccessFSReadFile | ll.AccessFSReadDir
		write = ll.AccessFSWriteFile | ll.AccessFSRemoveDir | ll.AccessFSRemoveFile | ll.AccessFSMakeDir |
			ll.AccessFSMakeReg | ll.AccessFSMakeSock | ll.AccessFSMakeFifo | ll.AccessFSMakeSym |
			ll.AccessFSTruncate | ll.AccessFSRefer
	)
	var rules []landlock.Rule
	if cfg.ExecAllow == nil {
		rules = append(rules, landlock.PathAccess(read|ll.AccessFSExecute, "/"))
	} else {
		readable, err := readableExcept(cfg.HiddenPrograms)
		if err != nil {
			return err
		}
		rules = append(rules, readable...)
		if exes := executablesWithInterpreters(cfg.ExecAllow); len(exes) > 0 {
			rules = append(rules, landlock.PathAccess(ll.AccessFSReadFile|ll.AccessFSExecute, exes...))
		}
	}
	if w := existing(cfg.Writable); len(w) > 0 {
		rules = append(rules, landlock.PathAccess(read|write, w...))
	}
	rules = append(rules, landlock.PathAccess(read|ll.AccessFSWriteFile|ll.AccessFSIoctlDev|ll.AccessFSTruncate, "/dev"))
	rules = append(rules, landlock.PathAccess(read|ll.AccessFSWriteFile|ll.AccessFSTruncate, "/proc"))
	return landlock.V7.BestEffort().RestrictPaths(rules...)
}

// executablesWithInterpreters adds each ELF program's interpreter (the
// dynamic loader), which the kernel opens for execution too.
func executablesWithInterpreters(exes []string) []string {
	seen := map[string]bool{}
	var out []string
	add := func(p string) {
		if _, err := os.Stat(p); err == nil && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, p := range exes {
		add(p)
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				data := make([]byte, prog.Filesz)
				if _, err := prog.ReadAt(data, 0); err == nil {
					interp := strings.TrimRight(string(data), "\x00")
					add(interp)
					if real, err := filepath.EvalSymlinks(interp); err == nil {
						add(real)
					}
				}
			}
		}
		f.Close()
	}
	return out
}

func existing(paths []string) []string {
	var out []string
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// trimMemory returns the start-up garbage to the kernel once the agent
// waits for commands: a warm pool keeps many agents idle, each charged for
// what it holds.
func trimMemory() {
	time.Sleep(50 * time.Millisecond)
	debug.FreeOSMemory()
}
