package integration

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPoolStateDamaged: a pools.json the daemon cannot read (garbled, or
// a FIFO in its place) stops the daemon's start at once with one line
// naming the file and what to do, and changes nothing: the ready sandbox
// is not reaped, the file stays as it is. Repaired, the daemon starts
// and re-adopts the pool and its sandbox.
func TestPoolStateDamaged(t *testing.T) {
	for _, c := range []struct {
		name   string
		damage func(path string) error
		want   string
	}{
		{"garbled", func(path string) error { return os.WriteFile(path, []byte(`{"pools": [{"files": ["/x`), 0o600) }, "is damaged"},
		{"fifo", func(path string) error { os.Remove(path); return syscall.Mkfifo(path, 0o600) }, "is a named pipe (FIFO), not a regular file; remove it"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRoot(t)
			policy := r.policy(poolPolicy)
			r.fill(policy, 1)
			r.waitPool(1)
			ready := r.pooledIDs()
			state := filepath.Join(r.root, "pool", "pools.json")
			saved, err := os.ReadFile(state)
			if err != nil {
				t.Fatal(err)
			}
			r.killDaemon(syscall.SIGKILL)
			if err := c.damage(state); err != nil {
				t.Fatal(err)
			}
			before, _ := os.Lstat(state)
			res := r.within(10*time.Second, "pool", "status")
			oneLine(t, "pool status with "+c.name+" pools.json", res, "pool state", state, c.want)
			if got := r.pooledIDs(); strings.Join(got, " ") != strings.Join(ready, " ") || len(cgroupProcesses(ready[0])) == 0 {
				t.Errorf("ready sandboxes after the refused start: %v (want %v, running)", got, ready)
			}
			if after, err := os.Lstat(state); err != nil || after.Mode() != before.Mode() || after.Size() != before.Size() || !after.ModTime().Equal(before.ModTime()) {
				t.Errorf("the damaged pools.json was changed: %v", err)
			}

			os.Remove(state)
			if err := os.WriteFile(state, saved, 0o600); err != nil {
				t.Fatal(err)
			}
			if st := r.waitPool(1); st.Size != 1 {
				t.Errorf("pool after the repair: %+v", st)
			}
			if got := r.pooledIDs(); strings.Join(got, " ") != strings.Join(ready, " ") {
				t.Errorf("ready sandboxes after the repair: %v, want %v re-adopted", got, ready)
			}
		})
	}
}

// TestPoolStateFullDisk: a `pool fill` whose pool state cannot be saved
// (its file system is full) fails in one line and changes nothing, so
// no pool lives that a restarted daemon would not know; with room again
// it works. A pooled container whose folder is gone is reaped by the
// next daemon. The pool folder is a small tmpfs in the daemon's own mount
// namespace.
func TestPoolStateFullDisk(t *testing.T) {
	r := newRoot(t)
	poolDir := filepath.Join(r.root, "pool")
	if err := os.MkdirAll(poolDir, 0o711); err != nil {
		t.Fatal(err)
	}
	os.Chmod(r.root, 0o711)
	fs := r.privateDaemon(poolDir, "16m")
	policy := r.policy(poolPolicy)
	r.fill(policy, 1)
	r.waitPool(1)
	state := filepath.Join(fs, "pools.json")
	saved, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}

	fill(t, filepath.Join(fs, "fill"))
	oneLine(t, "pool fill with the pool folder's file system full", r.warden("pool", "fill", "--policy", policy, "--size", "2"),
		"pool state", "pools.json", "no space left on device")
	if st := r.poolStatus(); len(st) != 1 || st[0].Size != 1 || st[0].Ready != 1 {
		t.Errorf("pool status after the refused fill: %+v; want it as it was", st)
	}
	if now, err := os.ReadFile(state); err != nil || !bytes.Equal(now, saved) {
		t.Errorf("pools.json after the refused fill: %q (%v), want %q", now, err, saved)
	}

	if err := os.Remove(filepath.Join(fs, "fill")); err != nil {
		t.Fatal(err)
	}
	r.fill(policy, 2)
	if st := r.waitPool(2); st.Size != 2 {
		t.Errorf("pool status after the fill with room again: %+v", st)
	}
	if now, _ := os.ReadFile(state); !strings.Contains(string(now), `"size": 2`) {
		t.Errorf("pools.json after the fill: %s", now)
	}

	// The daemon killed, its pool folder goes with its mount namespace;
	// the next daemon reaps the pooled containers no folder owns any
	// more, without a gc.
	r.killDaemon(syscall.SIGKILL)
	if ids := r.pooledIDs(); len(ids) > 0 {
		t.Fatalf("the host's pool folder holds %v", ids)
	}
	if cg := r.cgroupsOfRoot(); len(cg) == 0 {
		t.Fatalf("no cgroup of the pooled containers is left to reap")
	}
	r.list()
	r.assertNoPool()
}
