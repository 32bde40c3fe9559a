package policies

import (
	"strings"
	"testing"
	"time"
)

var issueRules = Commands{
	Deny:  []string{"rm -rf /", "git config --global **"},
	Ask:   []string{"git push **", "npm publish **"},
	Allow: []string{"git push --dry-run **"},
}

func TestCommandsDecide(t *testing.T) {
	git := ProgramNames("/usr/bin/git")
	for _, c := range []struct {
		rules Commands
		names []string
		args  string
		want  Action
		rule  string
	}{
		{issueRules, git, "push origin main", ActionAsk, "git push **"},
		{issueRules, git, "push", ActionAsk, "git push **"}, // ** matches no argument too
		{issueRules, git, "push --dry-run origin", ActionAllow, "git push --dry-run **"},
		{issueRules, git, "status", ActionNone, ""},
		{issueRules, git, "config --global user.name x", ActionDeny, "git config --global **"},
		{issueRules, git, "config user.name x", ActionNone, ""},
		{issueRules, ProgramNames("/usr/bin/rm"), "-rf /", ActionDeny, "rm -rf /"},
		{issueRules, ProgramNames("/usr/bin/rm"), "-rf / x", ActionNone, ""}, // a closed pattern matches that many arguments
		{issueRules, ProgramNames("/usr/bin/gitx"), "push", ActionNone, ""},
		// a glob matches slashes and any text within one argument
		{Commands{Deny: []string{"curl *://evil.example/*"}}, ProgramNames("/usr/bin/curl"), "https://evil.example/a/b", ActionDeny, "curl *://evil.example/*"},
		{Commands{Deny: []string{"curl ?"}}, ProgramNames("/usr/bin/curl"), "ab", ActionNone, ""},
		// a literal beats a glob at the first position they differ
		{Commands{Ask: []string{"git * --force"}, Allow: []string{"git push **"}}, git, "push --force", ActionAllow, "git push **"},
		// a closed pattern beats ** where the command line ends
		{Commands{Ask: []string{"git push **"}, Allow: []string{"git push"}}, git, "push", ActionAllow, "git push"},
		// a path beats a name
		{Commands{Ask: []string{"git push **"}, Allow: []string{"/usr/bin/git **"}}, git, "push", ActionAllow, "/usr/bin/git **"},
		{Commands{Ask: []string{"git push **"}, Allow: []string{"/usr/local/bin/git **"}}, git, "push", ActionAsk, "git push **"},
		// equally specific: the stricter list
		{Commands{Ask: []string{"git push a*"}, Deny: []string{"git push *a"}}, git, "push aa", ActionDeny, "git push *a"},
		// escapes
		{Commands{Deny: []string{`echo a\ b \*`}}, ProgramNames("/bin/echo"), "", ActionNone, ""},
	} {
		args := strings.Fields(c.args)
		got := c.rules.Decide(c.names, args)
		if got.Action != c.want || got.Rule != c.rule {
			t.Errorf("%v %q under %+v: got %v %q, want %v %q", c.names, c.args, c.rules, got.Action, got.Rule, c.want, c.rule)
		}
	}
	if d := (Commands{Deny: []string{`echo a\ b \*`}}).Decide(ProgramNames("/bin/echo"), []string{"a b", "*"}); d.Action != ActionDeny {
		t.Errorf("escaped space and star: got %v", d)
	}
	if d := (Commands{Deny: []string{`echo a\ b \*`}}).Decide(ProgramNames("/bin/echo"), []string{"a b", "x"}); d.Action != ActionNone {
		t.Errorf("\\* is a literal star: got %v", d)
	}
}

func TestCommandsBadRules(t *testing.T) {
	for _, c := range []struct{ toml, want string }{
		{`deny = ["git push ** --force"]`, `commands.deny[0]: "git push ** --force": ** stands for all remaining arguments and must be the last word; use * for one argument`},
		{`deny = [""]`, `commands.deny[0]: empty pattern; write a program then its arguments, e.g. "git push **"`},
		{`deny = ["g*t push"]`, `may not be a glob`},
		{`deny = ["./git push"]`, `is neither a name ("git") nor an absolute path ("/usr/bin/git")`},
		{`deny = ["git push"]` + "\n" + `allow = ["git  push"]`, `commands.allow[0]: "git push" is also in commands.deny[0]; a pattern may be in one of deny, ask and allow only`},
		{`ask = "git push"`, `commands.ask: wrong type: got a string, want a list of strings`},
		{`timeout = "0s"`, `commands.timeout:`},
		{`timeout = 5`, `commands.timeout: wrong type: got an integer, want a duration string such as "5m"`},
		{`never = ["x"]`, `commands.never: unknown key; valid keys in [commands] are deny, ask, allow, timeout`},
		{`deny = ["echo a\\"]`, `ends with a lone \`},
	} {
		_, err := Parse("p.toml", []byte("name = \"t\"\n[commands]\n"+c.toml+"\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: got %v, want one line with %q", c.toml, err, c.want)
		}
	}
}

func TestCommandsRoundTrip(t *testing.T) {
	p := &Policy{Name: "t", Exec: Exec{All: true}, Limits: DefaultLimits, Commands: issueRules}
	p.Commands.Timeout = 90 * time.Second
	data, err := p.TOML()
	if err != nil {
		t.Fatal(err)
	}
	q, err := Parse("t", data)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if q.Hash() != p.Hash() || q.Commands.Timeout != 90*time.Second || len(q.Commands.Deny) != 2 {
		t.Errorf("round trip changed the rules:\n%s\n%+v", data, q.Commands)
	}
	if (Commands{}).AskTimeout() != 5*time.Minute {
		t.Error("the default ask timeout is 5 minutes")
	}
}

func TestCommandsCompose(t *testing.T) {
	parse := func(rules string) *Policy {
		t.Helper()
		p, err := Parse("p.toml", []byte("name = \"p\"\n"+rules))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	skill := parse("[commands]\nask = [\"git push **\"]\nallow = [\"git push --dry-run **\"]\ntimeout = \"1m\"\n")
	other := parse("[commands]\ndeny = [\"git push origin **\"]\nask = [\"git push --dry-run origin **\"]\ntimeout = \"2m\"\n")
	free := parse("[commands]\nallow = [\"git push **\", \"git push --dry-run **\"]\n")
	none := parse("")
	git := ProgramNames("/usr/bin/git")
	decide := func(p *Policy, args string) Action { return p.Commands.Decide(git, strings.Fields(args)).Action }
	lines := []string{"push", "push origin main", "push --dry-run x", "push --dry-run origin", "status"}

	// An intersection is never more permissive than any input; with a
	// ceiling that has no [commands] it is the skill's rules.
	for _, ceiling := range []*Policy{other, free, none, skill} {
		in, err := Intersect(skill, ceiling)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			got, a, b := decide(in, l), decide(skill, l), decide(ceiling, l)
			strictest := max(a, b)
			if strictest == ActionNone {
				strictest = ActionAllow
			}
			if got == ActionNone {
				got = ActionAllow
			}
			if got < strictest {
				t.Errorf("intersect %+v with %+v: %q is %v, but an input says %v", skill.Commands, ceiling.Commands, l, got, strictest)
			}
		}
	}
	in, _ := Intersect(skill, other)
	if in.Commands.Timeout != time.Minute {
		t.Errorf("intersect keeps the shortest timeout, got %v", in.Commands.Timeout)
	}
	force, denyPush := parse("[commands]\nask = [\"git push --force **\"]\n"), parse("[commands]\ndeny = [\"git push **\"]\n")
	if in, _ := Intersect(force, denyPush); decide(in, "push --force x") != ActionDeny || decide(in, "push x") != ActionDeny {
		t.Errorf("an ask more specific than another input's deny must not weaken it: %+v", in.Commands)
	}
	if in, _ := Intersect(skill, none); decide(in, "push --dry-run x") != ActionAllow || decide(in, "push x") != ActionAsk {
		t.Errorf("a ceiling without [commands] cuts nothing: %+v", in.Commands)
	}
	if in, _ := Intersect(skill, free); decide(in, "push x") != ActionAsk || decide(in, "push --dry-run x") != ActionAllow {
		t.Errorf("intersect with a ceiling allowing everything: %+v", in.Commands)
	}

	m, err := Merge(skill, other)
	if err != nil {
		t.Fatal(err)
	}
	if m.Commands.Timeout != 2*time.Minute || len(m.Commands.Deny)+len(m.Commands.Ask)+len(m.Commands.Allow) != 4 {
		t.Errorf("merge keeps every rule and the longest timeout: %+v", m.Commands)
	}
	if m, _ := Merge(skill, free); decide(m, "push x") != ActionAllow {
		t.Errorf("merge: a pattern in two lists goes to the more permissive: %+v", m.Commands)
	}
	// The composed policies are valid TOML again.
	for _, p := range []*Policy{in, m} {
		if _, err := p.TOML(); err != nil {
			t.Error(err)
		}
	}
}

func FuzzParsePattern(f *testing.F) {
	for _, s := range []string{"git push **", `a\ b *`, "/usr/bin/x ? [", "**"} {
		f.Add(s, "push x")
	}
	f.Fuzz(func(t *testing.T, s, args string) {
		p, err := ParsePattern(s)
		if err != nil {
			return
		}
		q, err := ParsePattern(p.Text)
		if err != nil || q.Text != p.Text {
			t.Fatalf("%q: canonical %q does not parse back: %v", s, p.Text, err)
		}
		p.Matches([]string{p.Program}, strings.Fields(args))
	})
}
