package policies

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// SystemDirs are readable (never writable) by every policy, unless a deny
// covers them: the sandbox's root is built from them.
var SystemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"}

// SystemBinDirs are where a bare exec.allow name ("curl") is looked up.
var SystemBinDirs = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// Checker answers policy questions for agent tools that run in the host
// process (read_file, write_file, web_fetch) and so never enter a sandbox.
// It is safe for concurrent use.
type Checker struct {
	rules   []hostRule // as expanded, plus their resolved forms where those differ
	workDir string
	exec    Exec
	execAbs []string // absolute exec.allow entries, also as resolved
	hosts   []HostPattern
}

// NewChecker expands p with v and resolves the symlinks of every rule path
// that exists, so a grant on a path reached through a link still matches.
// Relative paths given to the checks resolve against v.WorkDir.
func NewChecker(p *Policy, v Vars) (*Checker, error) {
	if v.WorkDir != "" && !filepath.IsAbs(v.WorkDir) {
		return nil, fmt.Errorf("new checker: work directory %q is not absolute", v.WorkDir)
	}
	c := &Checker{exec: p.Exec}
	if v.WorkDir != "" {
		c.workDir = filepath.Clean(v.WorkDir)
	}
	rules, err := p.expandRules(v)
	if err != nil {
		return nil, fmt.Errorf("new checker: %w", err)
	}
	for _, r := range rules {
		c.rules = append(c.rules, r)
		if real, err := resolvePath(r.path); err == nil && real != r.path {
			r.path = real
			c.rules = append(c.rules, r)
		}
	}
	for _, s := range p.Network.Allow {
		h, err := ParseHostPattern(s)
		if err != nil {
			return nil, fmt.Errorf("new checker: policy %s: network.allow: %w", p.Name, err)
		}
		c.hosts = append(c.hosts, h)
	}
	for _, s := range p.Exec.Allow {
		if rest, ok := strings.CutPrefix(s, SkillExecPrefix); ok && filepath.IsAbs(v.SkillDir) {
			s = filepath.Join(v.SkillDir, rest)
		}
		if filepath.IsAbs(s) {
			c.execAbs = append(c.execAbs, filepath.Clean(s))
			if r, err := resolvePath(s); err == nil {
				c.execAbs = append(c.execAbs, r)
			}
		}
	}
	return c, nil
}

// CheckRead returns nil if the policy lets the path be read.
func (c *Checker) CheckRead(path string) error { return c.checkPath("read", path, AccessRead) }

// CheckWrite returns nil if the policy lets the path be written or created.
func (c *Checker) CheckWrite(path string) error { return c.checkPath("write", path, AccessWrite) }

// checkPath requires both the lexical path (".." resolved as text) and the
// path with every symlink resolved to be allowed: the first is what the
// caller asked for, the second is what the kernel would open.
func (c *Checker) checkPath(op, path string, want Access) error {
	if path == "" {
		return fmt.Errorf("%s: %w: empty path", op, ErrDenied)
	}
	abs := path
	if !filepath.IsAbs(abs) {
		if c.workDir == "" {
			return fmt.Errorf("%s %q: %w: relative path and no work directory", op, path, ErrDenied)
		}
		// Not filepath.Join: it would clean "link/.." away before the
		// kernel's reading (the link's target's parent) is checked.
		abs = c.workDir + "/" + abs
	}
	lex := filepath.Clean(abs)
	if err := c.allows(lex, want); err != nil {
		return fmt.Errorf("%s %q: %w: %s", op, path, ErrDenied, err)
	}
	res, err := resolvePath(abs)
	if err != nil {
		return fmt.Errorf("%s %q: %w: cannot resolve it: %v", op, path, ErrDenied, err)
	}
	if res != lex {
		if err := c.allows(res, want); err != nil {
			return fmt.Errorf("%s %q: %w: it resolves to %s", op, path, ErrDenied, err)
		}
	}
	return nil
}

// allows explains, as an error, why path does not have access want.
func (c *Checker) allows(path string, want Access) error {
	var best *hostRule
	for i := range c.rules {
		r := &c.rules[i]
		if !isUnder(path, r.path) {
			continue
		}
		if best == nil || len(r.path) > len(best.path) || len(r.path) == len(best.path) && rank(r.access) > rank(best.access) {
			best = r
		}
	}
	switch {
	case best == nil && want == AccessRead && slices.ContainsFunc(SystemDirs, func(d string) bool { return isUnder(path, d) }):
		return nil
	case best == nil:
		return fmt.Errorf("%s: no fs rule grants it", path)
	case best.access == AccessNone:
		return fmt.Errorf("%s: under %s", path, best.source)
	case best.access < want:
		return fmt.Errorf("%s: under %s, which does not allow writing", path, best.source)
	}
	return nil
}

// CheckNetwork returns nil if some network.allow pattern matches host:port.
// A special address given as an IP literal (loopback, private, link-local,
// metadata...) needs a rule that opens it, as in the egress proxy: "*:443"
// or 0.0.0.0/0 alone do not. (Names are not resolved here; the proxy
// checks the addresses they resolve to.)
func (c *Checker) CheckNetwork(host string, port int) error {
	lit, err := netip.ParseAddr(strings.Trim(host, "[]"))
	isAddr := err == nil
	for _, h := range c.hosts {
		if !h.Match(host, port) {
			continue
		}
		if _, special := Classify(lit); !isAddr || !special {
			return nil
		}
		for _, o := range c.hosts {
			if o.Opens(lit, port, false) {
				return nil
			}
		}
		return fmt.Errorf("connect %s: %w: a special address needs a network.allow rule naming it", hostPort(host, port), ErrDenied)
	}
	return fmt.Errorf("connect %s: %w: no network.allow pattern matches", hostPort(host, port), ErrDenied)
}

// DialControl is for net.Dialer.Control in a tool that connects from its
// own process: it refuses a connection to a special address (loopback,
// private, link-local, metadata...) that no network.allow rule opens, as
// the egress proxy does. CheckNetwork judges the name a tool asks for;
// this judges the address the name resolved to ("*:443" matches every
// name, "localhost" too). The host's own addresses are not known here.
func (c *Checker) DialControl(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("connect %s: %w: not an address and port", address, ErrDenied)
	}
	a := ap.Addr().Unmap().WithZone("")
	if _, special := Classify(a); !special {
		return nil
	}
	for _, h := range c.hosts {
		if h.Opens(a, int(ap.Port()), false) {
			return nil
		}
	}
	return fmt.Errorf("connect %s: %w: a special address needs a network.allow rule naming it", address, ErrDenied)
}

func hostPort(host string, port int) string {
	if strings.Contains(host, ":") && !strings.HasPrefix(host, "[") {
		host = "[" + host + "]"
	}
	return fmt.Sprintf("%s:%d", host, port)
}

// CheckExec returns nil if the policy lets name run (under exec.workspace,
// also a path under the work directory). A bare name must be
// listed; the caller is expected to look it up in SystemBinDirs, not in a
// PATH that could include the workspace. A path (relative ones resolve
// against the work directory) is allowed if listed, or if it is a listed
// bare name inside one of SystemBinDirs — either as given or with its
// symlinks resolved (so /usr/bin/cc passes when "cc" is listed).
func (c *Checker) CheckExec(name string) error {
	if c.exec.All {
		return nil
	}
	if name == "" {
		return fmt.Errorf("exec: %w: empty name", ErrDenied)
	}
	if !strings.Contains(name, "/") {
		if slices.Contains(c.exec.Programs(), name) {
			return nil
		}
		return fmt.Errorf("exec %q: %w: not in exec.allow", name, ErrDenied)
	}
	path := name
	if !filepath.IsAbs(path) {
		if c.workDir == "" {
			return fmt.Errorf("exec %q: %w: relative path and no work directory", name, ErrDenied)
		}
		path = c.workDir + "/" + path
	}
	if c.execPathAllowed(filepath.Clean(path)) {
		return nil
	}
	r, err := resolvePath(path)
	if err == nil && c.execPathAllowed(r) {
		return nil
	}
	// exec.workspace: what is written into the workspace runs, judged by
	// where the path really leads (a link in the workspace to /usr/bin
	// does not make its programs the workspace's).
	if err == nil && c.exec.Workspace && c.workDir != "" {
		if wd, werr := resolvePath(c.workDir); werr == nil && isUnder(r, wd) {
			return nil
		}
	}
	return fmt.Errorf("exec %q: %w: not in exec.allow", name, ErrDenied)
}

func (c *Checker) execPathAllowed(path string) bool {
	if slices.Contains(c.execAbs, path) {
		return true
	}
	return slices.Contains(SystemBinDirs, filepath.Dir(path)) && slices.Contains(c.exec.Programs(), filepath.Base(path))
}

// maxSymlinks matches Linux's limit on links followed in one lookup.
const maxSymlinks = 40

// resolvePath resolves every symlink in an absolute path, one component at
// a time, as the kernel does: "link/.." is the parent of the link's target,
// so the path must not be cleaned first. Unlike filepath.EvalSymlinks it also follows a dangling link and
// returns where it points, since creating a file through it would write
// there; the part that does not exist yet is appended lexically.
func resolvePath(p string) (string, error) {
	rest := strings.Split(p, "/")
	cur := "/"
	links := 0
	for len(rest) > 0 {
		comp := rest[0]
		rest = rest[1:]
		switch comp {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, comp)
		fi, err := os.Lstat(next)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return filepath.Join(append([]string{next}, rest...)...), nil
		}
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if links++; links > maxSymlinks {
			return "", fmt.Errorf("too many levels of symbolic links at %s", next)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			cur = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return cur, nil
}
