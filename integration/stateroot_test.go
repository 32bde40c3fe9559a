package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestStateRootOutOfReach: a sandbox never sees warden's state root
// through a grant. A workspace that holds the root would be id-mapped to
// its owner (root), so the sandbox could talk to the daemon's socket and
// create a session with any policy; a workspace inside the root is state
// that gc removes. Both are refused before anything starts, the user's
// files survive gc, and a workspace beside the root still works. The
// pool's placeholder, the one folder in the root a pooled sandbox's spec
// names for its workspace (never mounted), is no session's workspace
// either.
func TestStateRootOutOfReach(t *testing.T) {
	r := newRoot(t)
	parent := filepath.Dir(r.root)
	policy := r.policy("name = \"ws\"\n[fs]\nwrite = [\"$WORK_DIR\"]\n[exec]\nallow = [\"sh\", \"ls\"]\n")
	beside := filepath.Join(parent, "work")
	if err := os.Mkdir(beside, 0o755); err != nil {
		t.Fatal(err)
	}
	id := r.create("beside", policy, beside)
	if out := r.sh(id, "echo ok > /workspace/f && ls /workspace"); !strings.Contains(out, "f") {
		t.Fatalf("a workspace beside the root: %q", out)
	}

	r.fill(policy, 1)
	placeholder := filepath.Join(r.root, "pool", ".empty")
	if _, err := os.Stat(placeholder); err != nil {
		t.Fatalf("a pool fill made no placeholder: %v", err)
	}

	mine := filepath.Join(r.root, "sessions", "myproject")
	if err := os.MkdirAll(mine, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mine, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, ws := range map[string]string{"holds the root": parent, "is the root": r.root, "inside the root": mine, "the pool's placeholder": placeholder} {
		t.Run(name, func(t *testing.T) {
			for _, args := range [][]string{
				{"session", "create", "--id", r.id("bad"), "--policy", policy, "--workspace", ws},
				{"do", "--policy", policy, "--workspace", ws, "--", "ls", "/workspace"},
			} {
				res := r.warden(args...)
				if res.Exit != 125 || !strings.Contains(res.Stderr, "state root") || strings.Count(strings.TrimSpace(res.Stderr), "\n") != 0 {
					t.Errorf("%s with workspace %s: exit %d, stderr %q; want 125 and one line about the state root", args[0], ws, res.Exit, res.Stderr)
				}
			}
		})
	}
	// Nor may a workspace hold warden's own binary: root runs it next.
	bin, err := filepath.EvalSymlinks(wardenBinary)
	if err != nil {
		t.Fatal(err)
	}
	res := r.warden("do", "--policy", policy, "--workspace", filepath.Dir(bin), "--", "ls", "/workspace")
	if res.Exit != 125 || !strings.Contains(res.Stderr, "warden's own") {
		t.Errorf("a workspace holding warden's binary: exit %d, stderr %q", res.Exit, res.Stderr)
	}
	// gc leaves the folder it did not make, and says so.
	if res := r.warden("gc"); res.Exit == 0 || !strings.Contains(res.Stderr, "myproject") {
		t.Errorf("gc with a user's folder in the state root: exit %d, %s", res.Exit, res.Stderr)
	}
	if data, err := os.ReadFile(filepath.Join(mine, "notes.txt")); err != nil || string(data) != "mine" {
		t.Errorf("after the refused creates and gc, the user's file: %q, %v", data, err)
	}
	os.RemoveAll(mine)
	if res := r.warden("gc"); res.Exit != 0 {
		t.Errorf("gc: exit %d, %s", res.Exit, res.Stderr)
	}
	// The session beside the root still runs: nothing above touched it.
	r.sh(id, "test -f /workspace/f")
	if names, _ := os.ReadDir(placeholder); len(names) > 0 {
		t.Errorf("the pool's placeholder holds %d files", len(names))
	}
}

// TestDaemonRefusesOtherUsers: the daemon answers only its own user, even
// when its socket is reachable (here made so by hand): a sandbox's
// processes never run as that user.
func TestDaemonRefusesOtherUsers(t *testing.T) {
	r := newRoot(t)
	policy := r.policy("name = \"peer\"\n[exec]\nallow = [\"true\"]\n")
	id := r.create("peer", policy, tempDir(t))
	sock := filepath.Join(r.root, "warden.sock")
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(sock, 0o600)
	client := `
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.settimeout(5)
s.connect(sys.argv[1])
try:
    s.send(b'{"op":"list"}')
    reply = s.recv(65536)
except OSError as e:
    reply = b""
print(reply.decode() if reply else "NONE")
`
	asRoot, err := exec.Command("/usr/bin/python3", "-c", client, sock).CombinedOutput()
	if err != nil || !strings.Contains(string(asRoot), `"sessions"`) {
		t.Fatalf("root's request: %v, %s", err, asRoot)
	}
	// The daemon says why before it closes (docs/protocol.md), which the
	// client reads if it comes before the request; a request sent first is
	// never read, and the close resets it. Never an answer to it.
	asNobody, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", client, sock).CombinedOutput()
	if out := strings.TrimSpace(string(asNobody)); err != nil || out != "NONE" && !strings.Contains(out, "the warden daemon serves only its own user: process") {
		t.Errorf("another user's request: %v, %s; want no answer or the refusal", err, asNobody)
	}
	// The daemon goes on serving its own user.
	if res := r.exec(id, nil, "true"); res.Exit != 0 {
		t.Errorf("exec after the refused connection: exit %d, %s", res.Exit, res.Stderr)
	}
}

// TestBindSourceSwapRace: a sandbox that can write above another
// sandbox's grant swaps the granted folder for a symlink to a host folder
// again and again while the other starts. A mount must never follow the
// symlink: each start either mounts the checked folder or is refused.
func TestBindSourceSwapRace(t *testing.T) {
	r := newRoot(t)
	ws, hostonly := tempDir(t), tempDir(t)
	if err := os.Mkdir(filepath.Join(ws, "out"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hostonly, "f"), []byte("HOSTSECRET"), 0o644); err != nil {
		t.Fatal(err)
	}
	flip := `
import os, time
w = "/workspace"
end = time.time() + 45  # well inside its 60 s timeout: it never dies mid-swap
while time.time() < end and not os.path.exists(w + "/stop"):
    try:
        os.rename(w + "/out", w + "/out.d")
        os.symlink(HOSTONLY, w + "/out")
        time.sleep(0.003)
        os.unlink(w + "/out")
        os.rename(w + "/out.d", w + "/out")
    except OSError:
        pass
    time.sleep(0.001)
`
	if err := os.WriteFile(filepath.Join(ws, "flip.py"), []byte(strings.Replace(flip, "HOSTONLY", `"`+hostonly+`"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	attacker := r.create("flip", r.policy("name = \"flip\"\n[fs]\nwrite = [\"$WORK_DIR\"]\n[exec]\nallow = [\"python3\"]\n"), ws)
	flipper := r.command("exec", "--session", attacker, "--timeout", "60s", "--", "python3", "/workspace/flip.py")
	if err := flipper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		os.WriteFile(filepath.Join(ws, "stop"), nil, 0o644)
		flipper.Wait()
	}()
	victim := r.policy("name = \"victim\"\n[fs]\nread = [\"$WORK_DIR\"]\nwrite = [\"$WORK_DIR/out\"]\n[exec]\nallow = [\"sh\", \"cat\"]\n")
	ran, refused := 0, 0
	for i := 0; i < 40; i++ {
		res := r.warden("do", "--policy", victim, "--workspace", ws, "--", "sh", "-c",
			"for d in /workspace/out /workspace/out.d; do cat $d/f 2>/dev/null; echo x > $d/pwned 2>/dev/null; done; true")
		if strings.Contains(res.Stdout, "HOSTSECRET") {
			t.Fatalf("run %d read the host folder through a swapped mount", i)
		}
		switch {
		case res.Exit == 0:
			ran++
		case res.Exit == 125 && strings.Contains(res.Stderr, "symlink"):
			refused++
		default:
			t.Logf("run %d: exit %d, %s", i, res.Exit, res.Stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(hostonly, "pwned")); err == nil {
		t.Fatal("a sandbox wrote into the host folder through a swapped mount")
	}
	t.Logf("%d runs mounted the checked folder, %d were refused while it was swapped", ran, refused)
	// The allowed half: once the swapping stops, the same start works.
	os.WriteFile(filepath.Join(ws, "stop"), nil, 0o644)
	flipper.Wait()
	if res := r.warden("do", "--policy", victim, "--workspace", ws, "--", "sh", "-c", "echo ok > /workspace/out/f"); res.Exit != 0 {
		t.Errorf("after the swapping stopped: exit %d, %s", res.Exit, res.Stderr)
	}
	if data, err := os.ReadFile(filepath.Join(ws, "out", "f")); err != nil || string(data) != "ok\n" {
		t.Errorf("the granted folder after the swapping stopped: %q, %v", data, err)
	}
}

// TestDaemonChecksSessionFolders: a create request on the socket naming a
// workspace that is relative, missing or a file is refused with a reason,
// and no session is made; a real folder works.
func TestDaemonChecksSessionFolders(t *testing.T) {
	r := newRoot(t)
	r.create("first", r.policy("name = \"f\"\n[exec]\nallow = [\"true\"]\n"), tempDir(t)) // starts the daemon
	file := filepath.Join(tempDir(t), "file")
	os.WriteFile(file, nil, 0o644)
	client := `
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.settimeout(10)
s.connect(sys.argv[1])
s.send(json.dumps({"op": "create", "id": sys.argv[2], "create": {"policyToml": "name = \"p\"\n[fs]\nwrite = [\"$WORK_DIR\"]\n", "vars": {"workDir": sys.argv[3]}}}).encode())
print(s.recv(65536).decode())
`
	for name, ws := range map[string]string{"relative": "relative/ws", "missing": "/nonexistent/ws", "a file": file, "a folder": tempDir(t)} {
		id := r.id("folders")
		out, err := exec.Command("/usr/bin/python3", "-c", client, filepath.Join(r.root, "warden.sock"), id, ws).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v, %s", name, err, out)
		}
		refused := strings.Contains(string(out), `"error"`)
		if refused != (name != "a folder") {
			t.Errorf("workspace %s (%s): reply %s", name, ws, out)
		}
		if _, err := os.Stat(filepath.Join(r.root, "sessions", id)); (err == nil) == refused {
			t.Errorf("workspace %s: session folder exists: %v", name, err == nil)
		}
	}
}

// TestGrantAliasesRefused: a folder a bind mount shows at another path is
// the same folder: /etc or the state root bound elsewhere are refused as
// write grants there too, while an ordinary folder still works.
func TestGrantAliasesRefused(t *testing.T) {
	r := newRoot(t)
	ws := tempDir(t)
	policy := r.policy("name = \"alias\"\n[fs]\nwrite = [\"$WORK_DIR\"]\n[exec]\nallow = [\"true\"]\n")
	r.create("alias", policy, ws) // makes the state root
	dir := tempDir(t)
	for name, target := range map[string]string{"etc": "/etc", "root": r.root} {
		alias := filepath.Join(dir, name)
		if err := os.Mkdir(alias, 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("mount", "--bind", target, alias).CombinedOutput(); err != nil {
			t.Fatalf("mount --bind %s: %v %s", target, err, out)
		}
		defer exec.Command("umount", alias).Run()
		res := r.warden("do", "--policy", policy, "--workspace", alias, "--", "true")
		if res.Exit != 125 || strings.Count(strings.TrimSpace(res.Stderr), "\n") != 0 {
			t.Errorf("%s bound at %s as the workspace: exit %d, stderr %q; want one line and 125", target, alias, res.Exit, res.Stderr)
		}
	}
	// Grants are bound recursively: a folder holding a mount of /proc (a
	// chroot's) or of /etc is refused too.
	for name, mount := range map[string][]string{"proc": {"-t", "proc", "proc"}, "etc": {"--bind", "/etc"}} {
		holder := filepath.Join(dir, "holder-"+name)
		point := filepath.Join(holder, name)
		if err := os.MkdirAll(point, 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("mount", append(mount, point)...).CombinedOutput(); err != nil {
			t.Fatalf("mount %v: %v %s", mount, err, out)
		}
		defer exec.Command("umount", point).Run()
		res := r.warden("do", "--policy", policy, "--workspace", holder, "--", "true")
		if res.Exit != 125 || !strings.Contains(res.Stderr, "holds a") {
			t.Errorf("a workspace holding a mount of %s: exit %d, stderr %q", name, res.Exit, res.Stderr)
		}
		if name == "proc" {
			// The mount itself: a procfs of its own, so no identity
			// matches the host's /proc.
			res := r.warden("do", "--policy", policy, "--workspace", point, "--", "true")
			if res.Exit != 125 || !strings.Contains(res.Stderr, "kernel file system") {
				t.Errorf("a workspace that is a mount of proc: exit %d, stderr %q", res.Exit, res.Stderr)
			}
		}
	}
	if res := r.warden("do", "--policy", policy, "--workspace", ws, "--", "true"); res.Exit != 0 {
		t.Errorf("an ordinary workspace: exit %d, %s", res.Exit, res.Stderr)
	}
}
