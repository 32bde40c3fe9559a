package policies

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// checkerFixture builds $HOME with .ssh, a workspace inside it, a skill
// folder, and links that try to escape.
func checkerFixture(t *testing.T) (*Checker, Vars) {
	t.Helper()
	root := t.TempDir()
	v := Vars{
		Home:     filepath.Join(root, "home"),
		WorkDir:  filepath.Join(root, "home", "work", "s1"),
		SkillDir: filepath.Join(root, "skill"),
		DataDir:  filepath.Join(root, "data"),
	}
	for _, d := range []string{v.WorkDir, v.SkillDir, v.DataDir, filepath.Join(v.Home, ".ssh"), filepath.Join(v.WorkDir, "secret")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(v.Home, ".ssh", "id_rsa"), filepath.Join(v.WorkDir, "in.txt"), filepath.Join(v.SkillDir, "run.sh")} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"shadow":   "/etc/shadow",
		"keys":     filepath.Join(v.Home, ".ssh"),
		"loop1":    "loop2",
		"loop2":    "loop1",
		"dangling": "/etc/cron.d/warden-test-nonexistent",
		"skill":    v.SkillDir,
		"inside":   "in.txt",
		"curl":     "/usr/bin/curl",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(v.WorkDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	p := mustParse(t, `name = "t"
[fs]
read = ["$SKILL_DIR", "$DATA_DIR"]
write = ["$WORK_DIR"]
deny = ["~/.ssh", "$WORK_DIR/secret"]
[exec]
allow = ["curl", "sh", "/opt/tool/bin/tool"]
[network]
allow = ["api.example.com:443", "*.cdn.example.com:*", "10.0.0.0/8:80"]
`)
	c, err := NewChecker(p, v)
	if err != nil {
		t.Fatal(err)
	}
	return c, v
}

func TestCheckPaths(t *testing.T) {
	c, v := checkerFixture(t)
	for _, tc := range []struct {
		op   string
		path string
		ok   bool
	}{
		{"read", "in.txt", true},
		{"read", filepath.Join(v.WorkDir, "in.txt"), true},
		{"write", "in.txt", true},
		{"write", "new/dir/file.txt", true}, // does not exist yet, under the write grant
		{"read", "../../.ssh/id_rsa", false},
		{"read", filepath.Join(v.WorkDir, "..", "..", ".ssh", "id_rsa"), false},
		{"read", "shadow", false},        // link to /etc/shadow
		{"read", "keys/id_rsa", false},   // link into a denied folder
		{"read", "loop1", false},         // symlink loop
		{"write", "loop1/x", false},      // through a loop
		{"write", "dangling", false},     // would create a file in /etc/cron.d
		{"read", "skill/run.sh", true},   // link to a read grant: readable
		{"write", "skill/run.sh", false}, // ... not writable
		{"read", "inside", true},         // link inside the workspace
		{"write", filepath.Join(v.SkillDir, "run.sh"), false},
		{"read", filepath.Join(v.DataDir, "x"), true},
		{"read", "secret/token", false}, // a deny under a grant
		{"write", "secret", false},
		{"read", "/etc/passwd", false},
		{"read", "/usr/bin/env", true}, // system directories are readable
		{"write", "/usr/bin/env", false},
		{"read", "/bin/sh", true},
		{"read", "/usr", true},
		{"read", "/usrx", false},
		{"read", "", false},
		{"write", v.WorkDir, true},
		{"write", filepath.Dir(v.WorkDir), false},
		{"read", "keys/../.ssh/id_rsa", false},   // ".." after a link: $HOME/.ssh
		{"read", "skill/../data/x", true},        // lexically $WORK_DIR/data/x, really $DATA_DIR/x: both readable
		{"write", "skill/../data/x", false},      // ... but $DATA_DIR is read-only
		{"write", "skill/../home/.ssh/x", false}, // lexically in the workspace, really not
	} {
		t.Run(tc.op+" "+tc.path, func(t *testing.T) {
			check := c.CheckRead
			if tc.op == "write" {
				check = c.CheckWrite
			}
			err := check(tc.path)
			switch {
			case tc.ok && err != nil:
				t.Errorf("refused: %v", err)
			case !tc.ok && err == nil:
				t.Error("allowed")
			case !tc.ok && !errors.Is(err, ErrDenied):
				t.Errorf("error %v does not wrap ErrDenied", err)
			}
		})
	}
}

func TestCheckErrorSaysWhy(t *testing.T) {
	c, _ := checkerFixture(t)
	err := c.CheckRead("../../.ssh/id_rsa")
	if err == nil || !strings.Contains(err.Error(), "deny ~/.ssh") && !strings.Contains(err.Error(), "deny $HOME/.ssh") {
		t.Errorf("got %v, want the deny rule named", err)
	}
	err = c.CheckRead("shadow")
	if err == nil || !strings.Contains(err.Error(), "resolves to /etc/shadow") {
		t.Errorf("got %v, want the resolved path named", err)
	}
}

// networkCase is one CheckNetwork question and whether it is allowed.
type networkCase struct {
	host string
	port int
	ok   bool
}

func checkNetworkCases(t *testing.T, c *Checker, cases []networkCase) {
	t.Helper()
	for _, tc := range cases {
		err := c.CheckNetwork(tc.host, tc.port)
		if tc.ok != (err == nil) || err != nil && !errors.Is(err, ErrDenied) {
			t.Errorf("CheckNetwork(%s, %d) = %v, want ok=%v", tc.host, tc.port, err, tc.ok)
		}
	}
}

func TestCheckNetwork(t *testing.T) {
	c, _ := checkerFixture(t)
	checkNetworkCases(t, c, []networkCase{
		{"api.example.com", 443, true},
		{"api.example.com", 80, false},
		{"evil.com", 443, false},
		{"a.cdn.example.com", 8080, true},
		{"cdn.example.com", 443, false},
		{"10.1.2.3", 80, true},
		{"10.1.2.3", 443, false},
	})
}

// "*:PORT" allows any host on the port, but a special address given as a
// literal still needs a rule that names it, as in the egress proxy.
func TestCheckNetworkAnyHost(t *testing.T) {
	p, err := Parse("t.toml", []byte("name = \"t\"\n[network]\nallow = [\"*:443\", \"127.0.0.1:8080\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewChecker(p, Vars{})
	if err != nil {
		t.Fatal(err)
	}
	checkNetworkCases(t, c, []networkCase{
		{"api.example.com", 443, true},
		{"93.184.216.34", 443, true},
		{"api.example.com", 80, false},
		{"127.0.0.1", 443, false},
		{"169.254.169.254", 443, false},
		{"10.1.2.3", 443, false},
		{"[::1]", 443, false},
		{"127.0.0.1", 8080, true},
	})
}

// A policy listing programs may run the command shell too, as the sandbox
// does; one listing nothing may not.
func TestCheckExecCommandShell(t *testing.T) {
	for text, ok := range map[string]bool{
		"name = \"t\"\n[exec]\nallow = [\"curl\"]\n": true,
		"name = \"t\"\n[exec]\nallow = []\n":         false,
	} {
		p, err := Parse("t.toml", []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		c, err := NewChecker(p, Vars{})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.CheckExec(CommandShell); ok != (err == nil) {
			t.Errorf("%q: CheckExec(sh) = %v, want ok %v", text, err, ok)
		}
		if err := c.CheckExec("/usr/bin/sh"); ok != (err == nil) {
			t.Errorf("%q: CheckExec(/usr/bin/sh) = %v, want ok %v", text, err, ok)
		}
	}
}

// exec.workspace lets a program in the workspace run, judged by where its
// path leads: a link in the workspace to a system folder does not count.
func TestCheckExecWorkspace(t *testing.T) {
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "a.out"), nil, 0o755)
	os.Symlink("/usr/bin", filepath.Join(ws, "link"))
	p, err := Parse("t.toml", []byte("name = \"t\"\n[exec]\nallow = [\"curl\"]\nworkspace = true\n"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewChecker(p, Vars{WorkDir: ws})
	if err != nil {
		t.Fatal(err)
	}
	for name, ok := range map[string]bool{"./a.out": true, filepath.Join(ws, "a.out"): true, "link/su": false, filepath.Join(ws, "link/env"): false} {
		if err := c.CheckExec(name); ok != (err == nil) {
			t.Errorf("CheckExec(%s) = %v, want ok %v", name, err, ok)
		}
	}
}

// DialControl judges the address a name resolved to: with "*:PORT", a
// public address is dialed and loopback is refused unless a rule names it.
func TestCheckDialControl(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	for text, ok := range map[string]bool{
		fmt.Sprintf("name = \"t\"\n[network]\nallow = [\"*:%d\"]\n", port):                         false,
		fmt.Sprintf("name = \"t\"\n[network]\nallow = [\"*:%d\", \"127.0.0.1:%d\"]\n", port, port): true,
	} {
		p, err := Parse("t.toml", []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		c, err := NewChecker(p, Vars{})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.CheckNetwork("localhost", port); err != nil {
			t.Fatalf("%q: the name passes: %v", text, err)
		}
		conn, err := (&net.Dialer{Control: c.DialControl}).Dial("tcp4", fmt.Sprintf("localhost:%d", port))
		if err == nil {
			conn.Close()
		}
		if ok != (err == nil) || err != nil && !errors.Is(err, ErrDenied) {
			t.Errorf("%q: dial localhost: %v, want ok %v", text, err, ok)
		}
	}
	c, _ := NewChecker(&Policy{Name: "t"}, Vars{})
	if err := c.DialControl("tcp4", "93.184.216.34:443", nil); err != nil {
		t.Errorf("a public address: %v", err)
	}
}

func TestCheckExec(t *testing.T) {
	c, _ := checkerFixture(t)
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"curl", true},
		{"sh", true},
		{"python3", false},
		{"/usr/bin/curl", true},
		{"/bin/sh", true},
		{"/usr/local/bin/curl", true},
		{"/opt/tool/bin/tool", true},
		{"/opt/tool/bin/other", false},
		{"/tmp/curl", false},
		{"./curl", true}, // a workspace link to /usr/bin/curl runs curl
		{"/usr/bin/python3", false},
		{"tool", false},
		{"", false},
	} {
		err := c.CheckExec(tc.name)
		if tc.ok != (err == nil) || err != nil && !errors.Is(err, ErrDenied) {
			t.Errorf("CheckExec(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
	all, err := NewChecker(mustParse(t, minimal), Vars{})
	if err != nil {
		t.Fatal(err)
	}
	if err := all.CheckExec("/anything"); err != nil {
		t.Errorf("exec.All: %v", err)
	}
	if err := all.CheckRead("relative"); !errors.Is(err, ErrDenied) {
		t.Errorf("relative path without a work dir: %v", err)
	}
}

func TestNewCheckerErrors(t *testing.T) {
	p := mustParse(t, "name = \"t\"\n[fs]\nread = [\"$DATA_DIR\"]\n")
	if _, err := NewChecker(p, Vars{WorkDir: "/w"}); err == nil || !strings.Contains(err.Error(), "$DATA_DIR") {
		t.Errorf("unset variable: %v", err)
	}
	if _, err := NewChecker(p, Vars{WorkDir: "w", DataDir: "/d"}); err == nil {
		t.Error("relative work dir: no error")
	}
}

func TestResolvePath(t *testing.T) {
	d := t.TempDir()
	os.MkdirAll(filepath.Join(d, "real", "sub"), 0o755)
	os.Symlink("real", filepath.Join(d, "rel"))
	os.Symlink(filepath.Join(d, "real", "sub"), filepath.Join(d, "abs"))
	os.Symlink("../real", filepath.Join(d, "real", "up"))
	real, _ := filepath.EvalSymlinks(d)
	for in, want := range map[string]string{
		"rel/sub":       "real/sub",
		"abs/../x":      "real/x", // ".." after a link goes up from its target
		"real/up/sub/y": "real/sub/y",
		"none/../a":     "a",
		"rel/none/z":    "real/none/z",
	} {
		got, err := resolvePath(d + "/" + in)
		if err != nil || got != filepath.Join(real, want) {
			t.Errorf("resolvePath(%s) = %q, %v; want %q", in, got, err, filepath.Join(real, want))
		}
	}
}

// A program the skill ships is allowed at its host path.
func TestCheckExecSkillProgram(t *testing.T) {
	_, v := checkerFixture(t)
	c, err := NewChecker(mustParse(t, minimal+"[fs]\nread = [\"$SKILL_DIR\"]\n[exec]\nallow = [\"$SKILL_DIR/run.sh\"]\n"), v)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CheckExec(filepath.Join(v.SkillDir, "run.sh")); err != nil {
		t.Errorf("the skill's program: %v", err)
	}
	if err := c.CheckExec(filepath.Join(v.SkillDir, "other.sh")); !errors.Is(err, ErrDenied) {
		t.Errorf("another file of the skill: %v", err)
	}
}
