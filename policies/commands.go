package policies

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Commands are the [commands] rules: which command lines of a program are
// refused (Deny), wait for a human (Ask) or run (Allow). A command line no
// pattern matches runs, so a policy without [commands] changes nothing.
//
// A pattern is words separated by spaces: the program (a name such as
// "git", or an absolute path) then one glob per argument; "*" matches any
// text within one argument (slashes too), "?" one character, and a last
// word "**" any remaining arguments, none included. "\" quotes the next
// character ("\*", "\ " for a space inside an argument).
//
// The most specific matching pattern decides (see Pattern.Compare); on a
// tie, the stricter list (deny, then ask).
type Commands struct {
	Deny, Ask, Allow []string
	// Timeout is how long an ask waits for an answer before it is a deny.
	// Zero means DefaultAskTimeout.
	Timeout time.Duration
}

// DefaultAskTimeout: an ask no human answers is a deny after this long.
const DefaultAskTimeout = 5 * time.Minute

// The bounds of commands.timeout.
const (
	MinAskTimeout = time.Second
	MaxAskTimeout = 24 * time.Hour
)

// Action is what a rule does with a command line.
type Action int

const (
	ActionNone Action = iota // no rule matches: the command runs
	ActionAllow
	ActionAsk
	ActionDeny
)

func (a Action) String() string {
	return [...]string{"none", "allow", "ask", "deny"}[a]
}

// Empty says the policy has no command rules.
func (c Commands) Empty() bool { return len(c.Deny)+len(c.Ask)+len(c.Allow) == 0 }

// AskTimeout is Timeout or its default.
func (c Commands) AskTimeout() time.Duration {
	if c.Timeout == 0 {
		return DefaultAskTimeout
	}
	return c.Timeout
}

// Pattern is one parsed rule.
type Pattern struct {
	Text    string   // canonical: the words joined by one space
	Program string   // a name or an absolute path
	Args    []string // globs, unescaped form kept with their escapes
	Rest    bool     // ends with "**"
}

// ParsePattern reads one rule; the error says what is wrong and how to
// write it instead.
func ParsePattern(s string) (Pattern, error) {
	words, err := splitWords(s)
	if err != nil {
		return Pattern{}, fmt.Errorf("%q: %w", s, err)
	}
	if len(words) == 0 {
		return Pattern{}, fmt.Errorf("empty pattern; write a program then its arguments, e.g. \"git push **\"")
	}
	prog := words[0]
	if strings.ContainsAny(prog, "*?\\") {
		return Pattern{}, fmt.Errorf("%q: the program %q may not be a glob; name one program (\"git\") or its absolute path (\"/usr/bin/git\")", s, prog)
	}
	if _, err := checkExec(prog); err != nil || strings.HasPrefix(prog, SkillExecPrefix) {
		return Pattern{}, fmt.Errorf("%q: the program %q is neither a name (\"git\") nor an absolute path (\"/usr/bin/git\")", s, prog)
	}
	p := Pattern{Program: lexicalPathIf(prog)}
	for i, w := range words[1:] {
		if w == "**" {
			if i != len(words)-2 {
				return Pattern{}, fmt.Errorf("%q: ** stands for all remaining arguments and must be the last word; use * for one argument", s)
			}
			p.Rest = true
			continue
		}
		p.Args = append(p.Args, w)
	}
	p.Text = strings.Join(append([]string{p.Program}, words[1:]...), " ")
	return p, nil
}

func lexicalPathIf(s string) string {
	if strings.HasPrefix(s, "/") {
		return lexicalPath(s)
	}
	return s
}

// splitWords splits on unquoted spaces, keeping escapes in the words.
func splitWords(s string) ([]string, error) {
	if strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }) {
		return nil, fmt.Errorf("contains a control character")
	}
	var words []string
	var w strings.Builder
	in := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\':
			if i+1 == len(s) {
				return nil, fmt.Errorf("ends with a lone \\; write \\\\ for a backslash")
			}
			w.WriteByte(c)
			w.WriteByte(s[i+1])
			i++
			in = true
		case c == ' ' || c == '\t':
			if in {
				words = append(words, w.String())
				w.Reset()
				in = false
			}
		default:
			w.WriteByte(c)
			in = true
		}
	}
	if in {
		words = append(words, w.String())
	}
	return words, nil
}

// globMatch matches one argument: * any text, ? one byte, \x the byte x.
func globMatch(glob, s string) bool {
	if glob == "" {
		return s == ""
	}
	switch glob[0] {
	case '*':
		for i := 0; i <= len(s); i++ {
			if globMatch(glob[1:], s[i:]) {
				return true
			}
		}
		return false
	case '?':
		return s != "" && globMatch(glob[1:], s[1:])
	case '\\':
		return len(glob) > 1 && s != "" && s[0] == glob[1] && globMatch(glob[2:], s[1:])
	}
	return s != "" && s[0] == glob[0] && globMatch(glob[1:], s[1:])
}

func isLiteral(glob string) bool {
	for i := 0; i < len(glob); i++ {
		switch glob[i] {
		case '*', '?':
			return false
		case '\\':
			i++
		}
	}
	return true
}

// Matches says whether the pattern covers a command line: names are the
// program's identities (its name and its absolute paths), args its
// arguments (argv without argv[0]).
func (p Pattern) Matches(names []string, args []string) bool {
	if !slices.Contains(names, p.Program) {
		return false
	}
	if len(args) < len(p.Args) || len(args) > len(p.Args) && !p.Rest {
		return false
	}
	for i, g := range p.Args {
		if !globMatch(g, args[i]) {
			return false
		}
	}
	return true
}

// Word ranks, position by position: a literal argument is more specific
// than a glob; a glob than the end of a pattern without "**" (matching
// only where the command line ends); that than "**".
const (
	rankRest = iota
	rankEnd
	rankGlob
	rankLiteral
)

func (p Pattern) rank(i int) int {
	switch {
	case i < len(p.Args) && isLiteral(p.Args[i]):
		return rankLiteral
	case i < len(p.Args):
		return rankGlob
	case p.Rest:
		return rankRest
	}
	return rankEnd
}

// Compare orders two patterns by specificity (positive: p is more
// specific). A program given by path is more specific than one by name;
// then the arguments are compared from the first, and at the first
// position where their ranks differ the higher rank wins (literal, glob,
// end of a closed pattern, "**"). Equal otherwise.
func (p Pattern) Compare(q Pattern) int {
	pp, qp := strings.HasPrefix(p.Program, "/"), strings.HasPrefix(q.Program, "/")
	if pp != qp {
		if pp {
			return 1
		}
		return -1
	}
	for i := 0; i <= max(len(p.Args), len(q.Args)); i++ {
		if d := p.rank(i) - q.rank(i); d != 0 {
			return d
		}
	}
	return 0
}

// Decision is what the rules say about one command line.
type Decision struct {
	Action Action
	Rule   string // the deciding pattern; empty for ActionNone
}

// Describe names the rule for messages: `commands.ask "git push **"`.
func (d Decision) Describe() string {
	if d.Action == ActionNone {
		return "no rule"
	}
	return fmt.Sprintf("commands.%s %q", d.Action, d.Rule)
}

// Decide applies the rules to a command line (see Pattern.Matches for
// names and args). Patterns are parsed as written; a policy from Parse has
// only good ones, and a bad one matches nothing.
func (c Commands) Decide(names []string, args []string) Decision {
	var best Decision
	var bestPat Pattern
	for _, l := range c.lists() {
		for _, s := range l.rules {
			p, err := ParsePattern(s)
			if err != nil || !p.Matches(names, args) {
				continue
			}
			d := 0
			if best.Action != ActionNone {
				d = p.Compare(bestPat)
			}
			if best.Action == ActionNone || d > 0 || d == 0 && l.action > best.Action {
				best, bestPat = Decision{Action: l.action, Rule: p.Text}, p
			}
		}
	}
	return best
}

type ruleList struct {
	action Action
	key    string
	rules  []string
}

func (c Commands) lists() []ruleList {
	return []ruleList{{ActionDeny, "deny", c.Deny}, {ActionAsk, "ask", c.Ask}, {ActionAllow, "allow", c.Allow}}
}

// Programs lists the distinct programs the rules name, sorted.
func (c Commands) Programs() []string {
	var out []string
	for _, l := range c.lists() {
		for _, s := range l.rules {
			if p, err := ParsePattern(s); err == nil {
				out = append(out, p.Program)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ProgramNames is what a program found at path answers to in the rules:
// its path and its base name.
func ProgramNames(path string) []string {
	return []string{filepath.Base(path), path}
}

var commandsKeys = []string{"deny", "ask", "allow", "timeout"}

func decodeCommands(d *decoder, t *table, p *Policy) error {
	n := t.get("commands")
	if n == nil {
		return nil
	}
	ct, err := d.table(n, "[commands]", commandsKeys)
	if err != nil {
		return err
	}
	seen := map[string]*node{}
	for _, l := range []struct {
		key string
		dst *[]string
	}{{"deny", &p.Commands.Deny}, {"ask", &p.Commands.Ask}, {"allow", &p.Commands.Allow}} {
		ln := ct.get(l.key)
		if ln == nil {
			continue
		}
		list, nodes, err := d.strList(ln, func(s string) (string, error) {
			pat, err := ParsePattern(s)
			return pat.Text, err
		})
		if err != nil {
			return err
		}
		for i, s := range list {
			if first, dup := seen[s]; dup {
				return d.errf(nodes[i], "%q is also in %s; a pattern may be in one of deny, ask and allow only", s, first.key)
			}
			seen[s] = nodes[i]
		}
		slices.Sort(list)
		*l.dst = list
	}
	if tn := ct.get("timeout"); tn != nil {
		s, ok := tn.val.(string)
		if !ok {
			return d.errf(tn, "wrong type: got %s, want a duration string such as \"5m\"", typeName(tn.val))
		}
		v, err := parseDuration(s, MinAskTimeout, MaxAskTimeout)
		if err != nil {
			return d.errf(tn, "%v", err)
		}
		p.Commands.Timeout = v
	}
	return nil
}

// composeCommands: a merge keeps every rule (a pattern in two lists goes to
// the more permissive one) and the longest timeout. An intersection is
// never more permissive than any input: denies and asks add up, an allow
// stays only when every input with rules allows the same pattern, an ask
// that could outrank another input's deny becomes a deny, and the shortest
// timeout holds.
func composeCommands(ps []*Policy, union bool) Commands {
	var out Commands
	action := map[string]Action{}
	origin := map[string]int{}
	allowCount := map[string]int{}
	for i, p := range ps {
		for _, l := range p.Commands.lists() {
			for _, s := range l.rules {
				if l.action == ActionAllow {
					allowCount[s]++
				}
				old, ok := action[s]
				switch {
				case !ok:
					action[s], origin[s] = l.action, i
				case union && l.action < old, !union && l.action > old:
					action[s], origin[s] = l.action, i
				}
			}
		}
		if t := p.Commands.Timeout; t != 0 {
			if out.Timeout == 0 || union && t > out.Timeout || !union && t < out.Timeout {
				out.Timeout = t
			}
		}
	}
	if !union {
		for s, a := range action {
			if a == ActionAllow && allowCount[s] < len(ps) {
				delete(action, s)
			}
		}
		for s, a := range action {
			if a != ActionAsk {
				continue
			}
			q, _ := ParsePattern(s)
			for t, b := range action {
				if b != ActionDeny || origin[t] == origin[s] {
					continue
				}
				if d, _ := ParsePattern(t); q.Compare(d) >= 0 && overlap(q, d) {
					action[s] = ActionDeny
					break
				}
			}
		}
	}
	for s, a := range action {
		switch a {
		case ActionDeny:
			out.Deny = append(out.Deny, s)
		case ActionAsk:
			out.Ask = append(out.Ask, s)
		case ActionAllow:
			out.Allow = append(out.Allow, s)
		}
	}
	slices.Sort(out.Deny)
	slices.Sort(out.Ask)
	slices.Sort(out.Allow)
	return out
}

// overlap says whether some command line could match both patterns; it
// errs towards yes (two globs are taken to overlap).
func overlap(p, q Pattern) bool {
	if p.Program != q.Program && filepath.Base(p.Program) != filepath.Base(q.Program) {
		return false
	}
	for i := 0; i < max(len(p.Args), len(q.Args)); i++ {
		switch {
		case i >= len(p.Args):
			return p.Rest
		case i >= len(q.Args):
			return q.Rest
		}
		a, b := p.Args[i], q.Args[i]
		if isLiteral(a) && isLiteral(b) && a != b || isLiteral(a) && !globMatch(b, unescape(a)) || isLiteral(b) && !globMatch(a, unescape(b)) {
			return false
		}
	}
	return true
}

func unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
