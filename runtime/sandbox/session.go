package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	libseccomp "github.com/opencontainers/runc/libcontainer/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/runtime/egress"
	"github.com/warden-sandbox/warden/runtime/internal/protocol"
	"github.com/warden-sandbox/warden/runtime/internal/wire"
	"github.com/warden-sandbox/warden/spec"
	"github.com/warden-sandbox/warden/spec/hostfs"
)

// DefaultRoot is where warden keeps its state.
const DefaultRoot = protocol.DefaultRoot

// cgroupParent holds every sandbox's cgroup, so gc can find them all.
const cgroupParent = "/warden"

// Runtime owns a state root: libcontainer's state under containers/, one
// folder per session under sessions/.
type Runtime struct {
	Root string
	// Binary is the host path of the warden binary each session's agent
	// runs from.
	Binary string

	audit     *AuditLog // exec lines and egress decisions; see auditSink
	auditOnce sync.Once
	// gcMu keeps a daemon's gc apart from its creates, claims and pool
	// starts: what gc finds in the state root and no live session
	// owns must not be one of those under way. See Changing, Collecting.
	gcMu sync.RWMutex

	// The engines that run the sandboxes' containers; see engine.go.
	container, gvisor engine
	engine            engines // loads a container from its engine

	approver Approver // answers the command rules' asks; see commands.go
	copies   struct { // the ruled programs' copies; see programCopy
		sync.Mutex
		byKey map[string]*os.File
	}
}

// Changing marks a create, claim or pool start under way until the
// returned func is called; a Collecting caller waits for it.
func (rt *Runtime) Changing() (done func()) {
	rt.gcMu.RLock()
	return rt.gcMu.RUnlock
}

// Collecting holds off creates, claims and pool starts while a gc looks
// for what no live session owns.
func (rt *Runtime) Collecting() (done func()) {
	rt.gcMu.Lock()
	return rt.gcMu.Unlock
}

// SetAuditLog makes a the log of the runtime's exec lines and egress
// decisions (a daemon's), instead of the root's opened on first use.
func (rt *Runtime) SetAuditLog(a *AuditLog) { rt.audit = a }

// New checks a state root; its folders are made when the daemon or a
// first sandbox needs them (makeDirs).
func New(root, binary string) (*Runtime, error) {
	if err := CheckRoot(root); err != nil {
		return nil, err
	}
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("state root %q must be an absolute path", root)
	}
	if !libseccomp.Enabled {
		return nil, errors.New("this program was built without seccomp support and would fail every sandbox: build it with cgo and `-tags seccomp` (libseccomp-dev installed), as `make build` builds warden")
	}
	rt := &Runtime{Root: root, Binary: binary}
	rt.container, rt.gvisor = &containerEngine{rt: rt}, &gvisorEngine{rt: rt}
	rt.engine = engines{container: rt.container, gvisor: rt.gvisor}
	for _, d := range rt.stateDirs() {
		if err := CheckTraversable(d); err != nil {
			return nil, err
		}
	}
	if binary == "" {
		exe, err := executable()
		if err != nil {
			return nil, err
		}
		rt.Binary = exe
	}
	return rt, nil
}

func (rt *Runtime) stateDirs() []string {
	return []string{rt.containersDir(), filepath.Join(rt.Root, "sessions")}
}

// MakeDirs creates the state root's folders when the first sandbox or the
// daemon needs them: a command refused for bad input leaves no root behind.
func (rt *Runtime) MakeDirs() error {
	for _, d := range rt.stateDirs() {
		if err := MakeStateDir(d); err != nil {
			return fmt.Errorf("state root: %w", err)
		}
	}
	return nil
}

// CheckRoot refuses a state root warden must not take over: an empty one
// (the current folder) and the host's root folder.
func CheckRoot(root string) error { return protocol.CheckRoot(root) }

// MakeStateDir creates dir and whatever is missing above it, each new
// folder 0711 whatever the umask (protocol.MakeStateDir).
func MakeStateDir(dir string) error { return protocol.MakeStateDir(dir) }

// CheckTraversable makes sure the sandbox's unprivileged host user can
// pass through dir and every folder above it that exists
// (protocol.CheckTraversable).
func CheckTraversable(dir string) error { return protocol.CheckTraversable(dir) }

func (rt *Runtime) containersDir() string       { return filepath.Join(rt.Root, "containers") }
func (rt *Runtime) SessionDir(id string) string { return filepath.Join(rt.Root, "sessions", id) }

var idPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`) })

// ErrNoSession and ErrSessionExists are returned for unknown and duplicate
// session ids.
var (
	ErrNoSession     = protocol.ErrNoSession
	ErrSessionExists = protocol.ErrSessionExists
)

// CheckID validates a session id.
func CheckID(id string) error {
	if !idPattern().MatchString(id) {
		return kindf(spec.ErrInvalid, "session id %q: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit", id)
	}
	return nil
}

// SessionConfig describes a session to create.
type SessionConfig struct {
	ID       string
	Policy   *policies.Policy
	Vars     policies.Vars
	Identity spec.Identity // zero: spec.DefaultIdentity
	// OneShot is a sandbox claimed from a pool for one command and
	// discarded after it (warden do through the daemon). Its state file
	// is not synced: a host crash ends the sandbox it describes, the
	// daemon removes it right after the command, and a sync (~3 ms here)
	// would be most of the claim.
	OneShot bool
}

// Session is one warm sandbox: a container whose PID 1 is warden's agent,
// reused for every command. Its workspace belongs to the caller and is
// never removed.
type Session struct {
	ID         string        `json:"id"`
	PolicyName string        `json:"policy"`
	PolicyHash string        `json:"policyHash"`
	PolicyTOML string        `json:"policyToml"`
	Vars       policies.Vars `json:"vars"`
	Created    time.Time     `json:"created"`
	Identity   spec.Identity `json:"identity"`
	// Container is the libcontainer id when it differs from ID: a session
	// claimed from the warm pool keeps its pooled container's id.
	Container string `json:"container,omitempty"`
	// Pool is the key of the warm pool the session was claimed from.
	Pool   string          `json:"pool,omitempty"`
	Limits policies.Limits `json:"-"`
	Env    []string        `json:"-"` // the sandbox's base environment
	// Commands are the programs the policy's [commands] rules name.
	Commands []spec.CommandProgram `json:"commands,omitempty"`

	rt        *Runtime
	home      string // state folder when not sessions/ID: a pooled container's
	policy    *policies.Policy
	container container     // see engine.go
	egress    *egress.Proxy // serves network.allow; see startEgress

	// gate orders a command's start against freeze, thaw and kill (see
	// freeze.go): a command is sent to the agent under its read lock.
	gate   sync.RWMutex
	frozen atomic.Bool
	// waiting counts the commands sent to the agent whose end it has not
	// reported yet.
	waiting atomic.Int32

	mu       sync.Mutex
	oomSeen  uint64
	kills    uint64 // session kills so far: a command they ended says so
	lastUsed time.Time
	// persisted is when touch last wrote lastUsed to the state file.
	persisted time.Time
	hold      *os.File      // the session folder, locked (holdDir)
	rulesConn *net.UnixConn // the agent's command-rules channel
	asking    atomic.Int32  // asks waiting for an answer
	// samePolicy is a policy text CheckSame found to be this session's
	// policy: a client that sends it with every command (the Go client)
	// is not parsed again each time.
	samePolicy atomic.Pointer[string]
	// initID is the sandbox's init, once read (initProcess).
	initID atomic.Pointer[processID]
}

// Policy is the session's policy.
func (s *Session) Policy() *policies.Policy { return s.policy }

// Create starts a session's sandbox.
func (rt *Runtime) Create(cfg SessionConfig) (_ *Session, err error) {
	if err := CheckID(cfg.ID); err != nil {
		return nil, err
	}
	if cfg.Policy == nil {
		return nil, errors.New("no policy")
	}
	// A policy built in Go may leave limits at zero: the defaults.
	if cfg.Policy, err = cfg.Policy.Checked(); err != nil {
		return nil, err
	}
	if err := checkEngine(cfg.Policy); err != nil {
		return nil, err
	}
	leased := cfg.Identity == (spec.Identity{})
	if leased {
		cfg.Identity = spec.DefaultIdentity
	}
	// The spec first: a policy its variables do not fit creates nothing.
	dir := rt.SessionDir(cfg.ID)
	bundleDir := filepath.Join(dir, "bundle")
	b, err := rt.sessionSpec(cfg.Policy, cfg.Vars, cfg.Identity, cfg.ID, bundleDir)
	if err != nil {
		return nil, err
	}
	if err := rt.MakeDirs(); err != nil {
		return nil, err
	}
	if leased {
		id, lease, err := rt.leaseIdentity(cfg.ID)
		if err != nil {
			return nil, err
		}
		defer lease.Close()
		defer func() {
			if err != nil {
				rt.releaseIdentity(cfg.ID, id.UID)
			}
		}()
		spec.Reidentify(b.Spec, cfg.Identity, id)
		cfg.Identity = id
	}
	hold, err := makeHeldDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("%w: %s", ErrSessionExists, cfg.ID)
		}
		return nil, fmt.Errorf("session %s: %w", cfg.ID, err)
	}
	defer func() {
		if err != nil {
			rt.destroy(cfg.ID)
			hold.Close()
		}
	}()
	// config.json shows the whole sandbox, the session's folders included.
	if err := spec.WriteBundle(bundleDir, b); err != nil {
		return nil, err
	}
	if err := rt.hidePrograms(b.Spec, filepath.Join(bundleDir, "rootfs")); err != nil {
		return nil, err
	}
	text, err := cfg.Policy.TOML()
	if err != nil {
		return nil, err
	}
	s := &Session{
		ID: cfg.ID, PolicyName: cfg.Policy.Name, PolicyHash: cfg.Policy.Hash(), PolicyTOML: string(text),
		Vars: cfg.Vars, Created: time.Now().UTC(), Identity: cfg.Identity,
		rt: rt, policy: cfg.Policy, Limits: cfg.Policy.Limits, Env: b.Spec.Process.Env, lastUsed: time.Now(), hold: hold,
		Commands: commandsOf(b),
	}
	// The session's own folders are bound into the running sandbox, the
	// way a claim binds them into a pooled one: an id-mapped mount in the
	// spec costs libcontainer a helper process per start, a late bind
	// next to nothing. It also makes a cold session and a claimed one the
	// same sandbox by construction.
	if !rt.engineFor(cfg.Policy).lateBinds() {
		// An engine that cannot bind later starts with every mount.
		sp := *b.Spec
		if err := rt.startContainer(s, &sp, bundleDir); err != nil {
			return nil, err
		}
		if err := rt.bindSession(s, -1, nil); err != nil {
			return nil, err
		}
	} else {
		early, late := splitLate(b.Spec.Mounts)
		sp, proc := *b.Spec, *b.Spec.Process
		sp.Mounts, sp.Process = early, &proc
		proc.Args = append(slices.Clone(proc.Args), "--pooled")
		if err := rt.startContainer(s, &sp, bundleDir); err != nil {
			return nil, err
		}
		mntns, err := mountNamespace(s.container)
		if err != nil {
			return nil, err
		}
		defer mntns.Close()
		if err := rt.bindSession(s, int(mntns.Fd()), late); err != nil {
			return nil, err
		}
	}
	defer func() {
		if err != nil {
			s.StopEgress()
		}
	}()
	// Written last: a daemon that dies before this reaps the half-made
	// session instead of re-adopting a sandbox without its folders.
	if err := s.save(); err != nil {
		return nil, err
	}
	return s, nil
}

// bindSession binds a started sandbox's session folders, serves its
// network.allow and lets its agent seal: from then on it runs commands.
// The egress listener exists before the seal, so before any sandboxed
// code could take its port.
func (rt *Runtime) bindSession(s *Session, mntns int, late []specs.Mount) (err error) {
	t0 := time.Now()
	err = bindLate(mntns, s.container.lateRoot(), late)
	idmapUsernses.forget(s.Identity.UID) // bound once: not needed again
	if err != nil {
		return err
	}
	t1 := time.Now()
	if err := rt.startEgress(s); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			s.StopEgress()
		}
	}()
	// A cold gVisor agent sealed as it started, before it took the
	// host's first connection (gvisorEngine.start): it has nothing to
	// bind, and answering a seal would only cost a round trip.
	if _, gvisor := s.container.(*gvisorContainer); !gvisor || mntns >= 0 || len(late) > 0 {
		if err := s.seal(late); err != nil {
			return err
		}
	}
	if err := s.serveRules(); err != nil {
		return err
	}
	logrus.Debugf("session %s: late mounts %s, seal sent %s", s.ID, t1.Sub(t0), time.Since(t1))
	return nil
}

// agentArgs runs the warden binary as the sandbox's agent (the C program
// in runtime/agent, which takes over before the Go runtime starts),
// telling it what Landlock must allow.
func agentArgs(s *specs.Spec) []string {
	args := []string{spec.AgentPath, "agent"}
	if allow := s.Annotations[spec.AnnotationExecAllow]; allow != "*" {
		args = append(args, "--exec-allow", allow)
	}
	if progs, _ := spec.CommandPrograms(s); len(progs) > 0 {
		args = append(args, "--stubs", stubArgs(progs))
	}
	var writable []string
	for _, m := range s.Mounts {
		if m.Destination == "/dev" || m.Destination == "/proc" {
			continue
		}
		if contains(m.Options, "ro") || m.Type == "proc" || m.Type == "devpts" || m.Type == "mqueue" {
			continue
		}
		// A Landlock rule covers everything beneath its folder, mounts
		// included: one inside a writable mount (a deny's pinned parent)
		// adds nothing, and would make a pooled sandbox's key differ.
		if !slices.ContainsFunc(writable, func(w string) bool { _, in := hostfs.Under(m.Destination, w); return in }) {
			writable = append(writable, m.Destination)
		}
	}
	if len(writable) > 0 {
		args = append(args, "--writable", strings.Join(writable, ":"))
	}
	if s.Annotations[spec.AnnotationExecAllow] != "*" {
		args = append(args, "--hidden-programs", hiddenProgramsFile)
	}
	if dirs := s.Annotations[spec.AnnotationExecWritable]; dirs != "" {
		args = append(args, "--exec-dirs", dirs)
	}
	// The agent sets the rlimits on itself (see startContainer).
	if len(s.Process.Rlimits) > 0 {
		var limits []string
		for _, r := range s.Process.Rlimits {
			limits = append(limits, fmt.Sprintf("%s=%d:%d", strings.ToLower(strings.TrimPrefix(r.Type, "RLIMIT_")), r.Soft, r.Hard))
		}
		args = append(args, "--rlimits", strings.Join(limits, ","))
	}
	return args
}

func (s *Session) save() error { return s.saveSynced(true) }

func (s *Session) saveSynced(sync bool) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return writeStateFile(filepath.Join(s.dir(), "session.json"), data, sync)
}

// ContainerID is the session's libcontainer id.
func (s *Session) ContainerID() string {
	if s.Container != "" {
		return s.Container
	}
	return s.ID
}

func (s *Session) socketPath() string { return filepath.Join(s.dir(), "agent.sock") }

func (s *Session) dir() string {
	if s.home != "" {
		return s.home
	}
	return s.rt.SessionDir(s.ID)
}

// startContainer creates the session's container and starts the agent in
// it, under the engine the session's policy asks for.
func (rt *Runtime) startContainer(s *Session, sp *specs.Spec, bundleDir string) error {
	sp.Root.Path = filepath.Join(bundleDir, "rootfs")
	logFile, err := os.OpenFile(filepath.Join(s.dir(), "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	c, err := rt.engineFor(s.policy).start(startRequest{id: s.ContainerID(), spec: sp, bundleDir: bundleDir, socket: s.socketPath(), log: logFile,
		egress: s.policy != nil && len(s.policy.Network.Allow) > 0})
	if err != nil {
		return err
	}
	s.container = c
	return nil
}

// Load re-adopts a running session from its state.
func (rt *Runtime) Load(id string) (*Session, error) {
	if err := CheckID(id); err != nil {
		return nil, err
	}
	data, err := ReadStateFile(filepath.Join(rt.SessionDir(id), "session.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNoSession, id)
	} else if err != nil {
		return nil, err
	}
	s := &Session{rt: rt}
	if err := json.Unmarshal(data, s); err != nil {
		return nil, fmt.Errorf("session %s: state file: %w", id, err)
	}
	p, err := policies.Parse(id+"/session.json", []byte(s.PolicyTOML))
	if err != nil {
		return nil, err
	}
	s.policy, s.Limits, s.Env = p, p.Limits, spec.SandboxEnv(p, s.Vars, nil)
	c, err := rt.engine.load(s.ContainerID())
	if err != nil {
		return nil, fmt.Errorf("session %s: container: %w", id, err)
	}
	st, err := c.status()
	if err != nil || st != running && st != paused {
		return nil, fmt.Errorf("session %s: sandbox is not running (%v)", id, st)
	}
	s.container = c
	s.frozen.Store(st == paused) // it stays frozen until thawed
	// The state file's modification time is when the session was last
	// used (touch): a daemon's restart does not reset its idle time.
	s.lastUsed = time.Now()
	if fi, err := os.Stat(filepath.Join(rt.SessionDir(id), "session.json")); err == nil && fi.ModTime().Before(s.lastUsed) {
		s.lastUsed = fi.ModTime()
	}
	s.oomSeen = s.oomKills()
	return s, nil
}

// Adopt takes over a session another process left running (a previous
// daemon): it holds the session's folder and serves its network from now
// on. ErrHeld: a live process runs it. Any other error: the session could
// not be taken over and has been removed.
func (rt *Runtime) Adopt(id string) (*Session, error) {
	hold, err := holdDir(rt.SessionDir(id), false)
	if errors.Is(err, ErrHeld) {
		return nil, err
	}
	s, err := rt.Load(id)
	if err == nil {
		err = rt.startEgress(s)
	}
	if err == nil {
		err = s.serveRules()
	}
	if err != nil {
		rt.destroy(id)
		if hold != nil {
			hold.Close()
		}
		return nil, err
	}
	s.hold = hold
	return s, nil
}

// Release lets go of a session whose sandbox has stopped: its network is
// no longer served and its folder is unlocked, for gc to remove.
func (s *Session) Release() {
	s.closeRules()
	s.StopEgress()
	s.hold.Close()
}

// IDs lists the sessions with state under the root.
func (rt *Runtime) IDs() []string {
	entries, _ := os.ReadDir(filepath.Join(rt.Root, "sessions"))
	var ids []string
	for _, e := range entries {
		if e.IsDir() && CheckID(e.Name()) == nil {
			ids = append(ids, e.Name())
		}
	}
	return ids
}

// Close stops the session's sandbox and removes its state. The workspace
// and every other granted folder are left as they are.
func (s *Session) Close() error {
	s.closeRules()
	s.StopEgress()
	err := s.rt.destroy(s.ID)
	s.hold.Close()
	if _, gvisor := s.container.(*gvisorContainer); gvisor {
		s.rt.ReleaseViews()
	}
	return err
}

// makeHeldDir makes a session's folder already held: made under a name
// no session has (gc passes it by), locked, then renamed into place. A gc
// of another process, which removes a session folder nobody holds, never
// sees it unheld. fs.ErrExist: the session exists.
func makeHeldDir(dir string) (*os.File, error) {
	for try := 0; ; try++ {
		hold, err := makeHeldDirOnce(dir)
		// A gc (RemoveHalfMade) may take the new folder for one a dead
		// process left, between its making and its lock: make another.
		if try < 5 && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, errRemoved) || errors.Is(err, ErrHeld)) {
			continue
		}
		return hold, err
	}
}

func makeHeldDirOnce(dir string) (*os.File, error) {
	tmp := filepath.Join(filepath.Dir(dir), newDirPrefix+filepath.Base(dir)+"-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	if err := os.Mkdir(tmp, 0o711); err != nil {
		return nil, err
	}
	hold, err := holdDir(tmp, false)
	if err == nil {
		err = unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dir, unix.RENAME_NOREPLACE)
	}
	if err != nil {
		if hold != nil {
			hold.Close()
		}
		os.Remove(tmp)
		if errors.Is(err, unix.EEXIST) {
			return nil, fs.ErrExist
		}
		return nil, err
	}
	return hold, nil
}

// newDirPrefix names a session folder being made (makeHeldDir); gc
// removes one that nobody holds, left by a process that died.
const newDirPrefix = ".new-"

// holdDir locks a session's folder for as long as the process that runs
// the session keeps the file open: the daemon, or `warden do` and a Go
// program, which the daemon does not know. gc and a daemon's adoption
// leave a folder another process holds alone (ErrHeld). wait makes it
// wait out such a check rather than fail.
func holdDir(dir string, wait bool) (*os.File, error) {
	f, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	how := unix.LOCK_EX
	if !wait {
		how |= unix.LOCK_NB
	}
	if err := unix.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, ErrHeld
		}
		return nil, err
	}
	// gc may have removed the folder between its making and the lock.
	var fst, st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &fst) != nil || unix.Lstat(dir, &st) != nil || fst.Dev != st.Dev || fst.Ino != st.Ino {
		f.Close()
		return nil, fmt.Errorf("%s: %w", dir, errRemoved)
	}
	return f, nil
}

// errRemoved: a folder was removed between its opening and its lock.
var errRemoved = errors.New("removed while it was being locked")

// ErrHeld: another process runs the session (holdDir).
var ErrHeld = errors.New("another warden process runs it")

// destroy removes everything warden made for a session id: processes,
// container, cgroup, bundle, sockets, state. It never follows into
// granted folders: only the session's own directory is removed, and its
// bundle holds only mountpoints and generated files.
func (rt *Runtime) destroy(id string) error {
	var errs []error
	if err := rt.RemoveContainer(rt.SessionContainer(id)); err != nil {
		errs = append(errs, err)
	}
	dir := rt.SessionDir(id)
	if err := removeSessionDir(dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// removeSessionDir deletes a session folder without crossing into any
// mount (a bundle's rootfs never has one on the host, but a crash during
// start must not turn into deleting a workspace).
func removeSessionDir(dir string) error {
	var walkErr error
	var paths []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && p != dir && isMountpoint(p) {
			walkErr = fmt.Errorf("%s is a mountpoint; unmount it and run warden gc again", p)
			return filepath.SkipDir
		}
		paths = append(paths, p)
		return nil
	})
	if walkErr != nil {
		return walkErr
	}
	for i := len(paths) - 1; i >= 0; i-- {
		os.Remove(paths[i])
	}
	return nil
}

func isMountpoint(p string) bool {
	var st, parent unix.Stat_t
	if unix.Lstat(p, &st) != nil || unix.Lstat(filepath.Dir(p), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// ExecOptions describe one command.
type ExecOptions struct {
	Argv []string
	// Env holds extra variables; only names the policy's env.allow lists
	// (or env.set fixes) are passed, others are an error.
	Env []string
	// CallerEnv is the caller's environment: the names the policy's
	// env.allow lists pass through, nothing else.
	CallerEnv []string
	// Cwd is relative to the workspace, a host path inside a granted
	// workspace, skill or data folder, or absolute inside the sandbox
	// (spec.SandboxCwd).
	Cwd                   string
	Stdin, Stdout, Stderr *os.File // nil: /dev/null
	// Timeout kills the command's process tree; zero means the policy's
	// limits.timeout, and more than that or less than
	// policies.MinTimeout is refused.
	Timeout time.Duration
	// Tty runs the command on a new terminal; OnTerminal receives its
	// master side and must copy between it and the user. It is called
	// before the command's end is waited for, so it must not block: it
	// starts the copying and returns.
	Tty        bool
	Rows, Cols uint16
	OnTerminal func(master *os.File)
	// Signals forwards signals to the command's process group.
	Signals <-chan unix.Signal
	// Resize passes the caller's new window size to a terminal whose
	// master side OnTerminal got is not a terminal (gVisor's, relayed
	// by the agent); a real master side is resized by the caller.
	Resize <-chan WindowSize
}

// WindowSize is a terminal's size.
type WindowSize struct{ Rows, Cols uint16 }

// ExecResult is how a command ended: the protocol's result, so the
// daemon's clients get the same type.
type ExecResult = protocol.Result

// CheckExec refuses a command the sandbox would not get exactly as given
// (protocol.CheckExec): text that is not UTF-8, a timeout below
// policies.MinTimeout.
func CheckExec(argv, env []string, cwd string, timeout time.Duration) error {
	return protocol.CheckExec(argv, env, cwd, timeout)
}

// UTF8Env leaves out the caller's variables that are not UTF-8
// (protocol.UTF8Env).
func UTF8Env(env []string) []string { return protocol.UTF8Env(env) }

// ErrSandboxStopped is returned for a session whose sandbox is gone.
var ErrSandboxStopped = protocol.ErrSandboxStopped

// Stopped reports whether the session's sandbox is gone: its agent died,
// or its container was removed behind warden's back.
func (s *Session) Stopped() bool {
	st, err := s.container.status()
	if err == nil {
		return st == stopped
	}
	// A status that cannot be read (it reads a cgroup file) proves
	// nothing: the sandbox is gone only if its agent does not answer
	// either, and gc must never reap a live one.
	conn, err := wire.DialPacket(s.socketPath())
	if err != nil {
		return true
	}
	conn.Close()
	return false
}

// ErrTimeoutTooLong is returned for a timeout above the policy's.
var ErrTimeoutTooLong = protocol.ErrTimeoutTooLong

// Exec runs one command in the session, waits for it and writes its
// audit line: to the daemon's log, or for a runtime without a daemon
// (warden do, the Go API) to the root's, one append per line either way.
//
// A command whose line cannot be written does not run: room for the line
// is kept before it starts (AuditLog.reserve), and without room the error
// says so (ErrAuditWrite). Should the line still fail when the command
// ended, the error says that it ran and how it ended.
func (s *Session) Exec(ctx context.Context, o ExecOptions) (ExecResult, error) {
	audit := s.rt.auditSink()
	rec := AuditRecord{Event: "exec", Session: s.ID, Policy: s.PolicyName, PolicyHash: s.PolicyHash,
		Argv: o.Argv, Cwd: s.Cwd(o.Cwd)}
	room, err := audit.reserve(rec)
	if err != nil {
		return ExecResult{}, fmt.Errorf("%w; the command was not run: free space on that file system, then run it again", err)
	}
	defer audit.release(room)
	res, err := s.exec(ctx, o)
	rec.DurationMs = float64(res.Duration.Microseconds()) / 1000
	if err != nil {
		rec.Error = err.Error()
	} else {
		code := res.ExitCode
		rec.Exit, rec.Signal, rec.OOM, rec.TimedOut, rec.Error = &code, res.Signal, res.OOM, res.TimedOut, res.Error
	}
	if werr := audit.Write(rec); werr != nil && err == nil {
		err = fmt.Errorf("%w; the command ran (exit %d, signal %d) but no record of it was written: free space on that file system", werr, res.ExitCode, res.Signal)
	}
	return res, err
}

func (s *Session) exec(ctx context.Context, o ExecOptions) (ExecResult, error) {
	start := time.Now()
	if len(o.Argv) == 0 {
		return ExecResult{}, kindf(spec.ErrInvalid, "no command given")
	}
	if err := CheckExec(o.Argv, o.Env, o.Cwd, o.Timeout); err != nil {
		return ExecResult{}, err
	}
	timeout := o.Timeout
	if timeout == 0 {
		timeout = s.Limits.Timeout
	} else if timeout > s.Limits.Timeout {
		return ExecResult{}, fmt.Errorf("%w (%s > %s)", ErrTimeoutTooLong, o.Timeout, s.Limits.Timeout)
	}
	env, err := s.commandEnv(UTF8Env(o.CallerEnv), o.Env)
	if err != nil {
		return ExecResult{}, err
	}
	_, gvisor := s.container.(*gvisorContainer)
	req := execRequest{Argv: o.Argv, Env: env, Cwd: s.Cwd(o.Cwd), Tty: o.Tty, Rows: o.Rows, Cols: o.Cols}
	// A ruled program named by argv[0] is decided here, saving its stub
	// the round trip; a program it names elsewhere asks through its stub.
	if prog := s.ruledProgram(o.Argv[0]); prog >= 0 {
		dec := s.decide(ctx, prog, o.Argv, req.Cwd, "", func(line string) {
			if o.Stderr != nil {
				fmt.Fprintf(o.Stderr, "warden: %s\n", line)
			}
		})
		if !dec.allow {
			return ExecResult{ExitCode: DeniedExitCode, Error: dec.line, Duration: time.Since(start)}, nil
		}
		req.Run = prog + 1
	}
	var fds []int
	if !o.Tty {
		stdio, err := stdioFiles(o.Stdin, o.Stdout, o.Stderr)
		if err != nil {
			return ExecResult{}, err
		}
		for _, f := range stdio {
			fds = append(fds, int(f.Fd()))
		}
		defer restoreTerminals(fds)()
		openablePipes(fds)
	}
	var relay *stdioRelay
	if gvisor && !o.Tty {
		if fds, relay, err = relayFiles(fds); err != nil {
			return ExecResult{}, err
		}
		defer relay.finish(relayDrain)
	}
	// A terminal made in gVisor cannot be passed out of it: the agent
	// relays its master side to a socket whose other end is the caller's.
	var term *os.File
	if gvisor && o.Tty {
		pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return ExecResult{}, err
		}
		term = os.NewFile(uintptr(pair[0]), "terminal")
		defer unix.Close(pair[1])
		fds = []int{pair[1]}
	}
	conn, kills, err := s.send(req, fds)
	if relay != nil {
		relay.sent()
	}
	if err != nil {
		if term != nil {
			term.Close()
		}
		return ExecResult{}, err
	}
	defer conn.Close()
	defer s.waiting.Add(-1)
	if o.Tty {
		// A terminal's master side comes in a first message.
		var ev execEvent
		files, err := wire.Receive(conn, &ev)
		if err != nil {
			if term != nil {
				term.Close()
			}
			return ExecResult{}, fmt.Errorf("session %s: agent: %w", s.ID, err)
		}
		if term != nil {
			files = append(files, term)
		}
		if !ev.Started {
			wire.CloseAll(files)
			return ExecResult{ExitCode: ev.Code, Error: ev.Error, Duration: time.Since(start)}, nil
		}
		if len(files) > 0 && o.OnTerminal != nil {
			// Not in a goroutine: the daemon's OnTerminal sends the
			// master side to its client, which must come before the
			// result does.
			o.OnTerminal(files[0])
		} else {
			wire.CloseAll(files)
		}
	}
	res, err := s.wait(ctx, conn, timeout, o.Signals, o.Resize, kills)
	res.Duration = time.Since(start)
	s.touch()
	return res, err
}

// send hands a command to the agent, unless the session is frozen. It
// returns the connection the command's end comes on and the session's
// kill count when it was sent.
func (s *Session) send(req execRequest, fds []int) (*net.UnixConn, uint64, error) {
	s.gate.RLock()
	defer s.gate.RUnlock()
	if s.frozen.Load() {
		return nil, 0, fmt.Errorf("%w: %s (warden session freeze); nothing was run; thaw it with `warden session thaw %s`", ErrFrozen, s.ID, s.ID)
	}
	s.touch()
	conn, err := wire.DialPacket(s.socketPath())
	if err != nil {
		if s.Stopped() {
			return nil, 0, fmt.Errorf("session %s: %w; remove it with `warden session rm %s` (or `warden gc`) and create it again", s.ID, ErrSandboxStopped, s.ID)
		}
		return nil, 0, fmt.Errorf("session %s: agent unreachable: %w", s.ID, err)
	}
	if err := wire.Send(conn, req, fds...); err != nil {
		conn.Close()
		return nil, 0, err
	}
	s.waiting.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	return conn, s.kills, nil
}

// wait waits for the command's end, killing its tree on timeout or when
// ctx is done. kills is the session's kill count when it started.
func (s *Session) wait(ctx context.Context, conn *net.UnixConn, timeout time.Duration, signals <-chan unix.Signal, resize <-chan WindowSize, kills uint64) (ExecResult, error) {
	events := make(chan execEvent, 1)
	errc := make(chan error, 1)
	go func() {
		for {
			var ev execEvent
			files, err := wire.Receive(conn, &ev)
			wire.CloseAll(files)
			if err != nil {
				errc <- err
				return
			}
			if !ev.Started { // an agent of an older warden reports the start
				events <- ev
				return
			}
		}
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var res ExecResult
	for {
		select {
		case ev := <-events:
			res.ExitCode, res.Signal = ev.Code, ev.Signal
			if !ev.Exited { // it never started: 126, 127 and why
				res.Error = ev.Error
				return res, nil
			}
			if res.Signal == int(unix.SIGKILL) && !res.TimedOut {
				if s.sawOOM() {
					res.OOM = true
					res.Error = fmt.Sprintf("killed: memory limit %s exceeded", policies.FormatSize(s.Limits.Memory))
				} else if s.killedSince(kills) {
					res.Error = fmt.Sprintf("killed: every process of session %s was killed (warden session kill)", s.ID)
				}
			}
			return res, nil
		case err := <-errc:
			// Under gVisor the memory limit is the whole sandbox's: what
			// exceeds it ends the sandbox, the command with it.
			if _, gvisor := s.container.(*gvisorContainer); gvisor && s.sawOOM() {
				res.ExitCode, res.Signal, res.OOM = 128+int(unix.SIGKILL), int(unix.SIGKILL), true
				res.Error = fmt.Sprintf("killed: memory limit %s exceeded; under engine gvisor that ends the session's sandbox", policies.FormatSize(s.Limits.Memory))
				return res, nil
			}
			return res, fmt.Errorf("session %s: lost the agent: %w", s.ID, err)
		case <-timer.C:
			res.TimedOut = true
			res.Error = fmt.Sprintf("killed: timeout %s exceeded", timeout)
			wire.Send(conn, execControl{Kill: true})
		case <-ctx.Done():
			wire.Send(conn, execControl{Kill: true})
			ctx = context.Background()
		case sig := <-signals:
			wire.Send(conn, execControl{Signal: int(sig)})
		case ws := <-resize:
			wire.Send(conn, execControl{Rows: ws.Rows, Cols: ws.Cols})
		}
	}
}

// commandEnv is the sandbox's environment plus extra variables, each of
// which the policy must allow.
func (s *Session) commandEnv(caller, extra []string) ([]string, error) {
	if len(extra) == 0 && len(caller) == 0 {
		return s.Env, nil
	}
	allowed := map[string]bool{}
	for _, n := range s.policy.Env.Allow {
		allowed[n] = true
	}
	for _, kv := range extra {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return nil, kindf(spec.ErrInvalid, "--env %q: use NAME=VALUE", kv)
		}
		if _, set := s.policy.Env.Set[name]; set {
			return nil, kindf(policies.ErrDenied, "--env %s: the policy sets it (env.set); a command cannot change it", name)
		}
		if len(s.policy.Network.Allow) > 0 && slices.ContainsFunc([]string{"http_proxy", "https_proxy", "all_proxy", "no_proxy"}, func(p string) bool { return strings.EqualFold(p, name) }) {
			return nil, kindf(policies.ErrDenied, "--env %s: warden sets the proxy variables to its egress proxy; they cannot be passed", name)
		}
		if !allowed[name] {
			return nil, kindf(policies.ErrDenied, "--env %s: not in the policy's env.allow; add it there to pass it", name)
		}
	}
	return spec.SandboxEnv(s.policy, s.Vars, append(append([]string{}, caller...), extra...)), nil
}

// Cwd is the folder in the sandbox a command that asks for c runs in.
func (s *Session) Cwd(c string) string {
	return spec.SandboxCwd(s.policy, s.Vars, c)
}

// LastUsed is when the session last ran a command (or was made).
func (s *Session) LastUsed() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastUsed
}

// Running reports whether the sandbox's container runs.
func (s *Session) Running() bool {
	st, err := s.container.status()
	return err == nil && st == running
}

func (s *Session) touch() {
	now := time.Now()
	s.mu.Lock()
	// On disk at most once a second: idle limits count in seconds at least.
	persist := now.Sub(s.persisted) >= time.Second
	if persist {
		s.persisted = now
	}
	s.lastUsed = now
	s.mu.Unlock()
	if persist {
		os.Chtimes(filepath.Join(s.dir(), "session.json"), now, now)
	}
}

// stdioFiles returns the three descriptors to pass, /dev/null for the
// missing ones (opened once: the agent gets its own copies).
func stdioFiles(in, out, errf *os.File) ([]*os.File, error) {
	files := []*os.File{in, out, errf}
	for i, f := range files {
		if f == nil {
			null, err := devNull()
			if err != nil {
				return nil, err
			}
			files[i] = null
		}
	}
	return files, nil
}

// openablePipes lets the sandbox open the caller's pipes by name, as
// /dev/stdout, /dev/stderr or /dev/fd/N: a pipe belongs to the caller's
// host user, whom the sandbox's user namespace does not map, so its mode
// (0600) refused every such open (`echo error >/dev/stderr` failed in a
// script). Each pipe gets only the direction it was passed in (writing
// for a write end, reading for a read end), so opening one by name gives
// nothing its descriptor does not: the sandbox can neither write into the
// caller's stdin nor read what others write into its stdout. A pipe's
// mode matters for nothing else (reaching it by name takes access to a
// process that holds it). Named pipes (FIFOs on disk), files, terminals
// and pipes passed for both directions are left as they are.
func openablePipes(fds []int) {
	for _, fd := range fds {
		var fs unix.Statfs_t
		var st unix.Stat_t
		if unix.Fstatfs(fd, &fs) != nil || fs.Type != unix.PIPEFS_MAGIC || unix.Fstat(fd, &st) != nil {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
		if err != nil {
			continue
		}
		var bit uint32
		switch flags & unix.O_ACCMODE {
		case unix.O_WRONLY:
			bit = 0o002
		case unix.O_RDONLY:
			bit = 0o004
		default:
			continue
		}
		if st.Mode&bit == 0 {
			unix.Fchmod(fd, st.Mode&0o7777|bit)
		}
	}
}

// restoreTerminals notes the settings of the terminals among fds and
// returns what sets them back. A command given the caller's terminal as
// its stdio (no -t) can turn off its echo or make it raw, and that would
// outlive the command. (Not the window size: the user may resize it
// meanwhile.) And their non-blocking flag, which gVisor sets.
func restoreTerminals(fds []int) func() {
	saved := map[int]*unix.Termios{}
	flags := map[int]int{}
	for _, fd := range fds {
		if t, err := unix.IoctlGetTermios(fd, unix.TCGETS); err == nil {
			saved[fd] = t
		}
		if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err == nil {
			flags[fd] = fl
		}
	}
	return func() {
		for fd, t := range saved {
			unix.IoctlSetTermios(fd, unix.TCSETS, t)
		}
		// gVisor makes the descriptors it is given non-blocking, and the
		// flag belongs to the caller's open file (its terminal, its
		// pipe): its own writes would fail with EAGAIN afterwards.
		for fd, fl := range flags {
			if now, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err == nil && now&unix.O_NONBLOCK != fl&unix.O_NONBLOCK {
				unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl)
			}
		}
	}
}

var devNull = sync.OnceValues(func() (*os.File, error) { return os.OpenFile(os.DevNull, os.O_RDWR, 0) })
