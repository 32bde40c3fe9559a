package policies

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/BurntSushi/toml"
)

// Load reads and validates a policy file. Limits the file leaves out take
// DefaultLimits.
func Load(path string) (*Policy, error) {
	data, err := ReadFile(path, "policy", MaxPolicyFile)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// Parse validates TOML policy data; filename is used in errors only. Every
// problem is an *Error naming the file, line and key. Lists come back
// sorted (paths parent first) and host patterns in canonical form, so equal
// permissions give equal Policies and equal hashes.
func Parse(filename string, data []byte) (*Policy, error) {
	root, err := tomlTree(data)
	if err != nil && isSkillFile(filename, data) {
		return nil, &Error{File: filename, Msg: fmt.Sprintf("a SKILL.md, not a warden policy (TOML); convert it first: warden policy import %s -o policy.toml", filename)}
	}
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, &Error{File: filename, Line: pe.Position.Line, Msg: "toml syntax: " + pe.Message}
		}
		return nil, &Error{File: filename, Msg: "toml syntax: " + strings.TrimPrefix(err.Error(), "toml: ")}
	}
	return decode(filename, root)
}

// Schema: the keys each table may hold. Exact, case-sensitive: the toml
// library matches struct fields case-insensitively and Undecoded would then
// miss "NAME" or "fs.READ", so keys are checked here against this list.
var (
	topKeys    = []string{"name", "description", "fs", "exec", "network", "env", "limits", "commands", "sandbox"}
	fsKeys     = []string{"read", "write", "deny"}
	execKeys   = []string{"allow", "workspace"}
	netKeys    = []string{"allow"}
	envKeys    = []string{"allow", "set"}
	limitsKeys = []string{"memory", "pids", "cpu", "timeout", "idle"}
)

type decoder struct {
	file string
}

func (d *decoder) errf(n *node, format string, args ...any) error {
	return &Error{File: d.file, Line: n.line, Key: n.key, Msg: fmt.Sprintf(format, args...)}
}

// table returns n's table after checking that every key is in valid.
func (d *decoder) table(n *node, what string, valid []string) (*table, error) {
	t, ok := n.val.(*table)
	if !ok {
		return nil, d.errf(n, "wrong type: got %s, want a table (%s)", typeName(n.val), what)
	}
	for _, k := range t.keys {
		if !slices.Contains(valid, k) {
			return nil, d.errf(t.vals[k], "unknown key; valid keys in %s are %s", what, strings.Join(valid, ", "))
		}
	}
	return t, nil
}

func (d *decoder) str(n *node) (string, error) {
	s, ok := n.val.(string)
	if !ok {
		return "", d.errf(n, "wrong type: got %s, want a string", typeName(n.val))
	}
	return s, nil
}

// strList decodes a list of strings, rejecting duplicates after canon
// (which also checks each entry).
func (d *decoder) strList(n *node, canon func(string) (string, error)) ([]string, []*node, error) {
	list, ok := n.val.([]*node)
	if !ok {
		return nil, nil, d.errf(n, "wrong type: got %s, want a list of strings, e.g. [\"a\", \"b\"]", typeName(n.val))
	}
	var out []string
	seen := map[string]*node{}
	for _, e := range list {
		s, err := d.str(e)
		if err != nil {
			return nil, nil, err
		}
		c, err := canon(s)
		if err != nil {
			return nil, nil, d.errf(e, "%v", err)
		}
		if first, dup := seen[c]; dup {
			return nil, nil, d.errf(e, "%q is listed twice (also %s); remove one", s, first.key)
		}
		seen[c] = e
		out = append(out, c)
	}
	return out, list, nil
}

// decode turns a document tree into a Policy, checking everything.
func decode(file string, root *node) (*Policy, error) {
	d := &decoder{file: file}
	t, err := d.table(root, "a policy", topKeys)
	if err != nil {
		return nil, err
	}
	p := &Policy{Limits: DefaultLimits, Exec: Exec{All: true}}
	for key, omitted := range map[string]*bool{"fs": &p.Omitted.FS, "exec": &p.Omitted.Exec, "network": &p.Omitted.Network, "env": &p.Omitted.Env, "commands": &p.Omitted.Commands} {
		*omitted = t.get(key) == nil
	}
	p.Omitted.Memory, p.Omitted.Pids, p.Omitted.CPU, p.Omitted.Timeout, p.Omitted.Idle = true, true, true, true, true
	steps := []func(*decoder, *table, *Policy) error{decodeName, decodeFS, decodeExec, decodeNetwork, decodeEnv, decodeLimits, decodeCommands, decodeSandbox}
	for _, step := range steps {
		if err := step(d, t, p); err != nil {
			return nil, err
		}
	}
	return p, nil
}

var namePartRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`) })

const maxNameLen = 1024

// checkName: a name is one or more parts joined by "+" (the form Merge and
// Intersect produce); each part [a-z0-9][a-z0-9._-]*, at most 64 characters.
func checkName(s string) error {
	if s == "" {
		return fmt.Errorf("empty name; use lower-case letters, digits, '.', '_' and '-', e.g. \"web-fetch\"")
	}
	if len(s) > maxNameLen {
		return fmt.Errorf("name is %d characters long; at most %d", len(s), maxNameLen)
	}
	for part := range strings.SplitSeq(s, "+") {
		if len(part) > 64 {
			return fmt.Errorf("name %q is longer than 64 characters", part)
		}
		if !namePartRE().MatchString(part) {
			return fmt.Errorf("bad name %q; start with a lower-case letter or digit, then letters, digits, '.', '_' or '-' (e.g. \"web-fetch\")", s)
		}
	}
	return nil
}

func decodeName(d *decoder, t *table, p *Policy) error {
	n := t.get("name")
	if n == nil {
		return &Error{File: d.file, Key: "name", Msg: "missing; every policy needs a name, e.g. name = \"web-fetch\""}
	}
	s, err := d.str(n)
	if err != nil {
		return err
	}
	if err := checkName(s); err != nil {
		return d.errf(n, "%v", err)
	}
	p.Name = s
	if n := t.get("description"); n != nil {
		if p.Description, err = d.str(n); err != nil {
			return err
		}
	}
	return nil
}

func decodeFS(d *decoder, t *table, p *Policy) error {
	n := t.get("fs")
	if n == nil {
		return nil
	}
	ft, err := d.table(n, "[fs]", fsKeys)
	if err != nil {
		return err
	}
	seen := map[string]*node{} // across the three lists
	for _, l := range []struct {
		key string
		dst *[]string
	}{{"read", &p.FS.Read}, {"write", &p.FS.Write}, {"deny", &p.FS.Deny}} {
		ln := ft.get(l.key)
		if ln == nil {
			continue
		}
		list, nodes, err := d.strList(ln, normPath)
		if err != nil {
			return err
		}
		for i, s := range list {
			if first, dup := seen[s]; dup {
				return d.errf(nodes[i], "%q is also in %s; a path may be in one of read, write and deny only", s, first.key)
			}
			seen[s] = nodes[i]
		}
		slices.SortFunc(list, comparePaths)
		*l.dst = list
	}
	return nil
}

var execNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9._+-]+$`) })

// SkillExecPrefix starts an exec.allow entry naming a program in the
// skill's own folder.
const SkillExecPrefix = "$SKILL_DIR/"

// checkExec accepts a bare program name, an absolute path, or a path in
// the skill's own folder ("$SKILL_DIR/scripts/process.sh").
func checkExec(s string) (string, error) {
	if rest, ok := strings.CutPrefix(s, SkillExecPrefix); ok && !strings.Contains(rest, "$") {
		c, err := checkExec("/" + rest)
		if err != nil {
			return "", fmt.Errorf("%q: %w", s, err)
		}
		return "$SKILL_DIR" + c, nil
	}
	switch {
	case s == "":
		return "", fmt.Errorf("empty entry; write a program name (\"curl\") or an absolute path (\"/usr/bin/curl\")")
	case strings.Contains(s, "$") || strings.HasPrefix(s, "~"):
		return "", fmt.Errorf("%q: exec.allow takes no variable but $SKILL_DIR (a program the skill ships, \"$SKILL_DIR/scripts/run.sh\"); write a program name or an absolute path ([exec] workspace = true lets programs written into the workspace run)", s)
	case strings.Contains(s, "/"):
		if !strings.HasPrefix(s, "/") {
			return "", fmt.Errorf("%q has a / but is not absolute; write a bare name (\"curl\") or an absolute path (\"/usr/bin/curl\")", s)
		}
		if slices.Contains(strings.Split(s, "/"), "..") {
			return "", fmt.Errorf("%q has a \"..\" component; write the path it means without it", s)
		}
		if strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return "", fmt.Errorf("%q contains a control character", s)
		}
		c := lexicalPath(s)
		if c == "/" {
			return "", fmt.Errorf("%q is not a program", s)
		}
		return c, nil
	case s == "." || s == ".." || !execNameRE().MatchString(s):
		return "", fmt.Errorf("bad program name %q; use letters, digits, '.', '_', '+' and '-', or an absolute path", s)
	}
	return s, nil
}

func decodeExec(d *decoder, t *table, p *Policy) error {
	n := t.get("exec")
	if n == nil {
		return nil
	}
	et, err := d.table(n, "[exec]", execKeys)
	if err != nil {
		return err
	}
	if wn := et.get("workspace"); wn != nil {
		w, ok := wn.val.(bool)
		if !ok {
			return d.errf(wn, "wrong type: got %s, want true or false", typeName(wn.val))
		}
		p.Exec.Workspace = w
	}
	an := et.get("allow")
	if an == nil {
		return nil
	}
	list, _, err := d.strList(an, checkExec)
	if err != nil {
		return err
	}
	sort.Strings(list)
	p.Exec.All, p.Exec.Allow = false, list
	return nil
}

func canonHost(s string) (string, error) {
	h, err := ParseHostPattern(s)
	if err != nil {
		return "", err
	}
	return h.String(), nil
}

func decodeNetwork(d *decoder, t *table, p *Policy) error {
	n := t.get("network")
	if n == nil {
		return nil
	}
	nt, err := d.table(n, "[network]", netKeys)
	if err != nil {
		return err
	}
	an := nt.get("allow")
	if an == nil {
		return nil
	}
	list, _, err := d.strList(an, canonHost)
	if err != nil {
		return err
	}
	sort.Strings(list)
	p.Network.Allow = list
	return nil
}

var envNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })

func checkEnvName(s string) (string, error) {
	if !envNameRE().MatchString(s) {
		return "", fmt.Errorf("bad variable name %q; use letters, digits and _, not starting with a digit", s)
	}
	return s, nil
}

// notProxyVar refuses a proxy variable in [env] of a policy with network
// rules: warden points those at its egress proxy, so the policy's own
// would be silently replaced. ([network] is decoded first.)
func (d *decoder) notProxyVar(n *node, name string, p *Policy) error {
	if len(p.Network.Allow) == 0 {
		return nil
	}
	for _, proxy := range []string{"http_proxy", "https_proxy", "all_proxy", "no_proxy"} {
		if strings.EqualFold(name, proxy) {
			return d.errf(n, "%s: warden sets the proxy variables to its egress proxy when [network] allows hosts; remove it", name)
		}
	}
	return nil
}

func decodeEnv(d *decoder, t *table, p *Policy) error {
	n := t.get("env")
	if n == nil {
		return nil
	}
	et, err := d.table(n, "[env]", envKeys)
	if err != nil {
		return err
	}
	allowed := map[string]*node{}
	if an := et.get("allow"); an != nil {
		list, nodes, err := d.strList(an, checkEnvName)
		if err != nil {
			return err
		}
		for i, s := range list {
			if err := d.notProxyVar(nodes[i], s, p); err != nil {
				return err
			}
			allowed[s] = nodes[i]
		}
		sort.Strings(list)
		p.Env.Allow = list
	}
	sn := et.get("set")
	if sn == nil {
		return nil
	}
	st, ok := sn.val.(*table)
	if !ok {
		return d.errf(sn, "wrong type: got %s, want a table of strings, e.g. { PAGER = \"cat\" }", typeName(sn.val))
	}
	for _, k := range st.keys {
		vn := st.vals[k]
		if _, err := checkEnvName(k); err != nil {
			return d.errf(vn, "%v", err)
		}
		v, err := d.str(vn)
		if err != nil {
			return err
		}
		if strings.ContainsRune(v, 0) {
			return d.errf(vn, "value contains a NUL byte")
		}
		if err := d.notProxyVar(vn, k, p); err != nil {
			return err
		}
		if a, both := allowed[k]; both {
			return d.errf(vn, "%s is also in env.allow (%s); pass it through or set it, not both", k, a.key)
		}
		if p.Env.Set == nil {
			p.Env.Set = map[string]string{}
		}
		p.Env.Set[k] = v
	}
	return nil
}

func decodeLimits(d *decoder, t *table, p *Policy) error {
	n := t.get("limits")
	if n == nil {
		return nil
	}
	lt, err := d.table(n, "[limits]", limitsKeys)
	if err != nil {
		return err
	}
	for key, omitted := range map[string]*bool{"memory": &p.Omitted.Memory, "pids": &p.Omitted.Pids, "cpu": &p.Omitted.CPU, "timeout": &p.Omitted.Timeout, "idle": &p.Omitted.Idle} {
		*omitted = lt.get(key) == nil
	}
	if n := lt.get("memory"); n != nil {
		s, ok := n.val.(string)
		if !ok {
			return d.errf(n, "wrong type: got %s, want a size string such as \"256MiB\"", typeName(n.val))
		}
		m, err := parseSize(s)
		if err == nil {
			err = checkMemory(m)
		}
		if err != nil {
			return d.errf(n, "%v", err)
		}
		p.Limits.Memory = m
	}
	if n := lt.get("pids"); n != nil {
		i, ok := n.val.(int64)
		if !ok {
			return d.errf(n, "wrong type: got %s, want an integer such as 64", typeName(n.val))
		}
		if err := checkPids(i); err != nil {
			return d.errf(n, "%v", err)
		}
		p.Limits.Pids = i
	}
	if n := lt.get("cpu"); n != nil {
		var f float64
		switch v := n.val.(type) {
		case float64:
			f = v
		case int64:
			f = float64(v)
		default:
			return d.errf(n, "wrong type: got %s, want a number of cores such as 1.0 or 0.5", typeName(n.val))
		}
		if err := checkCPU(f); err != nil {
			return d.errf(n, "%v", err)
		}
		p.Limits.CPU = f
	}
	for _, l := range []struct {
		key    string
		dst    *time.Duration
		lo, hi time.Duration
	}{{"timeout", &p.Limits.Timeout, MinTimeout, MaxTimeout}, {"idle", &p.Limits.Idle, MinIdle, MaxIdle}} {
		n := lt.get(l.key)
		if n == nil {
			continue
		}
		s, ok := n.val.(string)
		if !ok {
			return d.errf(n, "wrong type: got %s, want a duration string such as \"30s\"", typeName(n.val))
		}
		v, err := parseDuration(s, l.lo, l.hi)
		if err != nil {
			return d.errf(n, "%v", err)
		}
		*l.dst = v
	}
	return nil
}
