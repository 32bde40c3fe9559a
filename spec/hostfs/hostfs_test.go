package hostfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
)

func TestUnder(t *testing.T) {
	for _, c := range []struct {
		p, dir, rel string
		ok          bool
	}{
		{"/a/b", "/a", "b", true},
		{"/a", "/a", ".", true},
		{"/a/b", "/a/", "b", true},
		{"/ab", "/a", "", false},
		{"/x", "/", "x", true},
	} {
		rel, ok := Under(c.p, c.dir)
		if rel != c.rel || ok != c.ok {
			t.Errorf("Under(%q, %q) = %q, %v; want %q, %v", c.p, c.dir, rel, ok, c.rel, c.ok)
		}
	}
}

func TestFileIDs(t *testing.T) {
	dir := t.TempDir()
	inner := filepath.Join(dir, "a")
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	chain := FileIDs(inner)
	want, _ := StatID(dir)
	if len(chain) < 3 || chain[1] != want {
		t.Fatalf("FileIDs(%s) = %v; want the folder, then %v, up to /", inner, chain, want)
	}
	if FileIDs(filepath.Join(dir, "missing")) != nil {
		t.Error("FileIDs of a missing file is not empty")
	}
}

// The mount table's escapes (a space is \040) are undone.
func TestMountinfoEscapes(t *testing.T) {
	line := `36 35 98:0 /a\040b /mnt/with\040space rw,noatime master:1 - ext3 /dev/root rw,errors=continue`
	mounts, err := mountinfo.GetMountsFromReader(strings.NewReader(line+"\n"), nil)
	if err != nil || len(mounts) != 1 {
		t.Fatalf("parse: %v %v", mounts, err)
	}
	if m := mounts[0]; m.Root != "/a b" || m.Mountpoint != "/mnt/with space" {
		t.Errorf("root %q point %q", m.Root, m.Mountpoint)
	}
}

// Another process's table is read from its own mountinfo: this process's
// by pid is the same as its own.
func TestMountsOfPid(t *testing.T) {
	own, err := Mounts(0)
	if err != nil {
		t.Fatal(err)
	}
	byPid, err := Mounts(os.Getpid())
	if err != nil || len(byPid) != len(own) || len(own) == 0 {
		t.Fatalf("Mounts(%d): %d mounts (%v), Mounts(0): %d", os.Getpid(), len(byPid), err, len(own))
	}
	if _, err := Mounts(1 << 30); err == nil {
		t.Error("Mounts of a pid that does not exist gave no error")
	}
}
