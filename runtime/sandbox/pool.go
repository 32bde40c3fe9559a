package sandbox

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/runtime/internal/wire"
	"github.com/warden-sandbox/warden/spec"
	"github.com/warden-sandbox/warden/spec/hostfs"
)

// A warm pool's containers are started before anyone asks for them, from
// the same spec a cold start would generate except for the mounts under
// the session's own folders ($WORK_DIR at /workspace, $DATA_DIR at /data):
// those are bound into the running container when a session claims it.
//
// Which pooled container may serve a session is decided by content, not by
// names: the key of a container is a hash of its engine, its spec and rootfs
// without those late mounts (bundle paths and the container's name left
// out). A
// claim generates the spec a cold start would use for the session, and
// takes a container only if its key is the same; whatever would differ
// (another policy, skill folder or identity, a deny rule that shows
// elsewhere because of where the workspace is, a write grant under a
// folder only this workspace has) falls back to a cold start.

// PoolDir holds the pool's containers: ROOT/pool/<container>/ with
// pool.json, the bundle, the agent's socket and log.
func (rt *Runtime) PoolDir() string { return filepath.Join(rt.Root, "pool") }

// placeholder stands for the session folders while a pooled container is
// generated: an empty folder of warden's own in its state root, which no
// sandbox ever sees. The state root may lie where no grant may be (the
// default, /run/warden): the spec's checks let this one folder stand at
// /workspace and /data because its binds are split off, never mounted.
func (rt *Runtime) placeholder() string { return filepath.Join(rt.PoolDir(), ".empty") }

// MakePoolDir creates the pool folder, traversable (not listable) by the
// sandboxes' host user like the rest of the root, and the placeholder.
func (rt *Runtime) MakePoolDir() error {
	if err := rt.MakeDirs(); err != nil {
		return err
	}
	if err := MakeStateDir(rt.PoolDir()); err != nil {
		return err
	}
	if err := os.Mkdir(rt.placeholder(), 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return checkPlaceholder(rt.placeholder())
}

// checkPlaceholder makes sure the placeholder is still what makePoolDir
// made: an empty folder of warden's user that only it can enter. The
// spec's checks trust it as warden's own, so anything else there (a
// symlink, another's folder, files) is refused rather than used.
func checkPlaceholder(p string) error {
	var st unix.Stat_t
	err := unix.Lstat(p, &st)
	if err == nil && (st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != uint32(os.Geteuid()) || st.Mode&0o077 != 0) {
		err = fmt.Errorf("not a folder of uid %d with mode 0700", os.Geteuid())
	}
	if err == nil {
		var names []string
		if names, err = readDirNames(p); err == nil && len(names) > 0 {
			err = fmt.Errorf("holds %s", strings.Join(names, ", "))
		}
	}
	if err != nil {
		return fmt.Errorf("the pool's placeholder %s is not warden's empty folder (%v); warden made it and keeps it empty: stop the daemon, remove it and fill the pool again", p, err)
	}
	return nil
}

func readDirNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(0)
}

// Pooled is one ready container of a warm pool, as kept in its pool.json.
type Pooled struct {
	ID         string        `json:"id"`
	Key        string        `json:"key"`
	PolicyName string        `json:"policy"`
	PolicyHash string        `json:"policyHash"`
	PolicyTOML string        `json:"policyToml"`
	Vars       policies.Vars `json:"vars"` // $SKILL_DIR and $HOME; the session folders are placeholders
	Created    time.Time     `json:"created"`
	// Masked are the host files the sandbox's masks outside the session
	// folders were mounted on (see maskedFiles).
	Masked map[string]string `json:"masked,omitempty"`
	// Identity is the sandbox's own host uid and gid (zero: one made
	// before sandboxes had their own, spec.DefaultIdentity).
	Identity spec.Identity `json:"identity"`

	container container
	mntns     *os.File // where a claim binds its folders (lateNamespace), held from its start: no pid can be mistaken
}

// attach keeps a handle on a running pooled container and the mount
// namespace a claim binds in.
func (p *Pooled) attach(c container) error {
	ns, err := c.lateNamespace()
	if err != nil {
		return err
	}
	p.container, p.mntns = c, ns
	return nil
}

// Close drops the handles; the container itself is left as it is.
func (p *Pooled) Close() {
	if p.mntns != nil {
		p.mntns.Close()
		p.mntns = nil
	}
}

func (p *Pooled) dir(rt *Runtime) string { return filepath.Join(rt.PoolDir(), p.ID) }

// isLate reports whether a sandbox path belongs to the session's folders.
func isLate(dest string) bool {
	_, work := hostfs.Under(dest, spec.WorkspacePath)
	_, data := hostfs.Under(dest, spec.DataPath)
	return work || data
}

// splitLate separates the mounts of the session's folders, which are bound
// into the running sandbox, from the rest, in the spec's order.
func splitLate(mounts []specs.Mount) (early, late []specs.Mount) {
	for _, m := range mounts {
		if isLate(m.Destination) {
			late = append(late, m)
		} else {
			early = append(early, m)
		}
	}
	return early, late
}

// writeMaskNumbered writes text to w with each "/masks/" and the digits
// after it, when there are any, as "/masks/N", scanning as the regular
// expression /masks/[0-9]+ would (leftmost first): the key does not
// depend on which number each mask got. Without a copy of the text, as a
// regular expression's replacement made (~0.1 ms and 80 kB a claim).
func writeMaskNumbered(w io.Writer, text []byte) {
	marker := []byte("/masks/")
	for {
		i := bytes.Index(text, marker)
		if i < 0 {
			w.Write(text)
			return
		}
		end := i + len(marker)
		digits := end
		for digits < len(text) && text[digits] >= '0' && text[digits] <= '9' {
			digits++
		}
		if digits == end { // no number: a match may start further on
			w.Write(text[:i+1])
			text = text[i+1:]
			continue
		}
		w.Write(text[:i])
		io.WriteString(w, "/masks/N")
		text = text[digits:]
	}
}

// sessionSpec generates the spec a session's sandbox runs from.
func (rt *Runtime) sessionSpec(p *policies.Policy, vars policies.Vars, id spec.Identity, container, bundleDir string) (*spec.Bundle, error) {
	return rt.generate(p, vars, id, container, bundleDir, false)
}

// pooledSpec generates the spec of a pooled sandbox: the placeholder
// stands for the session's folders.
func (rt *Runtime) pooledSpec(p *policies.Policy, vars policies.Vars, id spec.Identity, container, bundleDir string) (*spec.Bundle, error) {
	vars.WorkDir, vars.DataDir = rt.placeholder(), rt.placeholder()
	return rt.generate(p, vars, id, container, bundleDir, true)
}

// generate is sessionSpec, or with pooled pooledSpec. Only a pooled
// sandbox's spec treats the placeholder as warden's own: a session that
// names it as its workspace is a grant inside the state root, refused.
func (rt *Runtime) generate(p *policies.Policy, vars policies.Vars, id spec.Identity, container, bundleDir string, pooled bool) (*spec.Bundle, error) {
	host, err := spec.DetectHost()
	if err != nil {
		return nil, err
	}
	if id == (spec.Identity{}) {
		id = spec.DefaultIdentity
	}
	o := spec.Options{
		Policy: p, Vars: vars, Host: host, BundleDir: bundleDir, Identity: id,
		Agent: rt.Binary, CgroupsPath: rt.cgroupPath(container), Hostname: "sandbox",
	}
	if pooled {
		// The session's folders, and the deny rules in them, are checked
		// when a claim generates the spec with the real ones.
		o.Placeholder = rt.placeholder()
	}
	b, err := spec.Generate(o)
	if err != nil {
		return nil, err
	}
	b.Spec.Process.Args = agentArgs(b.Spec)
	if err := rt.checkStateRoot(b, bundleDir, pooled); err != nil {
		return nil, err
	}
	return b, nil
}

// resolveMissing resolves the symlinks of a path that may not exist yet:
// those of its longest existing parent.
func resolveMissing(p string) (string, error) {
	p, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	rest := ""
	for {
		resolved, err := filepath.EvalSymlinks(p)
		if err == nil {
			return filepath.Join(resolved, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) || p == "/" {
			return "", err
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = filepath.Dir(p)
	}
}

// systemSource reports whether a bind's source lies in the host's system
// folders warden binds read-only into every sandbox (/usr, /lib*, /etc's
// files, /dev's nodes): finding their identities on every start is time
// spent on folders that hold no state root.
func systemSource(src string) bool {
	for _, d := range []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/dev"} {
		if _, ok := hostfs.Under(src, d); ok {
			return true
		}
	}
	return false
}

// checkStateRoot refuses a sandbox that would see into warden's state root
// other than through its own masks: a writable grant is id-mapped to its
// owner, so one that holds the root (root-owned) gives the sandbox the
// daemon's socket, and through it any policy; one inside the root is
// warden's own state, which gc removes. Nor may a writable grant hold
// warden's binary (the sandbox would replace what root runs next) or the
// audit log (it would rewrite the record of what it did).
func (rt *Runtime) checkStateRoot(b *spec.Bundle, bundleDir string, pooled bool) error {
	root, err := resolveMissing(rt.Root) // made only once the spec is good
	if err != nil {
		return err
	}
	placeholder, _ := resolveMissing(rt.placeholder())
	binary, _ := resolveMissing(rt.Binary)
	audit, _ := resolveMissing(AuditPath(rt.Root))
	masks := filepath.Join(bundleDir, "masks")
	rootID, _ := hostfs.StatID(root)
	// The identities of the state root's, the binary's and the audit
	// log's folders and their parents, once: a writable grant may be none
	// of them.
	rootChain := hostfs.FileIDs(root)
	ownChains := map[string][]hostfs.FileID{}
	for _, own := range []string{binary, audit} {
		if own != "" {
			ownChains[own] = hostfs.FileIDs(filepath.Dir(own))
		}
	}
	for _, m := range b.Spec.Mounts {
		if m.Type != "bind" || m.Source == rt.Binary {
			continue
		}
		if pooled && m.Source == placeholder && isLate(m.Destination) {
			continue // the placeholder stands for a pooled sandbox's folders, never mounted
		}
		if _, own := hostfs.Under(m.Source, masks); own {
			continue
		}
		// By path, and by identity: a bind mount shows the same folder
		// at another path.
		writable := len(m.UIDMappings) > 0
		var chain []hostfs.FileID
		if !systemSource(m.Source) { // a system folder is no alias of a state root
			chain = hostfs.FileIDs(m.Source)
		}
		_, inside := hostfs.Under(m.Source, root)
		_, holds := hostfs.Under(root, m.Source)
		inside = inside || slices.Contains(chain, rootID) && rootID != (hostfs.FileID{})
		holds = holds || len(chain) > 0 && slices.Contains(rootChain, chain[0])
		if inside || (holds && writable) {
			return fmt.Errorf("%w: %s (%s on the host) %s warden's state root %s, which a sandbox must never reach; grant a folder outside it, or give warden another --root",
				spec.ErrInvalid, m.Destination, m.Source, map[bool]string{true: "is inside", false: "holds"}[inside], root)
		}
		for own, ownChain := range ownChains {
			_, holds := hostfs.Under(own, m.Source)
			holds = holds || len(chain) > 0 && slices.Contains(ownChain, chain[0])
			if holds && writable {
				return fmt.Errorf("%w: the writable grant %s (%s on the host) holds warden's own %s; grant a folder that does not hold it", spec.ErrInvalid, m.Destination, m.Source, own)
			}
		}
	}
	return nil
}

// poolView splits a generated bundle into the key of the pooled container
// that can serve it and the mounts a claim binds late, in the order the
// spec mounts them. The engine is part of the key: a gVisor policy's
// session never takes a container's sandbox, nor the reverse.
func poolView(b *spec.Bundle, bundleDir string, engine policies.Engine) (key string, late []specs.Mount, err error) {
	sp := viewCopy(b.Spec)
	sp.Mounts, late = splitLate(sp.Mounts)
	if sp.Linux != nil {
		sp.Linux.CgroupsPath = ""
	}
	// Every pooled sandbox has a uid of its own; a claim moves the
	// session's mounts to it.
	spec.Reidentify(sp, spec.SpecIdentity(sp), spec.DefaultIdentity)
	if engine != policies.EngineGVisor {
		engine = "" // the container engine's keys are those of before engines
	}
	view, err := json.Marshal(struct {
		Engine policies.Engine `json:",omitempty"`
		Spec   *specs.Spec
		Rootfs []spec.Entry
	}{engine, sp, b.Rootfs})
	if err != nil {
		return "", nil, err
	}
	h := sha256.New()
	writeMaskNumbered(h, bytes.ReplaceAll(view, []byte(bundleDir), []byte("$BUNDLE")))
	return hex.EncodeToString(h.Sum(nil)[:12]), late, nil
}

// viewCopy copies what poolView changes of a spec (the mounts, the
// cgroup path, the uid and gid mappings) and shares the rest. A copy
// through JSON was most of a claim's spec work (~0.6 ms of a warm
// one-shot run's ~2 ms).
func viewCopy(s *specs.Spec) *specs.Spec {
	sp := *s
	sp.Mounts = slices.Clone(s.Mounts)
	for i := range sp.Mounts {
		m := &sp.Mounts[i]
		m.UIDMappings, m.GIDMappings = slices.Clone(m.UIDMappings), slices.Clone(m.GIDMappings)
	}
	if s.Linux != nil {
		l := *s.Linux
		l.UIDMappings, l.GIDMappings = slices.Clone(l.UIDMappings), slices.Clone(l.GIDMappings)
		sp.Linux = &l
	}
	return &sp
}

// PoolKey is the key of the containers a pool keeps for a policy, its
// skill folder and $HOME.
func (rt *Runtime) PoolKey(p *policies.Policy, vars policies.Vars) (string, error) {
	if err := rt.checkPoolable(p); err != nil {
		return "", err
	}
	if err := rt.MakePoolDir(); err != nil {
		return "", err
	}
	dir := filepath.Join(rt.PoolDir(), "key")
	b, err := rt.pooledSpec(p, vars, spec.Identity{}, "key", dir)
	if err != nil {
		return "", err
	}
	key, _, err := poolView(b, dir, p.Sandbox.Engine)
	return key, err
}

// checkPoolable refuses a pool of a policy whose sandboxes cannot start.
func (rt *Runtime) checkPoolable(p *policies.Policy) error {
	return checkEngine(p)
}

func NewPoolID() string {
	var b [6]byte
	rand.Read(b[:])
	return "pool-" + hex.EncodeToString(b[:])
}

// StartPooled starts one warm container for a policy: the agent runs, but
// waits for a claim to bind the session's folders and seal it before it
// runs any command.
func (rt *Runtime) StartPooled(id string, p *policies.Policy, vars policies.Vars) (_ *Pooled, err error) {
	if err := rt.checkPoolable(p); err != nil {
		return nil, err
	}
	if err := rt.MakePoolDir(); err != nil {
		return nil, err
	}
	dir := filepath.Join(rt.PoolDir(), id)
	if err := os.Mkdir(dir, 0o711); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			rt.DestroyPooled(id)
		}
	}()
	identity, lease, err := rt.leaseIdentity(id)
	if err != nil {
		return nil, err
	}
	defer lease.Close()
	// A claim must not wait for the user namespaces its idmapped folders
	// need: they are made now, off the claim's path.
	idmapUsernses.prewarm(identity)
	bundleDir := filepath.Join(dir, "bundle")
	b, err := rt.pooledSpec(p, vars, identity, id, bundleDir)
	if err != nil {
		return nil, err
	}
	key, _, err := poolView(b, bundleDir, p.Sandbox.Engine)
	if err != nil {
		return nil, err
	}
	// Taken before the sandbox starts: a file replaced in between makes a
	// claim start cold rather than trust a mask on the old one.
	masked := maskedFiles(b.Spec, bundleDir)
	b.Spec.Mounts, _ = splitLate(b.Spec.Mounts)
	b.Spec.Process.Args = append(b.Spec.Process.Args, "--pooled")
	if err := spec.WriteBundle(bundleDir, b); err != nil {
		return nil, err
	}
	// The late mounts are never among the exec-capable mounts whose
	// programs are hidden (they are noexec), so the list is a cold
	// start's.
	if err := rt.hidePrograms(b.Spec, filepath.Join(bundleDir, "rootfs")); err != nil {
		return nil, err
	}
	text, err := p.TOML()
	if err != nil {
		return nil, err
	}
	vars.WorkDir, vars.DataDir = "", ""
	vars.WorkDir, vars.DataDir = rt.placeholder(), rt.placeholder()
	pc := &Pooled{ID: id, Key: key, PolicyName: p.Name, PolicyHash: p.Hash(), PolicyTOML: string(text), Vars: vars, Created: time.Now().UTC(), Masked: masked, Identity: identity}
	data, err := json.MarshalIndent(pc, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := WriteStateFile(filepath.Join(dir, "pool.json"), data); err != nil {
		return nil, err
	}
	s := &Session{ID: id, rt: rt, home: dir, policy: p} // the policy chooses the engine
	if err := rt.startContainer(s, b.Spec, bundleDir); err != nil {
		return nil, err
	}
	if _, gvisor := s.container.(*gvisorContainer); !gvisor {
		if err := s.agentReady(); err != nil {
			return nil, err
		}
	}
	if err := pc.attach(s.container); err != nil {
		return nil, err
	}
	return pc, nil
}

// agentReadyWait bounds how long a pooled sandbox's agent may take to
// fill its Landlock ruleset.
const agentReadyWait = 30 * time.Second

// agentReady waits until a pooled sandbox's agent serves. It answers from
// its loop, so only once it has filled its Landlock ruleset: tens of ms
// of CPU after the start, which a claim made meanwhile competed with, and
// its first command waited for (a one-shot run took ~20% longer).
func (s *Session) agentReady() error {
	conn, err := wire.DialPacket(s.socketPath())
	if err != nil {
		return fmt.Errorf("agent unreachable: %w", err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(agentReadyWait))
	if err := wire.Send(conn, execRequest{Ready: true}); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	var ev execEvent
	files, err := wire.Receive(conn, &ev)
	wire.CloseAll(files)
	if err != nil {
		return fmt.Errorf("agent: no answer within %s of its start: %w", agentReadyWait, err)
	}
	if ev.Error != "" {
		return fmt.Errorf("agent: %s", ev.Error)
	}
	return nil
}

// LoadPooled re-adopts a ready container a previous daemon left. One that
// a claim had begun to bind (it has a session.json) or whose sandbox died
// is an error: the caller reaps it.
func (rt *Runtime) LoadPooled(id string) (*Pooled, error) {
	dir := filepath.Join(rt.PoolDir(), id)
	if _, err := os.Stat(filepath.Join(dir, "session.json")); err == nil {
		return nil, errors.New("a claim was under way when the daemon stopped")
	}
	data, err := ReadStateFile(filepath.Join(dir, "pool.json"))
	if err != nil {
		return nil, err
	}
	pc := &Pooled{}
	if err := json.Unmarshal(data, pc); err != nil || pc.ID != id {
		return nil, fmt.Errorf("pool.json: bad state (%v)", err)
	}
	c, err := rt.engine.load(id)
	if err != nil {
		return nil, err
	}
	if err := pc.attach(c); err != nil {
		return nil, err
	}
	return pc, nil
}

// PooledIDs lists the containers under the pool folder.
func (rt *Runtime) PooledIDs() []string {
	entries, _ := os.ReadDir(rt.PoolDir())
	var ids []string
	for _, e := range entries {
		if e.IsDir() && CheckID(e.Name()) == nil {
			ids = append(ids, e.Name())
		}
	}
	return ids
}

// DestroyPooled removes a pooled container and its folder.
func (rt *Runtime) DestroyPooled(id string) error {
	var errs []error
	if err := rt.RemoveContainer(id); err != nil {
		errs = append(errs, err)
	}
	_, err := os.Stat(filepath.Join(rt.PoolDir(), id, "gvisor"))
	gvisor := err == nil
	if err := removeSessionDir(filepath.Join(rt.PoolDir(), id)); err != nil {
		errs = append(errs, err)
	}
	if gvisor {
		rt.ReleaseViews() // its program views, once no other sandbox names them
	}
	return errors.Join(errs...)
}

// ClaimSpec is what a claim needs to know about a session: the key of
// the pooled containers that can serve it and the mounts to bind late.
type ClaimSpec struct {
	key       string
	late      []specs.Mount
	bundle    *spec.Bundle
	bundleDir string
}

// Same reports whether a claim made with o is the claim cs would make:
// the same sandbox, for whichever session each was made (its folder and
// cgroup, which a claim does not take from the spec). The claim spec of
// an earlier session of the same policy and folders is Same as a new
// one's unless the host changed between them.
//
// Equal keys are equal specs but for what a claim sets itself (the late
// mounts, the identity, the cgroup) and the numbering of masks; the late
// mounts, the identity and the rest of the bundle are compared here.
func (cs *ClaimSpec) Same(o *ClaimSpec) bool {
	if cs.key != o.key || spec.SpecIdentity(cs.bundle.Spec) != spec.SpecIdentity(o.bundle.Spec) ||
		!slices.EqualFunc(cs.late, o.late, func(a, b specs.Mount) bool {
			a.Source, b.Source = bundleRelative(a.Source, cs.bundleDir), bundleRelative(b.Source, o.bundleDir)
			return reflect.DeepEqual(a, b)
		}) {
		return false
	}
	a, b := *cs.bundle, *o.bundle
	a.Spec, b.Spec = nil, nil
	return reflect.DeepEqual(a, b)
}

// bundleRelative names a path under the claim's bundle folder by where it
// is in that folder, and any other path as it is.
func bundleRelative(path, bundleDir string) string {
	if rel, ok := hostfs.Under(path, bundleDir); ok {
		return "$BUNDLE/" + rel
	}
	return path
}

// policyHash is the hash of the policy the claim's spec was made from
// (its annotation: Generate hashed that policy a moment ago).
func (cs *ClaimSpec) policyHash(p *policies.Policy) string {
	if h := cs.bundle.Spec.Annotations[spec.AnnotationPolicyHash]; h != "" {
		return h
	}
	return p.Hash()
}

// Key is the warm pool whose containers can serve the claim.
func (cs *ClaimSpec) Key() string { return cs.key }

// NewClaimSpec generates the spec a cold start of the session would use.
func (rt *Runtime) NewClaimSpec(cfg SessionConfig) (*ClaimSpec, error) {
	bundleDir := filepath.Join(rt.SessionDir(cfg.ID), "late")
	b, err := rt.sessionSpec(cfg.Policy, cfg.Vars, cfg.Identity, cfg.ID, bundleDir)
	if err != nil {
		return nil, err
	}
	key, late, err := poolView(b, bundleDir, cfg.Policy.Sandbox.Engine)
	if err != nil {
		return nil, err
	}
	return &ClaimSpec{key: key, late: late, bundle: b, bundleDir: bundleDir}, nil
}

// maskedFiles names, for each mask of a spec outside the session's
// folders, the host file under it (fileIdentity). A mask is mounted
// on the file that was there when the sandbox started; should the folder
// be removed and made again (rm -r ~/.ssh; mkdir ~/.ssh), a pooled sandbox
// shows the new one unmasked, so a claim compares them.
func maskedFiles(sp *specs.Spec, bundleDir string) map[string]string {
	masks := filepath.Join(bundleDir, "masks") + "/"
	out := map[string]string{}
	for _, m := range sp.Mounts {
		if !strings.HasPrefix(m.Source, masks) || isLate(m.Destination) {
			continue
		}
		// The host file is where the deepest bind above the mask shows it.
		host, depth := "", -1
		for _, b := range sp.Mounts {
			rel, ok := hostfs.Under(m.Destination, b.Destination)
			if b.Type != "bind" || strings.HasPrefix(b.Source, masks) || !ok || rel == "." || len(b.Destination) <= depth {
				continue
			}
			host, depth = filepath.Join(b.Source, rel), len(b.Destination)
		}
		out[m.Destination] = fileIdentity(host)
	}
	return out
}

// fileIdentity tells a file from one made in its place: device, inode
// (which a file system may reuse at once) and birth time, or, where the
// file system keeps none, the change time.
func fileIdentity(path string) string {
	var st unix.Statx_t
	if path == "" || unix.Statx(unix.AT_FDCWD, path, 0, unix.STATX_INO|unix.STATX_BTIME|unix.STATX_CTIME, &st) != nil {
		return "gone"
	}
	t := st.Ctime
	if st.Mask&unix.STATX_BTIME != 0 {
		t = st.Btime
	}
	return fmt.Sprintf("%d:%d:%d:%d.%09d", st.Dev_major, st.Dev_minor, st.Ino, t.Sec, t.Nsec)
}

// ErrPoolMismatch says a pooled container cannot serve a session: its
// sandbox would differ from the session's cold-started one.
var ErrPoolMismatch = errors.New("the pooled container does not match the session's sandbox")

// ClaimPooled turns a ready container into the session cfg describes. On
// error the container is gone and the caller starts the session cold.
// check, when not nil, is called once the session's folders are bound and
// before the session takes its name: an error from it is the claim's, so
// a sandbox it refuses never becomes a session, even for a daemon killed
// meanwhile.
//
// Order matters for a crash at any point: session.json in the pool folder
// marks the container as taken (a restarted daemon reaps it), then the
// session's folders are bound and the agent sealed, and only then does the
// folder move to sessions/ID, where a restarted daemon re-adopts it.
func (rt *Runtime) ClaimPooled(pc *Pooled, cfg SessionConfig, cs *ClaimSpec, check func() error) (_ *Session, err error) {
	dir := pc.dir(rt)
	defer func() {
		pc.Close()
		if err != nil {
			rt.DestroyPooled(pc.ID)
		}
	}()
	if cs.key != pc.Key {
		return nil, ErrPoolMismatch
	}
	if now := maskedFiles(cs.bundle.Spec, cs.bundleDir); !maps.Equal(now, pc.Masked) {
		return nil, fmt.Errorf("%w: a denied file was replaced on the host since the sandbox started", ErrPoolMismatch)
	}
	// The session runs as the pooled sandbox's uid: its mounts map files
	// to that one. A caller that chose an identity gets a cold start.
	identity := pc.Identity
	if identity == (spec.Identity{}) {
		identity = spec.DefaultIdentity
	}
	if cfg.Identity != (spec.Identity{}) && cfg.Identity != identity {
		return nil, fmt.Errorf("%w: the session asks for uid %d, the sandbox runs as %d", ErrPoolMismatch, cfg.Identity.UID, identity.UID)
	}
	// The masks are written where the session's folder is now, and the
	// spec names where it will be.
	lateSpec := specs.Spec{Mounts: make([]specs.Mount, len(cs.late))}
	for i, m := range cs.late {
		if rel, ok := hostfs.Under(m.Source, cs.bundleDir); ok {
			m.Source = filepath.Join(dir, "late", rel)
		}
		m.UIDMappings, m.GIDMappings = slices.Clone(m.UIDMappings), slices.Clone(m.GIDMappings)
		lateSpec.Mounts[i] = m
	}
	spec.Reidentify(&lateSpec, spec.SpecIdentity(cs.bundle.Spec), identity)
	late := lateSpec.Mounts
	if pc.container == nil || pc.mntns == nil {
		return nil, errors.New("pooled container not attached")
	}
	cfg.Identity = identity
	s := &Session{
		ID: cfg.ID, PolicyName: cfg.Policy.Name, PolicyHash: cs.policyHash(cfg.Policy), PolicyTOML: pc.PolicyTOML,
		Vars: cfg.Vars, Created: time.Now().UTC(), Identity: cfg.Identity, Container: pc.ID, Pool: pc.Key,
		rt: rt, home: dir, policy: cfg.Policy, Limits: cfg.Policy.Limits, Env: slices.Clone(cs.bundle.Spec.Process.Env),
		container: pc.container, lastUsed: time.Now(), Commands: commandsOf(cs.bundle),
	}
	if err := s.saveSynced(!cfg.OneShot); err != nil {
		return nil, err
	}
	if err := os.Mkdir(filepath.Join(dir, "late"), 0o755); err != nil {
		return nil, err
	}
	if err := spec.WriteMasks(filepath.Join(dir, "late"), cs.bundle); err != nil {
		return nil, err
	}
	if err := rt.bindSession(s, int(pc.mntns.Fd()), late); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.StopEgress()
		}
	}()
	// A gVisor sandbox's record names its agent's socket, which moves
	// with the folder.
	if g, ok := pc.container.(*gvisorContainer); ok {
		if err := g.rehome(filepath.Join(rt.SessionDir(cfg.ID), "agent.sock")); err != nil {
			return nil, err
		}
	}
	if check != nil {
		if err := check(); err != nil {
			return nil, err
		}
	}
	// Locked as a cold session's folder is (holdDir); the lock moves
	// with the folder into sessions/.
	hold, err := holdDir(dir, true)
	if err != nil {
		return nil, err
	}
	if err := unix.Renameat2(unix.AT_FDCWD, dir, unix.AT_FDCWD, rt.SessionDir(cfg.ID), unix.RENAME_NOREPLACE); err != nil {
		hold.Close()
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("%w: %s", ErrSessionExists, cfg.ID)
		}
		return nil, err
	}
	s.home, s.hold = "", hold
	return s, nil
}

// seal tells a pooled agent that its session's folders are bound, so it
// applies Landlock now rather than before the first command (which it
// would do anyway: no command ever runs without it). The claim does not
// wait: the agent seals while the session's creator gets its answer.
//
// A gVisor agent binds the folders itself, in gVisor's kernel, from where
// late put them (gvisorBinds): the claim waits for its answer, so a
// sandbox that could not take its folders is never handed out.
func (s *Session) seal(late []specs.Mount) error {
	conn, err := wire.DialPacket(s.socketPath())
	if err != nil {
		return fmt.Errorf("agent unreachable: %w", err)
	}
	defer conn.Close()
	_, gvisor := s.container.(*gvisorContainer)
	if !gvisor {
		return wire.Send(conn, execRequest{Seal: true})
	}
	if err := wire.Send(conn, execRequest{Seal: true, Binds: gvisorBinds(late)}); err != nil {
		return err
	}
	var ev execEvent
	files, err := wire.Receive(conn, &ev)
	wire.CloseAll(files)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	if ev.Error != "" {
		return fmt.Errorf("agent: %s", ev.Error)
	}
	return nil
}
