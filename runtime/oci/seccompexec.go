package oci

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/opencontainers/runc/libcontainer/apparmor"
	"github.com/opencontainers/runc/libcontainer/configs"
	libseccomp "github.com/opencontainers/runc/libcontainer/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/seccomp"
)

// A container under a policy gets the policy's seccomp filter in its first
// process without libcontainer compiling it there: libseccomp takes ~10
// ms of every start for warden's profile (the better part of what the
// tightened container costs over a plain one), and the program is the
// same every time. warden compiles it once per profile (cached under the
// root, seccompCacheDir), passes it to the init as a sealed memfd, and
// has the init execute warden's own binary (/proc/self/exe, the sealed
// copy the init runs from), whose constructor (runtime/agent/seccompexec.c)
// loads the program and executes the container's command. The container's
// libcontainer config keeps the profile, so `exec` loads it as before.

// seccompExecMarker is argv[1] of the constructor that loads the program
// (SECCOMP_EXEC_MARKER in seccompexec.c).
const seccompExecMarker = "warden-seccomp-exec"

// seccompCacheVersion changes with anything that changes the programs
// warden builds for a profile; with libseccomp's version it keys the cache.
const seccompCacheVersion = "init-1"

// initSeccomp is a container's filter, prepared for its first process.
type initSeccomp struct {
	program *os.File // sealed memfd
	profile *configs.Seccomp
	// text is the profile's JSON for the state file, encoded while the
	// init starts (~0.5 ms in a fresh process).
	text chan []byte
}

// prepareInitSeccomp takes the seccomp profile out of cfg, for the first
// process to load (initSeccomp.wrap), where that loads exactly what
// libcontainer would: a profile seccomp.InitProgramFits accepts, a process
// with no_new_privs and no LSM label (which libcontainer applies to the
// next program executed), in its own PID namespace (so no process of the
// container's sees the one that loads it) with /proc mounted, where the
// container's user may execute the init's binary (initExecutableByAll). Otherwise,
// or on any failure, it returns nil and cfg is unchanged: libcontainer
// compiles the profile in the init, as runc does.
func (o *Runtime) prepareInitSeccomp(s *specs.Spec, cfg *configs.Config) *initSeccomp {
	if s.Linux == nil || s.Process == nil || cfg.Seccomp == nil || !seccomp.InitProgramFits(s.Linux.Seccomp) {
		return nil
	}
	p := s.Process
	if !p.NoNewPrivileges || len(p.Args) == 0 || p.SelinuxLabel != "" || (p.ApparmorProfile != "" && apparmor.IsEnabled()) {
		return nil
	}
	ownPID := slices.ContainsFunc(s.Linux.Namespaces, func(n specs.LinuxNamespace) bool {
		return n.Type == specs.PIDNamespace && n.Path == ""
	})
	proc := slices.ContainsFunc(s.Mounts, func(m specs.Mount) bool {
		return filepath.Clean(m.Destination) == "/proc" && m.Type == "proc"
	})
	if !ownPID || !proc || !initExecutableByAll() {
		return nil
	}
	prog, err := o.initProgram(s.Linux.Seccomp)
	if err != nil {
		return nil
	}
	mem, err := sealedProgram(prog)
	if err != nil {
		return nil
	}
	init := &initSeccomp{program: mem, profile: cfg.Seccomp, text: make(chan []byte, 1)}
	cfg.Seccomp = nil
	go func() {
		text, _ := json.Marshal(init.profile) // plain data: it encodes
		init.text <- text
	}()
	return init
}

// initExecutableByAll reports whether the copy of warden's binary the
// init runs from (libcontainer's exeseal: an overlay of this binary, with
// its mode, or else an executable memfd, else a private file of mode 0700)
// may be executed by the container's user, who is not the host's root:
// this binary is executable by all and an executable memfd can be made.
func initExecutableByAll() bool {
	st, err := os.Stat("/proc/self/exe")
	if err != nil || st.Mode().Perm()&0o001 == 0 {
		return false
	}
	noexec, err := os.ReadFile("/proc/sys/vm/memfd_noexec")
	return err != nil || strings.TrimSpace(string(noexec)) != "2"
}

// initProgram is the program for profile s, from the cache or compiled
// into it.
func (o *Runtime) initProgram(s *specs.LinuxSeccomp) ([]byte, error) {
	text, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	major, minor, micro := libseccomp.Version()
	sum := sha256.Sum256(fmt.Appendf(text, "\n%s libseccomp %d.%d.%d", seccompCacheVersion, major, minor, micro))
	dir := filepath.Join(o.Root, "seccomp")
	path := filepath.Join(dir, hex.EncodeToString(sum[:])+".bpf")
	prog, err := os.ReadFile(path)
	if err != nil {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
		if err := seccomp.WriteInitProgram(s, tmp); err != nil {
			os.Remove(tmp)
			return nil, err
		}
		if prog, err = os.ReadFile(tmp); err == nil {
			err = os.Rename(tmp, path)
		}
		if err != nil {
			os.Remove(tmp)
			return nil, err
		}
	}
	if n := len(prog) / 8; len(prog)%8 != 0 || n == 0 || n > 4096 {
		return nil, fmt.Errorf("seccomp program %s is malformed (%d bytes)", path, len(prog))
	}
	return prog, nil
}

// sealedProgram is a memfd holding prog that nothing can change.
func sealedProgram(prog []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate("warden-seccomp", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "warden-seccomp")
	if _, err := f.Write(prog); err != nil {
		f.Close()
		return nil, err
	}
	seals := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, seals); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// wrap makes the process (the init's, with the descriptors the caller
// passes already in ExtraFiles) start warden's constructor, which loads
// the program from the descriptor after the caller's and executes Args.
func (i *initSeccomp) wrap(args []string, extra []*os.File) ([]string, []*os.File) {
	fd := 3 + len(extra)
	return append([]string{"/proc/self/exe", seccompExecMarker, strconv.Itoa(fd)}, args...), append(extra, i.program)
}

// lookCommand finds the container's command in its root the way the
// init will (Go's exec.LookPath over the process's PATH), so that a
// command that is not there fails create, as under libcontainer's own
// look-up. It checks existence and execute bits only; a path it cannot
// judge (a symlink out through /proc) passes, for the init to decide.
func lookCommand(pid int, p *specs.Process) error {
	name := p.Args[0]
	root, err := os.Open(fmt.Sprintf("/proc/%d/root", pid))
	if err != nil {
		return nil
	}
	defer root.Close()
	found := func(path string) (bool, bool) {
		if !filepath.IsAbs(path) {
			path = filepath.Join(p.Cwd, path)
		}
		fd, err := unix.Openat2(int(root.Fd()), path, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT})
		if err != nil {
			return false, errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR)
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil {
			return false, false
		}
		return st.Mode&unix.S_IFMT != unix.S_IFDIR && st.Mode&0o111 != 0, true
	}
	if strings.Contains(name, "/") {
		if ok, sure := found(name); !ok && sure {
			return fmt.Errorf("exec: %q: no such file or directory, or not executable", name)
		}
		return nil
	}
	path := ""
	for _, e := range p.Env {
		if v, ok := strings.CutPrefix(e, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		if ok, sure := found(filepath.Join(dir, name)); ok || !sure {
			return nil
		}
	}
	return fmt.Errorf("exec: %q: executable file not found in $PATH", name)
}

// started runs once the init exists and waits to execute: the command
// must be there (lookCommand), and the container's config gets its profile
// back, for every later `exec` to load as libcontainer does: in memory
// (cfg, which libcontainer.Create keeps) and in the state file the init's
// start wrote without it. Container.Set would write the state too, but
// writes every cgroup limit again on the way (~1.7 ms here), and decoding
// and encoding the whole state costs as much: the profile goes in as the
// first key of the one object under "config" (libcontainer leaves a nil
// profile out; in a string a key's quotes would be escaped).
func (i *initSeccomp) started(cfg *configs.Config, stateDir string, pid int, p *specs.Process) error {
	if err := lookCommand(pid, p); err != nil {
		return err
	}
	cfg.Seccomp = i.profile
	path := filepath.Join(stateDir, "state.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	config := []byte(`"config":{`)
	if bytes.Count(data, config) != 1 || bytes.Contains(data, []byte(`"seccomp":`)) {
		return fmt.Errorf("container state %s: not the state this warden's libcontainer writes", path)
	}
	text := <-i.text
	if len(text) == 0 {
		return errors.New("the container's seccomp profile does not encode")
	}
	with := append(append(append(config, `"seccomp":`...), text...), ',')
	data = bytes.Replace(data, config, with, 1)
	tmp, err := os.CreateTemp(stateDir, "state-")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}
