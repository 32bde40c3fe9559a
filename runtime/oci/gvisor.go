package oci

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/bits"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/runtime/sandbox"
	wseccomp "github.com/warden-sandbox/warden/seccomp"
	"github.com/warden-sandbox/warden/spec"
	"github.com/warden-sandbox/warden/spec/hostfs"
)

// Containers on the gVisor engine are run by runsc, a separate program:
// warden tightens their config.json as for the container engine, writes
// it into a bundle folder of its own (ROOT/oci-gvisor/containers/ID,
// beside the record of what it did), and calls the runsc verb runc's
// callers asked for, with runsc's state in ROOT/oci-gvisor/runsc.

// gvisorRecord is what warden keeps of a container runsc runs.
type gvisorRecord struct {
	// Bundle is the caller's bundle, as `state` reports it.
	Bundle string `json:"bundle"`
	// Flags are runsc's global flags for every call about the container
	// (but --root and --log, which are the runtime's).
	Flags []string `json:"flags"`
	// Cgroup is the container's cgroup path in every hierarchy.
	Cgroup string `json:"cgroup"`
	// Policy is the policy's record, nil when none applies.
	Policy *policyRecord `json:"policy,omitempty"`
	// Created is when warden made it (runsc's state does not say).
	Created time.Time `json:"created"`
	// Sandbox is the host process of the container's gVisor sandbox (the
	// pod's, for a sub-container) and its start time: a container that
	// joins its namespaces joins the container's (namespaceOwner).
	Sandbox      int    `json:"sandbox,omitempty"`
	SandboxStart uint64 `json:"sandboxStart,omitempty"`
	// Keeper is the host process that stands for a sub-container's
	// process, and its start time (gvisor_keeper.go).
	Keeper      int    `json:"keeper,omitempty"`
	KeeperStart uint64 `json:"keeperStart,omitempty"`
}

// gvisorTimeout bounds a runsc call that does not run the container's
// process in the foreground: one cold start in a hundred was seen to hang.
const gvisorTimeout = time.Minute

func (o *Runtime) gvisorRoot() string { return filepath.Join(o.Root, "oci-gvisor") }
func (o *Runtime) runscRoot() string  { return filepath.Join(o.gvisorRoot(), "runsc") }
func (o *Runtime) gvisorDir(id string) string {
	return filepath.Join(o.gvisorRoot(), "containers", id)
}

// gvisorContainer is a container of this root on the gVisor engine.
type gvisorContainer struct {
	o   *Runtime
	id  string
	dir string
	rec gvisorRecord
}

// loadGVisor returns the container if it is on the gVisor engine.
func (o *Runtime) loadGVisor(id string) (*gvisorContainer, bool, error) {
	if checkContainerID(id) != nil {
		return nil, false, nil
	}
	c := &gvisorContainer{o: o, id: id, dir: o.gvisorDir(id)}
	data, err := os.ReadFile(filepath.Join(c.dir, recordFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	} else if err != nil {
		return nil, true, err
	}
	if err := json.Unmarshal(data, &c.rec); err != nil {
		return nil, true, fmt.Errorf("container %s: %s: %w", id, recordFile, err)
	}
	return c, true, nil
}

// gvisorSpec rewrites a tightened spec for runsc: the cgroup named,
// and under a policy the seccomp profile as runsc can hold it, the
// policy's pids limit held inside gVisor and the host cgroup sized for
// runsc's own processes besides the container's.
func gvisorSpec(s *specs.Spec, rec *policyRecord) {
	if rec == nil {
		return
	}
	if s.Linux.Seccomp != nil {
		s.Linux.Seccomp = runscSeccomp(s.Linux.Seccomp)
	}
	// The host's pids cgroup counts runsc's threads, not the container's
	// processes: gVisor's kernel holds those to the policy's number.
	if n := rec.Limits.Pids; n > 0 {
		s.Process.Rlimits = append(deleteRlimit(s.Process.Rlimits, "RLIMIT_NPROC"), specs.POSIXRlimit{Type: "RLIMIT_NPROC", Hard: uint64(n), Soft: uint64(n)})
	}
	sandbox.GVisorHostLimits(s.Linux)
}

func deleteRlimit(rl []specs.POSIXRlimit, typ string) []specs.POSIXRlimit {
	var out []specs.POSIXRlimit
	for _, r := range rl {
		if r.Type != typ {
			out = append(out, r)
		}
	}
	return out
}

// runscSeccomp is a policy's profile as runsc applies it (--oci-seccomp):
// runsc answers every refusal with EPERM, clone3's ENOSYS included, after
// which libc does not fall back to clone and no thread can start. clone3
// is allowed: the namespaces it could ask for are gVisor's, not the
// host's. The refusals that cannot change a decision are left out
// (runscRefusals), and the rest is stated the way runsc compiles fastest
// (runscInverted): runsc's start compiles every rule it is given.
func runscSeccomp(s *specs.LinuxSeccomp) *specs.LinuxSeccomp {
	out := runscRules(s)
	all, err := wseccomp.X86_64Syscalls()
	if err != nil {
		return out
	}
	for _, r := range s.Syscalls { // those libseccomp does not know too
		all = append(all, r.Names...)
	}
	return runscInverted(out, all)
}

// runscRules are the rules of runscSeccomp before runscInverted.
func runscRules(s *specs.LinuxSeccomp) *specs.LinuxSeccomp {
	out := *s
	out.Syscalls = nil
	for _, r := range s.Syscalls {
		var names []string
		for _, n := range r.Names {
			if n != "clone3" {
				names = append(names, n)
			}
		}
		if len(names) > 0 {
			r.Names = names
			out.Syscalls = append(out.Syscalls, r)
		}
	}
	out.Syscalls = append(out.Syscalls, specs.LinuxSyscall{Names: []string{"clone3"}, Action: specs.ActAllow})
	out.Syscalls = runscComplements(runscRefusals(out.DefaultAction, out.Syscalls))
	return &out
}

// runscNames are the syscalls gVisor's table names otherwise than
// libseccomp (x86-64 number 156): runsc ignores a name it does not know.
var runscNames = map[string]string{"_sysctl": "sysctl"}

// runscInverted states a profile that refuses by default as one that
// allows by default and refuses, by name, every syscall (of all: the
// x86-64 names, and those the whole profile names) the profile does not
// allow outright: under runsc's first
// match both decide every call the same. runsc compiles the second in a
// fifth of the time (~25 -> ~6 ms of each start under the default
// profile): its optimizer's time grows with the syscalls named, and a
// policy allows many more than it leaves out. The syscalls with a
// condition or a refusal keep their rules, in order, and a refusal after
// them for the calls none of those matches.
//
// What differs is a number runsc knows no name of (and gVisor implements
// no syscall for): refused, it was EPERM; allowed, it is gVisor's ENOSYS.
func runscInverted(s *specs.LinuxSeccomp, all []string) *specs.LinuxSeccomp {
	if s.DefaultAction != specs.ActErrno {
		return s
	}
	rename := func(names []string) []string {
		out := make([]string, len(names))
		for i, n := range names {
			out[i] = cmp.Or(runscNames[n], n)
		}
		return out
	}
	named := map[string]bool{}   // by any rule
	kept := map[string]bool{}    // by a rule with a condition or another action
	decided := map[string]bool{} // by a rule without a condition
	rules := make([]specs.LinuxSyscall, len(s.Syscalls))
	for i, r := range s.Syscalls {
		r.Names = rename(r.Names)
		rules[i] = r
		for _, n := range r.Names {
			named[n] = true
			if r.Action != specs.ActAllow || len(r.Args) > 0 {
				kept[n] = true
			}
		}
	}
	out := *s
	out.DefaultAction, out.DefaultErrnoRet = specs.ActAllow, nil
	out.Syscalls = nil
	for _, r := range rules {
		var names []string
		for _, n := range r.Names {
			if kept[n] && !decided[n] {
				names = append(names, n)
			}
		}
		for _, n := range names {
			decided[n] = decided[n] || len(r.Args) == 0
		}
		if len(names) > 0 {
			r.Names = names
			out.Syscalls = append(out.Syscalls, r)
		}
	}
	refused := map[string]bool{}
	for n := range kept {
		refused[n] = !decided[n]
	}
	for _, n := range rename(all) {
		refused[n] = refused[n] || !named[n]
	}
	var names []string
	for n, r := range refused {
		if r {
			names = append(names, n)
		}
	}
	if len(names) > 0 {
		slices.Sort(names)
		out.Syscalls = append(out.Syscalls, specs.LinuxSyscall{Names: names, Action: specs.ActErrno, ErrnoRet: s.DefaultErrnoRet})
	}
	return &out
}

// runscRefusals drops the refusals of rules that decide nothing under
// runsc. There the first rule that matches a call decides it, and every
// refusal (the default's too) is EPERM whatever errno it names. So when
// the default refuses, an errno rule for a syscall that no later rule
// allows gives the answer the call gets without it: it is dropped for
// that syscall. A refusal ahead of an allow stays (ioctl's TIOCSTI
// before the rest of ioctl). This took ~85 ms off each start of a
// container under the default profile.
func runscRefusals(def specs.LinuxSeccompAction, rules []specs.LinuxSyscall) []specs.LinuxSyscall {
	if def != specs.ActErrno {
		return rules
	}
	allowedLater := map[string]bool{} // a rule after this one acts otherwise than refuse with errno
	kept := make([]specs.LinuxSyscall, 0, len(rules))
	for i := len(rules) - 1; i >= 0; i-- {
		r := rules[i]
		if r.Action != specs.ActErrno {
			for _, n := range r.Names {
				allowedLater[n] = true
			}
			kept = append(kept, r)
			continue
		}
		var names []string
		for _, n := range r.Names {
			if allowedLater[n] {
				names = append(names, n)
			}
		}
		if len(names) > 0 {
			r.Names = names
			kept = append(kept, r)
		}
	}
	slices.Reverse(kept)
	return kept
}

// runscFlags are runsc's global flags for a container: under a policy
// runsc applies its seccomp profile, and a policy without network gives
// the container loopback only (gVisor's own: the interfaces the engine
// put into the namespace are not used). Otherwise runsc's defaults, as
// plain runsc would run the container: its network stack over the
// interfaces of the namespace the engine made.
func runscFlags(rec *policyRecord) []string {
	flags := []string{sandbox.RunscSidecarFlag}
	if rec != nil {
		flags = append(flags, "--oci-seccomp")
		if !rec.Network {
			flags = append(flags, "--network=none")
		}
	}
	return flags
}

// createGVisor makes (and with run, starts) a container under runsc
// from its tightened spec s.
func (o *Runtime) createGVisor(opts CreateOptions, run bool, bundle string, s *specs.Spec, rec *policyRecord) (int, error) {
	if opts.PreserveFDs > 0 {
		return -1, errors.New("--preserve-fds: not available under engine gvisor (runsc create cannot pass more descriptors); run the container without it, or on engine container")
	}
	if _, err := o.runsc(); err != nil {
		return -1, err
	}
	if _, err := os.Stat(filepath.Join(o.stateDir(), opts.ID)); err == nil {
		return -1, fmt.Errorf("container %s already exists", opts.ID)
	}
	if err := os.MkdirAll(filepath.Dir(o.gvisorDir(opts.ID)), 0o711); err != nil {
		return -1, fmt.Errorf("state root: %w", err)
	}
	c := &gvisorContainer{o: o, id: opts.ID, dir: o.gvisorDir(opts.ID)}
	if err := os.Mkdir(c.dir, 0o711); errors.Is(err, fs.ErrExist) {
		return -1, fmt.Errorf("container %s already exists", opts.ID)
	} else if err != nil {
		return -1, fmt.Errorf("state root: %w", err)
	}
	gvisorSpec(s, rec)
	exe, err := os.Executable()
	if err != nil {
		return -1, err
	}
	relayHooks(s.Hooks, exe, bundle)
	c.rec = gvisorRecord{Bundle: bundle, Flags: runscFlags(rec), Cgroup: s.Linux.CgroupsPath, Policy: rec, Created: time.Now().UTC()}
	fail := func(err error) (int, error) {
		c.destroy(true)
		return -1, err
	}
	if err := c.save(); err != nil {
		return fail(err)
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fail(err)
	}
	if err := os.WriteFile(filepath.Join(c.dir, "config.json"), data, 0o600); err != nil {
		return fail(err)
	}
	if filepath.IsAbs(c.rec.Cgroup) {
		if err := sandbox.MakeCgroupParents(c.rec.Cgroup); err != nil {
			return fail(err)
		}
	}
	if !run {
		if err := c.create(opts, subcontainer(s)); err != nil {
			return fail(err)
		}
		return 0, nil
	}
	args := []string{"run", "--bundle", c.dir}
	if opts.PidFile != "" {
		args = append(args, "--pid-file", absPath(opts.PidFile))
	}
	if opts.ConsoleSocket != "" {
		args = append(args, "--console-socket", absPath(opts.ConsoleSocket))
	}
	if opts.Detach {
		args = append(args, "--detach")
	}
	args = append(args, opts.ID)
	if opts.Detach {
		if err := c.call(nil, args...); err != nil {
			return fail(err)
		}
		return 0, nil
	}
	// Attached: runsc runs the container to its end and removes it.
	status, err := c.foreground(func(sig os.Signal) {
		c.call(nil, "kill", c.id, strconv.Itoa(int(sig.(syscall.Signal))))
	}, args...)
	c.destroy(false)
	return status, err
}

// create runs runsc create and writes the pid runc's callers wait for
// into opts.PidFile: the sandbox's, or a sub-container's keeper's.
func (c *gvisorContainer) create(opts CreateOptions, sub bool) error {
	sandboxPid := filepath.Join(c.dir, "sandbox.pid")
	args := []string{"create", "--bundle", c.dir, "--pid-file", sandboxPid}
	if opts.ConsoleSocket != "" {
		args = append(args, "--console-socket", absPath(opts.ConsoleSocket))
	}
	if err := c.call(nil, append(args, c.id)...); err != nil {
		return err
	}
	data, err := os.ReadFile(sandboxPid)
	if err != nil {
		return fmt.Errorf("runsc create: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return fmt.Errorf("runsc create wrote %q as the pid: %w", data, err)
	}
	start, err := sandbox.ProcessStart(pid)
	if err != nil {
		return fmt.Errorf("the container's sandbox: %w", err)
	}
	c.rec.Sandbox, c.rec.SandboxStart = pid, start
	if sub {
		if err := c.startKeeper(); err != nil {
			return err
		}
		pid = c.rec.Keeper
	}
	if err := c.save(); err != nil {
		return err
	}
	if opts.PidFile != "" {
		return writePid(absPath(opts.PidFile), pid) // last, as runc
	}
	return nil
}

func absPath(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

func (o *Runtime) runsc() (string, error) {
	exe, _ := os.Executable()
	return sandbox.FindRunsc(exe)
}

func (c *gvisorContainer) save() error {
	data, err := json.Marshal(c.rec)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.dir, recordFile), data, 0o600)
}

func (c *gvisorContainer) logPath() string { return filepath.Join(c.dir, "runsc.log") }

// command is runsc with the container's global flags and args; its
// errors go (as JSON lines) to the container's runsc.log.
func (c *gvisorContainer) command(ctx context.Context, args ...string) (*exec.Cmd, error) {
	bin, err := c.o.runsc()
	if err != nil {
		return nil, err
	}
	flags := append([]string{"--root", c.o.runscRoot(), "--log", c.logPath(), "--log-format", "json"}, c.rec.Flags...)
	return exec.CommandContext(ctx, bin, append(flags, args...)...), nil
}

// call runs one runsc command that does not stay with the container's
// process, its output to out (nil: warden's stdout), within gvisorTimeout.
// Its stdin and stderr are warden's: runsc create hands them on to the
// container.
func (c *gvisorContainer) call(out io.Writer, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), gvisorTimeout)
	defer cancel()
	cmd, err := c.command(ctx, args...)
	if err != nil {
		return err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if out != nil {
		cmd.Stdout, cmd.Stderr = out, io.Discard
	}
	// A hung runsc is killed with what it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	offset := fileSize(c.logPath())
	err = cmd.Run()
	if ctx.Err() != nil {
		return fmt.Errorf("runsc %s did not finish within %s; it was killed", args[0], gvisorTimeout)
	}
	if err != nil {
		return fmt.Errorf("runsc %s: %s", args[0], c.runscError(offset, err))
	}
	return nil
}

// foreground runs a runsc command that stays with the container's
// process (run, exec without --detach) and returns that process's exit
// status, runsc's own; signals warden gets are handed to relay.
func (c *gvisorContainer) foreground(relay func(os.Signal), args ...string) (int, error) {
	cmd, err := c.command(context.Background(), args...)
	if err != nil {
		return -1, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	signals := make(chan os.Signal, 16)
	signal.Notify(signals, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2)
	defer signal.Stop(signals)
	offset := fileSize(c.logPath())
	if err := cmd.Start(); err != nil {
		return -1, err
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case sig := <-signals:
				relay(sig)
			case <-done:
				return
			}
		}
	}()
	err = cmd.Wait()
	close(done)
	if err == nil {
		return 0, nil
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return -1, err
	}
	// runsc's own failure is in its log; any other status is the
	// container's process's.
	if fileSize(c.logPath()) > offset {
		return -1, fmt.Errorf("runsc %s: %s", args[0], c.runscError(offset, err))
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return ee.ExitCode(), nil
}

// runscError is the last error runsc logged since offset, else err's.
func (c *gvisorContainer) runscError(offset int64, err error) string {
	f, oerr := os.Open(c.logPath())
	if oerr == nil {
		defer f.Close()
		data, _ := io.ReadAll(io.NewSectionReader(f, offset, 1<<20))
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		for i := len(lines) - 1; i >= 0; i-- {
			var line struct {
				Msg string `json:"msg"`
			}
			if json.Unmarshal([]byte(lines[i]), &line) == nil && line.Msg != "" {
				return line.Msg
			}
		}
	}
	return err.Error()
}

func fileSize(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// destroy removes the container from runsc (with force, whatever its
// state) and warden's folder of it.
func (c *gvisorContainer) destroy(force bool) error {
	args := []string{"delete", c.id}
	if force {
		args = []string{"delete", "--force", c.id}
	}
	// A container runsc has no state of (one `runsc run` ran to its end
	// and removed) needs no runsc call, which would take ~15 ms to say so.
	if force || c.runscHasState() {
		if err := c.call(io.Discard, args...); err != nil && !strings.Contains(err.Error(), "does not exist") {
			return err
		}
	}
	c.destroyKeeper()
	if err := os.RemoveAll(c.dir); err != nil {
		return err
	}
	c.o.releaseRunsc()
	return nil
}

// runscComplements gives one unconditional allow in place of a run of
// allow rules that, with the refusal just ahead of them, match every
// call: under runsc's first match the call the refusal does not take is
// allowed either way. The profile writes "ioctl's request is not TIOCSTI
// in the 32 bits the kernel reads" so, as one rule per bit (bit i differs
// from TIOCSTI's); runsc takes ~15 ms to compile those 32.
//
// The run is recognised in that form only: the refusal compares one
// argument under a mask, each allow rule names the same syscalls and
// tests one bit of that argument for the value the refusal does not
// have, and the bits cover the refusal's mask.
func runscComplements(rules []specs.LinuxSyscall) []specs.LinuxSyscall {
	out := make([]specs.LinuxSyscall, 0, len(rules))
	for i := 0; i < len(rules); i++ {
		out = append(out, rules[i])
		refusal := rules[i]
		if refusal.Action != specs.ActErrno || len(refusal.Args) != 1 || refusal.Args[0].Op != specs.OpMaskedEqual {
			continue
		}
		cmp := refusal.Args[0]
		covered, end := uint64(0), i+1
		for ; end < len(rules); end++ {
			r := rules[end]
			if r.Action != specs.ActAllow || !slices.Equal(r.Names, refusal.Names) || len(r.Args) != 1 {
				break
			}
			a := r.Args[0]
			if a.Op != specs.OpMaskedEqual || a.Index != cmp.Index || bits.OnesCount64(a.Value) != 1 || a.ValueTwo != ^cmp.ValueTwo&a.Value {
				break
			}
			covered |= a.Value
		}
		if end > i+1 && covered&cmp.Value == cmp.Value {
			out = append(out, specs.LinuxSyscall{Names: refusal.Names, Action: specs.ActAllow})
			i = end - 1
		}
	}
	return out
}

// runscHasState reports whether runsc's root holds a state file of the
// container (runsc names it ID_sandbox:SANDBOX-ID.state), or may: an
// unreadable root counts as holding one.
func (c *gvisorContainer) runscHasState() bool {
	entries, err := os.ReadDir(c.o.runscRoot())
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), c.id+"_sandbox:") && strings.HasSuffix(e.Name(), ".state") {
			return true
		}
	}
	return false
}

// releaseRunsc unmounts what runsc leaves mounted in its state folder
// (the empty network namespace of --network=none containers) once no
// container of the gVisor engine is left; runsc makes it again when it
// needs it.
func (o *Runtime) releaseRunsc() {
	if left, _ := os.ReadDir(filepath.Join(o.gvisorRoot(), "containers")); len(left) > 0 {
		return
	}
	for _, m := range hostfs.MountsUnder(o.runscRoot()) {
		if err := unix.Unmount(m.Mountpoint, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			logrus.Debugf("unmount %s: %v", m.Mountpoint, err)
		}
	}
}

// runscState is what `runsc state` prints.
type runscState struct {
	ID          string            `json:"id"`
	Pid         int               `json:"pid"`
	Status      string            `json:"status"`
	Annotations map[string]string `json:"annotations"`
}

func (c *gvisorContainer) runscState() (*runscState, error) {
	var out bytes.Buffer
	if err := c.call(&out, "state", c.id); err != nil {
		return nil, err
	}
	var st runscState
	if err := json.Unmarshal(out.Bytes(), &st); err != nil {
		return nil, fmt.Errorf("runsc state: %w", err)
	}
	return &st, nil
}

func (c *gvisorContainer) state() (*ContainerState, error) {
	st, err := c.runscState()
	if err != nil {
		return nil, err
	}
	cs := &ContainerState{OCIVersion: specs.Version, ID: c.id, Pid: st.Pid, Status: st.Status, Bundle: c.rec.Bundle,
		Created: c.rec.Created, Owner: "root", Annotations: st.Annotations}
	if s, err := LoadBundleSpec(c.dir); err == nil {
		cs.Rootfs, cs.OCIVersion = s.Root.Path, s.Version
	}
	if c.rec.Keeper != 0 {
		// runsc says the pod sandbox's pid; the keeper is the one create
		// wrote. A sub-container whose keeper died before start ran nothing.
		cs.Pid = c.rec.Keeper
		if st.Status == "created" && !c.keeperAlive() {
			cs.Status = "stopped"
		}
	}
	if cs.Status == "stopped" {
		cs.Pid = 0
	}
	if c.rec.Policy != nil {
		cs.Policy = c.rec.Policy.Policy
	}
	return cs, nil
}

func (c *gvisorContainer) start() error {
	if c.rec.Keeper != 0 {
		return c.startByKeeper()
	}
	return c.call(nil, "start", c.id)
}

func (c *gvisorContainer) kill(sig unix.Signal, all bool) error {
	if c.waitingKeeper() {
		// Nothing runs in gVisor yet: the keeper stands for the process.
		return c.signalKeeper(sig)
	}
	args := []string{"kill"}
	if all {
		args = append(args, "--all")
	}
	err := c.call(io.Discard, append(args, c.id, strconv.Itoa(int(sig)))...)
	if err == nil {
		return nil
	}
	// runsc refuses to signal a stopped sandbox; answer as the container
	// engine (and runc) do: --all succeeds, one signal is "not running".
	// containerd's runc shim kills --all before every delete, and takes
	// any other error for a failed stop (a pod's then never ends).
	if st, serr := c.state(); serr == nil && st.Status == "stopped" {
		if all {
			return nil
		}
		return notRunning(c.id)
	}
	return err
}

func (c *gvisorContainer) delete(force bool) error {
	if !force {
		st, err := c.state()
		if err != nil {
			return err
		}
		switch st.Status {
		case "stopped", "created":
		default:
			return fmt.Errorf("cannot delete container %s that is not stopped: %s (use --force)", c.id, st.Status)
		}
		force = st.Status == "created" // as runc: a created container's init is killed
	}
	return c.destroy(force)
}

// processes lists the host processes of the container: gVisor's
// sentry, gofer and the stubs its platform runs the container's code
// in, from the container's pids cgroup. The container's own processes
// live in gVisor's kernel and have no host pid.
func (c *gvisorContainer) processes() ([]int, error) {
	dir := filepath.Join("/sys/fs/cgroup", c.rec.Cgroup)
	if _, err := os.Stat("/sys/fs/cgroup/pids"); err == nil {
		dir = filepath.Join("/sys/fs/cgroup/pids", c.rec.Cgroup)
	}
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

func (c *gvisorContainer) exec(p *specs.Process, opts ExecOptions) (int, error) {
	if opts.PreserveFDs > 0 {
		return -1, errors.New("--preserve-fds: not available under engine gvisor (runsc exec cannot pass more descriptors); run the process without it")
	}
	if c.rec.Policy != nil {
		spec.TightenProcess(p, c.rec.Policy.CapAllow, func(format string, args ...any) {
			logrus.WithField("policy", c.rec.Policy.Policy).Debugf("exec: "+format, args...)
		})
	}
	data, err := json.Marshal(p)
	if err != nil {
		return -1, err
	}
	f, err := os.CreateTemp(c.dir, "process-*.json")
	if err != nil {
		return -1, err
	}
	defer os.Remove(f.Name())
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return -1, err
	}
	if opts.Detach {
		// It has read the file once the keeper is ready.
		return 0, c.execByKeeper(f.Name(), opts)
	}
	args := []string{"exec", "--process", f.Name()}
	if opts.PidFile != "" {
		args = append(args, "--pid-file", absPath(opts.PidFile))
	}
	if opts.ConsoleSocket != "" {
		args = append(args, "--console-socket", absPath(opts.ConsoleSocket))
	}
	// Signals go to the process by its pid in gVisor (runsc exec relays
	// them itself only to a terminal's).
	internal := strings.TrimSuffix(f.Name(), ".json") + ".pid"
	defer os.Remove(internal)
	args = append(args, "--internal-pid-file", internal, c.id)
	return c.foreground(func(sig os.Signal) {
		if pid, err := os.ReadFile(internal); err == nil {
			c.call(io.Discard, "kill", "--pid", strings.TrimSpace(string(pid)), c.id, strconv.Itoa(int(sig.(syscall.Signal))))
		}
	}, args...)
}

func (c *gvisorContainer) update(r *specs.LinuxResources) error {
	if c.rec.Policy != nil {
		spec.ClampResources(r, c.rec.Policy.Limits, func(format string, args ...any) {
			logrus.WithField("policy", c.rec.Policy.Policy).Debugf("update: "+format, args...)
		})
		linux := &specs.Linux{Resources: r}
		sandbox.GVisorHostLimits(linux)
		r = linux.Resources
	}
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(c.dir, "resources-*.json")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return c.call(io.Discard, "update", "--resources", f.Name(), c.id)
}
