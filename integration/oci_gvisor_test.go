package integration

import (
	"strings"
	"testing"
)

// A stopped container on the gVisor engine answers kill as runc does:
// --all succeeds and one signal says it is not running. containerd's runc
// shim kills --all before every delete and takes any other error for a
// failed stop: a pod's sandbox then never ended (critest hung).
func TestOCIGVisorKillStopped(t *testing.T) {
	requireRunsc(t)
	o := newOCIEnv(t)
	id := "oci-" + randomHex(4)
	if r := o.warden(t, "--engine", "gvisor", "run", "--detach", "--bundle", busyboxBundle(t, id, nil), id); r.Exit != 0 {
		t.Fatalf("run --detach on gVisor: %s", r.Stderr)
	}
	o.waitStatus(t, id, "running")
	if r := o.warden(t, "kill", id, "KILL"); r.Exit != 0 {
		t.Fatalf("kill of a running container: %s", r.Stderr)
	}
	o.waitStatus(t, id, "stopped")
	if r := o.warden(t, "kill", "--all", id, "9"); r.Exit != 0 {
		t.Errorf("kill --all of a stopped container: exit %d %q; runc succeeds", r.Exit, r.Stderr)
	}
	// runc's words, which containerd's shim takes for an ended process.
	if r := o.warden(t, "kill", id, "9"); r.Exit == 0 || !strings.Contains(r.Stderr, "container not running") {
		t.Errorf("kill of a stopped container: exit %d %q; want runc's %q", r.Exit, r.Stderr, "container not running")
	}
	if r := o.warden(t, "delete", id); r.Exit != 0 {
		t.Fatalf("delete: %s", r.Stderr)
	}
}
