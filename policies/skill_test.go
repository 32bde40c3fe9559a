package policies

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestImportSkill(t *testing.T) {
	p, err := ImportSkill("testdata/web_fetch.SKILL.md")
	if err != nil {
		t.Fatal(err)
	}
	want := &Policy{
		Name:        "web-fetch",
		Description: "Fetch a web page",
		FS:          FS{Read: []string{"$SKILL_DIR"}, Write: []string{"$WORK_DIR"}, Deny: []string{"$HOME/.ssh"}},
		Exec:        Exec{Allow: []string{"curl", "jq"}},
		Network:     Network{Allow: []string{"api.example.com:443"}},
		Env:         Env{Allow: []string{"LANG"}},
		Limits:      Limits{Memory: 256 << 20, Pids: 32, CPU: 1, Timeout: 30 * time.Second, Idle: DefaultLimits.Idle},
		Omitted:     Omitted{Commands: true, Idle: true},
	}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("got  %+v\nwant %+v", p, want)
	}

	p, err = ImportSkill("testdata/tables.SKILL.md")
	if err != nil {
		t.Fatal(err)
	}
	want = &Policy{Name: "data-tool", Env: Env{Allow: []string{"TZ"}, Set: map[string]string{"PAGER": "cat"}}, Limits: DefaultLimits,
		Omitted: Omitted{FS: true, Commands: true, Memory: true, Pids: true, CPU: true, Timeout: true, Idle: true}}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("got  %+v\nwant %+v", p, want)
	}
}

// The front matter of the integration plan imports as written: DIR/** is
// the folder, "*:443" any host on the port.
func TestImportSkillPlanExample(t *testing.T) {
	p, err := ImportSkill("testdata/plan.SKILL.md")
	if err != nil {
		t.Fatal(err)
	}
	want := &Policy{
		Name:        "plan-example",
		Description: "the front matter of the integration plan, as a skill author copies it",
		FS:          FS{Read: []string{"$SKILL_DIR"}, Write: []string{"$WORK_DIR"}},
		Exec:        Exec{Allow: []string{"curl", "jq"}},
		Network:     Network{Allow: []string{"*:443", "*:80"}},
		Env:         Env{Allow: []string{"LANG"}},
		Limits:      DefaultLimits,
		Omitted:     Omitted{Commands: true, Memory: true, Pids: true, CPU: true, Timeout: true, Idle: true},
	}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("got  %+v\nwant %+v", p, want)
	}
}

var skillErrorCases = []struct {
	name string
	src  string
	line int
	key  string
	msg  string
}{
	{"no front matter", "# title\n", 1, "", "no front matter"},
	{"unclosed front matter", "---\nname: a\n", 1, "", "no closing"},
	{"empty front matter", "---\n---\n", 1, "", "empty front matter"},
	{"yaml syntax", "---\nname: a\nb: c: d\n---\n", 3, "", "yaml front matter"},
	{"front matter a list", "---\n- a\n---\n", 2, "", "want a mapping"},
	{"missing name", "---\ndescription: x\npermissions: {}\n---\n", 0, "name", "missing"},
	{"no permissions", "---\nname: a\ndescription: x\n---\n", 2, "permissions", "declares no permissions"},
	{"glob in fs", "---\nname: a\npermissions:\n  fs:\n    read: [\"$SKILL_DIR/*.md\"]\n---\n", 5, "permissions.fs.read[0]", "no glob patterns except a trailing /**"},
	{"bad name", "---\nname: \"web fetch!\"\n---\n", 2, "name", "bad name"},
	{"unknown permission", "---\nname: a\npermissions:\n  fs: {}\n  netwrok: []\n---\n", 5, "permissions.netwrok", "valid keys in permissions are fs, network, exec, env, limits"},
	{"permissions a list", "---\nname: a\npermissions: [fs]\n---\n", 3, "permissions", "want a table"},
	{"unknown fs key", "---\nname: a\npermissions:\n  fs:\n    raed: [/a]\n---\n", 5, "permissions.fs.raed", "unknown key"},
	{"relative path", "---\nname: a\npermissions:\n  fs:\n    read:\n      - /a\n      - etc/passwd\n---\n", 7, "permissions.fs.read[1]", "is relative"},
	{"fs read a string", "---\nname: a\npermissions:\n  fs:\n    read: /a\n---\n", 5, "permissions.fs.read", "want a list of strings"},
	{"network no port", "---\nname: a\npermissions:\n  network: [a.com]\n---\n", 4, "permissions.network[0]", "has no port"},
	{"network a string", "---\nname: a\npermissions:\n  network: a.com:443\n---\n", 4, "permissions.network", "want a table"},
	{"exec bad", "---\nname: a\npermissions:\n  exec:\n    allow: [bin/x]\n---\n", 5, "permissions.exec.allow[0]", "not absolute"},
	{"exec null", "---\nname: a\npermissions:\n  exec:\n---\n", 4, "permissions.exec", "got null"},
	{"env bad name", "---\nname: a\npermissions:\n  env: [1X]\n---\n", 4, "permissions.env[0]", "bad variable name"},
	{"limits bad", "---\nname: a\npermissions:\n  limits: {memory: 1KiB}\n---\n", 4, "permissions.limits.memory", "out of range"},
	{"limits pids string", "---\nname: a\npermissions:\n  limits: {pids: many}\n---\n", 4, "permissions.limits.pids", "want an integer"},
	{"duplicate key", "---\nname: a\nname: b\n---\n", 3, "name", "key appears twice"},
	{"number as name", "---\nname: 12\n---\n", 2, "name", "want a string"},
}

func TestImportSkillErrors(t *testing.T) {
	for _, tc := range skillErrorCases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := parseSkill("SKILL.md", []byte(tc.src))
			if err == nil {
				t.Fatalf("parsed to %+v, want an error", p)
			}
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not an *Error", err)
			}
			if pe.File != "SKILL.md" || pe.Line != tc.line || pe.Key != tc.key {
				t.Errorf("got file %q line %d key %q, want SKILL.md, %d, %q (%v)", pe.File, pe.Line, pe.Key, tc.line, tc.key, err)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q does not contain %q", err, tc.msg)
			}
		})
	}
	t.Logf("%d error cases", len(skillErrorCases))
}

func TestImportSkillFiles(t *testing.T) {
	for file, msg := range map[string]string{
		"testdata/bad-key.SKILL.md":  "testdata/bad-key.SKILL.md:6: permissions.netwrok: unknown key",
		"testdata/bad-path.SKILL.md": "testdata/bad-path.SKILL.md:7: permissions.fs.read[1]: \"etc/passwd\" is relative",
	} {
		if _, err := ImportSkill(file); err == nil || !strings.HasPrefix(err.Error(), msg) {
			t.Errorf("%s: got %v, want %s...", file, err, msg)
		}
	}
}
