package policies

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func mustParse(t testing.TB, src string) *Policy {
	t.Helper()
	p, err := Parse("t.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAccessAt(t *testing.T) {
	p := mustParse(t, `name = "t"
[fs]
read = ["/a", "$HOME", "/a/b/c/d"]
write = ["/a/b", "$WORK_DIR"]
deny = ["/a/b/c", "~/.ssh"]
`)
	for _, tc := range []struct {
		path string
		want Access
	}{
		{"/", AccessNone},
		{"/a", AccessRead},
		{"/a/x", AccessRead},
		{"/ab", AccessNone}, // component-wise: /a is not a prefix of /ab
		{"/a/b", AccessWrite},
		{"/a/b/", AccessWrite},
		{"/a/b/x/../y", AccessWrite},
		{"/a/bc", AccessRead},
		{"/a/b/c", AccessNone},
		{"/a/b/c/x", AccessNone},
		{"/a/b/c/d", AccessRead},
		{"/a/b/c/d/e", AccessRead},
		{"$HOME/x", AccessRead},
		{"~/x", AccessRead},
		{"$HOME/.ssh/id_rsa", AccessNone},
		{"~/.ssh", AccessNone},
		{"$HOME/.sshx", AccessRead},
		{"$WORK_DIR/out", AccessWrite},
		{"$WORK_DIRX", AccessNone},
		{"$SKILL_DIR", AccessNone},
	} {
		if got := p.AccessAt(tc.path); got != tc.want {
			t.Errorf("AccessAt(%q) = %v, want %v", tc.path, got, tc.want)
		}
	}
}

func TestAccessAtTies(t *testing.T) {
	// Only a Policy built in Go can list a path twice; the safer rule wins.
	p := &Policy{FS: FS{Read: []string{"/a", "/b"}, Write: []string{"/a", "/c"}, Deny: []string{"/b", "/c"}}}
	for path, want := range map[string]Access{"/a": AccessWrite, "/b": AccessNone, "/c/x": AccessNone} {
		if got := p.AccessAt(path); got != want {
			t.Errorf("AccessAt(%q) = %v, want %v", path, got, want)
		}
	}
}

func TestRules(t *testing.T) {
	p := mustParse(t, `name = "t"
[fs]
read = ["/a", "/a/x", "/a/b/c/d", "$SKILL_DIR"]
write = ["/a/b", "/a/b/w"]
deny = ["/a/b/c", "~/.ssh", "/a/b/c/e", "/z", "/z/y"]
`)
	want := []Rule{
		{"/a", AccessRead},
		{"/a/b", AccessWrite},
		{"/a/b/c", AccessNone},
		{"/a/b/c/d", AccessRead},
		// /a/b/c/e: a deny under a deny, dropped
		// /a/b/w: write under write, dropped
		// /a/x: read under read, dropped
		{"/z", AccessNone}, // a deny with nothing above is kept
		// /z/y: deny under that deny, dropped
		{"$HOME/.ssh", AccessNone},
		{"$SKILL_DIR", AccessRead},
	}
	if got := p.Rules(); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
}

func TestComparePaths(t *testing.T) {
	in := []string{"/a-b", "/a/b", "/a", "/", "/a/b/c", "/ab", "/a b"}
	want := []string{"/", "/a", "/a/b", "/a/b/c", "/a b", "/a-b", "/ab"}
	got := sortedPaths(in)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestExpand(t *testing.T) {
	p := mustParse(t, `name = "t"
[fs]
read = ["$SKILL_DIR", "/usr/share/ca-certificates"]
write = ["$WORK_DIR"]
deny = ["~/.ssh", "$WORK_DIR/.git"]
`)
	v := Vars{SkillDir: "/skills/t/", WorkDir: "/w/s1", DataDir: "/d", Home: "/home/u"}
	e, err := p.Expand(v)
	if err != nil {
		t.Fatal(err)
	}
	want := FS{
		Read:  []string{"/skills/t", "/usr/share/ca-certificates"},
		Write: []string{"/w/s1"},
		Deny:  []string{"/home/u/.ssh", "/w/s1/.git"},
	}
	if !reflect.DeepEqual(e.FS, want) {
		t.Errorf("got %+v, want %+v", e.FS, want)
	}
	if p.FS.Read[1] != "$SKILL_DIR" {
		t.Errorf("Expand changed its receiver: %v", p.FS.Read)
	}

	// Two variables naming one folder: write beats read, deny beats both.
	q := mustParse(t, "name = \"t\"\n[fs]\nread = [\"$SKILL_DIR\"]\nwrite = [\"$WORK_DIR\"]\ndeny = [\"$DATA_DIR\"]\n")
	e, err = q.Expand(Vars{SkillDir: "/x", WorkDir: "/x", DataDir: "/y", Home: "/h"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(e.FS, FS{Write: []string{"/x"}, Deny: []string{"/y"}}) {
		t.Errorf("got %+v", e.FS)
	}
	e, _ = q.Expand(Vars{SkillDir: "/x", WorkDir: "/y", DataDir: "/y", Home: "/h"})
	if !reflect.DeepEqual(e.FS, FS{Read: []string{"/x"}, Deny: []string{"/y"}}) {
		t.Errorf("got %+v", e.FS)
	}
}

func TestExpandErrors(t *testing.T) {
	p := mustParse(t, "name = \"t\"\n[fs]\nread = [\"/etc/ssl\", \"$DATA_DIR/in\"]\n")
	for _, tc := range []struct {
		name string
		v    Vars
		msg  string
	}{
		{"empty variable", Vars{}, `fs.read[1]: "$DATA_DIR/in" uses $DATA_DIR, which is not set`},
		{"relative variable", Vars{DataDir: "data"}, `fs.read[1]: "$DATA_DIR/in" uses $DATA_DIR="data", which is not an absolute path`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := p.Expand(tc.v)
			var pe *Error
			if !errors.As(err, &pe) || pe.Key != "fs.read[1]" || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("got %v, want an *Error containing %q", err, tc.msg)
			}
		})
	}
}
