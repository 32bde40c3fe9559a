package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warden-sandbox/warden/policies"
)

// createRequest is the create part of a get-or-create request.
type createRequest struct {
	PolicyTOML string
	Vars       policies.Vars
}

func TestCheckSame(t *testing.T) {
	const own = "name = \"own\"\n[fs]\nread = [\"$SKILL_DIR\"]\nwrite = [\"$WORK_DIR\"]\n"
	p, err := policies.Parse("own.toml", []byte(own))
	if err != nil {
		t.Fatal(err)
	}
	text, _ := p.TOML()
	tmp := t.TempDir()
	dir := func(name string) string {
		d := filepath.Join(tmp, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	skill, a, b, s2, home := dir("skill"), dir("a"), dir("b"), dir("s2"), dir("home")
	link := filepath.Join(tmp, "link")
	if err := os.Symlink("a", link); err != nil {
		t.Fatal(err)
	}
	// No sandbox runs here: the session's folders are those their paths
	// name now.
	s := &Session{ID: "p1", PolicyName: p.Name, PolicyHash: p.Hash(), PolicyTOML: string(text),
		Vars: policies.Vars{SkillDir: skill, WorkDir: a, Home: home}}
	vars := s.Vars
	with := func(f func(*policies.Vars)) policies.Vars {
		v := vars
		f(&v)
		return v
	}
	for _, c := range []struct {
		name string
		req  *createRequest
		want string // "" when the session serves the request
	}{
		{"no create part", nil, ""},
		{"same policy and folders", &createRequest{PolicyTOML: own, Vars: vars}, ""},
		{"same policy written otherwise", &createRequest{PolicyTOML: "# a comment\n" + own, Vars: vars}, ""},
		{"the workspace through a symlink", &createRequest{PolicyTOML: own, Vars: with(func(v *policies.Vars) { v.WorkDir = link })}, ""},
		{"the workspace spelled otherwise alone", &createRequest{Vars: policies.Vars{WorkDir: b + "/../a"}}, ""},
		{"a data folder the policy does not use", &createRequest{PolicyTOML: own, Vars: with(func(v *policies.Vars) { v.DataDir = "/d" })}, ""},
		{"another home the policy does not use", &createRequest{PolicyTOML: own, Vars: with(func(v *policies.Vars) { v.Home = "/home/x" })}, ""},
		{"the same workspace alone", &createRequest{Vars: policies.Vars{WorkDir: a}}, ""},
		{"another policy", &createRequest{PolicyTOML: "name = \"other\"\n", Vars: vars},
			"session p1 exists with policy own (sha256:"},
		{"another workspace", &createRequest{PolicyTOML: own, Vars: with(func(v *policies.Vars) { v.WorkDir = b })},
			"exists with workspace " + a + "; this call asks for workspace " + b + ": use another --session id, or leave out --policy and --workspace to use the session as it is"},
		{"a missing workspace", &createRequest{PolicyTOML: own, Vars: with(func(v *policies.Vars) { v.WorkDir = tmp + "/gone" })},
			"asks for workspace " + tmp + "/gone (not found)"},
		{"no workspace", &createRequest{PolicyTOML: own, Vars: with(func(v *policies.Vars) { v.WorkDir = "" })},
			"this call asks for no workspace"},
		{"another skill folder", &createRequest{PolicyTOML: own, Vars: with(func(v *policies.Vars) { v.SkillDir = s2 })},
			"skill folder " + skill + "; this call asks for skill folder " + s2 + ": use another --session id, or leave out --policy and --skill-dir"},
		{"another workspace alone", &createRequest{Vars: policies.Vars{WorkDir: b}},
			"or leave out --workspace to use"},
		{"a bad policy", &createRequest{PolicyTOML: "name = 3"}, "name"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var err error
			if c.req != nil {
				err = s.CheckSame(c.req.PolicyTOML, c.req.Vars)
			}
			if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Errorf("CheckSame: %v, want %q", err, c.want)
			}
		})
	}
}
