package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/spec"
)

// TestPoolView: the key of a session's sandbox does not depend on which
// workspace it gets (those mounts are bound late), but does on the policy,
// and the late mounts are exactly those under the session's folders,
// masks included.
func TestPoolView(t *testing.T) {
	rt := &Runtime{Root: t.TempDir(), Binary: "/usr/local/bin/warden"}
	parse := func(text string) *policies.Policy {
		p, err := policies.Parse("p.toml", []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	const policy = `name = "v"
[fs]
write = ["$WORK_DIR"]
read = ["$DATA_DIR"]
deny = ["$WORK_DIR/secret"]
`
	p := parse(policy)
	view := func(p *policies.Policy, ws, data, id string) *ClaimSpec {
		cs, err := rt.NewClaimSpec(SessionConfig{ID: id, Policy: p, Vars: policies.Vars{WorkDir: ws, DataDir: data, SkillDir: "/nonexistent"}})
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	ws1, ws2, data := t.TempDir(), t.TempDir(), t.TempDir()
	for _, ws := range []string{ws1, ws2} {
		if err := os.Mkdir(filepath.Join(ws, "secret"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	a, b := view(p, ws1, data, "a"), view(p, ws2, data, "b")
	if a.key != b.key {
		t.Errorf("the key depends on the workspace or session id: %s, %s", a.key, b.key)
	}
	key, err := rt.PoolKey(p, policies.Vars{SkillDir: "/nonexistent"})
	if err != nil || key != a.key {
		t.Errorf("pool key %s (%v), session key %s", key, err, a.key)
	}
	var dests []string
	for _, m := range a.late {
		dests = append(dests, m.Destination)
		if !isLate(m.Destination) {
			t.Errorf("late mount %s is outside the session folders", m.Destination)
		}
	}
	if got := strings.Join(dests, " "); got != "/data /workspace /workspace/secret" {
		t.Errorf("late mounts of ws1: %s", got)
	}
	// A workspace without the denied folder is refused when claimed:
	// the pool's placeholder has none either, but the session could
	// create it.
	if _, err := rt.NewClaimSpec(SessionConfig{ID: "d", Policy: p, Vars: policies.Vars{WorkDir: t.TempDir(), DataDir: data, SkillDir: "/nonexistent"}}); err == nil || !strings.Contains(err.Error(), `fs.deny "$WORK_DIR/secret"`) {
		t.Errorf("a workspace without the denied folder: %v", err)
	}
	for _, m := range a.late {
		if m.Destination == "/workspace" && (len(m.UIDMappings) != 1 || !strings.Contains(strings.Join(m.Options, ","), "noexec")) {
			t.Errorf("workspace mount lost its id mapping or flags: %+v", m)
		}
	}
	other := view(parse(strings.Replace(policy, `name = "v"`, "name = \"v\"\n[limits]\npids = 7", 1)), ws1, data, "c")
	if other.key == a.key {
		t.Errorf("two policies share a key")
	}
}

// TestClaimSpecSame: the claim spec of an earlier session of the same
// policy and folders serves a new session (Same), unless what the claim
// takes from it differs: the folder a workspace path leads to, a file
// denied since, the identity.
func TestClaimSpecSame(t *testing.T) {
	rt := &Runtime{Root: t.TempDir(), Binary: "/usr/local/bin/warden"}
	shared, dir := t.TempDir(), t.TempDir()
	p, err := policies.Parse("p.toml", []byte("name = \"s\"\n[fs]\nwrite = [\"$WORK_DIR\"]\nread = [\""+shared+"\"]\ndeny = [\""+shared+"/secret\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "ws")
	for _, d := range []string{"a", "b"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("a", link); err != nil {
		t.Fatal(err)
	}
	claim := func(id string, identity spec.Identity) *ClaimSpec {
		cs, err := rt.NewClaimSpec(SessionConfig{ID: id, Policy: p, Identity: identity, Vars: policies.Vars{WorkDir: link, SkillDir: "/nonexistent"}})
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	first := claim("first", spec.Identity{})
	if second := claim("second-session", spec.Identity{}); !first.Same(second) || !second.Same(first) {
		t.Error("two sessions of one policy and folders are not Same")
	}
	if !first.Same(first) {
		t.Error("a claim spec is not Same as itself")
	}
	if other := claim("uid", spec.Identity{UID: 4242, GID: 4242}); first.Same(other) {
		t.Error("claim specs of two identities are Same")
	}
	os.Remove(link)
	if err := os.Symlink("b", link); err != nil {
		t.Fatal(err)
	}
	moved := claim("moved", spec.Identity{})
	if first.Same(moved) {
		t.Error("a workspace path that leads to another folder is Same")
	}
	if err := os.WriteFile(filepath.Join(shared, "secret"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if denied := claim("denied", spec.Identity{}); moved.Same(denied) {
		t.Error("a claim spec from before a denied file existed is Same as one after")
	}
}

// TestPoolViewKeyStable: the key is the one pools had before poolView
// stopped copying the spec through JSON (a daemon of either kind takes
// the other's pooled containers), and computing it changes nothing of
// the session's spec, uid mappings included.
func TestPoolViewKeyStable(t *testing.T) {
	rt := &Runtime{Root: t.TempDir(), Binary: "/usr/local/bin/warden"}
	shared := t.TempDir() // written by every session: an early id-mapped mount
	p, err := policies.Parse("p.toml", []byte("name = \"v\"\n[fs]\nwrite = [\"$WORK_DIR\", \""+shared+"\"]\nread = [\"$DATA_DIR\"]\n[exec]\nallow = [\"sh\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	bundleDir := filepath.Join(rt.Root, "sessions", "s", "late")
	b, err := rt.sessionSpec(p, policies.Vars{WorkDir: t.TempDir(), DataDir: t.TempDir(), SkillDir: "/nonexistent"}, spec.Identity{UID: 3000123, GID: 3000123}, "s", bundleDir)
	if err != nil {
		t.Fatal(err)
	}
	before, err := json.Marshal(b.Spec)
	if err != nil {
		t.Fatal(err)
	}
	key, late, err := poolView(b, bundleDir, p.Sandbox.Engine)
	if err != nil {
		t.Fatal(err)
	}
	if after, _ := json.Marshal(b.Spec); string(after) != string(before) {
		t.Errorf("poolView changed the session's spec")
	}
	// The key as computed through a JSON copy of the spec.
	var sp specs.Spec
	if err := json.Unmarshal(before, &sp); err != nil {
		t.Fatal(err)
	}
	sp.Mounts, _ = splitLate(sp.Mounts)
	sp.Linux.CgroupsPath = ""
	spec.Reidentify(&sp, spec.SpecIdentity(&sp), spec.DefaultIdentity)
	view, err := json.Marshal(struct {
		Engine policies.Engine `json:",omitempty"`
		Spec   *specs.Spec
		Rootfs []spec.Entry
	}{"", &sp, b.Rootfs})
	if err != nil {
		t.Fatal(err)
	}
	text := regexp.MustCompile(`/masks/[0-9]+`).ReplaceAllString(strings.ReplaceAll(string(view), bundleDir, "$BUNDLE"), "/masks/N")
	sum := sha256.Sum256([]byte(text))
	if want := hex.EncodeToString(sum[:12]); key != want {
		t.Errorf("key %s, through a JSON copy %s", key, want)
	}
	for _, m := range late {
		if m.Destination == "/workspace" && (len(m.UIDMappings) != 1 || m.UIDMappings[0].HostID != 3000123) {
			t.Errorf("the late workspace mount lost the session's mapping: %+v", m)
		}
	}
}

// TestWriteMaskNumbered: the key's text is what the regular expression
// /masks/[0-9]+ replaced with /masks/N gives, however the text runs.
func TestWriteMaskNumbered(t *testing.T) {
	re := regexp.MustCompile(`/masks/[0-9]+`)
	for _, text := range []string{"", "/masks/", "/masks/1", "a/masks/12/b", "/masks//masks/3", "/masks/masks/12",
		"/masks/x/masks/0007/masks/", "/mask/1 /masks/9", "//masks/", "/masks/12/masks/34", "x/masks"} {
		var b strings.Builder
		writeMaskNumbered(&b, []byte(text))
		if want := re.ReplaceAllString(text, "/masks/N"); b.String() != want {
			t.Errorf("%q: %q, want %q", text, b.String(), want)
		}
	}
}

// TestMaskedFiles: a pooled sandbox's masks outside the session folders
// are mounted on the host files that were there when it started; one
// removed and made again (its inode maybe reused) must not match.
func TestMaskedFiles(t *testing.T) {
	home := t.TempDir()
	ssh := filepath.Join(home, ".ssh")
	if err := os.Mkdir(ssh, 0o700); err != nil {
		t.Fatal(err)
	}
	sp := &specs.Spec{Mounts: []specs.Mount{
		{Destination: home, Type: "bind", Source: home},
		{Destination: ssh, Type: "bind", Source: "/b/masks/0"},
		{Destination: "/workspace/secret", Type: "bind", Source: "/b/masks/1"},
	}}
	before := maskedFiles(sp, "/b")
	if len(before) != 1 || before[ssh] == "" || before[ssh] == "gone" {
		t.Fatalf("masked files: %v", before)
	}
	if again := maskedFiles(sp, "/b"); !maps.Equal(again, before) {
		t.Errorf("the same file: %v, then %v", before, again)
	}
	if err := os.Remove(ssh); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(ssh, 0o700); err != nil {
		t.Fatal(err)
	}
	if after := maskedFiles(sp, "/b"); maps.Equal(after, before) {
		t.Errorf("~/.ssh made again has the identity of the old one: %v", after)
	}
}

// TestCheckPlaceholder: the spec's checks trust the pool's placeholder as
// warden's own empty folder, so anything else in its place is refused,
// with what to do.
func TestCheckPlaceholder(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, ".empty")
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := checkPlaceholder(p); err != nil {
		t.Fatalf("warden's own empty folder: %v", err)
	}
	bad := map[string]func(){
		"a file in it": func() { os.WriteFile(filepath.Join(p, "x"), nil, 0o600) },
		"mode 0755":    func() { os.Chmod(p, 0o755) },
		"a symlink":    func() { os.Rename(p, p+".old"); os.Symlink(p+".old", p) },
	}
	for name, spoil := range bad {
		t.Run(name, func(t *testing.T) {
			os.RemoveAll(p)
			os.RemoveAll(p + ".old")
			if err := os.Mkdir(p, 0o700); err != nil {
				t.Fatal(err)
			}
			spoil()
			err := checkPlaceholder(p)
			if err == nil || !strings.Contains(err.Error(), "not warden's empty folder") || !strings.Contains(err.Error(), "remove it") {
				t.Errorf("got %v, want a refusal saying what to do", err)
			}
		})
	}
}
