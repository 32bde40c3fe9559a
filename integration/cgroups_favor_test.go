package integration

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/runtime/sandbox"
)

// TestFavorCgroupMoves: the daemon's start-up switch to cheap cgroup moves
// works on this kernel and leaves nothing behind: no mount, and no
// hierarchy in any process's /proc/PID/cgroup. Like every daemon start in
// these tests, it leaves the kernel's favordynmods mode on until reboot
// (which is its purpose; see sandbox.FavorCgroupMoves).
func TestFavorCgroupMoves(t *testing.T) {
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if err := sandbox.FavorCgroupMoves(); errors.Is(err, sandbox.ErrFavorNoEffect) {
		t.Log("kernel before 6.18: FavorCgroupMoves rightly does nothing")
		return
	} else if err != nil {
		t.Fatal(err)
	}
	// Twice: a daemon restart does it again.
	if err := sandbox.FavorCgroupMoves(); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile("/proc/self/mountinfo")
	if string(after) != string(mounts) {
		t.Errorf("mounts changed:\n%s\n---\n%s", mounts, after)
	}
	// The kernel destroys a dropped hierarchy a moment later.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		cg, _ := os.ReadFile("/proc/self/cgroup")
		if !strings.Contains(string(cg), "name=warden-favordynmods-") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a hierarchy is left behind:\n%s", cg)
		}
	}
}
