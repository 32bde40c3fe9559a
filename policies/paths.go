package policies

import (
	"fmt"
	"maps"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"unicode"
)

// Variables a path may start with, in the order messages list them.
var pathVars = []string{"$SKILL_DIR", "$WORK_DIR", "$DATA_DIR", "$HOME"}

const pathHint = "start it with /, ~ or a variable ($SKILL_DIR, $WORK_DIR, $DATA_DIR, $HOME)"

// Rule is one entry of a policy's normalised file-system rule list.
// Access is AccessNone for a deny.
type Rule struct {
	Path   string
	Access Access
}

func (a Access) String() string {
	switch a {
	case AccessNone:
		return "none"
	case AccessRead:
		return "read"
	case AccessWrite:
		return "write"
	}
	return fmt.Sprintf("Access(%d)", int(a))
}

// normPath checks a path as written in a policy and returns its stored form:
// "~" becomes "$HOME", the path is cleaned. ".." is refused rather than
// cleaned away, because "$WORK_DIR/../.." reads like a grant inside the
// workspace and is not one.
func normPath(s string) (string, error) {
	if s == "" {
		return "", fmt.Errorf("empty path; %s", pathHint)
	}
	if strings.ContainsFunc(s, unicode.IsControl) {
		return "", fmt.Errorf("%q contains a control character", s)
	}
	orig := s
	switch {
	case s == "~" || strings.HasPrefix(s, "~/"):
		s = "$HOME" + s[1:]
	case strings.HasPrefix(s, "~"):
		return "", fmt.Errorf("%q: only ~ and ~/... are supported (they mean $HOME)", orig)
	}
	if strings.Contains(s[1:], "$") {
		return "", fmt.Errorf("%q has a variable (or $) after the start; a variable may only begin a path, as in \"$WORK_DIR/out\"", orig)
	}
	switch {
	case s[0] == '$':
		v, _, _ := strings.Cut(s, "/")
		if !slices.Contains(pathVars, v) {
			return "", fmt.Errorf("%q uses unknown variable %s; valid are $SKILL_DIR, $WORK_DIR, $DATA_DIR, $HOME", orig, v)
		}
	case s[0] != '/':
		return "", fmt.Errorf("%q is relative; %s", orig, pathHint)
	}
	if slices.Contains(strings.Split(s, "/"), "..") {
		return "", fmt.Errorf("%q has a \"..\" component; write the path it means without it", orig)
	}
	// DIR/** is DIR and everything below it, which is what a rule on DIR
	// means; any other glob would be taken as a literal file name by the
	// mounts, so it is refused.
	if rest, ok := strings.CutSuffix(s, "/**"); ok {
		if rest == "" {
			rest = "/"
		}
		s = rest
	}
	if i := strings.IndexAny(s, "*?["); i >= 0 {
		return "", fmt.Errorf("%q: fs rules take no glob patterns except a trailing /** (DIR/** is DIR and everything below it, the same as DIR); name the folder or file", orig)
	}
	return path.Clean(s), nil
}

// comparePaths orders paths component-wise, so that a parent sorts right
// before its children: "/a" < "/a/b" < "/a-b".
func comparePaths(a, b string) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		ca, cb := a[i], b[i]
		if ca == cb {
			continue
		}
		if ca == '/' {
			return -1
		}
		if cb == '/' {
			return 1
		}
		if ca < cb {
			return -1
		}
		return 1
	}
	return len(a) - len(b)
}

// isUnder reports whether root is a component-wise prefix of p (or p itself).
// Different variables never prefix each other, nor a variable an absolute path.
func isUnder(p, root string) bool {
	switch {
	case p == root:
		return true
	case root == "/":
		return strings.HasPrefix(p, "/")
	}
	return strings.HasPrefix(p, root+"/")
}

// lexicalPath brings a path asked about into the form rules are stored in.
func lexicalPath(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		p = "$HOME" + p[1:]
	}
	if p == "" {
		return p
	}
	return path.Clean(p)
}

// AccessAt says what p allows at a path, lexically: the rule with the
// longest path that is a component-wise prefix of the path decides, write
// implies read, no rule means AccessNone. The path is compared in the form
// the rules are in (variables before Expand, host paths after). Should two
// lists hold the same path (only possible in a Policy built in Go, or after
// Expand maps two variables to one folder), deny beats write beats read.
func (p *Policy) AccessAt(pathname string) Access {
	a, _ := p.accessAt(lexicalPath(pathname))
	return a
}

// accessAt also returns the deciding rule's path ("" when none).
func (p *Policy) accessAt(pathname string) (Access, string) {
	best, bestLen := AccessNone, -1
	rule := ""
	consider := func(list []string, a Access) {
		for _, r := range list {
			if !isUnder(pathname, r) {
				continue
			}
			if len(r) > bestLen || len(r) == bestLen && rank(a) > rank(best) {
				best, bestLen, rule = a, len(r), r
			}
		}
	}
	consider(p.FS.Read, AccessRead)
	consider(p.FS.Write, AccessWrite)
	consider(p.FS.Deny, AccessNone)
	return best, rule
}

// rank orders accesses for ties on one path: the safer one wins.
func rank(a Access) int {
	switch a {
	case AccessNone:
		return 2
	case AccessWrite:
		return 1
	}
	return 0
}

// Rules returns p's file-system rules as a minimal list sorted parent
// first: a rule that repeats the verdict of its nearest ancestor rule is
// dropped, except that a deny with no rule above it is kept — it documents
// intent and the spec masks it even though nothing mounts it.
func (p *Policy) Rules() []Rule {
	return minimalRules(p.points(), p.AccessAt, p.denied())
}

func (p *Policy) points() []string {
	var pts []string
	for _, l := range [][]string{p.FS.Read, p.FS.Write, p.FS.Deny} {
		for _, s := range l {
			pts = append(pts, lexicalPath(s))
		}
	}
	return pts
}

func (p *Policy) denied() map[string]bool {
	m := map[string]bool{}
	for _, s := range p.FS.Deny {
		m[lexicalPath(s)] = true
	}
	return m
}

// minimalRules emits, in parent-first order, every point whose verdict
// differs from the one it inherits from its nearest ancestor point (none:
// AccessNone), plus explicit denies with nothing above them. The result
// gives every path the verdict of its longest point-prefix.
func minimalRules(points []string, verdict func(string) Access, denied map[string]bool) []Rule {
	points = slices.Clone(points)
	slices.SortFunc(points, comparePaths)
	points = slices.Compact(points)
	var out []Rule
	for _, pt := range points {
		v := verdict(pt)
		inh, has := AccessNone, false
		for i := len(out) - 1; i >= 0; i-- {
			if isUnder(pt, out[i].Path) {
				inh, has = out[i].Access, true
				break
			}
		}
		if v != inh || v == AccessNone && denied[pt] && !has {
			out = append(out, Rule{Path: pt, Access: v})
		}
	}
	return out
}

func fsFromRules(rules []Rule) FS {
	var fs FS
	for _, r := range rules {
		switch r.Access {
		case AccessRead:
			fs.Read = append(fs.Read, r.Path)
		case AccessWrite:
			fs.Write = append(fs.Write, r.Path)
		default:
			fs.Deny = append(fs.Deny, r.Path)
		}
	}
	return fs
}

// Expand returns a copy of p whose file-system paths are cleaned absolute
// host paths. A rule using a variable that is empty or not absolute is an
// error naming the rule. Two rules landing on one host path (say $SKILL_DIR
// and $WORK_DIR are the same folder) become one: deny beats write beats read.
func (p *Policy) Expand(v Vars) (*Policy, error) {
	q := p.clone()
	rules, err := p.expandRules(v)
	if err != nil {
		return nil, err
	}
	acc := map[string]Access{}
	for _, r := range rules {
		if old, ok := acc[r.path]; !ok || rank(r.access) > rank(old) {
			acc[r.path] = r.access
		}
	}
	var out []Rule
	for _, s := range slices.Collect(maps.Keys(acc)) {
		out = append(out, Rule{Path: s, Access: acc[s]})
	}
	slices.SortFunc(out, func(a, b Rule) int { return comparePaths(a.Path, b.Path) })
	q.FS = fsFromRules(out)
	return q, nil
}

// hostRule is one fs rule after expansion, with the rule as written.
type hostRule struct {
	path   string
	access Access
	source string // e.g. "deny ~/.ssh", for messages
}

// expandRules expands every fs rule of p, in file order; an error names
// the rule.
func (p *Policy) expandRules(v Vars) ([]hostRule, error) {
	vals := map[string]string{"$SKILL_DIR": v.SkillDir, "$WORK_DIR": v.WorkDir, "$DATA_DIR": v.DataDir, "$HOME": v.Home}
	var out []hostRule
	for _, l := range []struct {
		name string
		list []string
		a    Access
	}{{"read", p.FS.Read, AccessRead}, {"write", p.FS.Write, AccessWrite}, {"deny", p.FS.Deny, AccessNone}} {
		for i, s := range l.list {
			host, err := expandPath(s, vals)
			if err != nil {
				return nil, fmt.Errorf("policy %s: %w", p.Name, &Error{Key: fmt.Sprintf("fs.%s[%d]", l.name, i), Msg: err.Error()})
			}
			out = append(out, hostRule{path: host, access: l.a, source: l.name + " " + s})
		}
	}
	return out, nil
}

// expandPath turns one stored path into a cleaned absolute host path.
func expandPath(s string, vals map[string]string) (string, error) {
	s = lexicalPath(s)
	if !strings.HasPrefix(s, "$") {
		if !filepath.IsAbs(s) {
			return "", fmt.Errorf("%q is relative; %s", s, pathHint)
		}
		return filepath.Clean(s), nil
	}
	name, rest, _ := strings.Cut(s, "/")
	val, known := vals[name]
	switch {
	case !known:
		return "", fmt.Errorf("%q uses unknown variable %s", s, name)
	case val == "":
		return "", fmt.Errorf("%q uses %s, which is not set", s, name)
	case !filepath.IsAbs(val):
		return "", fmt.Errorf("%q uses %s=%q, which is not an absolute path", s, name, val)
	}
	return filepath.Join(val, rest), nil
}

func (p *Policy) clone() *Policy {
	q := *p
	q.FS.Read = slices.Clone(p.FS.Read)
	q.FS.Write = slices.Clone(p.FS.Write)
	q.FS.Deny = slices.Clone(p.FS.Deny)
	q.Exec.Allow = slices.Clone(p.Exec.Allow)
	q.Network.Allow = slices.Clone(p.Network.Allow)
	q.Env.Allow = slices.Clone(p.Env.Allow)
	q.Env.Set = maps.Clone(p.Env.Set)
	return &q
}

// WithSkillDir returns a copy of p whose $SKILL_DIR rules name dir, an
// absolute host folder, so several skills merged into one sandbox each keep
// their own folder (it appears at its host path). Two rules landing on one
// path become one: deny beats write beats read. A program in the skill's
// folder (exec.allow "$SKILL_DIR/...") is refused: only the skill whose
// folder is $SKILL_DIR can run its own programs.
func (p *Policy) WithSkillDir(dir string) (*Policy, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("policy %s: skill folder %q is not absolute", p.Name, dir)
	}
	for _, e := range p.Exec.Allow {
		if strings.HasPrefix(e, SkillExecPrefix) {
			return nil, fmt.Errorf("policy %s: exec.allow %q: only the first skill (the one whose folder is $SKILL_DIR) may run programs from its folder; list this policy first, or run the program through an allowed interpreter (sh %s)", p.Name, e, e)
		}
	}
	acc := map[string]Access{}
	for _, r := range p.Rules() {
		path := r.Path
		if rest, ok := strings.CutPrefix(path, "$SKILL_DIR"); ok && (rest == "" || rest[0] == '/') {
			path = filepath.Join(dir, rest)
		}
		if old, ok := acc[path]; !ok || rank(r.Access) > rank(old) {
			acc[path] = r.Access
		}
	}
	var rules []Rule
	for _, s := range slices.Sorted(maps.Keys(acc)) {
		rules = append(rules, Rule{Path: s, Access: acc[s]})
	}
	slices.SortFunc(rules, func(a, b Rule) int { return comparePaths(a.Path, b.Path) })
	q := p.clone()
	q.FS = fsFromRules(rules)
	return q, nil
}
