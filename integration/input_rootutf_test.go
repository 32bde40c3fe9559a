package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRootRefused: an empty --root (the current folder) and the host's
// root folder are refused with one line before anything is created; an
// existing root keeps its mode, and only the folders warden creates get
// its 0711.
func TestRootRefused(t *testing.T) {
	check := examplePath("web-fetch")

	t.Run("empty", func(t *testing.T) {
		cwd := tempDir(t)
		// Cleanup for a binary that took the current folder as its root.
		r := &wardenRoot{t: t, root: cwd}
		t.Cleanup(func() {
			if entries, _ := os.ReadDir(cwd); len(entries) > 0 {
				r.teardown()
			}
		})
		for _, c := range []struct {
			name string
			env  []string
			args []string
		}{
			{"--root ''", nil, []string{"--root", "", "session", "ls"}},
			{"--root '' gc", nil, []string{"--root", "", "gc"}},
			{"--root '' exec", nil, []string{"--root", "", "exec", "--session", "s", "--", "true"}},
			{"WARDEN_ROOT=''", []string{"WARDEN_ROOT="}, []string{"session", "ls"}},
			{"WARDEN_ROOT='' exec", []string{"WARDEN_ROOT="}, []string{"exec", "--session", "s", "--", "true"}},
		} {
			t.Run(c.name, func(t *testing.T) {
				cmd := exec.Command(wardenBinary, c.args...)
				cmd.Dir = cwd
				cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=/root"}, c.env...)
				expectFailure(t, runCmd(t, cmd), "--root", "empty")
				if entries, _ := os.ReadDir(cwd); len(entries) > 0 {
					t.Errorf("the current folder got %v", names(entries))
				}
			})
		}
	})

	// The refusal comes first, for every command: a command that never
	// uses the root shows it, and leaves the host alone even with a binary
	// that would not refuse.
	t.Run("host root", func(t *testing.T) {
		link := filepath.Join(tempDir(t), "link")
		if err := os.Symlink("/", link); err != nil {
			t.Fatal(err)
		}
		for _, root := range []string{"/", "//", "/tmp/..", link} {
			res := runWarden(t, nil, "--root", root, "policy", "check", check)
			expectFailure(t, res, "--root "+root, "host's root folder")
		}
		res := runWarden(t, []string{"PATH=/usr/bin:/bin", "WARDEN_ROOT=/"}, "policy", "check", check)
		expectFailure(t, res, "host's root folder")
	})

	t.Run("existing root keeps its mode", func(t *testing.T) {
		r := newRoot(t)
		if err := os.Mkdir(r.root, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chmod(r.root, 0o755)
		expectOK(t, r.warden("session", "ls"))
		assertMode(t, r.root, 0o755)
		for _, d := range []string{"containers", "sessions"} {
			assertMode(t, filepath.Join(r.root, d), 0o711)
		}
	})

	t.Run("new root", func(t *testing.T) {
		r := newRoot(t)
		r.root = filepath.Join(r.root, "a", "b")
		r.create("new-root", r.policy(sessionPolicy), tempDir(t))
		for _, d := range []string{filepath.Dir(r.root), r.root, filepath.Join(r.root, "sessions")} {
			assertMode(t, d, 0o711)
		}
	})

	t.Run("existing root others cannot pass", func(t *testing.T) {
		r := newRoot(t)
		if err := os.Mkdir(r.root, 0o700); err != nil {
			t.Fatal(err)
		}
		os.Chmod(r.root, 0o700)
		expectFailure(t, r.warden("session", "ls"), "not searchable", "chmod o+x "+r.root)
		assertMode(t, r.root, 0o700)
		if entries, _ := os.ReadDir(r.root); len(entries) > 0 {
			t.Errorf("the root got %v", names(entries))
		}
	})
}

// TestBadInputCreatesNoRoot: `warden do` refused for its input (a policy
// that does not parse, one whose variables have no value, a bad timeout)
// leaves no state root behind; a good one still runs.
func TestBadInputCreatesNoRoot(t *testing.T) {
	dir := tempDir(t)
	ws := tempDir(t)
	syntax := writeFile(t, dir, "syntax.toml", "name = \"x\"\n[fs\n")
	vars := writeFile(t, dir, "vars.toml", "name = \"x\"\n[fs]\nwrite = [\"$WORK_DIR\"]\n[exec]\nallow = [\"true\"]\n")
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"syntax", []string{"do", "--policy", syntax, "--", "true"}, "toml syntax"},
		{"variable", []string{"do", "--policy", vars, "--", "true"}, "give it with --workspace"},
		{"timeout", []string{"do", "--policy", vars, "--workspace", ws, "--timeout", "-1s", "--", "true"}, "--timeout"},
		// a mistyped folder would leave its mount point empty
		{"skill dir", []string{"do", "--policy", vars, "--workspace", ws, "--skill-dir", filepath.Join(dir, "nope"), "--", "true"}, "--skill-dir"},
		{"data dir", []string{"do", "--policy", vars, "--workspace", ws, "--data-dir", filepath.Join(dir, "nope"), "--", "true"}, "--data-dir"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := filepath.Join(dir, "root-"+c.name)
			expectFailure(t, runWarden(t, nil, append([]string{"--root", root}, c.args...)...), c.want)
			if _, err := os.Lstat(root); !os.IsNotExist(err) {
				t.Errorf("%s was created", root)
			}
		})
	}
	r := newRoot(t)
	expectOK(t, r.warden("do", "--policy", vars, "--workspace", ws, "--", "true"))
}

func assertMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != want {
		t.Errorf("%s: mode %04o, want %04o", path, got, want)
	}
}

func names(entries []os.DirEntry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// inputPolicy may list and delete files in the workspace.
const inputPolicy = `name = "input-test"
[fs]
write = ["$WORK_DIR"]
[exec]
allow = ["rm", "ls", "true", "sleep"]
[env]
allow = ["LANG"]
[limits]
timeout = "30s"
`

// TestExecNotUTF8: an argument, variable or working folder that is not
// UTF-8 is refused with one line on both the C fast path and the Go CLI,
// and by `warden do`; nothing runs, so the file whose name JSON would have
// put in its place survives. UTF-8 names still work.
func TestExecNotUTF8(t *testing.T) {
	r := newRoot(t)
	ws := tempDir(t)
	os.Chmod(ws, 0o777)
	bad, replaced := "x\xff", "x\xef\xbf\xbd" // what JSON makes of the first
	for _, f := range []string{bad, replaced, "é"} {
		if err := os.WriteFile(filepath.Join(ws, f), []byte(f), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	policy := r.policy(inputPolicy)
	id := r.create("utf8", policy, ws)
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"argument", []string{"--", "rm", "/workspace/" + bad}, "argument 2 is not valid UTF-8"},
		{"relative argument", []string{"--", "rm", bad}, "argument 2 is not valid UTF-8"},
		{"env", []string{"--env", "LANG=" + bad, "--", "rm", replaced}, "--env is not valid UTF-8"},
		{"-e", []string{"-e", "LANG=" + bad, "--", "rm", replaced}, "--env is not valid UTF-8"},
		{"--env=", []string{"--env=LANG=" + bad, "--", "rm", replaced}, "--env is not valid UTF-8"},
		{"cwd", []string{"--cwd", bad, "--", "rm", "-r", "."}, "--cwd is not valid UTF-8"},
	} {
		for _, mode := range []string{"on", "off"} {
			t.Run(c.name+" fastpath "+mode, func(t *testing.T) {
				cmd := r.command(append([]string{"exec", "--session", id}, c.args...)...)
				cmd.Env = append(cmd.Env, "WARDEN_FASTPATH="+mode, "GODEBUG=inittrace=1")
				res := runCmd(t, cmd)
				if mode == "on" && goStarted(res.Stderr) {
					t.Errorf("the fast path left it to the Go CLI")
				}
				res.Stderr = withoutInitTrace(res.Stderr)
				expectFailure(t, res, c.want, "warden passes")
			})
		}
		t.Run(c.name+" do", func(t *testing.T) {
			args := append([]string{"do", "--policy", policy, "--workspace", ws}, c.args...)
			expectFailure(t, r.warden(args...), c.want, "warden passes")
		})
	}
	t.Run("workspace", func(t *testing.T) {
		expectFailure(t, r.warden("do", "--policy", policy, "--workspace", filepath.Join(ws, bad), "--", "true"),
			"--workspace is not valid UTF-8")
	})
	for _, f := range []string{bad, replaced} {
		if _, err := os.Stat(filepath.Join(ws, f)); err != nil {
			t.Errorf("%q: %v", f, err)
		}
	}
	// A caller's variable that is not UTF-8 is left out, not rewritten, and
	// does not stop the command; UTF-8 names are passed as they are.
	cmd := r.command("exec", "--session", id, "--", "rm", "/workspace/é")
	cmd.Env = append(cmd.Env, "LANG="+bad)
	expectOK(t, runCmd(t, cmd))
	if _, err := os.Stat(filepath.Join(ws, "é")); !os.IsNotExist(err) {
		t.Errorf("é was not removed: %v", err)
	}
}

// TestExecMissingCwd: a working folder that does not exist is named as the
// reason the command cannot run (126), not reported as a missing command.
func TestExecMissingCwd(t *testing.T) {
	r := newRoot(t)
	ws := tempDir(t)
	os.Mkdir(filepath.Join(ws, "sub"), 0o755)
	policy := r.policy(inputPolicy)
	id := r.create("cwd", policy, ws)
	expectOK(t, r.exec(id, []string{"--cwd", "sub"}, "ls"))
	for _, mode := range []string{"on", "off"} {
		cmd := r.command("exec", "--session", id, "--cwd", "nosub", "--", "ls")
		cmd.Env = append(cmd.Env, "WARDEN_FASTPATH="+mode)
		res := runCmd(t, cmd)
		if res.Exit != 126 || strings.TrimSpace(res.Stderr) != "warden: working folder /workspace/nosub does not exist in the sandbox; create it first or pass another --cwd" {
			t.Errorf("fast path %s: exit %d, stderr %q", mode, res.Exit, res.Stderr)
		}
	}
	res := r.warden("do", "--policy", policy, "--workspace", ws, "--cwd", "nosub", "--", "ls")
	if res.Exit != 126 || !strings.Contains(res.Stderr, "working folder /workspace/nosub does not exist") {
		t.Errorf("do: exit %d, stderr %q", res.Exit, res.Stderr)
	}
}

// TestExecTimeoutBounds: a timeout below 1ms, zero or negative is refused
// before anything runs, on both paths and by `warden do`; 1ms is the least
// accepted.
func TestExecTimeoutBounds(t *testing.T) {
	r := newRoot(t)
	ws := tempDir(t)
	policy := r.policy(inputPolicy)
	id := r.create("timeout", policy, ws)
	for _, d := range []string{"-1s", "1ns", "999us", "0", "0s", "-0.5ms"} {
		for _, mode := range []string{"on", "off"} {
			cmd := r.command("exec", "--session", id, "--timeout", d, "--", "true")
			cmd.Env = append(cmd.Env, "WARDEN_FASTPATH="+mode)
			expectFailure(t, runCmd(t, cmd), "--timeout", "use at least 1ms")
		}
		expectFailure(t, r.warden("do", "--policy", policy, "--workspace", ws, "--timeout", d, "--", "true"), "--timeout", "use at least 1ms")
	}
	res := r.exec(id, []string{"--timeout", "1ms"}, "sleep", "1")
	if res.Exit != 137 || !strings.Contains(res.Stderr, "timeout 1ms exceeded") {
		t.Errorf("--timeout 1ms: exit %d, stderr %q", res.Exit, res.Stderr)
	}
	expectOK(t, r.exec(id, []string{"--timeout", "10s"}, "true"))
}

// TestListMakesNoRoot: listing the sessions (or pools) of a root that does not exist
// (a mistyped --root) shows none and leaves neither the root nor a daemon
// behind; on a live root it lists its sessions.
func TestListMakesNoRoot(t *testing.T) {
	root := filepath.Join(tempDir(t), "typo")
	for _, list := range [][]string{{"session", "ls"}, {"pool", "status"}} {
		for _, format := range []string{"table", "json"} {
			res := runWarden(t, nil, append([]string{"--root", root}, append(list, "--format", format)...)...)
			if res.Exit != 0 || (format == "json" && strings.TrimSpace(res.Stdout) != "[]") {
				t.Errorf("%s --format %s on a missing root: exit %d, stdout %q, stderr %q", list, format, res.Exit, res.Stdout, res.Stderr)
			}
		}
	}
	if _, err := os.Lstat(root); !os.IsNotExist(err) {
		t.Errorf("session ls made the root %s", root)
	}
	r := newRoot(t)
	id := r.create("listed", r.policy(sessionPolicy), tempDir(t))
	if res := r.warden("session", "ls"); res.Exit != 0 || !strings.Contains(res.Stdout, id) {
		t.Errorf("session ls on a live root: exit %d, stdout %q", res.Exit, res.Stdout)
	}
}
