package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestCheckRoot(t *testing.T) {
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink("/", link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		root, want string
	}{
		{"", "--root (or WARDEN_ROOT) is empty"},
		{"/", "host's root folder"},
		{"//", "host's root folder"},
		{"/tmp/..", "host's root folder"},
		{link, "host's root folder"},
		{"/run/warden", ""},
		{"/tmp/not-there/yet", ""},
		{"relative", ""}, // refused later, as not absolute
	} {
		err := CheckRoot(c.root)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("CheckRoot(%q) = %v, want %q", c.root, err, c.want)
		}
	}
}

// MakeStateDir gives the folders it creates 0711 whatever the umask, and
// leaves the mode of those that exist alone.
func TestMakeStateDir(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	base := t.TempDir()
	existing := filepath.Join(base, "existing")
	if err := os.Mkdir(existing, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(existing, 0o750)
	dir := filepath.Join(existing, "a", "b")
	if err := MakeStateDir(dir); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{base: 0o700, existing: 0o750, filepath.Dir(dir): 0o711, dir: 0o711} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %04o, want %04o", p, got, want)
		}
	}
	if err := MakeStateDir(dir); err != nil {
		t.Errorf("again: %v", err)
	}
	if err := CheckTraversable(filepath.Join(existing, "new")); err == nil || !strings.Contains(err.Error(), "chmod o+x "+existing) {
		t.Errorf("CheckTraversable under a 0750 folder: %v", err)
	}
}

func TestCheckExec(t *testing.T) {
	for _, c := range []struct {
		name    string
		argv    []string
		env     []string
		cwd     string
		timeout time.Duration
		want    string
	}{
		{"ok", []string{"rm", "é"}, []string{"LANG=é"}, "sub/é", time.Millisecond, ""},
		{"policy timeout", []string{"true"}, nil, "", 0, ""},
		{"argument", []string{"rm", "x\xff"}, nil, "", 0, "argument 2 is not valid UTF-8"},
		{"command", []string{"\xff"}, nil, "", 0, "argument 1 is not valid UTF-8"},
		{"env", []string{"true"}, []string{"A=1", "B=\xff"}, "", 0, "--env is not valid UTF-8"},
		{"cwd", []string{"true"}, nil, "\xc0\xaf", 0, "--cwd is not valid UTF-8"},
		{"negative", []string{"true"}, nil, "", -time.Second, "--timeout -1s: use at least 1ms"},
		{"1ns", []string{"true"}, nil, "", time.Nanosecond, "--timeout 1ns: use at least 1ms"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := CheckExec(c.argv, c.env, c.cwd, c.timeout)
			if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Errorf("got %v, want %q", err, c.want)
			}
		})
	}
}

func TestUTF8Env(t *testing.T) {
	got := UTF8Env([]string{"A=1", "B=\xff", "C=é"})
	if strings.Join(got, " ") != "A=1 C=é" {
		t.Errorf("got %q", got)
	}
}
