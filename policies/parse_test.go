package policies

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

const minimal = "name = \"t\"\n"

// parseErrorCases: every kind of bad policy and the error it must give.
// line and key are checked on the *Error; msg is a substring of Error().
var parseErrorCases = []struct {
	name string
	src  string
	line int
	key  string
	msg  string
}{
	// syntax and structure
	{"toml syntax", "name = \"t\"\nx = = 1\n", 2, "", "toml syntax"},
	{"toml duplicate key", "name = \"t\"\nname = \"u\"\n", 2, "", "toml syntax"},
	{"unknown top-level key", minimal + "\nverison = 1\n", 3, "verison", "valid keys in a policy are name, description"},
	{"unknown section", minimal + "[mounts]\nx = 1\n", 2, "mounts", "unknown key"},
	{"unknown key in fs", minimal + "[fs]\nraed = [\"/a\"]\n", 3, "fs.raed", "valid keys in [fs] are read, write, deny"},
	{"unknown key in exec", minimal + "[exec]\ndeny = [\"rm\"]\n", 3, "exec.deny", "valid keys in [exec] are allow"},
	{"unknown key in network", minimal + "[network]\ndeny = []\n", 3, "network.deny", "unknown key"},
	{"unknown key in env", minimal + "[env]\npass = []\n", 3, "env.pass", "unknown key"},
	{"unknown key in limits", minimal + "[limits]\ndisk = \"1GiB\"\n", 3, "limits.disk", "valid keys in [limits] are memory, pids, cpu, timeout, idle"},
	{"key in wrong case", "NAME = \"t\"\n", 1, "NAME", "unknown key"},
	{"section key in wrong case", minimal + "[fs]\nREAD = [\"/a\"]\n", 3, "fs.READ", "unknown key"},
	{"unknown key in dotted form", minimal + "fs.reads = [\"/a\"]\n", 2, "fs.reads", "unknown key"},
	{"unknown key in inline table", minimal + "fs = { read = [\"/a\"], wirte = [\"/b\"] }\n", 2, "fs.wirte", "unknown key"},
	{"section not a table", minimal + "fs = \"/a\"\n", 2, "fs", "wrong type: got a string, want a table"},
	{"array of tables", minimal + "[[fs]]\nread = [\"/a\"]\n", 2, "fs", "wrong type: got a list"},

	// types
	{"string for list", minimal + "[fs]\nread = \"/a\"\n", 3, "fs.read", "wrong type: got a string, want a list of strings"},
	{"integer in list", minimal + "[fs]\nread = [\"/a\", 3]\n", 3, "fs.read[1]", "got an integer, want a string"},
	{"list element on its own line", minimal + "[fs]\nread = [\n  \"/a\",\n  \"b\",\n]\n", 5, "fs.read[1]", "is relative"},
	{"name not a string", "name = 3\n", 1, "name", "got an integer, want a string"},
	{"description not a string", minimal + "description = [\"x\"]\n", 2, "description", "want a string"},
	{"exec allow table", minimal + "[exec]\nallow = { curl = true }\n", 3, "exec.allow", "want a list of strings"},
	{"env set list", minimal + "[env]\nset = [\"A=b\"]\n", 3, "env.set", "want a table of strings"},
	{"env set value not string", minimal + "[env]\nset = { A = 1 }\n", 3, "env.set.A", "want a string"},
	{"memory integer", minimal + "[limits]\nmemory = 268435456\n", 3, "limits.memory", "want a size string"},
	{"pids string", minimal + "[limits]\npids = \"64\"\n", 3, "limits.pids", "want an integer"},
	{"pids float", minimal + "[limits]\npids = 64.0\n", 3, "limits.pids", "want an integer"},
	{"cpu string", minimal + "[limits]\ncpu = \"1\"\n", 3, "limits.cpu", "want a number of cores"},
	{"timeout integer", minimal + "[limits]\ntimeout = 30\n", 3, "limits.timeout", "want a duration string"},
	{"date value", minimal + "description = 1979-05-27\n", 2, "description", "got a date"},

	// name
	{"missing name", "description = \"x\"\n", 0, "name", "missing"},
	{"empty name", "name = \"\"\n", 1, "name", "empty name"},
	{"name upper case", "name = \"Web\"\n", 1, "name", "bad name"},
	{"name starts with dash", "name = \"-web\"\n", 1, "name", "bad name"},
	{"name with space", "name = \"web fetch\"\n", 1, "name", "bad name"},
	{"name too long", "name = \"" + strings.Repeat("a", 65) + "\"\n", 1, "name", "longer than 64"},
	{"name empty part", "name = \"a++b\"\n", 1, "name", "bad name"},

	// paths
	{"relative path", minimal + "[fs]\nread = [\"/a\", \"etc/passwd\"]\n", 3, "fs.read[1]", `"etc/passwd" is relative; start it with /, ~ or a variable ($SKILL_DIR, $WORK_DIR, $DATA_DIR, $HOME)`},
	{"dot relative path", minimal + "[fs]\nread = [\"./x\"]\n", 3, "fs.read[0]", "is relative"},
	{"unknown variable", minimal + "[fs]\nwrite = [\"$FOO/x\"]\n", 3, "fs.write[0]", "unknown variable $FOO; valid are $SKILL_DIR"},
	{"braced variable", minimal + "[fs]\nwrite = [\"${HOME}/x\"]\n", 3, "fs.write[0]", "unknown variable"},
	{"lower-case variable", minimal + "[fs]\nread = [\"$home\"]\n", 3, "fs.read[0]", "unknown variable $home"},
	{"variable not at start", minimal + "[fs]\nread = [\"/x/$HOME\"]\n", 3, "fs.read[0]", "a variable may only begin a path"},
	{"two variables", minimal + "[fs]\nread = [\"$HOME$WORK_DIR\"]\n", 3, "fs.read[0]", "a variable may only begin a path"},
	{"dotdot", minimal + "[fs]\nwrite = [\"$WORK_DIR/../x\"]\n", 3, "fs.write[0]", `".." component`},
	{"dotdot absolute", minimal + "[fs]\nread = [\"/a/..\"]\n", 3, "fs.read[0]", `".." component`},
	{"empty path", minimal + "[fs]\ndeny = [\"\"]\n", 3, "fs.deny[0]", "empty path"},
	{"tilde user", minimal + "[fs]\ndeny = [\"~root/.ssh\"]\n", 3, "fs.deny[0]", "only ~ and ~/"},
	{"control char", minimal + "[fs]\nread = [\"/a\\nb\"]\n", 3, "fs.read[0]", "control character"},
	{"duplicate in list", minimal + "[fs]\nread = [\"/a\", \"/b\", \"/a/\"]\n", 3, "fs.read[2]", "listed twice (also fs.read[0])"},
	{"duplicate via tilde", minimal + "[fs]\ndeny = [\"~/.ssh\", \"$HOME/.ssh\"]\n", 3, "fs.deny[1]", "listed twice"},
	{"same path read and write", minimal + "[fs]\nread = [\"$WORK_DIR\"]\nwrite = [\"$WORK_DIR\"]\n", 4, "fs.write[0]", "also in fs.read[0]"},
	{"same path write and deny", minimal + "[fs]\nwrite = [\"/a\"]\ndeny = [\"/a\"]\n", 4, "fs.deny[0]", "a path may be in one of read, write and deny only"},

	// exec
	{"exec relative with slash", minimal + "[exec]\nallow = [\"bin/tool\"]\n", 3, "exec.allow[0]", "has a / but is not absolute"},
	{"exec dot slash", minimal + "[exec]\nallow = [\"./run.sh\"]\n", 3, "exec.allow[0]", "not absolute"},
	{"exec variable", minimal + "[exec]\nallow = [\"$WORK_DIR/run\"]\n", 3, "exec.allow[0]", "takes no variable but $SKILL_DIR"},
	{"exec skill dir itself", minimal + "[exec]\nallow = [\"$SKILL_DIR\"]\n", 3, "exec.allow[0]", "takes no variable but $SKILL_DIR"},
	{"exec skill dir dotdot", minimal + "[exec]\nallow = [\"$SKILL_DIR/../x\"]\n", 3, "exec.allow[0]", "\"..\" component"},
	{"exec bad name", minimal + "[exec]\nallow = [\"cu rl\"]\n", 3, "exec.allow[0]", "bad program name"},
	{"exec empty", minimal + "[exec]\nallow = [\"\"]\n", 3, "exec.allow[0]", "empty entry"},
	{"exec dotdot name", minimal + "[exec]\nallow = [\"..\"]\n", 3, "exec.allow[0]", "bad program name"},
	{"exec dotdot path", minimal + "[exec]\nallow = [\"/usr/../bin/sh\"]\n", 3, "exec.allow[0]", `".." component`},
	{"exec root", minimal + "[exec]\nallow = [\"/\"]\n", 3, "exec.allow[0]", "not a program"},
	{"exec duplicate", minimal + "[exec]\nallow = [\"jq\", \"jq\"]\n", 3, "exec.allow[1]", "listed twice"},

	// network
	{"host no port", minimal + "[network]\nallow = [\"api.example.com\"]\n", 3, "network.allow[0]", `has no port; write host:port, e.g. "api.example.com:443"`},
	{"port zero", minimal + "[network]\nallow = [\"a.com:0\"]\n", 3, "network.allow[0]", "port 0 is out of range; use 1-65535 or *"},
	{"port too big", minimal + "[network]\nallow = [\"a.com:65536\"]\n", 3, "network.allow[0]", "port 65536 is out of range"},
	{"port leading zero", minimal + "[network]\nallow = [\"a.com:0443\"]\n", 3, "network.allow[0]", "out of range"},
	{"port not number", minimal + "[network]\nallow = [\"a.com:https\"]\n", 3, "network.allow[0]", "not a number"},
	{"port empty", minimal + "[network]\nallow = [\"a.com:\"]\n", 3, "network.allow[0]", "empty port"},
	{"wildcard in middle", minimal + "[network]\nallow = [\"a.*.com:443\"]\n", 3, "network.allow[0]", "whole first label"},
	{"partial wildcard", minimal + "[network]\nallow = [\"*foo.com:443\"]\n", 3, "network.allow[0]", "whole first label"},
	{"bare wildcard on every port", minimal + "[network]\nallow = [\"*:*\"]\n", 3, "network.allow[0]", "every host on every port"},
	{"wildcard tld", minimal + "[network]\nallow = [\"*.com:443\"]\n", 3, "network.allow[0]", "top-level domain"},
	{"bad cidr", minimal + "[network]\nallow = [\"10.0.0.0/33:443\"]\n", 3, "network.allow[0]", "bad CIDR"},
	{"cidr host bits", minimal + "[network]\nallow = [\"10.0.0.1/8:443\"]\n", 3, "network.allow[0]", `host bits set; write "10.0.0.0/8"`},
	{"ipv6 unbracketed", minimal + "[network]\nallow = [\"::1:80\"]\n", 3, "network.allow[0]", "brackets"},
	{"ipv4 bracketed", minimal + "[network]\nallow = [\"[1.2.3.4]:80\"]\n", 3, "network.allow[0]", "only for IPv6"},
	{"unclosed bracket", minimal + "[network]\nallow = [\"[::1:80\"]\n", 3, "network.allow[0]", "no closing ]"},
	{"bad host char", minimal + "[network]\nallow = [\"exa$mple.com:80\"]\n", 3, "network.allow[0]", "has character"},
	{"numeric host", minimal + "[network]\nallow = [\"1.2.3:80\"]\n", 3, "network.allow[0]", "neither an IP address nor a host name"},
	{"empty label", minimal + "[network]\nallow = [\"a..com:80\"]\n", 3, "network.allow[0]", "empty or over-long label"},
	{"network duplicate after canon", minimal + "[network]\nallow = [\"A.com:443\", \"a.com.:443\"]\n", 3, "network.allow[1]", "listed twice"},
	{"empty host pattern", minimal + "[network]\nallow = [\"\"]\n", 3, "network.allow[0]", "empty host pattern"},

	// env
	{"bad env name", minimal + "[env]\nallow = [\"1ABC\"]\n", 3, "env.allow[0]", "bad variable name"},
	{"env name with dash", minimal + "[env]\nallow = [\"MY-VAR\"]\n", 3, "env.allow[0]", "bad variable name"},
	{"env duplicate", minimal + "[env]\nallow = [\"LANG\", \"LANG\"]\n", 3, "env.allow[1]", "listed twice"},
	{"bad env set name", minimal + "[env]\nset = { \"A B\" = \"x\" }\n", 3, "env.set.A B", "bad variable name"},
	{"env set and allow", minimal + "[env]\nallow = [\"PAGER\"]\nset = { PAGER = \"cat\" }\n", 4, "env.set.PAGER", "also in env.allow"},
	{"proxy var allowed with network", minimal + "[network]\nallow = [\"a.test:443\"]\n[env]\nallow = [\"LANG\", \"https_proxy\"]\n", 5, "env.allow[1]", "warden sets the proxy variables"},
	{"proxy var set with network", minimal + "[network]\nallow = [\"a.test:443\"]\n[env]\nset = { NO_PROXY = \"x\" }\n", 5, "env.set.NO_PROXY", "warden sets the proxy variables"},

	// limits
	{"memory zero", minimal + "[limits]\nmemory = \"0MiB\"\n", 3, "limits.memory", "out of range; use 8MiB to 1TiB"},
	{"memory negative", minimal + "[limits]\nmemory = \"-5MiB\"\n", 3, "limits.memory", "is not a size"},
	{"memory too small", minimal + "[limits]\nmemory = \"4MiB\"\n", 3, "limits.memory", "out of range"},
	{"memory absurd", minimal + "[limits]\nmemory = \"99999999999TiB\"\n", 3, "limits.memory", "out of range"},
	{"memory bad unit", minimal + "[limits]\nmemory = \"256mb\"\n", 3, "limits.memory", "unknown unit \"mb\""},
	{"memory no unit", minimal + "[limits]\nmemory = \"256\"\n", 3, "limits.memory", "write a number and a unit"},
	{"memory exponent", minimal + "[limits]\nmemory = \"1e3MiB\"\n", 3, "limits.memory", "is not a size"},
	{"pids zero", minimal + "[limits]\npids = 0\n", 3, "limits.pids", "0 is out of range; use 1 to 65536"},
	{"pids negative", minimal + "[limits]\npids = -1\n", 3, "limits.pids", "out of range"},
	{"pids absurd", minimal + "[limits]\npids = 1000000\n", 3, "limits.pids", "out of range"},
	{"cpu zero", minimal + "[limits]\ncpu = 0.0\n", 3, "limits.cpu", "out of range"},
	{"cpu negative", minimal + "[limits]\ncpu = -1\n", 3, "limits.cpu", "out of range"},
	{"cpu absurd", minimal + "[limits]\ncpu = 5000\n", 3, "limits.cpu", "out of range"},
	{"cpu nan", minimal + "[limits]\ncpu = nan\n", 3, "limits.cpu", "nan is out of range"},
	{"cpu inf", minimal + "[limits]\ncpu = inf\n", 3, "limits.cpu", "inf is out of range; use 0.01 to"},
	{"cpu -inf", minimal + "[limits]\ncpu = -inf\n", 3, "limits.cpu", "-inf is out of range"},
	{"timeout zero", minimal + "[limits]\ntimeout = \"0s\"\n", 3, "limits.timeout", "out of range; use 1ms to 24h"},
	{"timeout negative", minimal + "[limits]\ntimeout = \"-1s\"\n", 3, "limits.timeout", "out of range"},
	{"timeout absurd", minimal + "[limits]\ntimeout = \"25h\"\n", 3, "limits.timeout", "out of range"},
	{"timeout bad", minimal + "[limits]\ntimeout = \"30 seconds\"\n", 3, "limits.timeout", "not a duration"},
	{"timeout no unit", minimal + "[limits]\ntimeout = \"30\"\n", 3, "limits.timeout", "not a duration"},
	{"idle too short", minimal + "[limits]\nidle = \"10ms\"\n", 3, "limits.idle", "use 1s to 168h"},
	{"idle too long", minimal + "[limits]\nidle = \"200h\"\n", 3, "limits.idle", "out of range"},
}

func TestParseErrors(t *testing.T) {
	for _, tc := range parseErrorCases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse("web.toml", []byte(tc.src))
			if err == nil {
				t.Fatalf("parsed to %+v, want an error", p)
			}
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not an *Error", err)
			}
			if pe.File != "web.toml" || pe.Line != tc.line || pe.Key != tc.key {
				t.Errorf("got file %q line %d key %q, want web.toml, %d, %q (%v)", pe.File, pe.Line, pe.Key, tc.line, tc.key, err)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q does not contain %q", err, tc.msg)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
	t.Logf("%d error cases", len(parseErrorCases))
}

func TestErrorFormat(t *testing.T) {
	_, err := Parse("web.toml", []byte("name = \"w\"\n\n\n\n\n[fs]\nread = [\"$SKILL_DIR\", \"etc/passwd\"]\n"))
	want := `web.toml:7: fs.read[1]: "etc/passwd" is relative; start it with /, ~ or a variable ($SKILL_DIR, $WORK_DIR, $DATA_DIR, $HOME)`
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}

func TestParseDefaultsAndNormalising(t *testing.T) {
	p, err := Parse("t.toml", []byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	want := &Policy{Name: "t", Exec: Exec{All: true}, Limits: DefaultLimits, Omitted: omittedAll}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("got %+v, want %+v", p, want)
	}
	if DefaultLimits != (Limits{Memory: 512 << 20, Pids: 128, CPU: 1, Timeout: time.Minute, Idle: 15 * time.Minute}) {
		t.Errorf("DefaultLimits changed: %+v", DefaultLimits)
	}

	p, err = Parse("t.toml", []byte(`
name = "t+u"
[fs]
read = ["/usr/share", "$SKILL_DIR/", "/a/./b", "~"]
deny = ["~/.ssh", "/a/b/c"]
[exec]
allow = ["sh", "/usr/bin/curl", "curl"]
[network]
allow = ["B.example.COM.:443", "[::1]:8080", "[::ffff:10.0.0.0/104]:*", "[fd00::/8]:443", "1.2.3.4:80", "10.0.0.0/8:443", "*.cdn.example.com:443", "host:*"]
[env]
allow = ["TZ", "LANG"]
set = { PAGER = "cat" }
[limits]
memory = "1.5GiB"
pids = 7
cpu = 2
timeout = "1h30m"
idle = "168h"
[commands]
deny = ["rm  -rf /"]
ask = ["git push **"]
allow = ["git push --dry-run **"]
timeout = "2m"
`))
	if err != nil {
		t.Fatal(err)
	}
	want = &Policy{
		Name: "t+u",
		FS: FS{
			Read: []string{"/a/b", "/usr/share", "$HOME", "$SKILL_DIR"},
			Deny: []string{"/a/b/c", "$HOME/.ssh"},
		},
		Exec:     Exec{Allow: []string{"/usr/bin/curl", "curl", "sh"}},
		Network:  Network{Allow: []string{"*.cdn.example.com:443", "1.2.3.4:80", "10.0.0.0/8:*", "10.0.0.0/8:443", "[::1]:8080", "[fd00::/8]:443", "b.example.com:443", "host:*"}},
		Env:      Env{Allow: []string{"LANG", "TZ"}, Set: map[string]string{"PAGER": "cat"}},
		Limits:   Limits{Memory: 1536 << 20, Pids: 7, CPU: 2, Timeout: 90 * time.Minute, Idle: 168 * time.Hour},
		Commands: Commands{Deny: []string{"rm -rf /"}, Ask: []string{"git push **"}, Allow: []string{"git push --dry-run **"}, Timeout: 2 * time.Minute},
	}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("got  %+v\nwant %+v", p, want)
	}
}

func TestExecPresence(t *testing.T) {
	for _, tc := range []struct {
		src   string
		all   bool
		allow []string
	}{
		{minimal, true, nil},
		{minimal + "[exec]\n", true, nil},
		{minimal + "[exec]\nallow = []\n", false, nil},
		{minimal + "[exec]\nallow = [\"jq\"]\n", false, []string{"jq"}},
	} {
		p, err := Parse("t.toml", []byte(tc.src))
		if err != nil {
			t.Fatal(err)
		}
		if p.Exec.All != tc.all || !reflect.DeepEqual(p.Exec.Allow, tc.allow) {
			t.Errorf("%q: got %+v", tc.src, p.Exec)
		}
	}
}

func TestSizes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"8MiB", 8 << 20}, {"256MiB", 256 << 20}, {"1GiB", 1 << 30}, {"1TiB", 1 << 40},
		{"100MB", 100e6}, {"2GB", 2e9}, {"16384KiB", 16 << 20}, {"10000000B", 1e7},
	} {
		got, err := parseSize(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		in   int64
		want string
	}{{256 << 20, "256MiB"}, {1 << 30, "1GiB"}, {1536 << 20, "1536MiB"}, {100e6, "100000000B"}, {10 << 10, "10KiB"}} {
		if got := FormatSize(tc.in); got != tc.want {
			t.Errorf("FormatSize(%d) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for _, tc := range []struct {
		in   time.Duration
		want string
	}{{30 * time.Second, "30s"}, {time.Minute, "1m"}, {time.Hour, "1h"}, {90 * time.Minute, "1h30m"}, {1500 * time.Millisecond, "1.5s"}, {time.Millisecond, "1ms"}} {
		if got := formatDuration(tc.in); got != tc.want {
			t.Errorf("formatDuration(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// Without network rules warden sets no proxy variable, so a policy may
// pass the caller's through.
func TestProxyVarWithoutNetwork(t *testing.T) {
	p, err := Parse("p.toml", []byte(minimal+"[env]\nallow = [\"HTTPS_PROXY\"]\n"))
	if err != nil || len(p.Env.Allow) != 1 {
		t.Fatalf("%v, %+v", err, p)
	}
}

// A SKILL.md given where a policy belongs is named as one, with the
// command that converts it; a policy file is never mistaken for one.
func TestParseSkillFile(t *testing.T) {
	const hint = "a SKILL.md, not a warden policy (TOML); convert it first: warden policy import "
	for _, c := range []struct {
		file, src string
		skill     bool
	}{
		{"SKILL.md", "---\nname: x\npermissions: {}\n---\n# X\n", true},
		{"skill.toml", "\ufeff--- \r\nname: x\n---\n", true},
		{"notes.MD", "# Notes\nsome words\n", true},
		{"policy.toml", "name = \"t\"\nx = = 1\n", false},
		{"policy.toml", "# ---\nname = \"t\"\n[fs\n", false},
	} {
		_, err := Parse(c.file, []byte(c.src))
		if got := err != nil && strings.Contains(err.Error(), hint+c.file+" -o policy.toml"); got != c.skill {
			t.Errorf("%s %q: %v", c.file, c.src, err)
		}
	}
}

var omittedAll = Omitted{FS: true, Exec: true, Network: true, Env: true, Commands: true, Memory: true, Pids: true, CPU: true, Timeout: true, Idle: true}

// permissions is p without what TOML does not keep (Omitted).
func permissions(p *Policy) *Policy {
	q := *p
	q.Omitted = Omitted{}
	return &q
}
