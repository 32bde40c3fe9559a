package spec

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/spec/hostfs"
)

// These tests attack the generator: a policy or a folder on the host that
// would make the sandbox see or write more than the policy says.

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// TestGrantThroughSymlinkRefused: a grant under a variable is a path the
// sandbox (or a skill's author) may control. A symlink there that leaves the
// variable's folder would make the host bind whatever it points at.
func TestGrantThroughSymlinkRefused(t *testing.T) {
	host := fakeHost(t)
	vars, base := testVars(t)
	outside := filepath.Join(base, "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	symlink(t, outside, filepath.Join(vars.SkillDir, "data"))           // absolute target
	symlink(t, "../outside", filepath.Join(vars.WorkDir, "cache"))      // relative target
	symlink(t, "/etc", filepath.Join(vars.DataDir, "conf"))             // into a system directory
	symlink(t, "scripts", filepath.Join(vars.SkillDir, "scripts-link")) // stays inside: fine
	cases := []struct{ name, policy, want string }{
		{"read via absolute link", `read = ["$SKILL_DIR/data"]`, "leaves $SKILL_DIR"},
		{"write via relative link", `write = ["$WORK_DIR/cache"]`, "leaves $WORK_DIR"},
		{"write via link to /etc", `write = ["$DATA_DIR/conf"]`, "leaves $DATA_DIR"},
		{"component is a link", `read = ["$SKILL_DIR/data/x"]`, "leaves $SKILL_DIR"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "component is a link" {
				os.WriteFile(filepath.Join(outside, "x"), nil, 0o644)
			}
			_, err := Generate(Options{Policy: mustParse(t, "name = \"t\"\n[fs]\n"+c.policy+"\n"), Vars: vars, Host: host, BundleDir: "/bundle"})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
	t.Run("link inside its folder", func(t *testing.T) {
		b, err := Generate(Options{Policy: mustParse(t, "name = \"t\"\n[fs]\nread = [\"$SKILL_DIR/scripts-link\"]\n"), Vars: vars, Host: host, BundleDir: "/bundle"})
		if err != nil {
			t.Fatal(err)
		}
		m := findMount(b.Spec, SkillPath+"/scripts-link")
		if m == nil || m.Source != filepath.Join(vars.SkillDir, "scripts") {
			t.Errorf("want a bind of the link's target, got %+v", m)
		}
	})
}

// TestWritableHostSystemRefused: a folder variable (or an absolute rule)
// that is, or resolves to, a host system directory would give the
// sandbox's root the owner's (host root's) write access to it.
func TestWritableHostSystemRefused(t *testing.T) {
	vars, base := testVars(t)
	etcLink := filepath.Join(base, "ws-link")
	symlink(t, "/etc", etcLink)
	cases := []struct {
		name, policy string
		vars         func(policies.Vars) policies.Vars
		want         string
	}{
		{"workspace is a link to /etc", `write = ["$WORK_DIR"]`, func(v policies.Vars) policies.Vars { v.WorkDir = etcLink; return v }, "/etc"},
		{"workspace is /", `write = ["$WORK_DIR"]`, func(v policies.Vars) policies.Vars { v.WorkDir = "/"; return v }, "host's root"},
		{"read workspace that is /", `read = ["$WORK_DIR"]`, func(v policies.Vars) policies.Vars { v.WorkDir = "/"; return v }, "host's root"},
		{"workspace is /usr/lib", `write = ["$WORK_DIR"]`, func(v policies.Vars) policies.Vars { v.WorkDir = "/usr/lib"; return v }, "/usr/lib"},
		{"skill dir is /proc", `read = ["$SKILL_DIR"]`, func(v policies.Vars) policies.Vars { v.SkillDir = "/proc/self"; return v }, "/proc"},
		{"write /etc", `write = ["/etc"]`, func(v policies.Vars) policies.Vars { return v }, "/etc"},
		{"write /etc/cron.d", `write = ["/etc/ssl"]`, func(v policies.Vars) policies.Vars { return v }, "/etc"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			host := Host{Root: "/", RlimitHard: map[string]uint64{"RLIMIT_NOFILE": 1 << 20}}
			if strings.HasPrefix(c.policy, `write = ["/etc`) {
				host = fakeHost(t)
			}
			_, err := Generate(Options{Policy: mustParse(t, "name = \"t\"\n[fs]\n"+c.policy+"\n"), Vars: c.vars(vars), Host: host, BundleDir: "/bundle"})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

// TestDenyCoversEveryPlace: a denied host folder stays hidden wherever a
// grant makes it visible, here through a workspace that is $HOME.
func TestDenyCoversEveryPlace(t *testing.T) {
	vars, _ := testVars(t)
	vars.WorkDir = vars.Home
	p := mustParse(t, `name = "t"
[fs]
write = ["$WORK_DIR"]
deny = ["~/.ssh"]
`)
	b, err := Generate(Options{Policy: p, Vars: vars, Host: fakeHost(t), BundleDir: "/bundle"})
	if err != nil {
		t.Fatal(err)
	}
	var dests []string
	for _, m := range b.Spec.Mounts {
		dests = append(dests, m.Destination)
	}
	ws, mask := slices.Index(dests, WorkspacePath), slices.Index(dests, WorkspacePath+"/.ssh")
	if ws < 0 || mask < ws {
		t.Errorf("~/.ssh is visible at %s/.ssh: want a mask mounted after the workspace; mounts %q", WorkspacePath, dests)
	}
}

// TestMountOrderFollowsPlaces: rules written with different prefixes ($HOME
// and an absolute path) that land on one folder must still be mounted
// parent first, or the parent's bind hides the child's mask.
func TestMountOrderFollowsPlaces(t *testing.T) {
	vars, _ := testVars(t)
	host := Host{Root: "/", RlimitHard: map[string]uint64{"RLIMIT_NOFILE": 1 << 20}}
	p := mustParse(t, `name = "t"
[fs]
read = ["$HOME"]
deny = ["`+vars.Home+`/.ssh"]
write = ["`+vars.Home+`/.aws"]
`)
	b, err := Generate(Options{Policy: p, Vars: vars, Host: host, BundleDir: "/bundle"})
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, m := range b.Spec.Mounts {
		if rel, ok := hostfs.Under(m.Destination, vars.Home); ok {
			order = append(order, rel)
		}
	}
	if want := []string{".", ".aws", ".ssh"}; !slices.Equal(order, want) {
		t.Errorf("mounts under $HOME in order %q, want %q", order, want)
	}
}

// TestDenyAbsentUnderWrite: a denied file that does not exist has nothing
// to mask, so a write grant above it would let the sandbox create it on
// the host (an authorized_keys in ~/.ssh). Such a policy is refused; an
// absent file nothing can create is fine, and a present one is masked.
func TestDenyAbsentUnderWrite(t *testing.T) {
	vars, _ := testVars(t) // $HOME has .ssh and .aws, no .gnupg
	if err := os.MkdirAll(filepath.Join(vars.Home, ".config"), 0o755); err != nil {
		t.Fatal(err)
	}
	home := func(v policies.Vars) policies.Vars { v.WorkDir = v.Home; return v }
	same := func(v policies.Vars) policies.Vars { return v }
	refused := []struct {
		name, policy string
		vars         func(policies.Vars) policies.Vars
		want         string
	}{
		{"under write ~", `write = ["~"]` + "\n" + `deny = ["~/.ssh", "~/.gnupg"]`, same, `fs.deny "$HOME/.gnupg" (` + vars.Home + `/.gnupg) does not exist, and it lies under the writable grant "$HOME"`},
		{"deeper under write ~", `write = ["~"]` + "\n" + `deny = ["~/.gnupg/private"]`, same, `writable grant "$HOME"`},
		{"under the workspace", `write = ["$WORK_DIR"]` + "\n" + `deny = ["$WORK_DIR/a/secret"]`, same, `fs.deny "$WORK_DIR/a/secret"`},
		{"under the data folder", `write = ["$DATA_DIR"]` + "\n" + `deny = ["$DATA_DIR/key"]`, same, `writable grant "$DATA_DIR"`},
		{"workspace is $HOME", `write = ["$WORK_DIR"]` + "\n" + `deny = ["~/.gnupg"]`, home, `writable grant "$WORK_DIR"`},
		{"under an absent read grant", `write = ["~"]` + "\n" + `read = ["~/ro"]` + "\n" + `deny = ["~/ro/.ssh"]`, same, `fs.deny "$HOME/ro/.ssh"`},
		{"absolute paths", `write = ["/home/user"]` + "\n" + `deny = ["/home/user/.gnupg"]`, same, `fs.deny "/home/user/.gnupg" (/home/user/.gnupg)`},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			_, err := Generate(Options{Policy: mustParse(t, "name = \"t\"\n[fs]\n"+c.policy+"\n"), Vars: c.vars(vars), Host: fakeHost(t), BundleDir: "/bundle"})
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "mkdir -p -m 700") {
				t.Errorf("got %v, want an error containing %q and how to fix it", err, c.want)
			}
		})
	}
	allowed := []struct {
		name, policy string
		placeholder  bool
		absent       string // the sandbox path explain reports absent; "" for none
	}{
		{"under read ~", `read = ["~"]` + "\n" + `deny = ["~/.gnupg"]`, false, vars.Home + "/.gnupg"},
		{"under no grant", `write = ["$WORK_DIR"]` + "\n" + `deny = ["~/.gnupg"]`, false, vars.Home + "/.gnupg"},
		{"under a read grant in a write grant", `write = ["~"]` + "\n" + `read = ["~/.config"]` + "\n" + `deny = ["~/.config/secret"]`, false, vars.Home + "/.config/secret"},
		{"present under write ~", `write = ["~"]` + "\n" + `deny = ["~/.ssh"]`, false, ""},
		{"pooled placeholder", `write = ["$WORK_DIR"]` + "\n" + `deny = ["$WORK_DIR/a/secret"]`, true, ""},
	}
	for _, c := range allowed {
		t.Run(c.name, func(t *testing.T) {
			o := Options{Policy: mustParse(t, "name = \"t\"\n[fs]\n"+c.policy+"\n"), Vars: vars, Host: fakeHost(t), BundleDir: "/bundle"}
			if c.placeholder {
				o.Placeholder = vars.WorkDir
			}
			b, err := Generate(o)
			if err != nil {
				t.Fatal(err)
			}
			if want := []string{c.absent}; c.absent == "" && len(b.Absent) != 0 || c.absent != "" && !slices.Equal(b.Absent, want) {
				t.Errorf("absent = %q, want %q", b.Absent, c.absent)
			}
		})
	}
	t.Run("present is masked", func(t *testing.T) {
		b, err := Generate(Options{Policy: mustParse(t, "name = \"t\"\n[fs]\nwrite = [\"~\"]\ndeny = [\"~/.ssh\"]\n"), Vars: vars, Host: fakeHost(t), BundleDir: "/bundle"})
		if err != nil {
			t.Fatal(err)
		}
		if m := findMount(b.Spec, vars.Home+"/.ssh"); m == nil || !strings.HasPrefix(m.Source, "/bundle/masks/") {
			t.Errorf("~/.ssh is not masked: %+v", m)
		}
	})
}

// TestHostMemoAgrees: a host from DetectHost, which keeps the folders'
// identities and the mount table for its generations, refuses and
// accepts grants as a host that reads them every time does, and again
// when its memory is warm.
func TestHostMemoAgrees(t *testing.T) {
	vars, _ := testVars(t)
	memo, err := DetectHost()
	if err != nil {
		t.Fatal(err)
	}
	plain := Host{Root: "/", RlimitHard: memo.RlimitHard}
	refused, accepted := 0, 0
	for _, grant := range []string{`write = ["/var"]`, `write = ["/opt"]`, `read = ["/proc/self"]`, `write = ["/usr/share"]`,
		`write = ["$WORK_DIR"]`, `read = ["$HOME"]`, `write = ["` + vars.Home + `/.aws"]`} {
		p := mustParse(t, "name = \"t\"\n[fs]\n"+grant+"\n")
		var errs [3]string
		for i, h := range []Host{plain, memo, memo} {
			if _, err := Generate(Options{Policy: p, Vars: vars, Host: h, BundleDir: "/bundle"}); err != nil {
				errs[i] = err.Error()
			}
		}
		if errs[1] != errs[0] || errs[2] != errs[0] {
			t.Errorf("%s: refused by a plain host with %q, by DetectHost's with %q, then %q", grant, errs[0], errs[1], errs[2])
		}
		if errs[0] != "" {
			refused++
		} else {
			accepted++
		}
	}
	if refused == 0 || accepted == 0 {
		t.Errorf("%d grants refused, %d accepted: the check compares nothing", refused, accepted)
	}
}
