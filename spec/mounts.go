package spec

import (
	"fmt"
	"golang.org/x/sys/unix"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/spec/hostfs"
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

// The recursive forms (rro, rnosuid, ...) reach the mounts beneath a bind's
// source too (a disk mounted inside a granted folder), which the plain ones
// leave as they are.
var (
	roBind = []string{"rbind", "ro", "nosuid", "nodev", "rro", "rnosuid", "rnodev"}
	// roBindNoexec is used where exec is allow-listed: a readable grant must
	// not become a way to run an unlisted binary.
	roBindNoexec = []string{"rbind", "ro", "nosuid", "nodev", "noexec", "rro", "rnosuid", "rnodev", "rnoexec"}
	rwBind       = []string{"rbind", "rw", "nosuid", "nodev", "noexec", "rnosuid", "rnodev", "rnoexec"}
	// rwBindExec is the workspace under exec.workspace: what the sandbox
	// writes there may run.
	rwBindExec = []string{"rbind", "rw", "nosuid", "nodev", "rnosuid", "rnodev"}
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
	case strings.HasPrefix(base, "lib") && base != "libexec":
		g.bindSystem(dir)
	default:
		// Folders without shared libraries need no exec rights at all:
		// noexec keeps the dynamic loader from running what they hold.
		g.addRootfs(Entry{Path: dir, Kind: Dir})
		g.mount(specs.Mount{Destination: dir, Type: "bind", Source: g.o.Host.path(dir), Options: roBindNoexec})
		g.bound[dir] = true
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
	// With the command shell (policies.CommandShell): agent frameworks run
	// tools as command strings, and the exec rules still let the shell
	// start only the listed programs.
	for _, name := range g.o.Policy.Exec.Programs() {
		if strings.HasPrefix(name, policies.SkillExecPrefix) {
			continue // skillPrograms, after the grants
		}
		at, file, err := g.o.Host.lookExec(name)
		if err != nil {
			g.warnf("exec.allow: %q is not installed on this host; it will not run in the sandbox", name)
			g.b.MissingPrograms = append(g.b.MissingPrograms, name)
			continue
		}
		if seen[at] {
			continue
		}
		seen[at] = true
		if err := ownFilesystem(name, at); err != nil {
			return err
		}
		if !g.underBind(at) {
			g.addRootfs(Entry{Path: at, Kind: File})
		}
		g.mount(specs.Mount{Destination: at, Type: "bind", Source: g.o.Host.path(file), Options: []string{"bind", "ro", "nosuid", "nodev"}})
		g.execPaths = append(g.execPaths, at)
	}
	return nil
}

// skillPrograms places the exec.allow entries in the skill's own folder
// ("$SKILL_DIR/scripts/process.sh"): each file is bound over itself at its
// place under /skill without noexec, so it runs while the rest of the
// folder stays noexec. It comes after the grants, whose /skill bind would
// hide it; it never shows a file the fs rules do not.
func (g *generator) skillPrograms() error {
	if g.o.Policy.Exec.All {
		return nil
	}
	var expanded *policies.Policy
	for _, entry := range g.o.Policy.Exec.Allow {
		rest, ok := strings.CutPrefix(entry, policies.SkillExecPrefix)
		if !ok {
			continue
		}
		root := g.o.Vars.SkillDir
		if root == "" || !filepath.IsAbs(root) {
			return fmt.Errorf("%w: exec.allow %q uses $SKILL_DIR, which has no absolute value here; give it with --skill-dir (Go: Vars.SkillDir)", ErrInvalid, entry)
		}
		if expanded == nil {
			var err error
			if expanded, err = g.o.Policy.Expand(g.o.Vars); err != nil {
				return fmt.Errorf("%w: %w", ErrInvalid, err)
			}
		}
		host := filepath.Join(root, rest)
		if expanded.AccessAt(host) < policies.AccessRead {
			return fmt.Errorf("%w: exec.allow %q: the fs rules do not let the sandbox read %s; grant it in fs.read (e.g. read = [\"$SKILL_DIR\"])", ErrInvalid, entry, host)
		}
		real, err := filepath.EvalSymlinks(host)
		if err != nil {
			g.warnf("exec.allow: %q (%s) does not exist; it will not run in the sandbox", entry, host)
			g.b.MissingPrograms = append(g.b.MissingPrograms, entry)
			continue
		}
		realRoot, err := filepath.EvalSymlinks(root)
		if err != nil {
			return err
		}
		if _, inside := hostfs.Under(real, realRoot); !inside {
			return fmt.Errorf("%w: exec.allow %q: %s leads through a symlink to %s, outside $SKILL_DIR (%s); allow the target by its absolute path, or remove the link", ErrInvalid, entry, host, real, realRoot)
		}
		if fi, err := os.Stat(real); err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
			return fmt.Errorf("%w: exec.allow %q: %s is not an executable file; make it one (chmod +x)", ErrInvalid, entry, host)
		}
		at := filepath.Join(SkillPath, rest)
		g.mount(specs.Mount{Destination: at, Type: "bind", Source: real, Options: []string{"bind", "ro", "nosuid", "nodev"}})
		g.execPaths = append(g.execPaths, at)
	}
	return nil
}

// ownFilesystem refuses an allowed program under /tmp or /dev: the
// sandbox has its own tmpfs there, where the program's mountpoint cannot
// be made, so every start would fail (and a pool retry for ever).
func ownFilesystem(name, at string) error {
	for _, dir := range []string{"/tmp", "/dev"} {
		if _, ok := hostfs.Under(at, dir); !ok {
			continue
		}
		where := ""
		if at != name {
			where = " (" + at + " on this host)"
		}
		return fmt.Errorf("%w: exec.allow %q%s: %s inside the sandbox is its own tmpfs; install the program outside %s", ErrInvalid, name, where, dir, dir)
	}
	return nil
}

// execNotWritable refuses an allowed executable that lies in a writable
// grant: the sandbox would write the program it is allowed to run.
func (g *generator) execNotWritable() error {
	for _, m := range g.b.Spec.Mounts {
		if !slices.Contains(g.execPaths, m.Destination) {
			continue
		}
		for _, w := range g.b.Spec.Mounts {
			if _, ok := hostfs.Under(m.Source, w.Source); ok && w.Type == "bind" && slices.Contains(w.Options, "rw") {
				return fmt.Errorf("%w: exec.allow %q is %s, inside the writable grant %s: the sandbox could replace the program it may run; allow a program outside every fs.write grant", ErrInvalid, m.Destination, m.Source, w.Source)
			}
		}
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

// ExecWritablePaths are the writable folders whose programs may run under
// exec.workspace: the workspace and the /tmp toolchains build in.
var ExecWritablePaths = []string{WorkspacePath, "/tmp"}

// scratch mounts the sandbox's private /tmp: memory-backed, half the memory
// limit, noexec (unless exec.workspace).
func (g *generator) scratch() error {
	size := g.o.Policy.Limits.Memory / 2
	opts := []string{"nosuid", "noexec", "nodev", "mode=1777", fmt.Sprintf("size=%dk", size/1024)}
	if g.o.Policy.Exec.Workspace {
		opts = slices.DeleteFunc(opts, func(o string) bool { return o == "noexec" })
	}
	g.mount(specs.Mount{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: opts})
	g.addRootfs(Entry{Path: "/tmp", Kind: Dir})
	for _, p := range []string{"/proc", "/dev", WorkspacePath} {
		g.addRootfs(Entry{Path: p, Kind: Dir})
	}
	return nil
}

// placed is one fs rule with the host file it stands for and where the
// sandbox sees it.
type placed struct {
	rule   policies.Rule
	inside string
	// source is the host file to bind, every symlink resolved, and host the
	// same path as the host sees it (without Host.Root); both are "" when
	// the file does not exist.
	source, host string
	dir          bool
	link         bool // the rule's own path is a symlink on the host
	// missing is the host path of a file that does not exist (as the
	// user sees it, without Host.Root), and variable whether the rule
	// names it through a path variable.
	missing  string
	variable bool
}

// grants turns the policy's fs rules into binds and masks, parents first by
// their place in the sandbox (not by how the rules are written: "$HOME/.ssh"
// and "/home/u" may be one folder), so the most specific rule is mounted
// last and wins. Then every denied file is masked wherever another grant
// shows it too.
func (g *generator) grants() error {
	var rules []placed
	for _, rule := range g.o.Policy.Rules() {
		r, err := g.place(rule)
		if err != nil {
			return err
		}
		if err := checkDestination(rule.Path, r.inside); err != nil {
			return err
		}
		if !g.isPlaceholder(r) {
			if err := checkSource(g.o.Host, r); err != nil {
				return err
			}
		}
		rules = append(rules, r)
	}
	// On one place the safest rule is mounted last: read over write, a mask
	// over both.
	sort.SliceStable(rules, func(i, j int) bool {
		a, b := rules[i], rules[j]
		if a.inside != b.inside {
			return lessPath(a.inside, b.inside)
		}
		return accessRank(a.rule.Access) < accessRank(b.rule.Access)
	})
	for _, r := range rules {
		switch r.rule.Access {
		case policies.AccessRead:
			if err := g.grant(r, false); err != nil {
				return err
			}
		case policies.AccessWrite:
			if isSystem(r.inside) {
				return fmt.Errorf("%w: fs.write %q: system directories are never writable; grant a path outside %s", ErrInvalid, r.rule.Path, strings.Join(systemTop, " "))
			}
			if err := g.grant(r, true); err != nil {
				return err
			}
		default:
			g.deny(r)
		}
	}
	g.maskAliases(rules)
	g.noexecAliases(rules)
	for _, r := range rules {
		if r.rule.Access == policies.AccessNone && r.missing != "" {
			if err := g.checkAbsent(r, rules); err != nil {
				return err
			}
		}
	}
	return nil
}

// isPlaceholder reports whether a rule is a session folder standing at a
// pooled sandbox's placeholder: warden's own empty folder in its state root
// (which may lie in /run), whose binds are split off and never mounted; a
// claim checks the session's real folders. Only the exact folder counts,
// and only at /workspace or /data: a rule naming the same folder by its
// path, or any other folder in /run, is checked as always.
func (g *generator) isPlaceholder(r placed) bool {
	if g.o.Placeholder == "" || r.source == "" || !hostfs.UnderAny(r.inside, WorkspacePath, DataPath) {
		return false
	}
	real, err := filepath.EvalSymlinks(g.o.Placeholder)
	return err == nil && r.source == real
}

func accessRank(a policies.Access) int {
	switch a {
	case policies.AccessWrite:
		return 0
	case policies.AccessRead:
		return 1
	}
	return 2
}

// lessPath orders paths component-wise, a parent right before its children.
func lessPath(a, b string) bool {
	return strings.ReplaceAll(a, "/", "\x00") < strings.ReplaceAll(b, "/", "\x00")
}

// writeRefused are host folders no grant may make writable, whatever path
// or variable leads there: the sandbox's root writes with the owner's (host
// root's) rights through a write grant.
var writeRefused = append([]string{"/etc", "/boot", "/run", "/var/run", "/var/spool",
	"/var/lib/dpkg", "/var/lib/apt", "/var/lib/docker", "/var/lib/containerd", "/var/lib/kubelet"}, systemTop...)

// holdRefused are host folders no write grant may hold: their files are
// root's (services' state, logs, programs, every user's home), and a
// write grant is id-mapped to its owner, so the sandbox would write them
// as root. A folder inside one (a service's own folder) may be granted.
var holdRefused = []string{"/var/lib", "/var/log", "/var/cache", "/var/tmp", "/tmp", "/opt", "/home", "/srv", "/root", "/mnt", "/media"}

// checkSource refuses grants whose host file, symlinks resolved, is the
// host's root, a kernel interface, or (for writing) a system folder, also
// when a bind mount shows it at another path.
func checkSource(h Host, r placed) error {
	if err := checkSourcePath(r); err != nil {
		return err
	}
	if err := checkSourceAlias(h, r); err != nil {
		return err
	}
	return checkBeneath(h, r)
}

// checkSourcePath makes checkSource's checks on the source's path.
func checkSourcePath(r placed) error {
	if r.source == "" || r.rule.Access == policies.AccessNone {
		return nil
	}
	switch {
	case r.host == "/":
		return fmt.Errorf("%w: fs rule %q is the host's root; grant a narrower path", ErrInvalid, r.rule.Path)
	case hostfs.UnderAny(r.host, "/proc", "/sys", "/dev"):
		return fmt.Errorf("%w: fs rule %q is %s, a host kernel interface (the sandbox has its own /proc and /dev); grant another path", ErrInvalid, r.rule.Path, r.host)
	case r.rule.Access == policies.AccessWrite && hostfs.UnderAny(r.host, writeRefused...):
		return fmt.Errorf("%w: fs.write %q is %s on the host; system directories are never writable; grant a path outside %s", ErrInvalid, r.rule.Path, r.host, strings.Join(writeRefused, " "))
	case r.rule.Access == policies.AccessWrite && slices.ContainsFunc(holdRefused, func(d string) bool { _, ok := hostfs.Under(d, r.host); return ok }):
		return fmt.Errorf("%w: fs.write %q is %s on the host, which holds system state (%s); grant a narrower folder inside it", ErrInvalid, r.rule.Path, r.host, strings.Join(holdRefused, " "))
	}
	return nil
}

// checkSourceAlias repeats checkSourcePath's checks on identities: a host
// folder bound at an unlisted path (mount --bind /etc /srv/x) is the same
// folder there.
func checkSourceAlias(h Host, r placed) error {
	if r.source == "" || r.rule.Access == policies.AccessNone {
		return nil
	}
	chain := hostfs.FileIDs(r.source)
	if len(chain) == 0 {
		return nil
	}
	isAny := func(ids []hostfs.FileID, dirs ...string) string {
		for _, d := range dirs {
			if id, ok := h.id(d); ok && slices.Contains(ids, id) {
				return d
			}
		}
		return ""
	}
	refuse := func(what string) error {
		return fmt.Errorf("%w: fs rule %q (%s on the host) is %s by another path (a bind mount); grant another folder", ErrInvalid, r.rule.Path, r.host, what)
	}
	if d := isAny(chain[:1], "/"); d != "" {
		return refuse("the host's root")
	}
	if d := isAny(chain, "/proc", "/sys", "/dev"); d != "" {
		return refuse(d + ", a host kernel interface,")
	}
	if r.rule.Access != policies.AccessWrite {
		return nil
	}
	if d := isAny(chain, writeRefused...); d != "" {
		return refuse(d + ", never writable,")
	}
	for _, d := range holdRefused {
		for _, id := range h.fileIDs(d) {
			if id == chain[0] {
				return refuse("a folder holding " + d + ", never writable whole,")
			}
		}
	}
	return nil
}

// checkBeneath refuses a grant holding a mount of what no grant may show:
// grants are bound recursively, so a chroot's /proc or a bind of /etc
// beneath the granted folder would come along.
func checkBeneath(h Host, r placed) error {
	if r.source == "" || r.rule.Access == policies.AccessNone || h.Root != "/" {
		return nil
	}
	// The source itself may lie in one (a chroot's own /proc, which has a
	// superblock of its own, so no identity matches the host's /proc).
	var fs unix.Statfs_t
	if unix.Statfs(r.source, &fs) == nil && kernelMagic[int64(fs.Type)] {
		return fmt.Errorf("%w: fs rule %q (%s on the host) lies in a kernel file system; grant another folder", ErrInvalid, r.rule.Path, r.host)
	}
	refused := []string{"/"}
	if r.rule.Access == policies.AccessWrite {
		refused = append(refused, writeRefused...)
	}
	for _, m := range h.mountsUnder(r.source) {
		if hostKernelFS[m.FSType] {
			return fmt.Errorf("%w: fs rule %q (%s on the host) holds a %s mount at %s, a host kernel interface; grant a folder without it, or unmount it", ErrInvalid, r.rule.Path, r.host, m.FSType, m.Mountpoint)
		}
		id, ok := hostfs.StatID(m.Mountpoint)
		if !ok {
			continue
		}
		for _, d := range refused {
			if did, ok := h.id(d); ok && did == id {
				return fmt.Errorf("%w: fs rule %q (%s on the host) holds a mount of %s at %s; grant a folder without it, or unmount it", ErrInvalid, r.rule.Path, r.host, d, m.Mountpoint)
			}
		}
	}
	return nil
}

// hostKernelFS are file systems that show the host's kernel state.
var hostKernelFS = map[string]bool{"proc": true, "sysfs": true, "devtmpfs": true, "cgroup": true, "cgroup2": true,
	"securityfs": true, "debugfs": true, "tracefs": true, "bpf": true, "configfs": true, "efivarfs": true, "pstore": true, "fusectl": true}

// kernelMagic are the statfs types of hostKernelFS.
var kernelMagic = map[int64]bool{unix.PROC_SUPER_MAGIC: true, unix.SYSFS_MAGIC: true, unix.CGROUP_SUPER_MAGIC: true,
	unix.CGROUP2_SUPER_MAGIC: true, unix.SECURITYFS_MAGIC: true, unix.DEBUGFS_MAGIC: true, unix.TRACEFS_MAGIC: true,
	unix.BPF_FS_MAGIC: true, unix.EFIVARFS_MAGIC: true, unix.PSTOREFS_MAGIC: true}

func (g *generator) grant(r placed, write bool) error {
	if isSystem(r.inside) && !write {
		return nil // already visible read-only
	}
	if r.source == "" {
		g.warnf("fs: %q does not exist on this host; nothing is mounted for it", r.rule.Path)
		return nil
	}
	g.mountpoint(r.inside, r.dir)
	m := specs.Mount{Destination: r.inside, Type: "bind", Source: r.source, Options: roBind}
	if !g.o.Policy.Exec.All {
		m.Options = roBindNoexec
	}
	if write {
		m.Options = rwBind
		if g.o.Policy.Exec.Workspace && r.inside == WorkspacePath {
			m.Options = rwBindExec
		}
		// Files the sandbox's root writes belong on the host to the
		// grant's owner: an idmapped mount maps that owner to the
		// sandbox's root.
		uid, gid, err := fileOwner(r.source)
		if err != nil {
			return err
		}
		m.UIDMappings = []specs.LinuxIDMapping{{ContainerID: uid, HostID: g.o.Identity.UID, Size: 1}}
		m.GIDMappings = []specs.LinuxIDMapping{{ContainerID: gid, HostID: g.o.Identity.GID, Size: 1}}
	}
	g.mount(m)
	g.bound[r.inside] = true
	return nil
}

// deny masks a path that would otherwise be visible (under a system
// directory or a grant) with an empty directory or file from the bundle. A
// denied path that is itself a symlink is left alone: inside, it points at
// a name, and maskAliases hides the file behind it wherever it is visible.
func (g *generator) deny(r placed) {
	if r.source == "" || r.link || !g.underBind(r.inside) {
		return // nothing visible there to hide
	}
	for d := filepath.Dir(r.inside); d != "/"; d = filepath.Dir(d) {
		if _, masked := g.masks[d]; masked {
			return // inside a mask: hidden already
		}
	}
	g.pinParents(r.inside)
	g.mask(r.inside, r.dir)
}

// pinParents binds each folder between a denied path and the writable
// grant above it onto itself, as writable as the grant: a mountpoint
// cannot be renamed, so the sandbox cannot move the mask's parent aside
// and make the denied path again unmasked for the next sandbox
// (mv sub sub2; mkdir -p sub/secret).
func (g *generator) pinParents(inside string) {
	// The nearest writable grant above: a read-only one between cannot be
	// renamed (it is a mountpoint), but the folders above it can.
	top := -1
	for d := filepath.Dir(inside); top < 0; d = filepath.Dir(d) {
		if g.bound[d] {
			for i := len(g.b.Spec.Mounts) - 1; i >= 0; i-- {
				if m := g.b.Spec.Mounts[i]; m.Destination == d {
					if slices.Contains(m.Options, "rw") {
						top = i
					}
					break
				}
			}
		}
		if d == "/" {
			break
		}
	}
	if top < 0 {
		return
	}
	grant := g.b.Spec.Mounts[top]
	rel, _ := hostfs.Under(filepath.Dir(inside), grant.Destination)
	if rel == "." {
		return
	}
	mid := grant.Destination
	for _, part := range strings.Split(rel, "/") {
		mid = filepath.Join(mid, part)
		if _, masked := g.masks[mid]; masked || g.bound[mid] {
			return // hidden whole already, or a grant's own mountpoint from here down
		}
		source := filepath.Join(grant.Source, strings.TrimPrefix(mid, grant.Destination))
		if fi, err := os.Lstat(source); err != nil || !fi.IsDir() {
			return // a symlink: what lies beyond is another folder's to pin
		}
		m := grant
		m.Destination, m.Source = mid, source
		// Before every mount at or beneath it (a read-only grant, a
		// mask), which must stay on top.
		at := len(g.b.Spec.Mounts)
		for j := top + 1; j < len(g.b.Spec.Mounts); j++ {
			if _, beneath := hostfs.Under(g.b.Spec.Mounts[j].Destination, mid); beneath {
				at = j
				break
			}
		}
		g.b.Spec.Mounts = slices.Insert(g.b.Spec.Mounts, at, m)
		g.bound[mid] = true
	}
}

func (g *generator) mask(inside string, dir bool) {
	name := strconv.Itoa(len(g.masks))
	g.masks[inside] = name
	kind := File
	if dir {
		kind = Dir
	}
	g.b.Masks = append(g.b.Masks, Entry{Path: name, Kind: kind})
	g.mount(specs.Mount{Destination: inside, Type: "bind",
		Source: filepath.Join(g.o.BundleDir, "masks", name), Options: roBindNoexec})
}

// maskAliases hides each denied host file under every bind that shows it
// at another place: a workspace that is $HOME shows ~/.ssh at
// /workspace/.ssh.
// noexecAliases makes a read grant noexec when it shows a write grant's
// files too (the same folder, one above it or one inside it, as a policy
// reading the workspace's own host path does): the sandbox would write a
// program through the writable grant and run it through the read-only one.
func (g *generator) noexecAliases(rules []placed) {
	for i, m := range g.b.Spec.Mounts {
		if m.Type != "bind" || !slices.Equal(m.Options, roBind) || isSystem(m.Destination) {
			continue // only read grants that let programs run
		}
		for _, r := range rules {
			if r.rule.Access != policies.AccessWrite || r.source == "" {
				continue
			}
			_, below := hostfs.Under(r.source, m.Source)
			_, above := hostfs.Under(m.Source, r.source)
			if below || above {
				g.b.Spec.Mounts[i].Options = roBindNoexec
				break
			}
		}
	}
}

func (g *generator) maskAliases(rules []placed) {
	binds := slices.Clone(g.b.Spec.Mounts)
	for _, r := range rules {
		if r.rule.Access != policies.AccessNone || r.source == "" {
			continue
		}
		for _, m := range binds {
			if m.Type != "bind" || strings.HasPrefix(m.Source, filepath.Join(g.o.BundleDir, "masks")+"/") {
				continue
			}
			rel, ok := hostfs.Under(r.source, m.Source)
			if !ok {
				continue
			}
			alias := filepath.Join(m.Destination, rel)
			if _, done := g.masks[alias]; done {
				continue
			}
			g.pinParents(alias)
			g.mask(alias, r.dir)
		}
	}
}

// checkAbsent refuses a deny rule whose file does not exist when a write
// grant lets the sandbox create it: there is nothing to mask, so a file
// the sandbox makes there (an authorized_keys in ~/.ssh) would land on the
// host unhidden. An absent file nothing can create is only reported.
func (g *generator) checkAbsent(r placed, rules []placed) error {
	if g.o.Placeholder != "" && r.variable {
		if _, ok := hostfs.Under(r.missing, g.o.Placeholder); ok {
			return nil // a claim checks the session's real folders
		}
	}
	dest := g.writableAt(g.wouldBe(r))
	if dest == "" {
		g.b.Absent = append(g.b.Absent, r.inside)
		return nil
	}
	grant := dest
	for _, w := range rules {
		if w.rule.Access == policies.AccessWrite && w.inside == dest {
			grant = w.rule.Path
		}
	}
	return fmt.Errorf("%w: fs.deny %q (%s) does not exist, and it lies under the writable grant %q: a sandbox could create it; create it first (mkdir -p -m 700 %s, or touch it for a file) or drop the write grant",
		ErrInvalid, r.rule.Path, r.missing, grant, r.missing)
}

// wouldBe returns the host file, as the generator's bind sources name
// files, that a missing rule's path would be once created: its nearest
// existing parent with symlinks resolved, joined with the rest.
func (g *generator) wouldBe(r placed) string {
	rest := ""
	for p := r.missing; ; p = filepath.Dir(p) {
		if r.variable {
			if real, err := filepath.EvalSymlinks(p); err == nil {
				return filepath.Join(real, rest)
			}
		} else if real, err := g.o.Host.resolve(p); err == nil {
			return filepath.Join(g.o.Host.path(real), rest)
		}
		if p == "/" {
			return ""
		}
		rest = filepath.Join(filepath.Base(p), rest)
	}
}

// writableAt returns the destination of a writable bind through which the
// sandbox reaches the host file p, or "" when every place that shows p is
// read-only or masked.
func (g *generator) writableAt(p string) string {
	mounts := g.b.Spec.Mounts
	for _, m := range mounts {
		if m.Type != "bind" || !slices.Contains(m.Options, "rw") {
			continue
		}
		rel, ok := hostfs.Under(p, m.Source)
		if !ok {
			continue
		}
		// What the sandbox sees there is the deepest mount over it, the
		// last one of a depth winning.
		at := filepath.Join(m.Destination, rel)
		var top *specs.Mount
		for i := range mounts {
			if _, ok := hostfs.Under(at, mounts[i].Destination); ok && (top == nil || len(mounts[i].Destination) >= len(top.Destination)) {
				top = &mounts[i]
			}
		}
		if top.Type == "bind" && slices.Contains(top.Options, "rw") {
			return top.Destination
		}
	}
	return ""
}

// mountpoint makes sure a grant's destination exists before runc mounts on
// it: runc cannot create it under a user namespace in a root-owned skeleton.
func (g *generator) mountpoint(inside string, dir bool) {
	kind := File
	if dir {
		kind = Dir
	}
	for m, name := range g.masks {
		if rel, ok := hostfs.Under(inside, m); ok {
			g.b.Masks = append(g.b.Masks, Entry{Path: filepath.Join(name, rel), Kind: kind})
			return
		}
	}
	if g.underBind(inside) || hostfs.UnderAny(inside, "/tmp", "/dev") {
		return
	}
	g.addRootfs(Entry{Path: inside, Kind: kind})
}

// place maps a rule to its host file and its path in the sandbox. The
// workspace, skill and data folders appear at fixed places; every other
// path appears where it is on the host. A granted path under a variable
// must stay in that variable's folder once symlinks are resolved: the
// folder may be the sandbox's own workspace, or a skill's download, and a
// symlink planted there would otherwise make the host bind what it points
// at.
func (g *generator) place(rule policies.Rule) (placed, error) {
	r := placed{rule: rule}
	v := g.o.Vars
	roots := []struct {
		name, value, inside, flag string
	}{
		{"$WORK_DIR", v.WorkDir, WorkspacePath, "--workspace (Go: Vars.WorkDir)"},
		{"$SKILL_DIR", v.SkillDir, SkillPath, "--skill-dir (Go: Vars.SkillDir)"},
		{"$DATA_DIR", v.DataDir, DataPath, "--data-dir (Go: Vars.DataDir)"},
		{"$HOME", v.Home, "", "HOME (Go: Vars.Home)"},
	}
	for _, root := range roots {
		rest, ok := strings.CutPrefix(rule.Path, root.name)
		if !ok || (rest != "" && rest[0] != '/') {
			continue
		}
		if root.value == "" {
			return r, fmt.Errorf("%w: fs rule %q uses %s, which has no value here; give it with %s", ErrInvalid, rule.Path, root.name, root.flag)
		}
		if !filepath.IsAbs(root.value) {
			return r, fmt.Errorf("%w: %s=%q must be an absolute path", ErrInvalid, root.name, root.value)
		}
		host := filepath.Join(root.value, rest)
		r.inside = filepath.Join(root.inside, rest)
		if root.inside == "" {
			r.inside = host
		}
		real, err := filepath.EvalSymlinks(host)
		if err != nil {
			// Absent: a grant warns, a deny has nothing to hide unless
			// the sandbox could create it.
			r.missing, r.variable = host, true
			return r, nil
		}
		realRoot, err := filepath.EvalSymlinks(root.value)
		if err != nil {
			return r, err
		}
		if _, inside := hostfs.Under(real, realRoot); !inside && rule.Access != policies.AccessNone {
			return r, fmt.Errorf("%w: fs rule %q: %s leads through a symlink to %s, which leaves %s (%s); grant the target itself, or remove the link", ErrInvalid, rule.Path, host, real, root.name, realRoot)
		}
		return r, g.found(&r, host, real, real)
	}
	if !filepath.IsAbs(rule.Path) {
		return r, fmt.Errorf("%w: fs rule %q is neither absolute nor under a variable", ErrInvalid, rule.Path)
	}
	r.inside = filepath.Clean(rule.Path)
	real, err := g.o.Host.resolve(r.inside)
	if err != nil {
		r.missing = r.inside
		return r, nil
	}
	return r, g.found(&r, g.o.Host.path(r.inside), g.o.Host.path(real), real)
}

// found fills in what place learnt about an existing file.
func (g *generator) found(r *placed, host, source, hostPath string) error {
	fi, err := os.Stat(source)
	if err != nil {
		return nil
	}
	if li, err := os.Lstat(host); err == nil && li.Mode()&fs.ModeSymlink != 0 {
		r.link = true
	}
	r.source, r.host, r.dir = source, hostPath, fi.IsDir()
	return nil
}

// checkDestination refuses grants that would replace the sandbox's own
// plumbing.
func checkDestination(rulePath, inside string) error {
	if inside == "/" || hostfs.UnderAny(inside, "/proc", "/dev", "/sys") {
		return fmt.Errorf("%w: fs rule %q would cover %s, which warden manages; grant a narrower path", ErrInvalid, rulePath, inside)
	}
	return nil
}

func isSystem(inside string) bool { return hostfs.UnderAny(inside, systemTop...) }

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
