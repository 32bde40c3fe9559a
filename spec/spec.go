package spec

import (
	"fmt"
	"path/filepath"
	"sort"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/warden-sandbox/warden/policies"
)

// Where the policy's path variables appear inside the sandbox. Fixed paths
// let one pooled container serve any workspace.
const (
	WorkspacePath = "/workspace" // $WORK_DIR
	SkillPath     = "/skill"     // $SKILL_DIR
	DataPath      = "/data"      // $DATA_DIR
	HomePath      = "/tmp"       // the sandbox's own HOME: scratch, never the caller's
)

// DefaultIdentity is the host uid and gid the sandbox's root maps to. It is
// far above the ranges distributions hand out to users and to subordinate
// id ranges, so it owns nothing on the host.
var DefaultIdentity = Identity{UID: 3_000_000, GID: 3_000_000}

// Identity is the unprivileged host user the sandbox's root runs as.
type Identity struct {
	UID, GID uint32
}

// SpecIdentity is the identity a generated spec's sandbox runs as.
func SpecIdentity(s *specs.Spec) Identity {
	if s.Linux == nil || len(s.Linux.UIDMappings) != 1 || len(s.Linux.GIDMappings) != 1 {
		return Identity{}
	}
	return Identity{UID: s.Linux.UIDMappings[0].HostID, GID: s.Linux.GIDMappings[0].HostID}
}

// Reidentify makes a spec generated for identity from one generated for
// to: the sandbox's root and the id-mapped mounts' view of it move, the
// rest stays (generating again would give the same spec but cost a walk
// of the host's folders).
func Reidentify(s *specs.Spec, from, to Identity) {
	move := func(ms []specs.LinuxIDMapping, from, to uint32) {
		for i := range ms {
			if ms[i].HostID == from {
				ms[i].HostID = to
			}
		}
	}
	if s.Linux != nil {
		move(s.Linux.UIDMappings, from.UID, to.UID)
		move(s.Linux.GIDMappings, from.GID, to.GID)
	}
	for _, m := range s.Mounts {
		move(m.UIDMappings, from.UID, to.UID)
		move(m.GIDMappings, from.GID, to.GID)
	}
}

// Annotations warden writes into every spec it generates.
const (
	AnnotationPolicy     = "dev.warden.policy"      // policy name
	AnnotationPolicyHash = "dev.warden.policy-hash" // policies.Policy.Hash
	AnnotationExecAllow  = "dev.warden.exec-allow"  // "*" or the sandbox paths of allowed executables, colon-separated; input for Landlock
	// AnnotationExecWritable lists (colon-separated) the writable sandbox
	// folders whose programs may run (exec.workspace); absent: none.
	AnnotationExecWritable = "dev.warden.exec-writable"
)

// Options are the inputs of Generate.
type Options struct {
	Policy    *policies.Policy
	Vars      policies.Vars
	Host      Host
	BundleDir string   // absolute; masks for denied paths live under it
	Args      []string // the process; default an interactive shell
	CallerEnv []string // the caller's environment; only env.allow names pass
	Identity  Identity // zero: DefaultIdentity
	Hostname  string   // default "sandbox"
	Terminal  bool
	// CgroupsPath is left to the runtime when empty.
	CgroupsPath string
	// Agent is the host path of the warden binary to mount read-only at
	// AgentPath, for sessions whose PID 1 is warden's agent.
	Agent string
	// Placeholder is the folder standing for the session's folders
	// ($WORK_DIR, $DATA_DIR) in a warm pool's sandbox, warden's own empty
	// folder in its state root (which may lie in /run). Its binds are never
	// mounted: the grant checks skip it there (only it, and only at
	// /workspace and /data), and deny rules under it are checked when a
	// claim generates the spec with the real folders.
	Placeholder string
}

// AgentPath is where Options.Agent appears inside the sandbox.
const AgentPath = "/.warden/warden"

// Bundle is a generated spec and the rootfs skeleton it needs on disk.
type Bundle struct {
	Spec *specs.Spec
	// Rootfs lists what must exist in the bundle's read-only root:
	// directories and files that are mountpoints, generated /etc files and
	// the host's top-level symlinks (/bin -> usr/bin).
	Rootfs []Entry
	// Masks are empty directories and files under BundleDir that cover
	// denied paths; each may hold mountpoints for grants beneath it.
	Masks []Entry
	// Warnings say what the policy names but this host lacks.
	Warnings []string
	// MissingPrograms are exec.allow entries this host does not have.
	MissingPrograms []string
	// Absent are the sandbox paths of fs.deny rules that do not exist on
	// the host and that no grant lets the sandbox create: nothing to mask.
	Absent []string
}

// EntryKind says what an Entry is.
type EntryKind int

const (
	Dir EntryKind = iota
	File
	Symlink
)

// Entry is one item of the skeleton, with a path relative to its root.
type Entry struct {
	Path   string
	Kind   EntryKind
	Data   []byte // File
	Target string // Symlink
}

// ErrInvalid marks errors caused by the policy or options rather than by
// the host (policies.ErrInvalid, so the socket protocol's pure Go side
// knows it without this package).
var ErrInvalid = policies.ErrInvalid

// Generate builds the hardened spec for a policy: a default that grants
// nothing, then ordered steps that each add one kind of permission.
func Generate(o Options) (*Bundle, error) {
	if o.Policy == nil {
		return nil, fmt.Errorf("%w: no policy", ErrInvalid)
	}
	// A policy built in Go may leave limits at zero: the defaults.
	p := *o.Policy
	p.Limits = p.Limits.WithDefaults()
	o.Policy = &p
	if !filepath.IsAbs(o.BundleDir) {
		return nil, fmt.Errorf("%w: bundle directory %q must be absolute", ErrInvalid, o.BundleDir)
	}
	if o.Identity == (Identity{}) {
		o.Identity = DefaultIdentity
	}
	if o.Identity.UID == 0 || o.Identity.GID == 0 {
		return nil, fmt.Errorf("%w: the sandbox may never run as host root (uid/gid 0); choose another identity", ErrInvalid)
	}
	if o.Hostname == "" {
		o.Hostname = "sandbox"
	}
	if len(o.Args) == 0 {
		o.Args = []string{"/bin/sh"}
	}
	g := &generator{o: o, b: &Bundle{Spec: hardenedDefault()}, rootfs: map[string]Entry{}, bound: map[string]bool{}, masks: map[string]string{}}
	steps := []func() error{
		g.identity,
		g.systemRoot,
		g.execAllowList,
		g.etc,
		g.scratch,
		g.grants,
		g.skillPrograms,
		g.execNotWritable,
		g.agent,
		g.commandStubs,
		g.resources,
		g.process,
		g.seccomp,
		g.annotations,
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	g.finishRootfs()
	if err := Validate(g.b.Spec, o.Policy); err != nil {
		return nil, fmt.Errorf("generated spec failed validation (a warden bug): %w", err)
	}
	return g.b, nil
}

type generator struct {
	o      Options
	b      *Bundle
	rootfs map[string]Entry // keyed by path; turned into b.Rootfs at the end
	// bound holds every bind destination whose source mirrors the host path,
	// so mountpoints beneath it already exist.
	bound map[string]bool
	// masks maps a denied sandbox path to its mask under BundleDir/masks.
	masks     map[string]string
	execPaths []string
	commands  string // the AnnotationCommands value
	// scriptDirs maps a ruled script's folder to its overlay's mask.
	scriptDirs map[string]string
}

func (g *generator) addRootfs(e Entry) {
	e.Path = filepath.Clean(e.Path)
	if e.Path == "/" || e.Path == "." {
		return
	}
	// Parents of anything in the skeleton are skeleton directories.
	for dir := filepath.Dir(e.Path); dir != "/" && dir != "."; dir = filepath.Dir(dir) {
		if _, ok := g.rootfs[dir]; !ok {
			g.rootfs[dir] = Entry{Path: dir, Kind: Dir}
		}
	}
	if old, ok := g.rootfs[e.Path]; ok && old.Kind == Dir && e.Kind == Dir {
		return
	}
	g.rootfs[e.Path] = e
}

func (g *generator) finishRootfs() {
	for _, e := range g.rootfs {
		g.b.Rootfs = append(g.b.Rootfs, e)
	}
	sort.Slice(g.b.Rootfs, func(i, j int) bool { return g.b.Rootfs[i].Path < g.b.Rootfs[j].Path })
}

func (g *generator) warnf(format string, args ...any) {
	g.b.Warnings = append(g.b.Warnings, fmt.Sprintf(format, args...))
}

func (g *generator) mount(m specs.Mount) {
	g.b.Spec.Mounts = append(g.b.Spec.Mounts, m)
}
