package integration

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A denied path that does not exist has nothing to mask: under a write
// grant the sandbox could create it on the host. These tests check that
// warden refuses such a sandbox (do, session create cold and claimed from
// a pool, pool fill) with one line and changes nothing, and that once the
// path exists the same policy runs and the path is hidden.

// refusedAbsent checks a refusal: exit 125, one line naming the deny rule,
// nothing on stdout.
func refusedAbsent(t *testing.T, what string, res sandboxResult, rule string) {
	t.Helper()
	line := strings.TrimSuffix(res.Stderr, "\n")
	if res.Exit != 125 || res.Stdout != "" || line == "" || strings.Contains(line, "\n") ||
		!strings.Contains(line, `fs.deny "`+rule+`"`) || !strings.Contains(line, "does not exist") {
		t.Fatalf("%s: want exit 125 and one line about %s, got exit %d, stdout %q, stderr %q", what, rule, res.Exit, res.Stdout, res.Stderr)
	}
}

// TestDenyAbsentUnderWriteHome: write = ["~"], deny = ["~/.ssh"] with no
// ~/.ssh must not let a command write ~/.ssh/authorized_keys.
func TestDenyAbsentUnderWriteHome(t *testing.T) {
	r := newRoot(t)
	home := tempDir(t)
	ssh := filepath.Join(home, ".ssh")
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=" + home}
	policy := r.policy(`name = "deny-absent"
[fs]
write = ["~"]
deny = ["~/.ssh"]
[exec]
allow = ["sh", "mkdir", "touch", "ls"]
`)
	ws := workspace(t, 0)
	attack := "mkdir -p " + ssh + " && echo attacker-key > " + ssh + "/authorized_keys"
	noSSH := func(what string) {
		t.Helper()
		if _, err := os.Lstat(ssh); err == nil {
			t.Fatalf("%s: %s was created on the host", what, ssh)
		}
	}
	noSessions := func(what string) {
		t.Helper()
		if l := r.list(); len(l) != 0 {
			t.Fatalf("%s: sessions left: %+v", what, l)
		}
		if entries, _ := os.ReadDir(filepath.Join(r.root, "sessions")); len(entries) != 0 {
			t.Fatalf("%s: session folders left: %d", what, len(entries))
		}
	}

	refusedAbsent(t, "do", r.wardenEnv(env, "do", "--policy", policy, "--workspace", ws, "--", "sh", "-c", attack), "$HOME/.ssh")
	noSSH("do")
	refusedAbsent(t, "session create", r.wardenEnv(env, "session", "create", "--policy", policy, "--workspace", ws, "--id", r.id("cold")), "$HOME/.ssh")
	noSSH("session create")
	noSessions("session create")
	refusedAbsent(t, "pool fill", r.wardenEnv(env, "pool", "fill", "--policy", policy, "--size", "1"), "$HOME/.ssh")
	noSSH("pool fill")

	// A pool filled while ~/.ssh existed: a claim after it is gone is
	// refused too, and leaves the pooled sandbox ready.
	if err := os.Mkdir(ssh, 0o700); err != nil {
		t.Fatal(err)
	}
	if res := r.wardenEnv(env, "pool", "fill", "--policy", policy, "--size", "1"); res.Exit != 0 {
		t.Fatalf("pool fill with ~/.ssh present: exit %d: %s", res.Exit, res.Stderr)
	}
	r.waitPool(1)
	ready := r.pooledIDs()
	if err := os.Remove(ssh); err != nil {
		t.Fatal(err)
	}
	refusedAbsent(t, "pooled session create", r.wardenEnv(env, "session", "create", "--policy", policy, "--workspace", ws, "--id", r.id("warm")), "$HOME/.ssh")
	noSSH("pooled session create")
	noSessions("pooled session create")
	if now := r.pooledIDs(); !slices.Equal(now, ready) {
		t.Fatalf("the refused claim changed the pool: %v, then %v", ready, now)
	}

	// The allowed half: with ~/.ssh present the same policy runs, the rest
	// of $HOME is writable and ~/.ssh stays out of reach.
	if err := os.Mkdir(ssh, 0o700); err != nil {
		t.Fatal(err)
	}
	script := probeScript + `
p write_home touch ` + home + `/ok
p list_ssh ls ` + ssh + `/
p write_key sh -c 'echo attacker-key > ` + ssh + `/authorized_keys'
p mkdir_ssh mkdir ` + ssh + `/sub
`
	want := map[string]string{"write_home": "ok", "write_key": "fail", "mkdir_ssh": "fail"}
	// The ready sandbox's mask is on the ~/.ssh that was removed, so the
	// first session starts cold rather than show the new one; the next is
	// claimed from the refilled pool.
	for _, pooled := range []bool{false, true} {
		if pooled {
			r.waitPool(1)
		}
		id := r.id("ok")
		if res := r.wardenEnv(env, "session", "create", "--policy", policy, "--workspace", ws, "--id", id); res.Exit != 0 {
			t.Fatalf("session create with ~/.ssh present: exit %d: %s", res.Exit, res.Stderr)
		}
		if got := strings.HasPrefix(r.container(id), "pool-"); got != pooled {
			t.Fatalf("pooled %v: session %s runs in container %s", pooled, id, r.container(id))
		}
		expectProbes(t, probes(r.sh(id, script)), want)
	}
	// do, which takes a ready sandbox of the pool when one matches (the
	// refilled one) or starts cold: the same either way.
	res := r.wardenEnv(env, "do", "--policy", policy, "--workspace", ws, "--", "sh", "-c", script)
	if res.Exit != 0 {
		t.Fatalf("do with ~/.ssh present: exit %d: %s", res.Exit, res.Stderr)
	}
	expectProbes(t, probes(res.Stdout), want)
	if entries, err := os.ReadDir(ssh); err != nil || len(entries) != 0 {
		t.Errorf("the sandbox changed ~/.ssh on the host: %v %v", entries, err)
	}
	if _, err := os.Stat(filepath.Join(home, "ok")); err != nil {
		t.Errorf("the sandbox could not write to $HOME: %v", err)
	}
}

// TestDenyAbsentAfterMove: deny rules name paths. A workspace whose denied
// folder a session moved away (a/secret -> b/secret) no longer matches the
// deny rule, so the next session, cold or claimed from a pool, is refused
// rather than started with nothing masked.
func TestDenyAbsentAfterMove(t *testing.T) {
	r := newRoot(t)
	policy := r.policy(`name = "deny-moved"
[fs]
write = ["$WORK_DIR"]
deny = ["$WORK_DIR/a/secret"]
[exec]
allow = ["sh", "mv", "cat", "ls"]
`)
	ws := workspace(t, 0)
	secret := filepath.Join(ws, "a", "secret")
	if err := os.MkdirAll(secret, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secret, "key"), []byte("s3cret"), 0o644); err != nil {
		t.Fatal(err)
	}
	r.fill(policy, 1)
	r.waitPool(1)
	first := r.create("first", policy, ws)
	if !strings.HasPrefix(r.container(first), "pool-") {
		t.Fatalf("session %s was not claimed from the pool", first)
	}
	// The sandbox cannot move the denied folder's parent (it is pinned, see
	// TestDenyParentsCannotMove); the host's user can, and the deny then
	// names nothing.
	if out := r.sh(first, "cat /workspace/a/secret/key 2>&1; mv /workspace/a /workspace/b 2>/dev/null && echo moved; true"); strings.Contains(out, "s3cret") || strings.Contains(out, "moved") {
		t.Fatalf("first session: %q", out)
	}
	if res := r.warden("session", "rm", first); res.Exit != 0 {
		t.Fatalf("session rm: exit %d: %s", res.Exit, res.Stderr)
	}
	if err := os.Rename(filepath.Join(ws, "a"), filepath.Join(ws, "b")); err != nil {
		t.Fatal(err)
	}
	r.waitPool(1)
	for _, how := range []string{"pooled", "cold"} {
		if how == "cold" {
			r.warden("pool", "drain")
		}
		refusedAbsent(t, how+" session create", r.warden("session", "create", "--policy", policy, "--workspace", ws, "--id", r.id("moved")), "$WORK_DIR/a/secret")
		refusedAbsent(t, how+" do", r.warden("do", "--policy", policy, "--workspace", ws, "--", "cat", "/workspace/b/secret/key"), "$WORK_DIR/a/secret")
		if l := r.list(); len(l) != 0 {
			t.Fatalf("%s: sessions left: %+v", how, l)
		}
		if _, err := os.Lstat(secret); err == nil {
			t.Fatalf("%s: %s was created", how, secret)
		}
	}
	// The allowed half: once the denied folder is back, sessions start
	// and it is hidden.
	if err := os.Rename(filepath.Join(ws, "b"), filepath.Join(ws, "a")); err != nil {
		t.Fatal(err)
	}
	id := r.create("back", policy, ws)
	if out := r.sh(id, "ls -A /workspace/a/secret; cat /workspace/a/secret/key 2>/dev/null; echo done"); out != "done\n" {
		t.Errorf("the denied folder is visible: %q", out)
	}
}

// TestDenyAbsentExplain: policy explain lists an absent deny path nothing
// can create, and refuses like a start where a write grant could create it.
func TestDenyAbsentExplain(t *testing.T) {
	home := tempDir(t)
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=" + home}
	dir := tempDir(t)
	explain := func(grant string) sandboxResult {
		t.Helper()
		p := filepath.Join(dir, grant+".toml")
		if err := os.WriteFile(p, []byte("name = \"explain\"\n[fs]\n"+grant+" = [\"~\"]\ndeny = [\"~/.ssh\"]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return runWarden(t, env, "policy", "explain", p)
	}
	res := explain("read")
	if res.Exit != 0 || !strings.Contains(res.Stdout, "absent") || !strings.Contains(res.Stdout, filepath.Join(home, ".ssh")) {
		t.Errorf("explain, read grant: exit %d, want %s listed as absent:\n%s%s", res.Exit, filepath.Join(home, ".ssh"), res.Stdout, res.Stderr)
	}
	refusedAbsent(t, "explain, write grant", explain("write"), "$HOME/.ssh")
	if _, err := os.Lstat(filepath.Join(home, ".ssh")); err == nil {
		t.Error("explain created ~/.ssh")
	}
}

// TestDenyParentsCannotMove: the folders between a write grant and a
// denied path cannot be renamed, so a sandbox cannot move the mask aside,
// make the path again and leave the file readable to the next sandbox;
// they stay writable.
func TestDenyParentsCannotMove(t *testing.T) {
	r := newRoot(t)
	ws := tempDir(t)
	if err := os.MkdirAll(filepath.Join(ws, "sub", "deeper", "secret"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ws, "sub", "deeper", "secret", "key"), []byte("TOPSECRET"), 0o600)
	policy := r.policy("name = \"pin\"\n[fs]\nwrite = [\"$WORK_DIR\"]\ndeny = [\"$WORK_DIR/sub/deeper/secret\"]\n[exec]\nallow = [\"sh\", \"mv\", \"mkdir\", \"cat\", \"touch\"]\n")
	res := r.warden("do", "--policy", policy, "--workspace", ws, "--", "sh", "-c",
		"touch /workspace/sub/ok /workspace/sub/deeper/ok || exit 3; "+
			"mv /workspace/sub /workspace/sub2 2>/dev/null && exit 4; "+
			"mv /workspace/sub/deeper /workspace/sub/d2 2>/dev/null && exit 5; "+
			"cat /workspace/sub/deeper/secret/key 2>/dev/null && exit 6; exit 0")
	if res.Exit != 0 {
		t.Fatalf("in the sandbox: exit %d (3: parents not writable, 4/5: a parent was renamed, 6: the secret was read), %s", res.Exit, res.Stderr)
	}
	for _, p := range []string{"sub/ok", "sub/deeper/ok", "sub/deeper/secret/key"} {
		if _, err := os.Stat(filepath.Join(ws, p)); err != nil {
			t.Errorf("%s on the host: %v", p, err)
		}
	}
	// A session made the same way holds too.
	id := r.create("pin", policy, ws)
	if res := r.exec(id, nil, "mv", "/workspace/sub", "/workspace/sub2"); res.Exit == 0 {
		t.Error("a session renamed the denied path's parent")
	}
}
