package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestGCLeavesDoAlone: `warden do` runs its sandbox in its own process, so
// the daemon does not know it. Neither gc nor a daemon that starts (and
// would adopt, then expire, what it finds) may touch it: the command ends
// as it would have, and gc afterwards finds nothing, since do cleaned up.
func TestGCLeavesDoAlone(t *testing.T) {
	r := newRoot(t)
	ws := tempDir(t)
	policy := r.policy("name = \"do-gc\"\n[fs]\nwrite = [\"$WORK_DIR\"]\n[exec]\nallow = [\"sh\", \"sleep\"]\n[limits]\nidle = \"1s\"\n")
	r.create("other", r.policy(sessionPolicy), tempDir(t)) // a daemon runs
	r.killDaemon(syscall.SIGKILL)                          // and is gone
	do := r.command("do", "--policy", policy, "--workspace", ws, "--", "sh", "-c", "sleep 4; echo done")
	var out strings.Builder
	do.Stdout = &out
	if err := do.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // do's sandbox runs
	r.list()                            // starts a daemon, which adopts what it finds
	time.Sleep(1500 * time.Millisecond) // past the policy's idle limit
	if res := r.warden("gc"); res.Exit != 0 || strings.Contains(res.Stdout, "do-") {
		t.Errorf("gc while do runs: exit %d, stdout %q, stderr %q", res.Exit, res.Stdout, res.Stderr)
	}
	if err := do.Wait(); err != nil || out.String() != "done\n" {
		t.Errorf("do: %v, stdout %q; want its command to finish", err, out.String())
	}
	if res := r.warden("gc"); res.Exit != 0 || strings.TrimSpace(res.Stdout) != "nothing to remove" {
		t.Errorf("gc after do: exit %d, stdout %q, stderr %q", res.Exit, res.Stdout, res.Stderr)
	}
}

// TestGCDuringCreates: sessions created while gc runs again and again are
// all alive afterwards: gc removes only what no live session owns, and a
// session being created is one.
func TestGCDuringCreates(t *testing.T) {
	r := newRoot(t)
	policy := r.policy(sessionPolicy)
	r.create("first", policy, tempDir(t)) // the daemon runs
	// Sandboxes of `warden do` beside them, which gc must leave alone too
	// (and which, were it to kill them, would make each gc take long).
	var dos []*exec.Cmd
	for i := 0; i < 4; i++ {
		do := r.command("do", "--policy", policy, "--workspace", tempDir(t), "--", "sleep", "8")
		if err := do.Start(); err != nil {
			t.Fatal(err)
		}
		dos = append(dos, do)
	}
	time.Sleep(time.Second)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			cmd := exec.Command(wardenBinary, "--root", r.root, "gc")
			cmd.Run()
		}
	}()
	var ids []string
	for i := 0; i < 20; i++ {
		ids = append(ids, r.create(fmt.Sprintf("during-gc%d", i), policy, tempDir(t)))
	}
	close(stop)
	wg.Wait()
	for _, id := range ids {
		if res := r.exec(id, nil, "sh", "-c", "true"); res.Exit != 0 {
			t.Errorf("session %s, created while gc ran: exit %d, %s", id, res.Exit, res.Stderr)
		}
	}
	for i, do := range dos {
		if err := do.Wait(); err != nil {
			t.Errorf("do %d, run while gc ran: %v", i, err)
		}
	}
}

// TestSessionFoldersLocked: the process that runs a session holds a lock
// on its folder, whether it started cold or was claimed from a pool, so
// gc run by anyone leaves it alone.
func TestSessionFoldersLocked(t *testing.T) {
	r := newRoot(t)
	policy := r.policy(poolPolicy)
	cold := r.create("cold", policy, poolWorkspace(t))
	r.fill(policy, 1)
	r.waitPool(1)
	claimed := r.create("claimed", policy, poolWorkspace(t))
	if st := r.waitPool(1); st.Hits != 1 {
		t.Fatalf("the second session did not come from the pool: %+v", st)
	}
	for _, id := range []string{cold, claimed} {
		f, err := os.Open(filepath.Join(r.root, "sessions", id))
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != syscall.EWOULDBLOCK {
			t.Errorf("session %s: its folder is not locked by the daemon: flock %v", id, err)
		}
		f.Close()
	}
}
