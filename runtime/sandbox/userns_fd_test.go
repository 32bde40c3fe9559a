package sandbox

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// TestNewUserns: the namespace has the maps asked for and setgroups
// denied (read from inside it by nsenter), no process of its making is
// left (its holder is reaped), and maps the kernel refuses fail with an
// error, leaving nothing either.
func TestNewUserns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to map host ids into a user namespace")
	}
	uids := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 3_500_000, Size: 65536}}
	gids := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 3_600_000, Size: 1000}, {ContainerID: 5000, HostID: 3_700_000, Size: 1}}
	f, err := newUserns(uids, gids)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	noChildren(t)
	cmd := exec.Command("nsenter", "--user=/proc/self/fd/3", "sh", "-c", "cat /proc/self/uid_map /proc/self/gid_map /proc/self/setgroups")
	cmd.ExtraFiles = []*os.File{f}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("nsenter into the namespace: %v: %s", err, out)
	}
	got := strings.Fields(string(out))
	want := strings.Fields("0 3500000 65536 0 3600000 1000 5000 3700000 1 deny")
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("inside the namespace: uid_map, gid_map, setgroups = %q, want %q", got, want)
	}

	// Two ranges over one host id: the kernel refuses the map.
	bad := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 3_500_000, Size: 10}, {ContainerID: 0, HostID: 3_600_000, Size: 10}}
	if f, err := newUserns(bad, gids); err == nil {
		f.Close()
		t.Error("overlapping uid ranges: got a namespace, want an error")
	}
	noChildren(t)
}

// noChildren fails if the test process has a child, running or not
// reaped.
func noChildren(t *testing.T) {
	t.Helper()
	var ws unix.WaitStatus
	if pid, err := unix.Wait4(-1, &ws, unix.WNOHANG|unix.WALL, nil); err != unix.ECHILD {
		t.Errorf("a child is left: wait4 = %d, %v", pid, err)
	}
}
