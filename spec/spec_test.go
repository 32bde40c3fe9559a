package spec

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/warden-sandbox/warden/policies"
)

var update = flag.Bool("update", false, "rewrite the golden config.json files")

// fakeHost lays out a small Debian-like system under a temporary root so
// generated specs do not depend on what this machine has installed.
func fakeHost(t *testing.T) Host {
	t.Helper()
	root := t.TempDir()
	dirs := []string{
		"usr/bin", "usr/sbin", "usr/lib/x86_64-linux-gnu", "usr/lib64", "usr/share/ca-certificates",
		"usr/libexec", "usr/local/bin", "usr/local/lib", "usr/local/go/bin", "usr/games",
		"etc/ssl/certs", "etc/alternatives", "home/user/.ssh", "home/user/.aws", "root", "var/lib",
	}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	exes := []string{"usr/bin/dash", "usr/bin/bash", "usr/bin/curl", "usr/bin/jq", "usr/bin/python3.11",
		"usr/bin/cat", "usr/bin/ls", "usr/bin/head", "usr/bin/tail", "usr/bin/wc", "usr/bin/grep", "usr/bin/find",
		"usr/bin/make", "usr/bin/x86_64-linux-gnu-gcc-12", "usr/bin/x86_64-linux-gnu-as", "usr/bin/x86_64-linux-gnu-ld.bfd",
		"usr/bin/mawk", "usr/bin/env", "usr/bin/sed", "usr/bin/tr", "usr/bin/sort", "usr/bin/cut", "usr/bin/mkdir",
		"usr/bin/rm", "usr/bin/cp", "usr/bin/mv", "usr/bin/touch", "usr/bin/echo", "usr/bin/printf", "usr/bin/uniq",
		"usr/bin/ar", "usr/bin/cpp-12", "usr/sbin/iptables", "usr/local/go/bin/go", "usr/lib64/ld-linux-x86-64.so.2"}
	for _, e := range exes {
		if err := os.WriteFile(filepath.Join(root, e), []byte("\x7fELF"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"bin": "usr/bin", "sbin": "usr/sbin", "lib": "usr/lib", "lib64": "usr/lib64",
		"usr/bin/sh": "dash", "usr/bin/python3": "python3.11", "usr/bin/awk": "/etc/alternatives/awk",
		"etc/alternatives/awk": "/usr/bin/mawk", "usr/bin/gcc": "gcc-12", "usr/bin/gcc-12": "x86_64-linux-gnu-gcc-12",
		"usr/bin/cc": "/etc/alternatives/cc", "etc/alternatives/cc": "/usr/bin/gcc", "usr/bin/as": "x86_64-linux-gnu-as",
		"usr/bin/ld": "x86_64-linux-gnu-ld.bfd", "usr/bin/cpp": "cpp-12", "etc/localtime": "/usr/share/zoneinfo/Etc/UTC",
		"usr/bin/python": "python3",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"etc/ld.so.cache", "etc/services", "etc/protocols", "etc/shadow"} {
		if err := os.WriteFile(filepath.Join(root, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return Host{Root: root, RlimitHard: map[string]uint64{"RLIMIT_NOFILE": 1 << 20}}
}

// testVars creates the folders a policy's variables stand for.
func testVars(t *testing.T) (policies.Vars, string) {
	t.Helper()
	base := t.TempDir()
	v := policies.Vars{
		SkillDir: filepath.Join(base, "skill"),
		WorkDir:  filepath.Join(base, "ws"),
		DataDir:  filepath.Join(base, "data"),
		Home:     filepath.Join(base, "home"),
	}
	for _, d := range []string{v.SkillDir, v.WorkDir, v.DataDir, filepath.Join(v.Home, ".ssh"), filepath.Join(v.Home, ".aws"), filepath.Join(v.SkillDir, "scripts")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return v, base
}

func generate(t *testing.T, p *policies.Policy) (*Bundle, Host, string) {
	t.Helper()
	host := fakeHost(t)
	vars, base := testVars(t)
	b, err := Generate(Options{Policy: p, Vars: vars, Host: host, BundleDir: "/bundle",
		Args: []string{"sh"}, CallerEnv: []string{"LANG=C.UTF-8", "SECRET_TOKEN=hunter2", "TZ=UTC"}})
	if err != nil {
		t.Fatal(err)
	}
	return b, host, base
}

// normalised renders a spec with the temporary roots replaced, so golden
// files are the same on every machine.
func normalised(t *testing.T, s *specs.Spec, host Host, base string) []byte {
	t.Helper()
	data, err := json.MarshalIndent(s, "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	data = bytes.ReplaceAll(data, []byte(host.Root), nil)
	data = bytes.ReplaceAll(data, []byte(base), []byte("/HOST"))
	// Owners of temporary folders depend on who runs the test.
	var back specs.Spec
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	for i := range back.Mounts {
		for j := range back.Mounts[i].UIDMappings {
			back.Mounts[i].UIDMappings[j].ContainerID = 1000
		}
		for j := range back.Mounts[i].GIDMappings {
			back.Mounts[i].GIDMappings[j].ContainerID = 1000
		}
	}
	data, err = json.MarshalIndent(&back, "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	return append(data, '\n')
}

// TestGolden pins the config.json of every example policy, so any widening
// of permissions shows up as a diff in review. Run with -update to accept.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob("../policies/*.toml")
	if err != nil || len(files) < 4 {
		t.Fatalf("want at least 4 example policies, found %v (%v)", files, err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".toml")
		t.Run(name, func(t *testing.T) {
			p, err := policies.Load(f)
			if err != nil {
				t.Fatal(err)
			}
			b, host, base := generate(t, p)
			got := normalised(t, b.Spec, host, base)
			golden := filepath.Join("testdata", "golden", name+".json")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./spec -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("config.json for %s differs from %s; review the diff and run go test ./spec -update if it is intended\n%s", f, golden, firstDiff(got, want))
			}
			if err := validateSchema(got); err != nil {
				t.Errorf("runtime-spec schema: %v", err)
			}
		})
	}
}

func firstDiff(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(g) && i < len(w); i++ {
		if g[i] != w[i] {
			return "line " + strconv.Itoa(i+1) + ":\n got: " + g[i] + "\nwant: " + w[i]
		}
	}
	return "lengths differ"
}

func mustParse(t *testing.T, text string) *policies.Policy {
	t.Helper()
	p, err := policies.Parse("test.toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func findMount(s *specs.Spec, dest string) *specs.Mount {
	for i := range s.Mounts {
		if s.Mounts[i].Destination == dest {
			return &s.Mounts[i]
		}
	}
	return nil
}

func TestExecAllowListLayout(t *testing.T) {
	p := mustParse(t, `name = "t"
[exec]
allow = ["sh", "awk", "curl", "nosuchtool"]
[fs]
read = ["$SKILL_DIR"]
write = ["$WORK_DIR"]
`)
	b, host, _ := generate(t, p)
	s := b.Spec
	// Allowed binaries are bound one by one, from the real file behind links.
	for dest, src := range map[string]string{"/usr/bin/sh": "/usr/bin/dash", "/usr/bin/awk": "/usr/bin/mawk", "/usr/bin/curl": "/usr/bin/curl"} {
		m := findMount(s, dest)
		if m == nil || m.Source != host.Root+src {
			t.Errorf("%s: want a bind of %s, got %+v", dest, src, m)
		}
	}
	// Nothing binds the host's whole executable directories.
	for _, dir := range []string{"/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/go", "/usr/games", "/usr"} {
		if m := findMount(s, dir); m != nil {
			t.Errorf("%s is bound (%v): unlisted binaries would run", dir, m.Source)
		}
	}
	// Libraries stay visible and mappable; folders without libraries are
	// noexec, so the dynamic loader cannot run what they hold.
	for _, dir := range []string{"/usr/lib", "/usr/lib64", "/usr/local/lib"} {
		if m := findMount(s, dir); m == nil || slices.Contains(m.Options, "noexec") || !slices.Contains(m.Options, "ro") {
			t.Errorf("%s must be bound read-only without noexec: %+v", dir, m)
		}
	}
	for _, dir := range []string{"/usr/share", "/usr/libexec"} {
		if m := findMount(s, dir); m == nil || !slices.Contains(m.Options, "noexec") {
			t.Errorf("%s must be bound noexec: %+v", dir, m)
		}
	}
	if len(b.Warnings) != 1 || !strings.Contains(b.Warnings[0], "nosuchtool") {
		t.Errorf("want one warning about nosuchtool, got %q", b.Warnings)
	}
	if got := s.Annotations[AnnotationExecAllow]; got != "/usr/bin/awk:/usr/bin/curl:/usr/bin/sh" {
		t.Errorf("exec-allow annotation = %q", got)
	}
	// With an allow-list, read grants are noexec too.
	if m := findMount(s, SkillPath); m == nil || !slices.Contains(m.Options, "noexec") {
		t.Errorf("skill dir must be noexec under an exec allow-list: %+v", m)
	}
	if m := findMount(s, WorkspacePath); m == nil || !slices.Contains(m.Options, "noexec") || !slices.Contains(m.Options, "rw") {
		t.Errorf("workspace must be rw,noexec: %+v", m)
	}
}

func TestAllBinariesWithoutExecSection(t *testing.T) {
	p := mustParse(t, `name = "t"`)
	b, _, _ := generate(t, p)
	m := findMount(b.Spec, "/usr")
	if m == nil || !slices.Contains(m.Options, "ro") || !slices.Contains(m.Options, "nosuid") {
		t.Fatalf("/usr must be a read-only nosuid bind without exec.allow: %+v", m)
	}
	if b.Spec.Annotations[AnnotationExecAllow] != "*" {
		t.Errorf("exec-allow annotation = %q, want *", b.Spec.Annotations[AnnotationExecAllow])
	}
}

func TestDenyUnderGrantIsMasked(t *testing.T) {
	p := mustParse(t, `name = "t"
[fs]
read = ["$HOME"]
deny = ["$HOME/.ssh", "$HOME/.aws"]
`)
	b, _, base := generate(t, p)
	home := filepath.Join(base, "home")
	var order []string
	for _, m := range b.Spec.Mounts {
		if strings.HasPrefix(m.Destination, home) {
			order = append(order, m.Destination+" <- "+m.Source)
		}
	}
	want := []string{home + " <- " + home, home + "/.aws <- /bundle/masks/0", home + "/.ssh <- /bundle/masks/1"}
	if !slices.Equal(order, want) {
		t.Errorf("mounts under $HOME:\n got %q\nwant %q", order, want)
	}
	if len(b.Masks) != 2 || b.Masks[0].Kind != Dir {
		t.Errorf("masks = %+v", b.Masks)
	}
}

func TestEnvironmentOnlyFromPolicy(t *testing.T) {
	p := mustParse(t, `name = "t"
[env]
allow = ["LANG"]
set = { PAGER = "cat" }
`)
	b, _, _ := generate(t, p)
	env := b.Spec.Process.Env
	for _, want := range []string{"LANG=C.UTF-8", "PAGER=cat", "HOME=/tmp"} {
		if !slices.Contains(env, want) {
			t.Errorf("env lacks %s: %q", want, env)
		}
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, "SECRET_TOKEN=") || strings.HasPrefix(kv, "TZ=") {
			t.Errorf("caller variable leaked: %s", kv)
		}
	}
}

func TestHardening(t *testing.T) {
	b, _, _ := generate(t, mustParse(t, `name = "t"
[limits]
memory = "64MiB"
pids = 32
cpu = 0.5
`))
	s := b.Spec
	if !s.Root.Readonly || !s.Process.NoNewPrivileges || len(s.Process.Capabilities.Bounding) != 0 {
		t.Error("root must be read-only, no_new_privs set, capabilities empty")
	}
	if *s.Linux.Resources.Memory.Limit != 64<<20 || *s.Linux.Resources.Pids.Limit != 32 || *s.Linux.Resources.CPU.Quota != 50000 {
		t.Errorf("limits not applied: %+v", s.Linux.Resources)
	}
	if m := findMount(s, "/tmp"); m == nil || !slices.Contains(m.Options, "size=32768k") || !slices.Contains(m.Options, "noexec") {
		t.Errorf("/tmp must be a noexec tmpfs of half the memory limit: %+v", m)
	}
	for _, m := range s.Mounts {
		if m.Destination == "/sys" || m.Destination == "/etc" || m.Destination == "/root" || m.Destination == "/home" || m.Destination == "/var" || m.Destination == "/run" {
			t.Errorf("%s must not be mounted from the host", m.Destination)
		}
	}
	if s.Linux.UIDMappings[0].HostID != DefaultIdentity.UID || s.Linux.UIDMappings[0].ContainerID != 0 {
		t.Errorf("uid mapping = %+v", s.Linux.UIDMappings)
	}
	for _, r := range s.Process.Rlimits {
		if r.Type == "RLIMIT_NOFILE" && r.Hard > 1<<20 {
			t.Errorf("rlimit above the host's hard limit: %+v", r)
		}
	}
}

func TestRlimitsStayUnderHostHardLimit(t *testing.T) {
	host := fakeHost(t)
	host.RlimitHard = map[string]uint64{"RLIMIT_NOFILE": 1000, "RLIMIT_SIGPENDING": 1000, "RLIMIT_MSGQUEUE": 1000, "RLIMIT_MEMLOCK": 1000}
	vars, _ := testVars(t)
	b, err := Generate(Options{Policy: mustParse(t, `name = "t"`), Vars: vars, Host: host, BundleDir: "/bundle"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range b.Spec.Process.Rlimits {
		if r.Hard > 1000 || r.Soft > r.Hard {
			t.Errorf("%s = %d/%d exceeds the host's hard limit 1000", r.Type, r.Soft, r.Hard)
		}
	}
}

// The per-user kernel counters a sandbox shares with the host user that
// owns its user namespace are bounded in every sandbox.
func TestRlimitsBoundSharedCounters(t *testing.T) {
	vars, _ := testVars(t)
	b, err := Generate(Options{Policy: mustParse(t, `name = "t"`), Vars: vars, Host: fakeHost(t), BundleDir: "/bundle"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"RLIMIT_SIGPENDING": 1024, "RLIMIT_MSGQUEUE": 204800, "RLIMIT_MEMLOCK": 1 << 20, "RLIMIT_CORE": 0, "RLIMIT_NOFILE": 4096}
	for _, r := range b.Spec.Process.Rlimits {
		if w, ok := want[r.Type]; ok && r.Hard == w && r.Soft == w {
			delete(want, r.Type)
		}
	}
	if len(want) != 0 {
		t.Errorf("rlimits %+v lack %v", b.Spec.Process.Rlimits, want)
	}
}

func TestGenerateRefuses(t *testing.T) {
	host := fakeHost(t)
	vars, _ := testVars(t)
	cases := []struct {
		name, policy string
		vars         policies.Vars
		identity     Identity
		want         string
	}{
		{"write to system dir", "name = \"t\"\n[fs]\nwrite = [\"/usr/local\"]\n", vars, Identity{}, "never writable"},
		{"grant over /proc", "name = \"t\"\n[fs]\nread = [\"/proc/1\"]\n", vars, Identity{}, "warden manages"},
		{"grant of /", "name = \"t\"\n[fs]\nread = [\"/\"]\n", vars, Identity{}, "warden manages"},
		{"grant over /dev", "name = \"t\"\n[fs]\nwrite = [\"/dev/shm\"]\n", vars, Identity{}, "warden manages"},
		{"write holding /var/lib", "name = \"t\"\n[fs]\nwrite = [\"/var\"]\n", vars, Identity{}, "holds system state"},
		{"write of root's home", "name = \"t\"\n[fs]\nwrite = [\"/root\"]\n", vars, Identity{}, "holds system state"},
		{"missing data dir", "name = \"t\"\n[fs]\nread = [\"$DATA_DIR\"]\n", policies.Vars{WorkDir: vars.WorkDir}, Identity{}, "--data-dir"},
		{"host root identity", "name = \"t\"\n", vars, Identity{UID: 0, GID: 5}, "host root"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Generate(Options{Policy: mustParse(t, c.policy), Vars: c.vars, Host: host, BundleDir: "/bundle", Identity: c.identity})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

// TestValidateCatchesWeakSpecs feeds specs that break each check.
func TestValidateCatchesWeakSpecs(t *testing.T) {
	p := mustParse(t, `name = "t"`)
	cases := []struct {
		name   string
		weaken func(s *specs.Spec)
		field  string
	}{
		{"writable root", func(s *specs.Spec) { s.Root.Readonly = false }, "root.readonly"},
		{"a capability", func(s *specs.Spec) { s.Process.Capabilities.Bounding = []string{"CAP_SYS_ADMIN"} }, "process.capabilities.bounding"},
		{"default capabilities", func(s *specs.Spec) { s.Process.Capabilities = nil }, "process.capabilities"},
		{"new privileges", func(s *specs.Spec) { s.Process.NoNewPrivileges = false }, "process.noNewPrivileges"},
		{"no user namespace", func(s *specs.Spec) { s.Linux.Namespaces = s.Linux.Namespaces[:6] }, "linux.namespaces"},
		{"joined network namespace", func(s *specs.Spec) { s.Linux.Namespaces[4].Path = "/proc/1/ns/net" }, "linux.namespaces[4]"},
		{"root mapped to host root", func(s *specs.Spec) { s.Linux.UIDMappings[0].HostID = 0 }, "linux.uidMappings[0]"},
		{"wide mapping", func(s *specs.Spec) { s.Linux.GIDMappings[0].Size = 65536 }, "linux.gidMappings[0]"},
		{"exec on a writable mount", func(s *specs.Spec) {
			s.Mounts = append(s.Mounts, specs.Mount{Destination: "/w", Type: "bind", Source: "/w", Options: []string{"rbind", "rw", "nosuid", "nodev"}})
		}, "writable mount without noexec"},
		{"sysfs", func(s *specs.Spec) {
			s.Mounts = append(s.Mounts, specs.Mount{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"ro"}})
		}, "the sandbox has no /sys"},
		{"host root bind", func(s *specs.Spec) {
			s.Mounts = append(s.Mounts, specs.Mount{Destination: "/host", Type: "bind", Source: "/", Options: []string{"rbind", "ro"}})
		}, "whole root"},
		{"unbounded tmpfs", func(s *specs.Spec) {
			s.Mounts = append(s.Mounts, specs.Mount{Destination: "/x", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "noexec", "nodev"}})
		}, "without a size limit"},
		{"kcore visible", func(s *specs.Spec) { s.Linux.MaskedPaths = s.Linux.MaskedPaths[1:] }, "linux.maskedPaths"},
		{"proc sys writable", func(s *specs.Spec) { s.Linux.ReadonlyPaths = nil }, "linux.readonlyPaths"},
		{"no memory limit", func(s *specs.Spec) { s.Linux.Resources.Memory = nil }, "linux.resources.memory.limit"},
		{"more memory than the policy", func(s *specs.Spec) { m := int64(1 << 40); s.Linux.Resources.Memory.Limit = &m }, "exceeds the policy"},
		{"no pids limit", func(s *specs.Spec) { s.Linux.Resources.Pids = nil }, "linux.resources.pids.limit"},
		{"devices allowed", func(s *specs.Spec) { s.Linux.Resources.Devices[0].Allow = true }, "linux.resources.devices[0]"},
		{"no seccomp", func(s *specs.Spec) { s.Linux.Seccomp = nil }, "linux.seccomp"},
		{"seccomp allows by default", func(s *specs.Spec) { s.Linux.Seccomp.DefaultAction = specs.ActAllow }, "linux.seccomp.defaultAction"},
		{"leaked variable", func(s *specs.Spec) { s.Process.Env = append(s.Process.Env, "AWS_SECRET_ACCESS_KEY=x") }, "process.env"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, _, _ := generate(t, p)
			if err := Validate(b.Spec, p); err != nil {
				t.Fatalf("generated spec must validate: %v", err)
			}
			c.weaken(b.Spec)
			err := Validate(b.Spec, p)
			if err == nil || !strings.Contains(err.Error(), c.field) {
				t.Errorf("got %v, want an error naming %q", err, c.field)
			}
		})
	}
}

func TestWriteBundle(t *testing.T) {
	p := mustParse(t, `name = "t"
[fs]
read = ["$HOME"]
deny = ["$HOME/.ssh"]
`)
	b, _, _ := generate(t, p)
	dir := filepath.Join(t.TempDir(), "bundle")
	if err := WriteBundle(dir, b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"config.json", "rootfs/etc/passwd", "rootfs/workspace", "rootfs/usr", "masks/0"} {
		if _, err := os.Lstat(filepath.Join(dir, want)); err != nil {
			t.Errorf("bundle lacks %s: %v", want, err)
		}
	}
	if target, _ := os.Readlink(filepath.Join(dir, "rootfs/bin")); target != "usr/bin" {
		t.Errorf("rootfs/bin -> %q, want usr/bin", target)
	}
	// A non-empty directory is never written into or removed.
	keep := filepath.Join(t.TempDir(), "mine")
	os.MkdirAll(keep, 0o755)
	os.WriteFile(filepath.Join(keep, "notes.txt"), []byte("mine"), 0o644)
	if err := WriteBundle(keep, b); err == nil {
		t.Fatal("writing into a non-empty directory must fail")
	}
	if data, err := os.ReadFile(filepath.Join(keep, "notes.txt")); err != nil || string(data) != "mine" {
		t.Errorf("existing file changed: %q %v", data, err)
	}
	if entries, _ := os.ReadDir(keep); len(entries) != 1 {
		t.Errorf("WriteBundle left files behind in a directory it refused: %d entries", len(entries))
	}
}

// TestExecAllowedNotWritable: a program the sandbox may run must not lie
// in a grant it may write, or it could replace the program.
func TestExecAllowedNotWritable(t *testing.T) {
	host := fakeHost(t)
	vars, _ := testVars(t)
	if err := os.MkdirAll(filepath.Join(host.Root, "var/lib/app"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(host.Root, "var/lib/app/tool"), []byte("\x7fELF"), 0o755); err != nil {
		t.Fatal(err)
	}
	gen := func(grant string) error {
		p := mustParse(t, "name = \"t\"\n[fs]\n"+grant+" = [\"/var/lib/app\"]\n[exec]\nallow = [\"/var/lib/app/tool\", \"sh\"]\n")
		_, err := Generate(Options{Policy: p, Vars: vars, Host: host, BundleDir: "/bundle"})
		return err
	}
	if err := gen("write"); err == nil || !strings.Contains(err.Error(), "could replace the program") {
		t.Errorf("an allowed program in a writable grant: %v, want a refusal", err)
	}
	if err := gen("read"); err != nil {
		t.Errorf("an allowed program in a read-only grant: %v", err)
	}
}

// TestDenyParentsPinnedBelowOthers: a pinned parent of a denied path is
// mounted before every mount at or beneath it, so a read-only grant or a
// mask there stays on top, and a folder hidden by a mask is not pinned.
func TestDenyParentsPinnedBelowOthers(t *testing.T) {
	host := fakeHost(t)
	vars, _ := testVars(t)
	for _, d := range []string{"src/vendor", "src/x/secret", "a/b/key", "r/b/secret"} {
		if err := os.MkdirAll(filepath.Join(vars.WorkDir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p := mustParse(t, "name = \"t\"\n[fs]\nwrite = [\"$WORK_DIR\"]\nread = [\"$WORK_DIR/src/vendor\", \"$WORK_DIR/r/b\"]\ndeny = [\"$WORK_DIR/src/x/secret\", \"$WORK_DIR/a\", \"$WORK_DIR/a/b/key\", \"$WORK_DIR/r/b/secret\"]\n")
	b, err := Generate(Options{Policy: p, Vars: vars, Host: host, BundleDir: "/bundle"})
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]int{}
	var order []string
	for i, m := range b.Spec.Mounts {
		if strings.HasPrefix(m.Destination, "/workspace") {
			last[m.Destination] = i
			order = append(order, m.Destination+" "+strings.Join(m.Options, ","))
		}
	}
	// /workspace/r is pinned although a read-only grant (/workspace/r/b)
	// lies between it and the deny: the grant's parent could be renamed.
	for _, pinned := range []string{"/workspace/src", "/workspace/src/x", "/workspace/r"} {
		if _, ok := last[pinned]; !ok {
			t.Errorf("%s is not pinned: %v", pinned, order)
		}
	}
	if last["/workspace/src"] > last["/workspace/src/vendor"] {
		t.Errorf("the pinned /workspace/src is mounted over the read-only grant beneath it: %v", order)
	}
	if ro := b.Spec.Mounts[last["/workspace/src/vendor"]]; !slices.Contains(ro.Options, "ro") {
		t.Errorf("the read grant's top mount is not read-only: %v", order)
	}
	if m := b.Spec.Mounts[last["/workspace/a"]]; !strings.Contains(m.Source, "/masks/") {
		t.Errorf("the masked /workspace/a is covered by another mount: %v", order)
	}
	if _, ok := last["/workspace/a/b"]; ok {
		t.Errorf("a folder inside a mask was pinned: %v", order)
	}
	if _, ok := last["/workspace/a/b/key"]; ok {
		t.Errorf("a path inside a mask got a mask of its own (its mountpoint cannot be made in the read-only mask): %v", order)
	}
	if last["/workspace/r"] > last["/workspace/r/b"] || !slices.Contains(b.Spec.Mounts[last["/workspace/r/b"]].Options, "ro") {
		t.Errorf("the read-only grant beneath a pin is covered: %v", order)
	}
}

// TestExecAllowedOutsideOwnTmpfs: a program under /tmp or /dev (where the
// sandbox has its own tmpfs) is refused, also when a symlinked folder
// leads there; one elsewhere is placed.
func TestExecAllowedOutsideOwnTmpfs(t *testing.T) {
	host := fakeHost(t)
	vars, _ := testVars(t)
	for _, dir := range []string{"tmp/pol", "dev/pol", "opt/pol"} {
		if err := os.MkdirAll(filepath.Join(host.Root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(host.Root, dir, "tool"), []byte("\x7fELF"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/tmp/pol", filepath.Join(host.Root, "opt/link")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ program, want string }{
		{"/tmp/pol/tool", `exec.allow "/tmp/pol/tool": /tmp inside the sandbox is its own tmpfs; install the program outside /tmp`},
		{"/dev/pol/tool", "install the program outside /dev"},
		{"/opt/link/tool", `exec.allow "/opt/link/tool" (/tmp/pol/tool on this host): /tmp inside`},
		{"/opt/pol/tool", ""},
	} {
		p := mustParse(t, "name = \"t\"\n[exec]\nallow = [\""+c.program+"\", \"sh\"]\n")
		_, err := Generate(Options{Policy: p, Vars: vars, Host: host, BundleDir: "/bundle"})
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("exec.allow %s: %v, want %q", c.program, err, c.want)
		}
	}
}

// Reidentify gives the spec generating with the other identity would.
func TestReidentify(t *testing.T) {
	vars, _ := testVars(t)
	p := mustParse(t, "name = \"t\"\n[fs]\nwrite = [\"$WORK_DIR\"]\n")
	other := Identity{UID: 3_000_123, GID: 3_000_123}
	host := fakeHost(t)
	gen := func(id Identity) *Bundle {
		b, err := Generate(Options{Policy: p, Vars: vars, Host: host, BundleDir: "/bundle", Identity: id})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	moved, want := gen(DefaultIdentity), gen(other)
	Reidentify(moved.Spec, DefaultIdentity, other)
	got, _ := json.Marshal(moved.Spec)
	if w, _ := json.Marshal(want.Spec); string(got) != string(w) {
		t.Errorf("reidentified spec differs from one generated for %+v", other)
	}
	if SpecIdentity(moved.Spec) != other {
		t.Errorf("SpecIdentity = %+v", SpecIdentity(moved.Spec))
	}
}
