package integration

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// `warden do` through the daemon's warm pool (docs/sessions.md, one-shot
// runs): the same results as a cold do, a fresh sandbox each time, and
// nothing left of it afterwards. Each case runs twice: through the C fast
// path (the default) and through the Go CLI (WARDEN_FASTPATH=off).

const doPolicy = `name = "oneshot"
[fs]
write = ["$WORK_DIR"]
[exec]
allow = ["sh", "sleep", "true", "touch"]
[env]
allow = ["FOO"]
[limits]
timeout = "60s"
`

// doPaths are the two clients of the do op.
var doPaths = []struct {
	name string
	env  []string
}{
	{"fastpath", nil},
	{"go", []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/root", "WARDEN_FASTPATH=off"}},
}

// doCase is one do: its flags, command and stdin, and what it gives.
type doCase struct {
	name  string
	flags []string
	argv  []string
	stdin string
}

func doCases() []doCase {
	return []doCase{
		{"output and exit code", nil, []string{"sh", "-c", "echo out; echo err >&2; exit 3"}, ""},
		{"stdin", nil, []string{"sh", "-c", "read x; echo got $x"}, "line\n"},
		{"not allowed", nil, []string{"cat", "/etc/hostname"}, ""},
		{"timeout", []string{"--timeout", "300ms"}, []string{"sleep", "5"}, ""},
		{"env and cwd", []string{"--env", "FOO=bar", "--cwd", "sub"}, []string{"sh", "-c", "echo $FOO; pwd"}, ""},
		{"env refused", []string{"--env", "BAR=1"}, []string{"true"}, ""},
		{"workspace write", nil, []string{"sh", "-c", "echo kept >/workspace/sub/note && echo wrote"}, ""},
	}
}

// doRun runs one do of c against r's root with env; the result and the
// audit lines it added.
func (r *wardenRoot) doRun(env []string, policy, ws string, c doCase) sandboxResult {
	r.t.Helper()
	args := append([]string{"do", "--policy", policy, "--workspace", ws}, c.flags...)
	args = append(append(args, "--"), c.argv...)
	cmd := r.command(args...)
	if env != nil {
		cmd.Env = env
	}
	cmd.Stdin = strings.NewReader(c.stdin)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	res := sandboxResult{Stdout: out.String(), Stderr: errOut.String()}
	if err != nil {
		ee, ok := err.(interface{ ExitCode() int })
		if !ok {
			r.t.Fatalf("do %v: %v", args, err)
		}
		res.Exit = ee.ExitCode()
	}
	return res
}

// doLines are the audit lines of do- sessions after the first skip lines.
func (r *wardenRoot) doLines(skip int) []auditRecord {
	r.t.Helper()
	data, _ := os.ReadFile(filepath.Join(r.root, "audit.log"))
	var out []auditRecord
	for i, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if i < skip || !strings.Contains(line, `"session":"do-`) {
			continue
		}
		var rec auditRecord
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			r.t.Fatalf("audit line %q: %v", line, err)
		}
		out = append(out, rec)
	}
	return out
}

// waitFor waits until ok holds, or fails the test saying what.
func waitFor(t *testing.T, within time.Duration, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !ok(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
	}
}

func auditLines(r *wardenRoot) int {
	data, _ := os.ReadFile(filepath.Join(r.root, "audit.log"))
	return strings.Count(string(data), "\n")
}

func TestDoPool(t *testing.T) {
	for _, path := range doPaths {
		t.Run(path.name, func(t *testing.T) {
			pooled, cold := newRoot(t), newRoot(t)
			policy := pooled.policy(doPolicy)
			pooled.fill(policy, 1)
			pooled.waitPool(1)
			wsPooled, wsCold := tempDir(t), tempDir(t)
			for _, ws := range []string{wsPooled, wsCold} {
				os.Mkdir(filepath.Join(ws, "sub"), 0o755)
			}
			hits := pooled.poolStatus()[0].Hits
			for _, c := range doCases() {
				pooled.waitPool(1)
				before := pooled.pooledIDs()
				lines := auditLines(pooled)
				got := pooled.doRun(path.env, policy, wsPooled, c)
				claimed := pooled.poolStatus()[0].Hits - hits
				hits += claimed
				if claimed != 1 {
					t.Fatalf("%s: %d claims from the pool, want 1 (stderr %q)", c.name, claimed, got.Stderr)
				}
				coldLines := auditLines(cold)
				want := cold.doRun(path.env, policy, wsCold, c)
				if got != want {
					t.Errorf("%s: through the pool %+v, cold %+v", c.name, got, want)
				}
				// The audit log: one exec line of a do- session, as cold.
				gotRecs, wantRecs := pooled.doLines(lines), cold.doLines(coldLines)
				if len(gotRecs) != 1 || len(wantRecs) != 1 {
					t.Fatalf("%s: do audit lines: pooled %+v, cold %+v", c.name, gotRecs, wantRecs)
				}
				g, w := gotRecs[0], wantRecs[0]
				if g.Event != "exec" || g.Event != w.Event || !slices.Equal(g.Argv, w.Argv) || g.Cwd != w.Cwd ||
					(g.Exit == nil) != (w.Exit == nil) || g.Exit != nil && *g.Exit != *w.Exit || g.PolicyHash != w.PolicyHash {
					t.Errorf("%s: audit line through the pool %+v, cold %+v", c.name, g, w)
				}
				// The claimed sandbox is gone: session, container, cgroup, mounts.
				var used string
				for _, id := range before {
					if !slices.Contains(pooled.pooledIDs(), id) {
						used = id
					}
				}
				if used == "" {
					t.Fatalf("%s: no pooled container was used", c.name)
				}
				pooled.waitGone(func() []int { return cgroupProcesses(used) }, "the processes of "+used)
				waitFor(t, 10*time.Second, c.name+": the sandbox of the do removed", func() bool {
					sessions, _ := filepath.Glob(filepath.Join(pooled.root, "sessions", "do-*"))
					cgroups, _ := filepath.Glob("/sys/fs/cgroup/*/warden/*/" + used)
					_, err := os.Lstat(filepath.Join(pooled.root, "containers", used))
					mounts := slices.ContainsFunc(mountsBelow(pooled.root), func(m string) bool { return strings.Contains(m, used) })
					return len(sessions) == 0 && len(cgroups) == 0 && os.IsNotExist(err) && !mounts
				})
				if l := pooled.list(); len(l) != 0 {
					t.Errorf("%s: sessions left: %+v", c.name, l)
				}
			}
			for _, ws := range []string{wsPooled, wsCold} {
				if data, err := os.ReadFile(filepath.Join(ws, "sub", "note")); err != nil || string(data) != "kept\n" {
					t.Errorf("the workspace write did not land in %s: %q %v", ws, data, err)
				}
			}
			if _, err := os.Stat(filepath.Join(cold.root, "warden.sock")); err == nil {
				t.Error("a do without a daemon started one")
			}
		})
	}
}

// A second do sees nothing of the first's: not its /tmp, not a process
// it left running.
func TestDoPoolFresh(t *testing.T) {
	for _, path := range doPaths {
		t.Run(path.name, func(t *testing.T) {
			r := newRoot(t)
			policy := r.policy(doPolicy)
			ws := tempDir(t)
			r.fill(policy, 2)
			r.waitPool(2)
			first := r.doRun(path.env, policy, ws, doCase{argv: []string{"sh", "-c", "echo 1 >/tmp/mark; sleep 30 & echo started"}})
			if first.Exit != 0 || first.Stdout != "started\n" {
				t.Fatalf("first do: %+v", first)
			}
			// The check itself must work: in one sandbox it sees the mark.
			same := r.doRun(path.env, policy, ws, doCase{argv: []string{"sh", "-c", "echo 1 >/tmp/mark; test -e /tmp/mark && echo seen"}})
			if same.Stdout != "seen\n" {
				t.Fatalf("control do: %+v", same)
			}
			r.waitPool(2)
			second := r.doRun(path.env, policy, ws, doCase{argv: []string{"sh", "-c",
				`test -e /tmp/mark && echo mark; for p in /proc/[0-9]*; do read c <$p/comm; echo "$c"; done`}})
			if second.Exit != 0 || strings.Contains(second.Stdout, "mark") || strings.Contains(second.Stdout, "sleep") {
				t.Errorf("the second do saw the first's: %+v", second)
			}
			if st := r.poolStatus()[0]; st.Hits != 3 {
				t.Errorf("%d claims, want 3: %+v", st.Hits, st)
			}
		})
	}
}

// A signal to warden do reaches the command in the pooled sandbox, as in
// a cold one.
func TestDoPoolSignal(t *testing.T) {
	for _, path := range doPaths {
		t.Run(path.name, func(t *testing.T) {
			r := newRoot(t)
			policy := r.policy(doPolicy)
			r.fill(policy, 1)
			r.waitPool(1)
			cmd := r.command("do", "--policy", policy, "--workspace", tempDir(t), "--", "sh", "-c",
				`trap 'echo got TERM; exit 7' TERM; echo ready; sleep 30 & wait`)
			if path.env != nil {
				cmd.Env = path.env
			}
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			rd := bufio.NewReader(out)
			if line, _ := rd.ReadString('\n'); line != "ready\n" {
				cmd.Process.Kill()
				t.Fatalf("do printed %q", line)
			}
			cmd.Process.Signal(syscall.SIGTERM)
			rest, _ := rd.ReadString('\n')
			code := waitExit(t, cmd, 10*time.Second)
			if rest != "got TERM\n" || code != 7 {
				t.Errorf("after SIGTERM: output %q, exit %d; want \"got TERM\", 7", rest, code)
			}
			if st := r.poolStatus()[0]; st.Hits != 1 {
				t.Errorf("not run from the pool: %+v", st)
			}
		})
	}
}

// Without a pool of the policy, and without a daemon, do runs cold as
// before; it never starts a daemon.
func TestDoNoPool(t *testing.T) {
	for _, path := range doPaths {
		t.Run(path.name, func(t *testing.T) {
			r := newRoot(t)
			policy := r.policy(doPolicy)
			other := r.policy(strings.Replace(doPolicy, `"oneshot"`, `"other"`, 1))
			ws := tempDir(t)
			c := doCase{argv: []string{"sh", "-c", "echo cold; exit 4"}}
			if res := r.doRun(path.env, policy, ws, c); res.Exit != 4 || res.Stdout != "cold\n" {
				t.Errorf("no daemon: %+v", res)
			}
			if pids := r.processes(); len(pids) > 0 {
				t.Errorf("do started a daemon: %v", pids)
			}
			r.fill(other, 1)
			r.waitPool(1)
			if res := r.doRun(path.env, policy, ws, c); res.Exit != 4 || res.Stdout != "cold\n" {
				t.Errorf("a pool of another policy: %+v", res)
			}
			r.fill(policy, 0) // its pool, empty
			if res := r.doRun(path.env, policy, ws, c); res.Exit != 4 || res.Stdout != "cold\n" {
				t.Errorf("an empty pool: %+v", res)
			}
			for _, st := range r.poolStatus() {
				if st.Hits != 0 {
					t.Errorf("a claim from %+v", st)
				}
			}
		})
	}
}

// A claim starts from the spec of the last claim of the same policy and
// folders, and checks it against one made fresh before anything runs
// (runtime/daemon/claim.go). A host that changed in between must not get
// through: a file denied since, in a folder the pooled sandbox already
// shows (its key), is denied in the next do while the file beside it
// stays readable; and a workspace path that now leads to another folder
// (a late mount) shows the new folder, not the old one.
func TestDoPoolStale(t *testing.T) {
	t.Run("deny", func(t *testing.T) {
		r := newRoot(t)
		ws, shared := tempDir(t), tempDir(t)
		policy := r.policy(`name = "guess"
[fs]
write = ["$WORK_DIR"]
read = ["` + shared + `"]
deny = ["` + shared + `/secret"]
[exec]
allow = ["cat"]
`)
		if err := os.WriteFile(filepath.Join(shared, "public"), []byte("public\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		r.fill(policy, 2)
		r.waitPool(2)
		read := func(name string) sandboxResult {
			return r.doRun(nil, policy, ws, doCase{argv: []string{"cat", filepath.Join(shared, name)}})
		}
		if res := read("public"); res.Exit != 0 || res.Stdout != "public\n" {
			t.Fatalf("first do: %+v", res)
		}
		r.waitPool(2)
		if err := os.WriteFile(filepath.Join(shared, "secret"), []byte("s3cret\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			if res := read("secret"); strings.Contains(res.Stdout, "s3cret") {
				t.Fatalf("do %d read the file denied since the last claim: %+v", i+2, res)
			}
			if res := read("public"); res.Exit != 0 || res.Stdout != "public\n" {
				t.Fatalf("do %d: %+v", i+2, res)
			}
		}
		r.doneClean()
	})
	t.Run("moved", func(t *testing.T) {
		r := newRoot(t)
		policy := r.policy(doPolicy)
		dir := tempDir(t)
		link := filepath.Join(dir, "ws")
		for _, name := range []string{"old", "new"} {
			os.Mkdir(filepath.Join(dir, name), 0o755)
			if err := os.WriteFile(filepath.Join(dir, name, "which"), []byte(name+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink("old", link); err != nil {
			t.Fatal(err)
		}
		r.fill(policy, 2)
		r.waitPool(2)
		which := func() sandboxResult {
			return r.doRun(nil, policy, link, doCase{argv: []string{"sh", "-c", "read w </workspace/which; echo $w"}})
		}
		if res := which(); res.Exit != 0 || res.Stdout != "old\n" {
			t.Fatalf("first do: %+v", res)
		}
		r.waitPool(2)
		os.Remove(link)
		if err := os.Symlink("new", link); err != nil {
			t.Fatal(err)
		}
		if res := which(); res.Exit != 0 || res.Stdout != "new\n" {
			t.Fatalf("the do after the workspace moved: %+v", res)
		}
		if st := r.poolStatus()[0]; st.Hits < 2 {
			t.Errorf("the dos were not served by the pool: %+v", st)
		}
		r.doneClean()
	})
}

// doneClean waits until no session of r's is left, nor its folder.
func (r *wardenRoot) doneClean() {
	r.t.Helper()
	waitFor(r.t, 10*time.Second, "the do sandboxes removed", func() bool {
		sessions, _ := filepath.Glob(filepath.Join(r.root, "sessions", "*"))
		return len(sessions) == 0 && len(r.list()) == 0
	})
}
