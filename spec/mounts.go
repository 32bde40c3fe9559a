package spec

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/warden-sandbox/warden/policies"
)

// systemTop are the host's system directories the sandbox's root is built
// from. Nothing else of the host (/etc, /root, /home, /var, /run) is there
// unless a policy grants it.
var systemTop = []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/usr"}

// execDirs are directories that hold executables. With an exec allow-list
// they are empty skeletons holding only the allowed binaries.
var execDirs = map[string]bool{"bin": true, "sbin": true, "games": true}

// usrLocalKept are the parts of /usr/local an allow-listed sandbox still
// sees: libraries and data, never executables.
var usrLocalKept = map[string]bool{"lib": true, "lib64": true, "share": true, "include": true}

var (
	roBind = []string{"rbind", "ro", "nosuid", "nodev"}
	// roBindNoexec is used where exec is allow-listed: a readable grant must
	// not become a way to run an unlisted binary.
	roBindNoexec = []string{"rbind", "ro", "nosuid", "nodev", "noexec"}
	rwBind       = []string{"rbind", "rw", "nosuid", "nodev", "noexec"}
)

// systemRoot lays out /usr, /bin, /lib...: read-only binds of the host's,
// or, with an exec allow-list, skeletons whose executable directories stay
// empty until execAllowList fills them.
func (g *generator) systemRoot() error {
	for _, top := range systemTop {
		g.layoutSystem(top)
	}
	return nil
}

func (g *generator) layoutSystem(dir string) {
	h := g.o.Host
	if target := h.readlink(dir); target != "" {
		g.addRootfs(Entry{Path: dir, Kind: Symlink, Target: target})
		return
	}
	if !h.isDir(dir) {
		return
	}
	if g.o.Policy.Exec.All {
		g.bindSystem(dir)
		return
	}
	base := filepath.Base(dir)
	switch {
	case execDirs[base]:
		g.addRootfs(Entry{Path: dir, Kind: Dir})
	case dir == "/usr":
		g.addRootfs(Entry{Path: dir, Kind: Dir})
		for _, child := range h.readDir(dir) {
			g.layoutSystem(filepath.Join(dir, child))
		}
	case dir == "/usr/local":
		g.addRootfs(Entry{Path: dir, Kind: Dir})
		for _, child := range h.readDir(dir) {
			if execDirs[child] || usrLocalKept[child] {
				g.layoutSystem(filepath.Join(dir, child))
			}
		}
	default:
		g.bindSystem(dir)
	}
}

func (g *generator) bindSystem(dir string) {
	g.addRootfs(Entry{Path: dir, Kind: Dir})
	g.mount(specs.Mount{Destination: dir, Type: "bind", Source: g.o.Host.path(dir), Options: roBind})
	g.bound[dir] = true
}

// execAllowList places each allowed executable, and nothing else, in the
// skeleton's executable directories.
func (g *generator) execAllowList() error {
	if g.o.Policy.Exec.All {
		return nil
	}
	seen := map[string]bool{}
	for _, name := range g.o.Policy.Exec.Allow {
		at, file, err := g.o.Host.lookExec(name)
		if err != nil {
			g.warnf("exec.allow: %q is not installed on this host; it will not run in the sandbox", name)
			continue
		}
		if seen[at] {
			continue
		}
		seen[at] = true
		if !g.underBind(at) {
			g.addRootfs(Entry{Path: at, Kind: File})
		}
		g.mount(specs.Mount{Destination: at, Type: "bind", Source: g.o.Host.path(file), Options: []string{"bind", "ro", "nosuid", "nodev"}})
		g.execPaths = append(g.execPaths, at)
	}
	return nil
}

// etcBinds are the host /etc entries every sandbox needs to work: TLS
// roots, the dynamic loader's cache, service names. Nothing secret.
var etcBinds = []string{
	"/etc/ssl", "/etc/ca-certificates", "/etc/alternatives", "/etc/ld.so.cache",
	"/etc/services", "/etc/protocols", "/etc/mime.types",
}

// etc generates a minimal /etc instead of exposing the host's.
func (g *generator) etc() error {
	h := g.o.Host
	g.addRootfs(Entry{Path: "/etc", Kind: Dir})
	files := map[string]string{
		"/etc/passwd":        "sandbox:x:0:0:warden sandbox:" + HomePath + ":/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		"/etc/group":         "sandbox:x:0:\nnogroup:x:65534:\n",
		"/etc/hostname":      g.o.Hostname + "\n",
		"/etc/hosts":         "127.0.0.1\tlocalhost " + g.o.Hostname + "\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		"/etc/nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n",
		// No resolver inside: names are resolved on the host by the egress
		// proxy, so direct DNS goes nowhere.
		"/etc/resolv.conf": "# warden: the sandbox has no DNS; allowed hosts are reached through the egress proxy\nnameserver 127.0.0.1\noptions timeout:1 attempts:1\n",
	}
	for p, data := range files {
		g.addRootfs(Entry{Path: p, Kind: File, Data: []byte(data)})
	}
	if target := h.readlink("/etc/localtime"); target != "" {
		g.addRootfs(Entry{Path: "/etc/localtime", Kind: Symlink, Target: target})
	}
	for _, p := range etcBinds {
		fi, err := os.Stat(h.path(p))
		if err != nil {
			continue
		}
		kind := File
		if fi.IsDir() {
			kind = Dir
		}
		g.addRootfs(Entry{Path: p, Kind: kind})
		g.mount(specs.Mount{Destination: p, Type: "bind", Source: h.path(p), Options: roBindNoexec})
		g.bound[p] = true
	}
	return nil
}

// scratch mounts the sandbox's private /tmp: memory-backed, half the memory
// limit, noexec.
func (g *generator) scratch() error {
	size := g.o.Policy.Limits.Memory / 2
	g.mount(specs.Mount{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs",
		Options: []string{"nosuid", "noexec", "nodev", "mode=1777", fmt.Sprintf("size=%dk", size/1024)}})
	g.addRootfs(Entry{Path: "/tmp", Kind: Dir})
	for _, p := range []string{"/proc", "/dev", WorkspacePath} {
		g.addRootfs(Entry{Path: p, Kind: Dir})
	}
	return nil
}

// grants turns the policy's fs rules into binds and masks, parents first, so
// the most specific rule is mounted last and wins.
func (g *generator) grants() error {
	p := g.o.Policy
	for _, rule := range p.Rules() {
		host, inside, err := g.place(rule.Path)
		if err != nil {
			return err
		}
		if err := checkDestination(rule.Path, inside); err != nil {
			return err
		}
		switch rule.Access {
		case policies.AccessRead:
			if err := g.grant(rule.Path, host, inside, false); err != nil {
				return err
			}
		case policies.AccessWrite:
			if isSystem(inside) {
				return fmt.Errorf("%w: fs.write %q: system directories are never writable; grant a path outside %s", ErrInvalid, rule.Path, strings.Join(systemTop, " "))
			}
			if err := g.grant(rule.Path, host, inside, true); err != nil {
				return err
			}
		default:
			g.deny(rule.Path, host, inside)
		}
	}
	return nil
}

func (g *generator) grant(rulePath, host, inside string, write bool) error {
	if isSystem(inside) && !write {
		return nil // already visible read-only
	}
	fi, err := os.Stat(host)
	if err != nil {
		g.warnf("fs: %q (%s) does not exist on this host; nothing is mounted for it", rulePath, host)
		return nil
	}
	g.mountpoint(inside, fi.IsDir())
	m := specs.Mount{Destination: inside, Type: "bind", Source: host, Options: roBind}
	if !g.o.Policy.Exec.All {
		m.Options = roBindNoexec
	}
	if write {
		m.Options = rwBind
		// Files the sandbox's root writes belong on the host to the
		// grant's owner: an idmapped mount maps that owner to the
		// sandbox's root.
		uid, gid, err := fileOwner(host)
		if err != nil {
			return err
		}
		m.UIDMappings = []specs.LinuxIDMapping{{ContainerID: uid, HostID: g.o.Identity.UID, Size: 1}}
		m.GIDMappings = []specs.LinuxIDMapping{{ContainerID: gid, HostID: g.o.Identity.GID, Size: 1}}
	}
	g.mount(m)
	g.bound[inside] = true
	return nil
}

// deny masks a path that would otherwise be visible (under a system
// directory or a grant) with an empty directory or file from the bundle.
func (g *generator) deny(rulePath, host, inside string) {
	if !g.underBind(inside) {
		return // nothing visible there to hide
	}
	fi, err := os.Stat(host)
	if err != nil {
		return
	}
	name := strconv.Itoa(len(g.masks))
	g.masks[inside] = name
	kind := File
	if fi.IsDir() {
		kind = Dir
	}
	g.b.Masks = append(g.b.Masks, Entry{Path: name, Kind: kind})
	g.mount(specs.Mount{Destination: inside, Type: "bind",
		Source: filepath.Join(g.o.BundleDir, "masks", name), Options: roBindNoexec})
}

// mountpoint makes sure a grant's destination exists before runc mounts on
// it: runc cannot create it under a user namespace in a root-owned skeleton.
func (g *generator) mountpoint(inside string, dir bool) {
	kind := File
	if dir {
		kind = Dir
	}
	for m, name := range g.masks {
		if rel, ok := under(inside, m); ok {
			g.b.Masks = append(g.b.Masks, Entry{Path: filepath.Join(name, rel), Kind: kind})
			return
		}
	}
	if g.underBind(inside) || underAny(inside, "/tmp", "/dev") {
		return
	}
	g.addRootfs(Entry{Path: inside, Kind: kind})
}

// place maps a rule's path to its host path and its path in the sandbox.
// The workspace, skill and data folders appear at fixed places; every
// other path appears where it is on the host.
func (g *generator) place(rulePath string) (host, inside string, err error) {
	v := g.o.Vars
	roots := []struct {
		name, value, inside, flag string
	}{
		{"$WORK_DIR", v.WorkDir, WorkspacePath, "--workspace"},
		{"$SKILL_DIR", v.SkillDir, SkillPath, "--skill-dir"},
		{"$DATA_DIR", v.DataDir, DataPath, "--data-dir"},
		{"$HOME", v.Home, "", "HOME"},
	}
	for _, r := range roots {
		rest, ok := strings.CutPrefix(rulePath, r.name)
		if !ok || (rest != "" && rest[0] != '/') {
			continue
		}
		if r.value == "" {
			return "", "", fmt.Errorf("%w: fs rule %q uses %s, which has no value here; give it with %s", ErrInvalid, rulePath, r.name, r.flag)
		}
		if !filepath.IsAbs(r.value) {
			return "", "", fmt.Errorf("%w: %s=%q must be an absolute path", ErrInvalid, r.name, r.value)
		}
		host = filepath.Join(r.value, rest)
		inside = filepath.Join(r.inside, rest)
		if r.inside == "" {
			inside = host
		}
		return host, inside, nil
	}
	if !filepath.IsAbs(rulePath) {
		return "", "", fmt.Errorf("%w: fs rule %q is neither absolute nor under a variable", ErrInvalid, rulePath)
	}
	return g.o.Host.path(rulePath), filepath.Clean(rulePath), nil
}

// checkDestination refuses grants that would replace the sandbox's own
// plumbing.
func checkDestination(rulePath, inside string) error {
	if inside == "/" || underAny(inside, "/proc", "/dev", "/sys") {
		return fmt.Errorf("%w: fs rule %q would cover %s, which warden manages; grant a narrower path", ErrInvalid, rulePath, inside)
	}
	return nil
}

func isSystem(inside string) bool { return underAny(inside, systemTop...) }

func (g *generator) underBind(p string) bool {
	for d := p; ; d = filepath.Dir(d) {
		if g.bound[d] {
			return true
		}
		if d == "/" {
			return false
		}
	}
}

// under reports whether p is dir or inside it, and the path relative to dir.
func under(p, dir string) (string, bool) {
	if p == dir {
		return ".", true
	}
	rel, ok := strings.CutPrefix(p, strings.TrimSuffix(dir, "/")+"/")
	return rel, ok
}

func underAny(p string, dirs ...string) bool {
	for _, d := range dirs {
		if _, ok := under(p, d); ok {
			return true
		}
	}
	return false
}

// agent mounts the warden binary that runs as a session's PID 1. It is the
// only executable outside the system directories, read-only and nosuid.
func (g *generator) agent() error {
	if g.o.Agent == "" {
		return nil
	}
	if !filepath.IsAbs(g.o.Agent) {
		return fmt.Errorf("%w: agent binary %q must be an absolute path", ErrInvalid, g.o.Agent)
	}
	g.addRootfs(Entry{Path: AgentPath, Kind: File})
	g.mount(specs.Mount{Destination: AgentPath, Type: "bind", Source: g.o.Agent, Options: []string{"bind", "ro", "nosuid", "nodev"}})
	return nil
}
