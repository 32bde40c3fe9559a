package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
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
	if held := runscStateOf(o, id); len(held) == 0 {
		t.Error("runsc holds no state file of the stopped container: runscStateOf looks in the wrong place")
	}
	if r := o.warden(t, "delete", id); r.Exit != 0 {
		t.Fatalf("delete: %s", r.Stderr)
	}
	if left := runscStateOf(o, id); len(left) > 0 {
		t.Errorf("runsc still holds state of the deleted container: %v", left)
	}
}

// A container run in the foreground on the gVisor engine gives its exit
// status and leaves nothing: no state of warden's, none of runsc's.
func TestOCIGVisorRunLeavesNothing(t *testing.T) {
	requireRunsc(t)
	o := newOCIEnv(t)
	id := "oci-" + randomHex(4)
	bundle := busyboxBundle(t, id, func(s *specs.Spec) { s.Process.Args = []string{"sh", "-c", "echo ran; exit 3"} })
	r := o.warden(t, "--engine", "gvisor", "run", "--bundle", bundle, id)
	if r.Exit != 3 || !strings.Contains(r.Stdout, "ran") {
		t.Fatalf("run on gVisor: exit %d, stdout %q, stderr %q; want exit 3 and \"ran\"", r.Exit, r.Stdout, r.Stderr)
	}
	if left := runscStateOf(o, id); len(left) > 0 {
		t.Errorf("runsc still holds state of the ended container: %v", left)
	}
	if ents, _ := os.ReadDir(filepath.Join(o.root, "oci-gvisor", "containers")); len(ents) != 0 {
		t.Errorf("warden still holds %d gVisor containers", len(ents))
	}
	if r := o.warden(t, "state", id); r.Exit == 0 {
		t.Errorf("state of the ended container answers: %s", r.Stdout)
	}
}

// runscStateOf lists the state files runsc keeps of container id.
func runscStateOf(o *ociEnv, id string) []string {
	files, _ := filepath.Glob(filepath.Join(o.root, "oci-gvisor", "runsc", id+"_sandbox:*"))
	return files
}
