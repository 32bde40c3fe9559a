package spec

import (
	"path/filepath"
	"sort"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/seccomp"
	"github.com/warden-sandbox/warden/spec/hostfs"
)

// maskedPaths and readonlyPaths hide the parts of /proc that leak host
// state or let a process change the kernel (the set runc and Docker use;
// there is no /sys to mask).
var (
	maskedPaths = []string{
		"/proc/acpi", "/proc/asound", "/proc/interrupts", "/proc/kcore", "/proc/keys",
		"/proc/latency_stats", "/proc/sched_debug", "/proc/scsi", "/proc/timer_list",
		"/proc/timer_stats",
	}
	readonlyPaths = []string{
		"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
	}
)

// sandboxRlimits are every sandbox's rlimits. Pending signals, POSIX
// message queue bytes and locked shared memory are counted per user in
// each user namespace and (since Linux 5.14) again for the namespace's
// owner at every level up to the host's, checked there against the
// owner's own limit: without these a sandbox could use up the host
// user's whole allowance (96,000 queued signals stop every
// timer_create of that user). Each is a small share of the usual host
// default (96365 signals, 800 KiB of queues, 8 MiB locked).
var sandboxRlimits = []specs.POSIXRlimit{
	{Type: "RLIMIT_NOFILE", Hard: 4096, Soft: 4096},
	{Type: "RLIMIT_CORE", Hard: 0, Soft: 0},
	{Type: "RLIMIT_SIGPENDING", Hard: 1024, Soft: 1024},
	{Type: "RLIMIT_MSGQUEUE", Hard: 200 << 10, Soft: 200 << 10},
	{Type: "RLIMIT_MEMLOCK", Hard: 1 << 20, Soft: 1 << 20},
}

var rlimitResource = map[string]int{
	"RLIMIT_NOFILE": unix.RLIMIT_NOFILE, "RLIMIT_CORE": unix.RLIMIT_CORE,
	"RLIMIT_SIGPENDING": unix.RLIMIT_SIGPENDING, "RLIMIT_MSGQUEUE": unix.RLIMIT_MSGQUEUE,
	"RLIMIT_MEMLOCK": unix.RLIMIT_MEMLOCK,
}

// hardenedDefault is a spec that can see nothing, do nothing privileged and
// reach nothing: every later step only widens it where a policy says so.
func hardenedDefault() *specs.Spec {
	return &specs.Spec{
		Version:  specs.Version,
		Root:     &specs.Root{Path: "rootfs", Readonly: true},
		Hostname: "sandbox",
		Process: &specs.Process{
			User:            specs.User{UID: 0, GID: 0},
			Cwd:             "/",
			NoNewPrivileges: true,
			Capabilities: &specs.LinuxCapabilities{
				Bounding: []string{}, Effective: []string{}, Inheritable: []string{},
				Permitted: []string{}, Ambient: []string{},
			},
		},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"ro", "nosuid", "noexec", "nodev"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "noexec", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "max=64"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
				{Type: specs.MountNamespace}, {Type: specs.NetworkNamespace}, {Type: specs.CgroupNamespace},
				{Type: specs.UserNamespace},
			},
			MaskedPaths:   append([]string(nil), maskedPaths...),
			ReadonlyPaths: append([]string(nil), readonlyPaths...),
			Resources: &specs.LinuxResources{
				Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
			},
		},
	}
}

// identity maps the sandbox's root to one unprivileged host user.
func (g *generator) identity() error {
	id := g.o.Identity
	g.b.Spec.Linux.UIDMappings = []specs.LinuxIDMapping{{ContainerID: 0, HostID: id.UID, Size: 1}}
	g.b.Spec.Linux.GIDMappings = []specs.LinuxIDMapping{{ContainerID: 0, HostID: id.GID, Size: 1}}
	g.b.Spec.Hostname = g.o.Hostname
	return nil
}

// resources turns the policy's limits into cgroup settings, a size for the
// scratch /tmp and rlimits that stay under the caller's own hard limits.
func (g *generator) resources() error {
	l := g.o.Policy.Limits
	r := g.b.Spec.Linux.Resources
	mem := l.Memory
	r.Memory = &specs.LinuxMemory{Limit: &mem, Swap: &mem}
	pids := l.Pids
	r.Pids = &specs.LinuxPids{Limit: &pids}
	period := uint64(100_000)
	quota := int64(l.CPU * float64(period))
	r.CPU = &specs.LinuxCPU{Period: &period, Quota: &quota}
	for _, r := range sandboxRlimits {
		if hard, ok := g.o.Host.RlimitHard[r.Type]; ok {
			r.Hard, r.Soft = min(r.Hard, hard), min(r.Soft, hard)
		}
		g.b.Spec.Process.Rlimits = append(g.b.Spec.Process.Rlimits, r)
	}
	if g.o.CgroupsPath != "" {
		g.b.Spec.Linux.CgroupsPath = g.o.CgroupsPath
	}
	return nil
}

// process sets the command, its working directory and an environment built
// only from the policy: nothing of the caller's leaks unless env.allow
// names it.
func (g *generator) process() error {
	p := g.b.Spec.Process
	p.Args = g.o.Args
	p.Terminal = g.o.Terminal
	if g.o.Vars.WorkDir != "" {
		p.Cwd = WorkspacePath
	}
	p.Env = SandboxEnv(g.o.Policy, g.o.Vars, g.o.CallerEnv)
	return nil
}

// SandboxEnv is the environment of a sandboxed process: warden's fixed
// variables, then the caller's variables named by env.allow, then env.set,
// then the sandbox paths of the policy's folders (FolderEnv) and (with a
// network.allow list) the egress proxy's variables, which neither the
// caller nor the policy can point elsewhere.
func SandboxEnv(p *policies.Policy, vars policies.Vars, caller []string) []string {
	env := map[string]string{
		"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
		"HOME": HomePath,
		"USER": "sandbox",
	}
	allowed := map[string]bool{}
	for _, name := range p.Env.Allow {
		allowed[name] = true
	}
	for _, kv := range caller {
		name, value, ok := strings.Cut(kv, "=")
		if ok && allowed[name] {
			env[name] = value
		}
	}
	for name, value := range p.Env.Set {
		env[name] = value
	}
	for name, value := range FolderEnv(p, vars) {
		env[name] = value
	}
	for name, value := range proxyEnv(p) {
		env[name] = value
	}
	out := make([]string, 0, len(env))
	for name, value := range env {
		out = append(out, name+"="+value)
	}
	sort.Strings(out)
	return out
}

func (g *generator) seccomp() error {
	g.b.Spec.Linux.Seccomp = seccomp.ForPolicy(g.o.Policy)
	return nil
}

func (g *generator) annotations() error {
	p := g.o.Policy
	a := map[string]string{
		AnnotationPolicy:     p.Name,
		AnnotationPolicyHash: p.Hash(),
		AnnotationExecAllow:  "*",
	}
	if !p.Exec.All {
		a[AnnotationExecAllow] = strings.Join(g.execPaths, ":")
	}
	if g.commands != "" {
		a[AnnotationCommands] = g.commands
	}
	if p.Exec.Workspace {
		a[AnnotationExecWritable] = strings.Join(ExecWritablePaths, ":")
	}
	g.b.Spec.Annotations = a
	return nil
}

type folderVar struct {
	name   string
	value  func(policies.Vars) string
	inside string
}

// folders are the path variables whose folders appear at fixed places in
// the sandbox.
var folders = []folderVar{
	{"WORK_DIR", func(v policies.Vars) string { return v.WorkDir }, WorkspacePath},
	{"SKILL_DIR", func(v policies.Vars) string { return v.SkillDir }, SkillPath},
	{"DATA_DIR", func(v policies.Vars) string { return v.DataDir }, DataPath},
}

// FolderEnv gives WORK_DIR, SKILL_DIR and DATA_DIR their sandbox paths, so
// a command finds $SKILL_DIR/scripts as the policy names it: each one that
// has a folder and that the policy grants something under.
func FolderEnv(p *policies.Policy, vars policies.Vars) map[string]string {
	env := map[string]string{}
	for _, f := range folders {
		if f.value(vars) != "" && grantsUnder(p, "$"+f.name) {
			env[f.name] = f.inside
		}
	}
	return env
}

func grantsUnder(p *policies.Policy, variable string) bool {
	for _, l := range [][]string{p.FS.Read, p.FS.Write} {
		for _, r := range l {
			if r == variable || strings.HasPrefix(r, variable+"/") {
				return true
			}
		}
	}
	return false
}

// SandboxCwd turns a command's working folder into its sandbox path: a
// relative one is taken from the workspace (from / without one); a host
// path inside the workspace, skill or data folder of a policy that grants
// it becomes the same place under /workspace, /skill or /data, since
// agents know host paths; any other absolute path is a sandbox path as
// given.
func SandboxCwd(p *policies.Policy, vars policies.Vars, cwd string) string {
	base := "/"
	if vars.WorkDir != "" {
		base = WorkspacePath
	}
	if cwd == "" {
		return base
	}
	if !filepath.IsAbs(cwd) {
		return filepath.Join(base, cwd)
	}
	cwd = filepath.Clean(cwd)
	best, bestLen := cwd, -1
	for _, f := range folders {
		host := f.value(vars)
		if host == "" || !grantsUnder(p, "$"+f.name) {
			continue
		}
		if rel, ok := hostfs.Under(cwd, filepath.Clean(host)); ok && len(host) > bestLen {
			best, bestLen = filepath.Join(f.inside, rel), len(host)
		}
	}
	return best
}
