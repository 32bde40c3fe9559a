package integration

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReapCreateKilled: a daemon killed (SIGKILL) at any point of a
// session's create leaves nothing for the next one to miss: the restarted
// daemon reaps the half-made session (container state, cgroups in every
// hierarchy, processes, state folder, uid lease) without a gc, or serves
// it if the create had finished.
func TestReapCreateKilled(t *testing.T) {
	r := newRoot(t)
	policy := r.policy(sessionPolicy)
	ws := tempDir(t)
	r.create("first", policy, tempDir(t)) // the daemon runs
	reaped := 0
	for delay := 2 * time.Millisecond; delay <= 62*time.Millisecond; delay += 4 * time.Millisecond {
		id := r.id("killed")
		create := r.command("session", "create", "--policy", policy, "--workspace", ws, "--id", id)
		if err := create.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(delay)
		r.killDaemon(syscall.SIGKILL) // the client names the root too
		create.Wait()
		live := false
		for _, s := range r.list() { // a new daemon, which adopts or reaps
			live = live || s.ID == id
		}
		if live {
			r.expectAlive(id)
			continue
		}
		log, _ := os.ReadFile(filepath.Join(r.root, "daemon.log"))
		if strings.Contains(string(log), "reaping session "+id) {
			reaped++
		}
		r.assertGone(id, id, 0, fmt.Sprintf("create killed after %s", delay))
	}
	if reaped == 0 {
		t.Errorf("no create was cut short: every kill came before the session's folder or after its create")
	}
	// The uid leases left are the live sessions': a create cut short
	// before its folder existed left none either.
	owners := map[string]bool{}
	for _, s := range r.list() {
		owners[r.container(s.ID)] = true
	}
	entries, _ := os.ReadDir(filepath.Join(r.root, "uids"))
	for _, e := range entries {
		if owner, _ := os.ReadFile(filepath.Join(r.root, "uids", e.Name())); !owners[string(owner)] {
			t.Errorf("uid lease %s of %q left, which no live session owns", e.Name(), owner)
		}
	}
	t.Logf("%d creates cut short and reaped", reaped)
}

// TestReapDamagedState: a session whose state a restarted daemon cannot
// read (garbled, or a FIFO in its place) is reaped whole, without a gc:
// its agent is killed, its container state, cgroups and folder removed,
// even when it was claimed from a pool and its session.json no longer
// says which container it runs in. The daemon starts at once (a FIFO is
// not opened), serves the other sessions and the workspace is untouched.
func TestReapDamagedState(t *testing.T) {
	garble := func(path string) error { return os.WriteFile(path, []byte("{\"id\": \"tr"), 0o600) }
	fifo := func(path string) error {
		os.Remove(path)
		return syscall.Mkfifo(path, 0o600)
	}
	for _, c := range []struct {
		name    string
		claimed bool
		file    func(r *wardenRoot, id string) string
		damage  func(path string) error
	}{
		{"state.json garbled", false, stateFile, garble},
		{"state.json fifo", false, stateFile, fifo},
		{"session.json garbled", false, sessionFile, garble},
		{"session.json fifo", false, sessionFile, fifo},
		{"claimed session.json garbled", true, sessionFile, garble},
		{"claimed state.json garbled", true, stateFile, garble},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "-"), func(t *testing.T) {
			r := newRoot(t)
			policy := r.policy(poolPolicy)
			if c.claimed {
				r.fill(policy, 1)
				r.waitPool(1)
			}
			ws := poolWorkspace(t)
			if err := os.WriteFile(filepath.Join(ws, "kept"), []byte("mine\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			other := r.create("other", r.policy(sessionPolicy), tempDir(t))
			id := r.create("damaged", policy, ws)
			container := r.container(id)
			if c.claimed != strings.HasPrefix(container, "pool-") {
				t.Fatalf("session %s runs in container %s; claimed from the pool: %v", id, container, c.claimed)
			}
			agent := r.agentPid(id)
			r.killDaemon(syscall.SIGKILL)
			if err := c.damage(c.file(r, id)); err != nil {
				t.Fatal(err)
			}
			if res := r.within(10*time.Second, "session", "ls"); res.Exit != 0 || strings.Contains(res.Stdout, id) || !strings.Contains(res.Stdout, other) {
				t.Errorf("session ls after the damage: exit %d, stdout %q, stderr %q; want %s served and %s reaped", res.Exit, res.Stdout, res.Stderr, other, id)
			}
			r.assertGone(id, container, agent, c.name)
			r.expectAlive(other)
			if data, err := os.ReadFile(filepath.Join(ws, "kept")); err != nil || string(data) != "mine\n" {
				t.Errorf("the workspace's file: %q, %v", data, err)
			}
			if recs, _ := r.logs("--session", id); len(recs) == 0 || recs[len(recs)-1].Event != "session.reap" {
				t.Errorf("audit records of %s: %+v; want a session.reap last", id, recs)
			}
		})
	}
}

func stateFile(r *wardenRoot, id string) string {
	return filepath.Join(r.root, "containers", r.container(id), "state.json")
}

func sessionFile(r *wardenRoot, id string) string {
	return filepath.Join(r.root, "sessions", id, "session.json")
}

// assertGone checks nothing of a session is left on the host: its agent
// (when agent is not 0) and any process in its container's cgroups, the
// cgroups in every hierarchy, its container state and its state folder.
func (r *wardenRoot) assertGone(id, container string, agent int, what string) {
	r.t.Helper()
	if agent > 0 { // (a zombie, not yet reaped by the host's init, is gone)
		r.waitGone(func() []int { return running([]int{agent}) }, fmt.Sprintf("%s: session %s's agent", what, id))
	}
	if pids := cgroupProcesses(container); len(pids) > 0 {
		r.t.Errorf("%s: processes left in the cgroups of %s: %v", what, container, pids)
	}
	if dirs, _ := filepath.Glob(r.cgroup("*", container)); len(dirs) > 0 {
		r.t.Errorf("%s: cgroups of %s left: %v", what, container, dirs)
	}
	for _, p := range []string{filepath.Join("containers", container), filepath.Join("sessions", id), filepath.Join("pool", container)} {
		if _, err := os.Lstat(filepath.Join(r.root, p)); !errors.Is(err, os.ErrNotExist) {
			r.t.Errorf("%s: %s left under the root", what, p)
		}
	}
}

// TestReapDeadLeases: the uid leases a daemon killed during a create can
// leave with no folder naming their owner (one not yet naming its owner,
// one naming a sandbox whose folder was never made) are freed by the next
// daemon without a gc, while a lease a create under way holds locked and
// the lease of a live session are kept, and that session still works.
func TestReapDeadLeases(t *testing.T) {
	r := newRoot(t)
	id := r.create("live", r.policy(sessionPolicy), tempDir(t))
	r.killDaemon(syscall.SIGKILL)
	uids := filepath.Join(r.root, "uids")
	leases := func() map[string]string {
		out := map[string]string{}
		entries, _ := os.ReadDir(uids)
		for _, e := range entries {
			owner, _ := os.ReadFile(filepath.Join(uids, e.Name()))
			out[e.Name()] = string(owner)
		}
		return out
	}
	before := leases()
	if len(before) != 1 {
		t.Fatalf("uid leases of one session: %v", before)
	}
	// Numbers outside warden's range: a lease is a file, whatever its number.
	unnamed, gone, locked := filepath.Join(uids, "4000001"), filepath.Join(uids, "4000002"), filepath.Join(uids, "4000003")
	for path, owner := range map[string]string{unnamed: "", gone: "pool-0123456789ab", locked: ""} {
		if err := os.WriteFile(path, []byte(owner), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	hold, err := os.Open(locked)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	if err := syscall.Flock(int(hold.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if res := r.within(20*time.Second, "session", "ls"); res.Exit != 0 || !strings.Contains(res.Stdout, id) {
		t.Fatalf("session ls after the restart: exit %d, stdout %q, stderr %q", res.Exit, res.Stdout, res.Stderr)
	}
	after := leases()
	for _, p := range []string{unnamed, gone} {
		if owner, left := after[filepath.Base(p)]; left {
			t.Errorf("the dead lease %s (owner %q) is left after the daemon's restart", filepath.Base(p), owner)
		}
	}
	if _, kept := after[filepath.Base(locked)]; !kept {
		t.Errorf("the locked lease (a create under way) was freed")
	}
	for uid, owner := range before {
		if after[uid] != owner {
			t.Errorf("the live session's lease %s (%s) is now %q", uid, owner, after[uid])
		}
	}
	r.expectAlive(id)
	hold.Close()
	os.Remove(locked)
}
