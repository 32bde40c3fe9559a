package sandbox

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/specconv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/spec/hostfs"
)

// containerEngine runs sandboxes as libcontainer containers of this
// process, their state under the root's containers folder.
type containerEngine struct {
	rt *Runtime
}

func (e *containerEngine) lateBinds() bool { return true }

// start hands the agent a listening socket whose file exists only on the
// host.
func (e *containerEngine) start(req startRequest) (container, error) {
	sp := req.spec
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: req.socket, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	ln.SetUnlinkOnClose(false)
	lf, err := ln.File()
	ln.Close()
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	owner, err := startUsernsOwner(e.rt.Binary, sp)
	if err != nil {
		return nil, err
	}
	// The sandbox's init has joined the namespace once Run returns.
	defer owner.stop()
	cfg, err := specconv.CreateLibcontainerConfig(&specconv.CreateOpts{
		CgroupName: req.id, Spec: inOwnedUserns(sp, owner), NoNewKeyring: true,
	})
	if err != nil {
		return nil, fmt.Errorf("container config: %w", err)
	}
	pins, err := PinBinds(sp.Mounts, func(source string) bool {
		_, own := hostfs.Under(source, req.bundleDir)
		return own || source == e.rt.Binary
	})
	if err != nil {
		return nil, err
	}
	c, err := libcontainer.Create(e.rt.containersDir(), req.id, cfg)
	if err != nil {
		return nil, fmt.Errorf("create container: %w", err)
	}
	p := initProcess(sp.Process)
	p.ExtraFiles = []*os.File{lf}
	p.Stdout, p.Stderr = req.log, req.log
	if err := c.Run(p); err != nil {
		c.Destroy() // a failed start leaves state and cgroups behind otherwise
		return nil, fmt.Errorf("start sandbox: %w", err)
	}
	pid, err := p.Pid()
	if err == nil {
		err = CheckBinds(pid, pins)
	}
	if err != nil {
		KillAndDestroy(c)
		return nil, err
	}
	return libcontainerContainer{c}, nil
}

func (e *containerEngine) load(id string) (container, error) {
	c, err := loadContainer(e.rt.containersDir(), id)
	if err != nil {
		return nil, err
	}
	return libcontainerContainer{c}, nil
}

type libcontainerContainer struct{ c *libcontainer.Container }

// A container's late mounts go straight into its own mount namespace.
func (l libcontainerContainer) lateNamespace() (*os.File, error) { return mountNamespace(l) }
func (l libcontainerContainer) lateRoot() string                 { return "/" }

func (l libcontainerContainer) init() (int, uint64, error) {
	st, err := l.c.State()
	if err != nil {
		return 0, 0, err
	}
	return st.InitProcessPid, st.InitProcessStartTime, nil
}

func (l libcontainerContainer) status() (containerStatus, error) {
	st, err := l.c.Status()
	if err != nil {
		return 0, err
	}
	switch st {
	case libcontainer.Running:
		return running, nil
	case libcontainer.Paused:
		return paused, nil
	case libcontainer.Created:
		return creating, nil
	}
	return stopped, nil
}

// pause freezes the container. On cgroup v2 that is libcontainer's
// Pause. On cgroup v1 it is not: Pause's retries thaw the cgroup every
// few milliseconds (they are made for processes that keep forking), so
// a process that spins while the CPUs are busy is seldom scheduled in
// the moment the freeze would take it, and Pause gives up ("unable to
// freeze") when a kill switch is needed most. warden writes the v1
// freezer itself and waits for it; libcontainer reads the state back
// from the cgroup (Status, Resume, Signal, Destroy).
func (l libcontainerContainer) pause() error {
	if cgroups.IsCgroup2UnifiedMode() {
		return l.c.Pause()
	}
	if st, err := l.status(); err != nil || st != running {
		return fmt.Errorf("the sandbox is not running (%v)", st)
	}
	st, err := l.c.State()
	if err != nil {
		return err
	}
	return freezeV1(st.CgroupPaths["freezer"])
}

func (l libcontainerContainer) resume() error             { return l.c.Resume() }
func (l libcontainerContainer) processes() ([]int, error) { return l.c.Processes() }
func (l libcontainerContainer) destroy() error            { return KillAndDestroy(l.c) }

// freezeWait bounds how long a freeze waits for every process of a
// container to stop.
const freezeWait = 10 * time.Second

// freezeV1 freezes a cgroup v1 freezer cgroup and waits until it is
// frozen; one that does not freeze in time is thawed again.
func freezeV1(path string) error {
	if path == "" {
		return errors.New("the sandbox has no freezer cgroup")
	}
	if err := cgroups.WriteFile(path, "freezer.state", string(cgroups.Frozen)); err != nil {
		return err
	}
	deadline := time.Now().Add(freezeWait)
	for {
		state, err := cgroups.ReadFile(path, "freezer.state")
		if err == nil && strings.TrimSpace(state) == string(cgroups.Frozen) {
			return nil
		}
		if err == nil && time.Now().After(deadline) {
			err = fmt.Errorf("its processes did not all stop within %s", freezeWait)
		}
		if err != nil {
			cgroups.WriteFile(path, "freezer.state", string(cgroups.Thawed))
			return fmt.Errorf("%w; it was thawed again", err)
		}
		time.Sleep(time.Millisecond)
	}
}

// initProcess converts the spec's process the way runc does, but for its
// rlimits: the engine would set them with prlimit from the host, which
// needs CAP_SYS_RESOURCE over the sandbox's user namespace; root has that
// only where its bounding set holds it, or over a namespace it owns. The
// agent sets them on itself instead (agentArgs' --rlimits).
func initProcess(p *specs.Process) *libcontainer.Process {
	lp := &libcontainer.Process{
		Args: p.Args, Env: p.Env, Cwd: "/", UID: int(p.User.UID), GID: int(p.User.GID),
		NoNewPrivileges: &p.NoNewPrivileges, Init: true,
	}
	if c := p.Capabilities; c != nil {
		lp.Capabilities = &configsCapabilities{Bounding: c.Bounding, Effective: c.Effective,
			Inheritable: c.Inheritable, Permitted: c.Permitted, Ambient: c.Ambient}
	}
	return lp
}

// loadContainer loads a container's libcontainer state, refusing a state
// file that is not a regular file (libcontainer would open a FIFO and
// wait for a writer).
func loadContainer(root, id string) (*libcontainer.Container, error) {
	state := filepath.Join(root, id, "state.json")
	if fi, err := os.Lstat(state); err == nil && !fi.Mode().IsRegular() {
		return nil, notRegular(state, nil)
	}
	return libcontainer.Load(root, id)
}

// KillAndDestroy kills a container's processes and removes it. Destroy
// refuses a container whose init has not died yet, so it waits for that
// first, the way `runc delete --force` does.
func KillAndDestroy(c *libcontainer.Container) error {
	init := 0
	if st, err := c.State(); err == nil && isChild(st.InitProcessPid) {
		init = st.InitProcessPid
	}
	c.Signal(unix.SIGKILL)
	for i := 0; i < 500; i++ {
		if st, err := c.Status(); err != nil || st == libcontainer.Stopped {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	err := c.Destroy()
	reapInit(init)
	return err
}

// isChild reports whether pid is a child of this process (a sandbox this
// daemon started, not one it re-adopted).
func isChild(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(f) >= 2 && f[1] == strconv.Itoa(os.Getpid())
}

// reapInit collects a sandbox's dead init when this process started it
// (its parent is the daemon that started the container; a re-adopted one
// belongs to the host's init): nothing else waits for it, and a daemon
// that churns through sessions would otherwise collect zombies.
func reapInit(pid int) {
	if pid <= 0 {
		return
	}
	for i := 0; i < 100; i++ {
		var ws unix.WaitStatus
		n, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		if n > 0 || err != nil && err != unix.EINTR {
			return // reaped, or no longer a child of this process
		}
		if n == 0 { // still dying: SIGKILL was sent
			time.Sleep(time.Millisecond)
		}
	}
}
