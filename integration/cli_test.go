package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The foundation CLI, end to end against the built binary: each command's
// real output and exit code, the refusal half as well as the working one.

var examplePolicies = []string{"web-fetch", "data-processor", "inspector", "offline-builder"}

func examplePath(name string) string {
	p, _ := filepath.Abs(filepath.Join("..", "policies", name+".toml"))
	return p
}

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// expectFailure checks warden's own failure: exit 125 and exactly one line
// on stderr containing each of want.
func expectFailure(t *testing.T, res sandboxResult, want ...string) {
	t.Helper()
	if res.Exit != 125 {
		t.Errorf("exit %d, want 125 (stdout %q, stderr %q)", res.Exit, res.Stdout, res.Stderr)
	}
	lines := strings.Split(strings.TrimSuffix(res.Stderr, "\n"), "\n")
	if len(lines) != 1 || lines[0] == "" {
		t.Errorf("want exactly one line on stderr, got %d: %q", len(lines), res.Stderr)
	}
	for _, w := range want {
		if !strings.Contains(res.Stderr, w) {
			t.Errorf("stderr %q does not mention %q", res.Stderr, w)
		}
	}
}

func expectOK(t *testing.T, res sandboxResult) {
	t.Helper()
	if res.Exit != 0 {
		t.Fatalf("exit %d, want 0\nstdout: %s\nstderr: %s", res.Exit, res.Stdout, res.Stderr)
	}
}

func TestCLIPolicyCheckExamples(t *testing.T) {
	for _, name := range examplePolicies {
		t.Run(name, func(t *testing.T) {
			res := runWarden(t, nil, "policy", "check", examplePath(name))
			expectOK(t, res)
			if !strings.HasPrefix(res.Stdout, "ok ") || !strings.Contains(res.Stdout, `policy "`+name+`"`) || res.Stderr != "" {
				t.Errorf("stdout %q stderr %q", res.Stdout, res.Stderr)
			}
		})
	}
}

func TestCLIPolicyCheckErrors(t *testing.T) {
	cases := []struct {
		name, text, line, key string
	}{
		{"unknown key", "name = \"x\"\nbogus = 1\n", ":2:", "bogus"},
		{"unknown nested key", "name = \"x\"\n[fs]\nread = [\"/a\"]\nreed = [\"/b\"]\n", ":4:", "fs.reed"},
		{"relative path", "name = \"x\"\n[fs]\nread = [\"data/in\"]\n", ":3:", "fs.read[0]"},
		{"dot-dot", "name = \"x\"\n[fs]\nwrite = [\"$WORK_DIR/../x\"]\n", ":3:", "fs.write[0]"},
		{"bad host pattern", "name = \"x\"\n[network]\nallow = [\"exa mple.com:443\"]\n", ":3:", "network.allow[0]"},
		{"port out of range", "name = \"x\"\n[network]\nallow = [\"example.com:99999\"]\n", ":3:", "network.allow[0]"},
		{"zero memory", "name = \"x\"\n\n[limits]\nmemory = \"0MiB\"\n", ":4:", "limits.memory"},
		{"zero pids", "name = \"x\"\n[limits]\npids = 0\n", ":3:", "limits.pids"},
		{"wrong type", "name = \"x\"\n[limits]\npids = \"many\"\n", ":3:", "limits.pids"},
		{"duplicate", "name = \"x\"\n[exec]\nallow = [\"sh\", \"sh\"]\n", ":3:", "exec.allow"},
		{"empty name", "name = \"\"\n", ":1:", "name"},
		{"syntax error", "name = \"x\"\n[limits\nmemory = \"1GiB\"\n", ":", "syntax"},
	}
	dir := tempDir(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := writeFile(t, dir, strings.ReplaceAll(c.name, " ", "-")+".toml", c.text)
			res := runWarden(t, nil, "policy", "check", f)
			expectFailure(t, res, filepath.Base(f)+c.line, c.key)
			if res.Stdout != "" {
				t.Errorf("stdout %q, want nothing", res.Stdout)
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		expectFailure(t, runWarden(t, nil, "policy", "check", filepath.Join(dir, "absent.toml")), "absent.toml")
	})
	t.Run("no file", func(t *testing.T) {
		expectFailure(t, runWarden(t, nil, "policy", "check"), "policy check")
	})
}

func TestCLIPolicyExplain(t *testing.T) {
	ws := tempDir(t)
	res := runWarden(t, nil, "policy", "explain", examplePath("web-fetch"), "--workspace", ws)
	expectOK(t, res)
	out := res.Stdout
	lines := strings.Split(out, "\n")
	hasLine := func(parts ...string) bool {
		return slices.ContainsFunc(lines, func(l string) bool {
			for _, p := range parts {
				if !strings.Contains(l, p) {
					return false
				}
			}
			return true
		})
	}
	for _, want := range [][]string{
		{"read-write", "/workspace", ws, "noexec"},
		{"read-only", "/skill"},
		{"only /usr/bin/curl /usr/bin/jq /usr/bin/sh"},
		{"api.github.com:443", "*.githubusercontent.com:443"},
		{"memory 256MiB", "64 processes", "30s per command"},
		{"uid 3000000"},
	} {
		if !hasLine(want...) {
			t.Errorf("explain does not say %q on one line:\n%s", want, out)
		}
	}
	if hasLine("read-write", "/skill") {
		t.Errorf("/skill is read-only in web-fetch:\n%s", out)
	}
	// Only the allowed programs are runnable.
	for _, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "run ") && !regexp.MustCompile(`/usr/bin/(curl|jq|sh)\s`).MatchString(l) {
			t.Errorf("unexpected runnable: %q", l)
		}
	}
	t.Run("no network", func(t *testing.T) {
		res := runWarden(t, nil, "policy", "explain", examplePath("inspector"), "--workspace", ws)
		expectOK(t, res)
		if !strings.Contains(res.Stdout, "none: loopback only") || strings.Contains(res.Stdout, "read-write") {
			t.Errorf("inspector: want no network and nothing writable:\n%s", res.Stdout)
		}
	})
	t.Run("workspace missing", func(t *testing.T) {
		expectFailure(t, runWarden(t, nil, "policy", "explain", examplePath("web-fetch"), "--workspace", filepath.Join(ws, "absent")), "--workspace")
	})
}

// checkTOML writes combined output to a file and checks it parses back.
func checkTOML(t *testing.T, dir, name, text string) {
	t.Helper()
	f := writeFile(t, dir, name, text)
	if res := runWarden(t, nil, "policy", "check", f); res.Exit != 0 {
		t.Fatalf("output of %s does not check: %s\n%s", name, res.Stderr, text)
	}
}

func TestCLIPolicyMergeIntersect(t *testing.T) {
	dir := tempDir(t)
	t.Run("merge", func(t *testing.T) {
		res := runWarden(t, nil, "policy", "merge", examplePath("web-fetch"), examplePath("data-processor"))
		expectOK(t, res)
		checkTOML(t, dir, "merged.toml", res.Stdout)
		for _, want := range []string{`"curl"`, `"python3"`, `"api.github.com:443"`, `"$DATA_DIR"`, `memory = "1GiB"`} {
			if !strings.Contains(res.Stdout, want) {
				t.Errorf("merge lacks %s:\n%s", want, res.Stdout)
			}
		}
	})
	t.Run("intersect", func(t *testing.T) {
		ceiling := writeFile(t, dir, "ceiling.toml", `name = "ceiling"
[fs]
read = ["$SKILL_DIR"]
write = ["$WORK_DIR"]
[exec]
allow = ["curl", "sh", "ls"]
[network]
allow = []
[limits]
memory = "128MiB"
pids = 32
cpu = 2.0
timeout = "1m"
idle = "5m"
`)
		res := runWarden(t, nil, "policy", "intersect", examplePath("web-fetch"), ceiling)
		expectOK(t, res)
		checkTOML(t, dir, "intersected.toml", res.Stdout)
		out := res.Stdout
		for _, want := range []string{`allow = ["curl", "sh"]`, `memory = "128MiB"`, "pids = 32", "cpu = 1.0", `timeout = "30s"`, `idle = "5m"`} {
			if !strings.Contains(out, want) {
				t.Errorf("intersect lacks %s:\n%s", want, out)
			}
		}
		for _, absent := range []string{"[network]", `"jq"`, "githubusercontent"} {
			if strings.Contains(out, absent) {
				t.Errorf("intersect with a ceiling without network or jq has %q:\n%s", absent, out)
			}
		}
	})
	// A ceiling that leaves out a section or a limit is no ceiling there:
	// the skill keeps its paths, hosts and limits, and stderr says what
	// each ceiling cut.
	t.Run("intersect omitted", func(t *testing.T) {
		skill := writeFile(t, dir, "skill.toml", `name = "skill"
[fs]
read = ["$SKILL_DIR", "/usr/share"]
write = ["$WORK_DIR"]
[exec]
allow = ["curl", "jq", "sh"]
[network]
allow = ["api.example.com:443"]
[env]
allow = ["LANG"]
[limits]
memory = "2GiB"
timeout = "5m"
`)
		agent := writeFile(t, dir, "agent.toml", `name = "agent"
[exec]
allow = ["curl", "sh"]
[limits]
pids = 16
`)
		global := writeFile(t, dir, "global.toml", `name = "global"
description = "no ceiling at all"
`)
		res := runWarden(t, nil, "policy", "intersect", skill, agent, global)
		expectOK(t, res)
		checkTOML(t, dir, "omitted.toml", res.Stdout)
		for _, want := range []string{`read = ["/usr/share", "$SKILL_DIR"]`, `write = ["$WORK_DIR"]`, `allow = ["curl", "sh"]`,
			`allow = ["api.example.com:443"]`, `allow = ["LANG"]`, `memory = "2GiB"`, "pids = 16", `timeout = "5m"`} {
			if !strings.Contains(res.Stdout, want) {
				t.Errorf("intersect lacks %s:\n%s", want, res.Stdout)
			}
		}
		for _, want := range []string{
			"ceiling " + agent + ": exec.allow: removes jq\n",
			"ceiling " + agent + ": limits.pids: 128 -> 16\n",
			"ceiling " + global + ": cuts nothing\n",
		} {
			if !strings.Contains(res.Stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, res.Stderr)
			}
		}
		if n := strings.Count(res.Stderr, "\n"); n != 3 {
			t.Errorf("stderr has %d lines, want 3:\n%s", n, res.Stderr)
		}
	})
	t.Run("one file", func(t *testing.T) {
		expectFailure(t, runWarden(t, nil, "policy", "merge", examplePath("web-fetch")), "two or more")
	})
	t.Run("bad input", func(t *testing.T) {
		bad := writeFile(t, dir, "bad.toml", "name = \"x\"\nbogus = 1\n")
		expectFailure(t, runWarden(t, nil, "policy", "intersect", examplePath("web-fetch"), bad), "bad.toml:2", "bogus")
	})
}

const skillMD = `---
name: web_fetch
description: fetch things
permissions:
  fs:
    read: ["$SKILL_DIR"]
    write: ["$WORK_DIR"]
  network: ["api.example.com:443"]
  exec: ["curl", "jq"]
  env: ["LANG"]
---
# Web fetch

Fetches pages.
`

func TestCLIPolicyImport(t *testing.T) {
	dir := tempDir(t)
	skill := writeFile(t, dir, "SKILL.md", skillMD)
	res := runWarden(t, nil, "policy", "import", skill)
	expectOK(t, res)
	checkTOML(t, dir, "imported.toml", res.Stdout)
	for _, want := range []string{`allow = ["curl", "jq"]`, `"api.example.com:443"`, `write = ["$WORK_DIR"]`} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("import lacks %s:\n%s", want, res.Stdout)
		}
	}
	t.Run("out", func(t *testing.T) {
		out := filepath.Join(dir, "out.toml")
		expectOK(t, runWarden(t, nil, "policy", "import", skill, "--out", out))
		if res := runWarden(t, nil, "policy", "check", out); res.Exit != 0 {
			t.Errorf("--out file does not check: %s", res.Stderr)
		}
	})
	t.Run("out never overwrites", func(t *testing.T) {
		out := writeFile(t, dir, "existing.toml", "keep me\n")
		expectFailure(t, runWarden(t, nil, "policy", "import", "--out", out, skill), "already exists")
		if data, _ := os.ReadFile(out); string(data) != "keep me\n" {
			t.Errorf("existing file changed to %q", data)
		}
	})
	t.Run("no front matter", func(t *testing.T) {
		f := writeFile(t, dir, "plain.md", "# just a readme\n")
		expectFailure(t, runWarden(t, nil, "policy", "import", f), "plain.md")
	})
}

func TestCLIBundle(t *testing.T) {
	ws := tempDir(t)
	dir := tempDir(t)
	t.Run("writes", func(t *testing.T) {
		out := filepath.Join(dir, "b1")
		res := runWarden(t, nil, "bundle", "--policy", examplePath("web-fetch"), "--workspace", ws, "--out", out, "--", "sh", "-c", "echo hi")
		expectOK(t, res)
		data, err := os.ReadFile(filepath.Join(out, "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		var cfg struct {
			Process struct{ Args []string }
			Root    struct {
				Path     string
				Readonly bool
			}
		}
		if err := json.Unmarshal(data, &cfg); err != nil {
			t.Fatalf("config.json: %v", err)
		}
		if !slices.Equal(cfg.Process.Args, []string{"sh", "-c", "echo hi"}) || cfg.Root.Path != "rootfs" || !cfg.Root.Readonly {
			t.Errorf("config.json: args %q root %+v", cfg.Process.Args, cfg.Root)
		}
		for _, p := range []string{"rootfs/usr", "rootfs/etc/passwd", "rootfs/workspace", "rootfs/skill"} {
			if _, err := os.Lstat(filepath.Join(out, p)); err != nil {
				t.Errorf("bundle lacks %s", p)
			}
		}
	})
	t.Run("refuses non-empty out", func(t *testing.T) {
		out := filepath.Join(dir, "b2")
		os.Mkdir(out, 0o755)
		writeFile(t, out, "precious", "data")
		before := listTree(t, out)
		res := runWarden(t, nil, "bundle", "--policy", examplePath("web-fetch"), "--workspace", ws, "--out", out)
		expectFailure(t, res, "not empty")
		if after := listTree(t, out); !slices.Equal(after, before) {
			t.Errorf("out changed: before %q after %q", before, after)
		}
		if data, _ := os.ReadFile(filepath.Join(out, "precious")); string(data) != "data" {
			t.Errorf("existing file changed")
		}
	})
	t.Run("bad flag", func(t *testing.T) {
		expectFailure(t, runWarden(t, nil, "bundle", "--frob", "--policy", examplePath("web-fetch"), "--out", filepath.Join(dir, "b3")), "frob")
		assertAbsent(t, filepath.Join(dir, "b3"))
	})
	t.Run("missing policy", func(t *testing.T) {
		expectFailure(t, runWarden(t, nil, "bundle", "--out", filepath.Join(dir, "b4")), "--policy")
		assertAbsent(t, filepath.Join(dir, "b4"))
	})
	t.Run("missing out", func(t *testing.T) {
		expectFailure(t, runWarden(t, nil, "bundle", "--policy", examplePath("web-fetch")), "--out")
	})
	t.Run("missing workspace", func(t *testing.T) {
		expectFailure(t, runWarden(t, nil, "bundle", "--policy", examplePath("web-fetch"), "--workspace", filepath.Join(dir, "nows"), "--out", filepath.Join(dir, "b5")), "--workspace")
		assertAbsent(t, filepath.Join(dir, "b5"))
	})
	t.Run("workspace links to /etc", func(t *testing.T) {
		link := filepath.Join(dir, "etc-link")
		os.Symlink("/etc", link)
		expectFailure(t, runWarden(t, nil, "bundle", "--policy", examplePath("web-fetch"), "--workspace", link, "--out", filepath.Join(dir, "b6")), "never writable")
		assertAbsent(t, filepath.Join(dir, "b6"))
	})
}

func assertAbsent(t *testing.T, p string) {
	t.Helper()
	if _, err := os.Lstat(p); err == nil {
		t.Errorf("%s was created by a failed command", p)
	}
}

func TestCLISeccomp(t *testing.T) {
	for _, args := range [][]string{{"seccomp"}, {"seccomp", "--policy", examplePath("web-fetch")}} {
		t.Run(strings.Join(args[1:], " "), func(t *testing.T) {
			res := runWarden(t, nil, args...)
			expectOK(t, res)
			var profile struct {
				DefaultAction string
				Syscalls      []struct {
					Names  []string
					Action string
				}
			}
			if err := json.Unmarshal([]byte(res.Stdout), &profile); err != nil {
				t.Fatalf("not JSON: %v", err)
			}
			if profile.DefaultAction != "SCMP_ACT_ERRNO" {
				t.Errorf("defaultAction %q", profile.DefaultAction)
			}
			allowed := 0
			for _, r := range profile.Syscalls {
				if r.Action != "SCMP_ACT_ALLOW" {
					continue
				}
				for _, name := range r.Names {
					allowed++
					switch name {
					case "mount", "umount", "umount2", "pivot_root", "fsopen", "fsmount", "fsconfig", "move_mount", "open_tree", "mount_setattr",
						"unshare", "setns", "bpf", "perf_event_open", "ptrace", "kexec_load", "init_module", "io_uring_setup", "userfaultfd":
						t.Errorf("%s is allowed", name)
					}
				}
			}
			if allowed < 200 {
				t.Errorf("only %d syscalls allowed: ordinary programs would not run", allowed)
			}
		})
	}
	t.Run("bad policy", func(t *testing.T) {
		f := writeFile(t, tempDir(t), "bad.toml", "name = \"x\"\nbogus = 1\n")
		expectFailure(t, runWarden(t, nil, "seccomp", "--policy", f), "bad.toml:2", "bogus")
	})
}

func TestCLICheck(t *testing.T) {
	res := runWarden(t, nil, "check")
	expectOK(t, res)
	for _, name := range []string{"seccomp", "landlock", "cgroups", "user namespaces"} {
		if !regexp.MustCompile(`(?m)^ok\s+` + name + `\s`).MatchString(res.Stdout) {
			t.Errorf("check has no ok line for %s:\n%s", name, res.Stdout)
		}
	}
	res = runWarden(t, nil, "check", "--format", "json")
	expectOK(t, res)
	var checks []struct {
		Name     string
		OK       bool
		Required bool
	}
	if err := json.Unmarshal([]byte(res.Stdout), &checks); err != nil || len(checks) < 4 {
		t.Fatalf("check --format json: %v (%d checks)\n%s", err, len(checks), res.Stdout)
	}
	expectFailure(t, runWarden(t, nil, "check", "--format", "yaml"), "--format")
}

func TestCLIVersion(t *testing.T) {
	res := runWarden(t, nil, "--version")
	expectOK(t, res)
	// dockerd reads "<name> version X" and "commit: Y".
	if !regexp.MustCompile(`(?m)^warden version \S+$`).MatchString(res.Stdout) ||
		!regexp.MustCompile(`(?m)^commit: \S+$`).MatchString(res.Stdout) {
		t.Errorf("--version:\n%s", res.Stdout)
	}
}

func TestCLIUsageErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"frob"}, "frob"},
		{[]string{"--frob"}, "frob"},
		{[]string{"policy", "frob"}, "frob"},
		{[]string{"policy", "check", "--frob", "x.toml"}, "frob"},
		{[]string{"seccomp", "--frob"}, "frob"},
		{[]string{"seccomp", "extra"}, "seccomp"},
		{[]string{"check", "--frob"}, "frob"},
		{[]string{"policy", "explain", examplePath("web-fetch"), "--frob", "1"}, "frob"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			res := runWarden(t, nil, c.args...)
			expectFailure(t, res, c.want)
			if res.Stdout != "" {
				t.Errorf("usage error printed to stdout: %q", res.Stdout)
			}
		})
	}
}
