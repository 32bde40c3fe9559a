package oci

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/opencontainers/runc/libcontainer/apparmor"
	"github.com/opencontainers/runc/libcontainer/configs"
	libseccomp "github.com/opencontainers/runc/libcontainer/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/seccomp"
)

// A container under a policy gets the policy's seccomp filter in its first
// process without libcontainer compiling it there: libseccomp takes the
// better part of what the tightened container costs over a plain one
// (docs/oci.md), and the program is the same every time. warden compiles
// it once per profile (cached under the root), passes it to the init as a
// sealed memfd, and has the init execute warden's own binary
// (/proc/self/exe, the sealed copy the init runs from), whose constructor
// (seccompexec.c) loads the program and executes the container's command.
// The container's libcontainer config keeps the profile, so `exec` loads
// it as before.

// seccompExecMarker is argv[1] of the constructor that loads the program
// (SECCOMP_EXEC_MARKER in seccompexec.c).
const seccompExecMarker = "warden-seccomp-exec"

// maxProgram is the kernel's limit on a filter's instructions
// (BPF_MAXINSNS; MAX_PROGRAM in seccompexec.c).
const maxProgram = 4096

// seccompFlagSpecAllow is SECCOMP_FILTER_FLAG_SPEC_ALLOW, the one flag
// libcontainer's configs carry for warden's profiles (specconv sets it
// where a spec names none) and the constructor passes on.
const seccompFlagSpecAllow = 4

// seccompCacheVersion changes with anything that changes the programs
// warden builds for a profile; with libseccomp's version it keys the cache.
const seccompCacheVersion = "init-1"

// initSeccomp is a container's filter, prepared for its first process.
type initSeccomp struct {
	program *os.File // sealed memfd
	flags   int      // for seccomp(2)
	profile *configs.Seccomp
	// text is the profile's JSON for the state file, encoded while the
	// init starts.
	text chan []byte
}

// prepareInitSeccomp takes the seccomp profile out of cfg, for the first
// process to load (initSeccomp.wrap), where that loads exactly what
// libcontainer would (fastSeccompRefusal says where not). Otherwise, or
// on any failure, it returns nil and cfg is unchanged: libcontainer
// compiles the profile in the init, as runc does.
func (o *Runtime) prepareInitSeccomp(id string, s *specs.Spec, cfg *configs.Config) *initSeccomp {
	log := func(format string, args ...any) {
		logrus.Debugf("container %s: libcontainer loads the seccomp profile: "+format, append([]any{id}, args...)...)
	}
	flags, why := fastSeccompRefusal(s, cfg)
	if why != "" {
		log("%s", why)
		return nil
	}
	prog, err := o.initProgram(s.Linux.Seccomp)
	if err != nil {
		log("%v", err)
		return nil
	}
	mem, err := sealedProgram(prog)
	if err != nil {
		log("%v", err)
		return nil
	}
	init := &initSeccomp{program: mem, flags: flags, profile: cfg.Seccomp, text: make(chan []byte, 1)}
	cfg.Seccomp = nil
	go func() {
		text, _ := json.Marshal(init.profile) // plain data: it encodes
		init.text <- text
	}()
	return init
}

// fastSeccompRefusal says why the container's first process cannot load
// its filter itself (empty: it can), and else the flags to load it with.
// It can where it loads what libcontainer would load, from a binary no
// one else can change or reach before the filter holds:
//   - a profile seccomp.InitProgramFits accepts, with no flag but
//     SPEC_ALLOW in libcontainer's form of it;
//   - no_new_privs, and no SELinux or AppArmor label (libcontainer
//     applies them to the next program executed: warden's);
//   - no startContainer hooks (the init runs them after the filter);
//   - the container's own PID namespace (no process of another container
//     sees the one that loads it) with /proc mounted;
//   - a statically linked warden (a dynamic one would start the image's
//     own loader, with the container's environment, before the filter),
//     which the container's user may execute (initExecutableByAll);
//   - no address-space limit too small to execute warden's binary.
func fastSeccompRefusal(s *specs.Spec, cfg *configs.Config) (int, string) {
	switch {
	case s.Linux == nil || s.Process == nil || cfg.Seccomp == nil:
		return 0, "no profile"
	case !seccomp.InitProgramFits(s.Linux.Seccomp):
		return 0, "the profile needs more than its program"
	}
	flags := 0
	for _, f := range cfg.Seccomp.Flags {
		if f != specs.LinuxSeccompFlagSpecAllow {
			return 0, fmt.Sprintf("flag %s", f)
		}
		flags = seccompFlagSpecAllow
	}
	p := s.Process
	switch {
	case !p.NoNewPrivileges:
		return 0, "no no_new_privs"
	case len(p.Args) == 0:
		return 0, "no command"
	case p.SelinuxLabel != "" || (p.ApparmorProfile != "" && apparmor.IsEnabled()):
		return 0, "an LSM label"
	case s.Hooks != nil && len(s.Hooks.StartContainer) > 0:
		return 0, "startContainer hooks"
	case !slices.ContainsFunc(s.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == specs.PIDNamespace && n.Path == "" }):
		return 0, "no PID namespace of its own"
	case !slices.ContainsFunc(s.Mounts, func(m specs.Mount) bool { return filepath.Clean(m.Destination) == "/proc" && m.Type == "proc" }):
		return 0, "no /proc"
	case !staticSelf():
		return 0, "warden's binary is not statically linked"
	case !initExecutableByAll():
		return 0, "warden's binary is not executable by all"
	}
	for _, r := range p.Rlimits {
		if r.Type == "RLIMIT_AS" && r.Soft < 1<<30 {
			return 0, "an address-space limit under 1 GiB"
		}
	}
	return flags, ""
}

// staticSelf reports whether this binary has no program interpreter
// (PT_INTERP): the kernel would load one from the container's root.
var staticSelf = sync.OnceValue(func() bool {
	f, err := elf.Open("/proc/self/exe")
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
})

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
// into it. A cached file is the program followed by its SHA-256; one that
// does not check out (a write a crash cut short) is compiled again. The
// folder must be this user's alone: a program planted there would be
// every later container's filter.
func (o *Runtime) initProgram(s *specs.LinuxSeccomp) ([]byte, error) {
	text, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	major, minor, micro := libseccomp.Version()
	key := sha256.Sum256(fmt.Appendf(text, "\n%s libseccomp %d.%d.%d", seccompCacheVersion, major, minor, micro))
	dir := filepath.Join(o.Root, "seccomp")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		return nil, fmt.Errorf("%s is not a folder of this user's alone (mode %o, owner %d)", dir, st.Mode&0o7777, st.Uid)
	}
	path := filepath.Join(dir, hex.EncodeToString(key[:])+".bpf")
	if data, err := os.ReadFile(path); err == nil {
		if prog, ok := checkedProgram(data); ok {
			return prog, nil
		}
	}
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	defer os.Remove(tmp)
	if err := seccomp.WriteInitProgram(s, tmp); err != nil {
		return nil, err
	}
	prog, err := os.ReadFile(tmp)
	if err != nil {
		return nil, err
	}
	if n := len(prog) / 8; len(prog)%8 != 0 || n == 0 || n > maxProgram {
		return nil, fmt.Errorf("libseccomp's program for the profile is malformed (%d bytes)", len(prog))
	}
	sum := sha256.Sum256(prog)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_APPEND, 0)
	if err == nil {
		_, err = f.Write(sum[:])
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	return prog, err
}

// checkedProgram is the program of a cached file, if its sum checks out.
func checkedProgram(data []byte) ([]byte, bool) {
	if len(data) < sha256.Size {
		return nil, false
	}
	prog, sum := data[:len(data)-sha256.Size], data[len(data)-sha256.Size:]
	if n := len(prog) / 8; len(prog)%8 != 0 || n == 0 || n > maxProgram {
		return nil, false
	}
	got := sha256.Sum256(prog)
	return prog, bytes.Equal(got[:], sum)
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
	return append([]string{"/proc/self/exe", seccompExecMarker, strconv.Itoa(fd), strconv.Itoa(i.flags)}, args...), append(extra, i.program)
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
// writes every cgroup limit again on the way, and decoding and encoding
// the whole state costs as much: the profile goes in as the first key of
// the one object under "config" (libcontainer leaves a nil profile out; in
// a string a key's quotes would be escaped).
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
