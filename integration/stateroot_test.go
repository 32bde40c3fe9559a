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
// files survive gc, and a workspace beside the root still works.
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

	mine := filepath.Join(r.root, "sessions", "myproject")
	if err := os.MkdirAll(mine, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mine, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, ws := range map[string]string{"holds the root": parent, "is the root": r.root, "inside the root": mine} {
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
print("REPLY" if reply else "NONE")
`
	asRoot, err := exec.Command("/usr/bin/python3", "-c", client, sock).CombinedOutput()
	if err != nil || strings.TrimSpace(string(asRoot)) != "REPLY" {
		t.Fatalf("root's request: %v, %s", err, asRoot)
	}
	asNobody, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", client, sock).CombinedOutput()
	if err != nil || strings.TrimSpace(string(asNobody)) != "NONE" {
		t.Errorf("another user's request: %v, %s; want no answer", err, asNobody)
	}
	// The daemon goes on serving its own user.
	if res := r.exec(id, nil, "true"); res.Exit != 0 {
		t.Errorf("exec after the refused connection: exit %d, %s", res.Exit, res.Stderr)
	}
}
