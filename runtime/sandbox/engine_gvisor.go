package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	securejoin "github.com/cyphar/filepath-securejoin"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/runtime/internal/wire"
	wseccomp "github.com/warden-sandbox/warden/seccomp"
	"github.com/warden-sandbox/warden/spec"
)

// gvisorEngine runs sandboxes under gVisor: runsc, a separate program
// (never linked), with its state under the root's runsc folder. The
// sandbox's processes run on gVisor's application kernel; the host's
// kernel sees only runsc's sentry and gofer.
//
// What differs from the container engine, and why:
//   - No listener can be passed in (runsc queues its connections where the
//     agent never sees them): the agent binds its socket on a folder the
//     host shares (--host-uds=create), the host links it into the
//     session's folder and the agent removes the shared name at the
//     first connection (runtime/agent/agent.c).
//   - No late binds into a running sandbox from the host's side: every
//     mount of a cold start is in the spec. A pooled sandbox starts with
//     a staging folder of its own at gvisorLateDir; a claim mounts the
//     session's folders under it in the gofer's mount namespace, whose
//     lookups see them, and the agent binds them to their places in
//     gVisor's kernel and unmounts the staging folder (pooledSpec).
//   - No Landlock: exec.allow is held by the file view. Programs the list
//     does not allow are whited out of an overlay of each exec-capable
//     system folder (programViews), so they are not there to be run,
//     read, mapped or copied; writable mounts are noexec, which gVisor
//     enforces for execve and for mmap(PROT_EXEC).
//   - No network but none yet (--network=none).
type gvisorEngine struct {
	rt *Runtime
}

// runsc's flags for every call. --host-uds=create lets a socket bound
// inside on a shared folder be reached from the host, never the reverse
// (open/all would let the sandbox connect to host sockets in its grants).
// The sidecar flag keeps this runsc build's embedded fallback, the only
// one a module build has (ENVIRONMENT: the sidecars cannot be built).
func (e *gvisorEngine) globalArgs() []string {
	return []string{
		"--root", e.stateDir(),
		"--network=none",
		"--host-uds=create",
		"--overlay2=none",
		RunscSidecarFlag,
	}
}

func (e *gvisorEngine) stateDir() string { return e.rt.runscDir() }

// gvisorAgentDir is where the agent binds its socket, in the sandbox.
const gvisorAgentDir = "/.warden/agent"

// gvisorStartTimeout bounds a runsc create or start: one in a hundred
// cold starts was seen to hang spinning a CPU.
const gvisorStartTimeout = 30 * time.Second

// Runsc finds runsc (FindRunsc).
func (rt *Runtime) Runsc() (string, error) { return FindRunsc(rt.Binary) }

func (e *gvisorEngine) runsc(ctx context.Context, args ...string) *exec.Cmd {
	bin, _ := e.rt.Runsc()
	cmd := exec.CommandContext(ctx, bin, append(e.globalArgs(), args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	return cmd
}

// run runs one runsc command and returns its output; a failure carries
// runsc's last line.
func (e *gvisorEngine) run(timeout time.Duration, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out, errOut strings.Builder
	cmd := e.runsc(ctx, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("runsc %s did not finish within %s", args[0], timeout)
	}
	if err != nil {
		return nil, fmt.Errorf("runsc %s: %s", args[0], lastLine(errOut.String(), err))
	}
	return []byte(out.String()), nil
}

func lastLine(text string, err error) string {
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if l := strings.TrimSpace(lines[len(lines)-1]); l != "" {
		return l
	}
	return err.Error()
}

// lateBinds is false: a cold start mounts everything from its spec,
// without the round trip a claim's binds take (pooledSpec).
func (e *gvisorEngine) lateBinds() bool { return false }

// gvisorLateDir is a pooled sandbox's staging folder, in the sandbox: the
// claim's folders appear under it (at their own paths below it) until
// the agent has bound them and unmounted it.
const gvisorLateDir = "/dev/.warden-late"

// gvisorGoferRoot is where runsc's gofer shows the sandbox's root in its
// own mount namespace (runsc/cmd/sandboxsetup: the root file system is
// bound at /root of a tmpfs the gofer pivots into).
const gvisorGoferRoot = "/root"

// pooledSpec readies the spec of a pooled sandbox (its agent --pooled)
// for its claim: a staging folder of its own, stage on the host, at
// gvisorLateDir, and CAP_SYS_ADMIN for the agent alone, which it needs in
// gVisor's kernel to bind the folders the claim brings and gives up (with
// every other capability, and before loading the policy's seccomp
// filter) before any command runs. The host's kernel never sees the
// capability: gVisor's kernel holds it, and no sandbox code runs before
// the claim. The staging folder is the sandbox user's and empty but for the
// mountpoints of the session's folders and the claim's seccomp filter
// (claimSeccomp). sp's process is the caller's own copy.
func pooledSpec(sp *specs.Spec, stage string) error {
	uid, gid := int(sp.Linux.UIDMappings[0].HostID), int(sp.Linux.GIDMappings[0].HostID)
	if err := os.Mkdir(stage, 0o700); err != nil {
		return err
	}
	if err := os.Chown(stage, uid, gid); err != nil {
		return err
	}
	for _, d := range []string{spec.WorkspacePath, spec.DataPath} {
		if err := os.Mkdir(filepath.Join(stage, d), 0o755); err != nil {
			return err
		}
	}
	sp.Mounts = append(sp.Mounts, specs.Mount{Destination: gvisorLateDir, Type: "bind", Source: stage,
		Options: []string{"bind", "rw", "nosuid", "nodev", "noexec"}})
	admin := []string{"CAP_SYS_ADMIN", "CAP_SETPCAP"} // SETPCAP: to empty the bounding set
	sp.Process.Capabilities = &specs.LinuxCapabilities{Bounding: admin, Effective: admin, Permitted: admin}
	return nil
}

// gvisorBinds are the late mounts a claimed gVisor agent binds in gVisor's
// kernel, each "FLAGS:PATH" with the mount's flags (ro, nosuid, noexec) as
// gVisor's kernel should hold them; nodev is left out as runsc leaves it
// out of a cold start's mounts (gVisor opens no host device through a
// folder). A folder's mount is bound; a mask of a file is not (its host
// mount is read-only already, and it hides the file either way).
func gvisorBinds(late []specs.Mount) []string {
	var binds []string
	for _, m := range late {
		if fi, err := os.Stat(m.Source); err != nil || !fi.IsDir() {
			continue
		}
		var flags []string
		for _, f := range []string{"ro", "nosuid", "noexec"} {
			if slices.Contains(m.Options, f) || slices.Contains(m.Options, "r"+f) {
				flags = append(flags, f)
			}
		}
		binds = append(binds, strings.Join(flags, ",")+":"+m.Destination)
	}
	return binds
}

func (e *gvisorEngine) start(req startRequest) (container, error) {
	if _, err := e.rt.Runsc(); err != nil {
		return nil, err
	}
	sp, holds, err := e.sandboxSpec(req)
	if err != nil {
		return nil, err
	}
	// The views it names are this start's until its bundle names them.
	defer holds.release()
	// The folder the agent binds its socket on: the sandbox's root owns
	// it, nobody else on the host may enter it.
	share := filepath.Join(filepath.Dir(req.socket), "agent")
	if err := os.Mkdir(share, 0o700); err != nil {
		return nil, err
	}
	if err := os.Chown(share, int(sp.Linux.UIDMappings[0].HostID), int(sp.Linux.GIDMappings[0].HostID)); err != nil {
		return nil, err
	}
	sp.Mounts = append(sp.Mounts, specs.Mount{Destination: gvisorAgentDir, Type: "bind", Source: share,
		Options: []string{"bind", "rw", "nosuid", "nodev", "noexec"}})
	pooled := slices.Contains(sp.Process.Args, "--pooled")
	if err := mountpoints(sp); err != nil {
		return nil, err
	}
	bundle := filepath.Join(filepath.Dir(req.socket), "gvisor")
	if err := os.MkdirAll(bundle, 0o700); err != nil {
		return nil, err
	}
	data, err := json.MarshalIndent(sp, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o600); err != nil {
		return nil, err
	}
	holds.release()
	c := &gvisorContainer{e: e, id: req.id}
	fail := func(err error) (container, error) {
		c.destroy()
		return nil, err
	}
	// The agent's socket is waited for by its folder's events, not by
	// polling: the watch exists before anything in the sandbox runs.
	watch, err := watchFolder(share)
	if err != nil {
		return fail(err)
	}
	// Closed beside the start, not in it: closing an inotify instance
	// waits for the kernel's grace period (SRCU), 10-20 ms here.
	defer func() { go watch.close() }()
	// The agent's stdout and stderr are runsc create's: the log file.
	ctx, cancel := context.WithTimeout(context.Background(), gvisorStartTimeout)
	defer cancel()
	var offset int64
	if fi, err := req.log.Stat(); err == nil {
		offset = fi.Size()
	}
	// One runsc for create and start: each call of the 100 MB binary costs
	// tens of milliseconds. Its pid file names the sandbox's process.
	pidFile := filepath.Join(bundle, "sandbox.pid")
	for try := 0; ; try++ {
		if err := MakeCgroupParents(e.rt.cgroupPath(req.id)); err != nil {
			return fail(fmt.Errorf("start sandbox: %w", err))
		}
		run := e.runsc(ctx, "run", "--detach", "--bundle", bundle, "--pid-file", pidFile, req.id)
		run.Stdout, run.Stderr = req.log, req.log
		err := run.Run()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return fail(fmt.Errorf("start sandbox: runsc run did not finish within %s; it was killed", gvisorStartTimeout))
		}
		why := logTail(req.log, offset, err)
		// A gc of another process removed the root's cgroup folder, empty
		// a moment before runsc made the sandbox's in it: once more.
		if try == 0 && strings.Contains(why, "cgroup") && strings.Contains(why, "no such file or directory") {
			c.destroy()
			continue
		}
		return fail(fmt.Errorf("start sandbox: runsc run: %s", why))
	}
	if err := c.record(pidFile, req.socket, pooled); err != nil {
		return fail(err)
	}
	// The agent binds its socket as it starts; the host's name for it is
	// a link in the session's folder, which the sandbox cannot see.
	shared := filepath.Join(share, "agent.sock")
	for deadline := time.Now().Add(gvisorStartTimeout); ; {
		if err := os.Link(shared, req.socket); err == nil {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			return fail(fmt.Errorf("agent socket: %w", err))
		}
		if !watch.wait(50 * time.Millisecond) {
			// Nothing came: is the sandbox still there?
			if st, err := c.status(); err != nil || st != running {
				return fail(fmt.Errorf("start sandbox: the agent ended before it listened: %s", logTail(req.log, offset, err)))
			}
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("start sandbox: the agent did not listen within %s", gvisorStartTimeout))
		}
	}
	// A first connection makes the agent remove the shared name; then the
	// folder is the host's again, so nothing in the sandbox can write to
	// it (it is on the state root's file system) or bind a socket there.
	// (The name exists from the agent's bind, a moment before it listens.)
	for deadline := time.Now().Add(gvisorStartTimeout); ; time.Sleep(100 * time.Microsecond) {
		conn, err := wire.DialPacket(req.socket)
		if err == nil {
			conn.Close()
			break
		}
		if !errors.Is(err, unix.ECONNREFUSED) || time.Now().After(deadline) {
			return fail(fmt.Errorf("agent socket: %w", err))
		}
	}
	// The agent takes it once it has loaded its filter and sealed.
	for deadline := time.Now().Add(gvisorStartTimeout); ; watch.wait(50 * time.Millisecond) {
		if _, err := os.Lstat(shared); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("start sandbox: the agent did not take its first connection within %s", gvisorStartTimeout))
		}
	}
	if err := os.Chown(share, 0, 0); err != nil {
		return fail(err)
	}
	return c, nil
}

// mountpoints makes every mount's mountpoint in the bundle's root folder:
// runsc makes them there, not in the file system mounted above them (a
// grant under /tmp, whose tmpfs is the sandbox's), and may not.
func mountpoints(sp *specs.Spec) error {
	for _, m := range sp.Mounts {
		// Inside the root folder whatever its links say.
		p, err := securejoin.SecureJoin(sp.Root.Path, m.Destination)
		if err != nil {
			return err
		}
		if _, err := os.Lstat(p); err == nil {
			continue
		}
		if fi, err := os.Stat(m.Source); err == nil && !fi.IsDir() && m.Type == "bind" {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return err
			}
			f.Close()
			continue
		}
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// logTail is the last line written to log since offset, or err's text.
func logTail(log *os.File, offset int64, err error) string {
	f, oerr := os.Open(log.Name())
	if oerr == nil {
		defer f.Close()
		data, _ := io.ReadAll(io.NewSectionReader(f, offset, 64<<10))
		if text := strings.TrimSpace(string(data)); text != "" {
			return lastLine(text, err)
		}
	}
	if err == nil {
		return "no output"
	}
	return err.Error()
}

// sandboxSpec is req's spec as runsc runs it: the agent listens on the
// shared folder instead of an inherited socket and leaves the walls
// Landlock would build to the file view; exec-capable system folders show
// only the programs exec.allow allows.
func (e *gvisorEngine) sandboxSpec(req startRequest) (*specs.Spec, viewHolds, error) {
	sp := *req.spec
	proc := *sp.Process
	sp.Process = &proc
	args := []string{spec.AgentPath, "agent", "--gvisor", "--listen", gvisorAgentDir + "/agent.sock"}
	if req.egress {
		args = append(args, "--egress", spec.EgressProxyAddr)
	}
	for i := 2; i < len(proc.Args); i++ {
		switch a := proc.Args[i]; a {
		case "--exec-allow": // kept: the agent's own check, for its messages
			if i+1 < len(proc.Args) {
				args = append(args, a, proc.Args[i+1])
				i++
			}
		case "--rlimits":
			// gVisor refuses to set the limits of queues its own kernel
			// keeps (pending signals, POSIX message queues): none of them
			// is a host resource.
			if i+1 < len(proc.Args) {
				var kept []string
				for _, l := range strings.Split(proc.Args[i+1], ",") {
					if !strings.HasPrefix(l, "sigpending=") && !strings.HasPrefix(l, "msgqueue=") && !strings.HasPrefix(l, "nproc=") {
						kept = append(kept, l)
					}
				}
				// The pids cgroup counts runsc's threads, not the sandbox's
				// processes: gVisor's kernel holds those to the policy's
				// number by RLIMIT_NPROC (every process runs as one user).
				if n := pidsLimit(sp.Linux); n > 0 {
					kept = append(kept, fmt.Sprintf("nproc=%d:%d", n, n))
				}
				args = append(args, a, strings.Join(kept, ","))
				i++
			}
		case "--writable", "--hidden-programs", "--exec-dirs": // Landlock's
			i++
		case "--pooled":
			args = append(args, a)
		}
	}
	proc.Args = args
	sp.Mounts = slices.Clone(sp.Mounts)
	var holds viewHolds
	if allow := sp.Annotations[spec.AnnotationExecAllow]; allow != "*" {
		var err error
		if holds, err = e.rt.programViews(&sp, strings.Split(allow, ":")); err != nil {
			return nil, nil, err
		}
	}
	linux := *sp.Linux
	sp.Linux = &linux
	linux.CgroupsPath = e.rt.cgroupPath(req.id)
	// On the host the cgroup holds runsc's sentry and gofer, whose threads
	// count against pids: the sandbox's own processes are held to the
	// policy's number inside (RLIMIT_NPROC, above).
	GVisorHostLimits(&linux)
	// The agent loads the policy's seccomp filter itself (runsc would turn
	// every refusal into EPERM, clone3's ENOSYS included, which libc does
	// not replace with clone): setuid bits, memfd, namespaces and the rest
	// stay refused inside gVisor as they are on the host's kernel.
	pooled := slices.Contains(args, "--pooled")
	stage := filepath.Join(filepath.Dir(req.socket), "stage")
	if pooled {
		if err := pooledSpec(&sp, stage); err != nil {
			holds.release()
			return nil, nil, err
		}
	}
	if linux.Seccomp != nil {
		profile := gvisorSeccomp(linux.Seccomp)
		var claim *specs.LinuxSeccomp
		if pooled {
			var err error
			if profile, claim, err = claimSeccomp(profile); err != nil {
				holds.release()
				return nil, nil, err
			}
		}
		// The claim's filter is in the staging folder, gone with it.
		for _, f := range []struct {
			profile         *specs.LinuxSeccomp
			host, path, arg string
		}{
			{profile, filepath.Join(sp.Root.Path, gvisorSeccompFile), gvisorSeccompFile, "--seccomp"},
			{claim, filepath.Join(stage, gvisorClaimSeccompFile), gvisorLateDir + "/" + gvisorClaimSeccompFile, "--seccomp-claim"},
		} {
			if f.profile == nil {
				continue
			}
			if err := wseccomp.WriteBPF(f.profile, f.host); err != nil {
				holds.release()
				return nil, nil, fmt.Errorf("seccomp filter: %w", err)
			}
			proc.Args = append(proc.Args, f.arg, f.path)
		}
	}
	linux.Seccomp = nil
	return &sp, holds, nil
}

// gvisorSeccompFile is where the agent finds its filter, in the sandbox,
// and gvisorClaimSeccompFile a pooled agent's second one (claimSeccomp).
const (
	gvisorSeccompFile      = "/.warden/seccomp.bpf"
	gvisorClaimSeccompFile = "seccomp-claim.bpf" // in the staging folder
)

// gvisorClaimCalls are what a pooled agent's claim calls that a policy's
// filter refuses: binding the session's folders in gVisor's kernel.
var gvisorClaimCalls = []string{"mount", "umount2"}

// claimSeccomp splits a pooled gVisor sandbox's filter in two: the agent
// loads start before its claim, the policy's filter but allowing
// gvisorClaimCalls, and claim after, which allows everything but those
// and gives them the policy's rules. Filters stack, so both together are
// the policy's. (gVisor takes ~10 ms to load a policy's filter, more than
// a claim's whole budget; claim's few rules take next to nothing.) A rule
// on those calls with conditions on their arguments is not split (where
// its conditions do not hold, claim's default would answer instead of
// the policy's): such a policy is not pooled.
func claimSeccomp(s *specs.LinuxSeccomp) (start, claim *specs.LinuxSeccomp, err error) {
	st := *s
	st.Syscalls = nil
	claim = &specs.LinuxSeccomp{DefaultAction: specs.ActAllow, Architectures: s.Architectures}
	ruled := map[string]bool{}
	for _, r := range s.Syscalls {
		var kept, moved []string
		for _, n := range r.Names {
			if slices.Contains(gvisorClaimCalls, n) {
				moved, ruled[n] = append(moved, n), true
			} else {
				kept = append(kept, n)
			}
		}
		if len(moved) > 0 {
			if len(r.Args) > 0 {
				return nil, nil, fmt.Errorf("%w: the seccomp rule on %s has conditions on its arguments, which a pooled gVisor sandbox cannot split; its sessions start cold", spec.ErrInvalid, strings.Join(moved, ", "))
			}
			c := r
			c.Names = moved
			claim.Syscalls = append(claim.Syscalls, c)
		}
		if len(kept) > 0 {
			r.Names = kept
			st.Syscalls = append(st.Syscalls, r)
		}
	}
	for _, n := range gvisorClaimCalls {
		if !ruled[n] {
			claim.Syscalls = append(claim.Syscalls, specs.LinuxSyscall{Names: []string{n}, Action: s.DefaultAction, ErrnoRet: s.DefaultErrnoRet})
		}
	}
	st.Syscalls = append(st.Syscalls, specs.LinuxSyscall{Names: slices.Clone(gvisorClaimCalls), Action: specs.ActAllow})
	return &st, claim, nil
}

// gvisorSeccomp is a policy's filter for a gVisor sandbox: the same, and
// no signal to the agent. The host's kernel keeps a namespace's init from
// the signals of its own processes; gVisor's does not, and a command that
// stopped or killed the agent would outlive its timeout.
func gvisorSeccomp(s *specs.LinuxSeccomp) *specs.LinuxSeccomp {
	signals := []string{"kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open"}
	out := *s
	out.Syscalls = nil
	// libseccomp ignores a conditional rule beside an unconditional one of
	// the same call: these leave the allow-list for rules on their pid.
	for _, r := range s.Syscalls {
		if r.Action == specs.ActAllow && len(r.Args) == 0 {
			r.Names = slices.DeleteFunc(slices.Clone(r.Names), func(n string) bool { return slices.Contains(signals, n) })
		}
		out.Syscalls = append(out.Syscalls, r)
	}
	eperm := uint(unix.EPERM)
	for _, name := range signals {
		out.Syscalls = append(out.Syscalls,
			specs.LinuxSyscall{Names: []string{name}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 0, Value: 1, Op: specs.OpNotEqual}}},
			specs.LinuxSyscall{Names: []string{name}, Action: specs.ActErrno, ErrnoRet: &eperm, Args: []specs.LinuxSeccompArg{{Index: 0, Value: 1, Op: specs.OpEqualTo}}})
	}
	return &out
}

// pidsLimit is the spec's pids limit, 0 for none.
func pidsLimit(l *specs.Linux) int64 {
	if l == nil || l.Resources == nil || l.Resources.Pids == nil || l.Resources.Pids.Limit == nil {
		return 0
	}
	return max(*l.Resources.Pids.Limit, 0)
}

// gvisorContainer is a sandbox runsc runs. Its sandbox process's pid and
// start time are kept beside runsc's state: status and init read them
// without running runsc (tens of milliseconds) on every command.
type gvisorContainer struct {
	e  *gvisorEngine
	id string
}

type gvisorRecord struct {
	Pid    int    `json:"pid"`
	Start  uint64 `json:"start"`
	Socket string `json:"socket"` // the agent's, on the host
	Paused bool   `json:"paused,omitempty"`
	// A pooled sandbox's gofer, in whose mount namespace a claim binds.
	GoferPid   int    `json:"goferPid,omitempty"`
	GoferStart uint64 `json:"goferStart,omitempty"`
}

func (c *gvisorContainer) recordPath() string {
	return filepath.Join(c.e.stateDir(), c.id+".warden.json")
}

// record notes the sandbox process runsc started, from its pid file, and
// for a pooled sandbox its gofer, from runsc's state file.
func (c *gvisorContainer) record(pidFile, socket string, pooled bool) error {
	data, err := os.ReadFile(pidFile)
	if err != nil {
		return fmt.Errorf("runsc's pid file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return fmt.Errorf("runsc's pid file %s: %q", pidFile, data)
	}
	start, err := ProcessStart(pid)
	if err != nil {
		return err
	}
	r := gvisorRecord{Pid: pid, Start: start, Socket: socket}
	if pooled {
		state, err := os.ReadFile(filepath.Join(c.e.stateDir(), c.id+"_sandbox:"+c.id+".state"))
		if err != nil {
			return fmt.Errorf("runsc's state: %w", err)
		}
		var st struct {
			GoferPid int `json:"goferPid"`
		}
		if err := json.Unmarshal(state, &st); err != nil || st.GoferPid <= 0 {
			return fmt.Errorf("runsc's state names no gofer (%v)", err)
		}
		if r.GoferStart, err = ProcessStart(st.GoferPid); err != nil {
			return fmt.Errorf("the sandbox's gofer: %w", err)
		}
		r.GoferPid = st.GoferPid
	}
	return c.save(r)
}

// rehome records where the agent's socket is once its folder moved.
func (c *gvisorContainer) rehome(socket string) error {
	r, err := c.load()
	if err != nil {
		return err
	}
	r.Socket = socket
	return c.save(r)
}

// lateNamespace is the gofer's mount namespace: gVisor's kernel reaches
// the host's files through the gofer's view (its descriptors, opened
// lazily), so a folder mounted there under the staging folder appears in
// the sandbox.
func (c *gvisorContainer) lateNamespace() (*os.File, error) {
	r, err := c.load()
	if err != nil {
		return nil, err
	}
	if r.GoferPid <= 0 {
		return nil, errors.New("the sandbox was not started for a pool: it has no staging folder")
	}
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/mnt", r.GoferPid))
	if err != nil {
		return nil, fmt.Errorf("the sandbox's gofer: %w", err)
	}
	// The pid could have died and been reused between load and Open.
	if start, err := ProcessStart(r.GoferPid); err != nil || start != r.GoferStart {
		ns.Close()
		return nil, errors.New("the sandbox's gofer is gone")
	}
	if s, err := c.status(); err != nil || s != running {
		ns.Close()
		return nil, fmt.Errorf("sandbox is not running (%v)", s)
	}
	return ns, nil
}

func (c *gvisorContainer) lateRoot() string { return gvisorGoferRoot + gvisorLateDir }

func (c *gvisorContainer) save(r gvisorRecord) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return WriteStateFile(c.recordPath(), data)
}

func (c *gvisorContainer) load() (gvisorRecord, error) {
	var r gvisorRecord
	data, err := ReadStateFile(c.recordPath())
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("%s: %w", c.recordPath(), err)
	}
	return r, nil
}

// ProcessStart is a process's start time, in clock ticks since boot.
func ProcessStart(pid int) (uint64, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(f) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: too short", pid)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

func (e *gvisorEngine) load(id string) (container, error) {
	c := &gvisorContainer{e: e, id: id}
	if _, err := c.load(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *gvisorContainer) init() (int, uint64, error) {
	r, err := c.load()
	return r.Pid, r.Start, err
}

func (c *gvisorContainer) status() (containerStatus, error) {
	r, err := c.load()
	if err != nil {
		return 0, err
	}
	if start, err := ProcessStart(r.Pid); err != nil || start != r.Start {
		return stopped, nil
	}
	// runsc's sandbox process can outlive the sandbox's kernel (one that
	// exceeded its memory limit): the agent must still take connections.
	// (A connection waits in the queue of a paused one.)
	if conn, err := wire.DialPacket(r.Socket); err != nil {
		if _, serr := os.Lstat(r.Socket); serr == nil {
			return stopped, nil
		}
	} else {
		conn.Close()
	}
	if r.Paused {
		return paused, nil
	}
	return running, nil
}

func (c *gvisorContainer) pause() error {
	r, err := c.load()
	if err != nil {
		return err
	}
	if _, err := c.e.run(freezeWait, "pause", c.id); err != nil {
		return err
	}
	r.Paused = true
	return c.save(r)
}

func (c *gvisorContainer) resume() error {
	r, err := c.load()
	if err != nil {
		return err
	}
	if _, err := c.e.run(freezeWait, "resume", c.id); err != nil {
		return err
	}
	r.Paused = false
	return c.save(r)
}

// processes lists the sandbox's host processes (runsc's sentry and gofer
// and what they started), from its cgroup.
func (c *gvisorContainer) processes() ([]int, error) {
	return nil, errors.New("not available under engine gvisor yet (runsc does not let warden signal the sandbox's processes one by one); `warden session rm` ends them all")
}

// destroy stops the sandbox and removes runsc's state of it. A runsc
// that does not answer is not waited for: RemoveContainer kills what is
// left in the sandbox's cgroups.
func (c *gvisorContainer) destroy() error {
	var errs []error
	if _, err := c.e.run(10*time.Second, "delete", "--force", c.id); err != nil && !strings.Contains(err.Error(), "does not exist") {
		errs = append(errs, err)
	}
	if r, err := c.load(); err == nil {
		if start, err := ProcessStart(r.Pid); err == nil && start == r.Start {
			unix.Kill(r.Pid, unix.SIGKILL)
		}
	}
	if err := os.Remove(c.recordPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// checkEngine refuses what a policy's engine cannot give yet, before
// anything is made.
func checkEngine(p *policies.Policy) error {
	if p.Sandbox.Engine != policies.EngineGVisor {
		return nil
	}
	if c := p.Commands; len(c.Deny)+len(c.Ask)+len(c.Allow) > 0 {
		return kindf(spec.ErrInvalid, "policy %s: [commands] rules are not available under engine \"gvisor\" yet; remove them or use engine \"container\"", p.Name)
	}
	return nil
}

// engineFor is the engine a policy's sandboxes run under, pooled ones
// included.
func (rt *Runtime) engineFor(p *policies.Policy) engine {
	if p != nil && p.Sandbox.Engine == policies.EngineGVisor {
		return rt.gvisor
	}
	return rt.container
}

// folderWatch wakes a wait when a name is made in or removed from a
// folder (inotify).
type folderWatch struct{ fd int }

func watchFolder(dir string) (*folderWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_DELETE|unix.IN_MOVED_FROM|unix.IN_MOVED_TO); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("inotify on %s: %w", dir, err)
	}
	return &folderWatch{fd: fd}, nil
}

// wait returns true once something changed in the folder since the last
// wait, false when timeout passed first.
func (w *folderWatch) wait(timeout time.Duration) bool {
	fds := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, int(timeout.Milliseconds()))
	if err != nil && !errors.Is(err, unix.EINTR) {
		time.Sleep(time.Millisecond) // never spin
	}
	var buf [4096]byte
	for {
		if k, err := unix.Read(w.fd, buf[:]); k <= 0 || err != nil {
			break
		}
	}
	return n > 0
}

func (w *folderWatch) close() { unix.Close(w.fd) }
