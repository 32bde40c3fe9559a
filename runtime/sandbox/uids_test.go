package sandbox

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// Concurrent leases never share a uid; a lease is freed only by its
// owner, and gc frees one whose container is gone unless a create still
// holds it locked.
func TestUIDLeases(t *testing.T) {
	rt := &Runtime{Root: t.TempDir()}
	var mu sync.Mutex
	seen := map[uint32]string{}
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := "s" + string(rune('a'+i%26)) + string(rune('a'+i/26))
			id, lease, err := rt.leaseIdentity(owner)
			if err != nil {
				t.Error(err)
				return
			}
			lease.Close()
			mu.Lock()
			defer mu.Unlock()
			if other, ok := seen[id.UID]; ok {
				t.Errorf("uid %d leased to %s and %s", id.UID, other, owner)
			}
			if id.UID < uidFirst || id.UID >= uidFirst+uidCount || id.GID != id.UID {
				t.Errorf("identity %+v outside the range", id)
			}
			seen[id.UID] = owner
		}()
	}
	wg.Wait()
	if n := len(rt.leases()); n != 50 {
		t.Fatalf("%d leases, want 50", n)
	}
	for uid, owner := range seen {
		rt.releaseIdentity("someone-else", uid)
		if rt.leases()[uid] != owner {
			t.Fatalf("uid %d freed by another owner", uid)
		}
		break
	}
	// A session folder keeps its lease; a locked lease is a create under
	// way; the others are gc's.
	os.MkdirAll(rt.SessionDir("saa"), 0o711)
	_, held, err := rt.leaseIdentity("new")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	removed := rt.GCLeases(map[string]bool{"sba": true})
	if len(removed) != 48 {
		t.Errorf("gc removed %d leases, want 48: %v", len(removed), removed)
	}
	left := map[string]bool{}
	for _, owner := range rt.leases() {
		left[owner] = true
	}
	if len(left) != 3 || !left["saa"] || !left["sba"] || !left["new"] {
		t.Errorf("leases left: %v", left)
	}
	rt.releaseOwned("saa")
	if _, err := os.Stat(filepath.Join(rt.uidsDir())); err != nil || len(rt.leases()) != 2 {
		t.Errorf("releaseOwned: %v, %v", rt.leases(), err)
	}
}

// A lease whose creator died before it named its owner (kill -9 between
// making the file and writing it) is gc's once no create holds it locked;
// a create that finds its lease freed before it locked it takes another.
func TestUIDLeaseNamingNoOwner(t *testing.T) {
	rt := &Runtime{Root: t.TempDir()}
	if err := os.MkdirAll(rt.uidsDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	dead, locked := rt.leasePath(uidFirst), rt.leasePath(uidFirst+1)
	for _, p := range []string{dead, locked} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(locked)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if removed := rt.GCLeases(nil); len(removed) != 1 || !strings.Contains(removed[0], "no owner named") {
		t.Errorf("gc removed %v, want the unlocked lease naming no owner", removed)
	}
	if _, err := os.Stat(dead); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the unlocked lease naming no owner is left: %v", err)
	}
	if !namesFile(f) {
		t.Errorf("the locked lease was freed")
	}
	os.Remove(locked)
	if namesFile(f) {
		t.Errorf("namesFile: a removed lease still counts as its path's")
	}
	if err := os.WriteFile(locked, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if namesFile(f) {
		t.Errorf("namesFile: a lease made again at the same path counts as the old one")
	}
}
