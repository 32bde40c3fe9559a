package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCRIPodGVisor runs a pod with one container through a private
// containerd's CRI plugin and crictl on warden's gVisor engine, without a
// policy and under the baseline policy: the pod's container is a gVisor
// sub-container that joins the pod sandbox's kernel. Every verb a kubelet
// uses must work (run the pod, create, start, exec, logs, stop, remove)
// and nothing may be left: no runsc process, mount, cgroup or warden
// state of the pod.
func TestCRIPodGVisor(t *testing.T) {
	crictl, busybox := os.Getenv("WARDEN_CRICTL"), os.Getenv("WARDEN_K8S_BUSYBOX")
	if crictl == "" || busybox == "" {
		t.Fatal("TestCRIPodGVisor needs WARDEN_CRICTL and WARDEN_K8S_BUSYBOX: run `make integration` (it builds crictl and unpacks Debian's dynamic busybox into bin/tools)")
	}
	policy, err := filepath.Abs("../policies/baseline-container.toml")
	if err != nil {
		t.Fatal(err)
	}
	dir := tempDir(t)
	handlers := map[string]string{
		"runc":                   runcBinary, // containerd's default handler
		"warden-gvisor":          writeWrapper(t, dir, "warden-gvisor", "--engine", "gvisor"),
		"warden-gvisor-baseline": writeWrapper(t, dir, "warden-gvisor-baseline", "--engine", "gvisor", "--policy", policy),
	}
	e := startCRI(t, crictl, busybox, handlers)
	for _, h := range []string{"warden-gvisor", "warden-gvisor-baseline"} {
		t.Run(h, func(t *testing.T) { testCRIPod(t, e, h) })
	}
}

func testCRIPod(t *testing.T, e *criEnv, handler string) {
	dir := tempDir(t)
	name := "pod-" + randomHex(4)
	pod := map[string]any{
		"metadata":      map[string]any{"name": name, "namespace": "default", "uid": randomHex(8), "attempt": 0},
		"log_directory": filepath.Join(dir, "logs"),
		"linux":         map[string]any{},
	}
	ctr := map[string]any{
		"metadata": map[string]any{"name": "main"},
		"image":    map[string]any{"image": "registry.k8s.io/e2e-test-images/busybox:1.29-2"},
		// PID 1 ignores SIGTERM unless it traps it.
		"command":  []string{"sh", "-c", "trap 'echo stopping; exit 0' TERM; echo hello from the pod; while :; do sleep 1; done"},
		"log_path": "main.log",
		"linux":    map[string]any{},
	}
	podFile, ctrFile := filepath.Join(dir, "pod.json"), filepath.Join(dir, "ctr.json")
	writeJSON(t, podFile, pod)
	writeJSON(t, ctrFile, ctr)
	if r := e.crictlRun(t, "pull", "registry.k8s.io/e2e-test-images/busybox:1.29-2"); r.Exit != 0 {
		t.Fatalf("crictl pull: %s", r.Stderr)
	}
	r := e.crictlRun(t, "runp", "--runtime", handler, podFile)
	if r.Exit != 0 {
		t.Fatalf("crictl runp: %s", r.Stderr)
	}
	podID := strings.TrimSpace(r.Stdout)
	r = e.crictlRun(t, "create", podID, ctrFile, podFile)
	if r.Exit != 0 {
		t.Fatalf("crictl create: %s", r.Stderr)
	}
	ctrID := strings.TrimSpace(r.Stdout)
	began := time.Now()
	if r := e.crictlRun(t, "start", ctrID); r.Exit != 0 {
		t.Fatalf("crictl start (after %s): %s", time.Since(began).Round(time.Millisecond), r.Stderr)
	}
	t.Logf("started in %s", time.Since(began).Round(time.Millisecond))
	// crictl says the command's status in words and exits 1.
	if r := e.crictlRun(t, "exec", ctrID, "sh", "-c", "echo exec works; exit 3"); r.Stdout != "exec works\n" || !strings.Contains(r.Stderr, "exit code 3") {
		t.Errorf("crictl exec: exit %d, stdout %q, stderr %q; want %q and the command's exit code 3", r.Exit, r.Stdout, r.Stderr, "exec works\n")
	}
	// A process that ends before runsc exec reports its pid is an exec too.
	for i := 0; i < 5; i++ {
		if r := e.crictlRun(t, "exec", ctrID, "true"); r.Exit != 0 {
			t.Errorf("crictl exec true (%d of 5): exit %d, %q", i+1, r.Exit, r.Stderr)
		}
	}
	// An exec the CRI plugin kills at its timeout (a kubelet probe's)
	// ends in gVisor too, and the call returns at the timeout.
	began = time.Now()
	if r := e.crictlRun(t, "exec", "--sync", "--timeout", "1", ctrID, "sleep", "4321"); r.Exit == 0 || time.Since(began) > 20*time.Second {
		t.Errorf("crictl exec --timeout 1 sleep 4321: exit %d after %s, stderr %q; want a timeout within seconds", r.Exit, time.Since(began).Round(time.Millisecond), r.Stderr)
	}
	waitFor(t, 10*time.Second, "the timed-out exec's process gone", func() bool {
		r := e.crictlRun(t, "exec", ctrID, "ps")
		return r.Exit == 0 && strings.Contains(r.Stdout, "ps") && !strings.Contains(r.Stdout, "sleep 4321")
	})
	waitFor(t, 10*time.Second, "the container's output in its log", func() bool {
		return strings.Contains(e.crictlRun(t, "logs", ctrID).Stdout, "hello from the pod")
	})
	if r := e.crictlRun(t, "stop", "--timeout", "20", ctrID); r.Exit != 0 {
		t.Fatalf("crictl stop: %s", r.Stderr)
	}
	var status struct {
		Status struct {
			State    string `json:"state"`
			ExitCode int    `json:"exitCode"`
		} `json:"status"`
	}
	r = e.crictlRun(t, "inspect", ctrID)
	if err := json.Unmarshal([]byte(r.Stdout), &status); err != nil {
		t.Fatalf("crictl inspect: %v (%s %s)", err, r.Stdout, r.Stderr)
	}
	if status.Status.State != "CONTAINER_EXITED" || status.Status.ExitCode != 0 {
		t.Errorf("after stop: state %s, exit %d; want CONTAINER_EXITED, 0 (the trap ran)", status.Status.State, status.Status.ExitCode)
	}
	if logs := e.crictlRun(t, "logs", ctrID).Stdout; !strings.Contains(logs, "stopping") {
		t.Errorf("the container's log lacks what it wrote on SIGTERM: %q", logs)
	}
	// A container created and removed without a start: what stands for
	// its process on the host must go with it.
	ctr["metadata"] = map[string]any{"name": "unstarted"}
	writeJSON(t, ctrFile, ctr)
	r = e.crictlRun(t, "create", podID, ctrFile, podFile)
	if r.Exit != 0 {
		t.Fatalf("crictl create (a second container): %s", r.Stderr)
	}
	unstarted := strings.TrimSpace(r.Stdout)
	for _, args := range [][]string{{"rm", ctrID}, {"rm", unstarted}, {"stopp", podID}, {"rmp", podID}} {
		if r := e.crictlRun(t, args...); r.Exit != 0 {
			t.Fatalf("crictl %s: %s", strings.Join(args, " "), r.Stderr)
		}
	}
	// Nothing of the pod is left: no process (runsc's sandbox and gofers,
	// warden's keepers) naming the handler's state, no mount below it, no
	// container state, no cgroup.
	state := filepath.Join(e.dir, "runtime-root", handler)
	waitFor(t, 10*time.Second, "no process naming "+state, func() bool { return len(processesNaming(state+"/")) == 0 })
	if m := mountsBelow(state); len(m) > 0 {
		t.Errorf("mounts left below %s: %v", state, m)
	}
	if left, _ := filepath.Glob(filepath.Join(state, "*", "oci-gvisor", "containers", "*")); len(left) > 0 {
		t.Errorf("warden's gVisor containers left: %v", left)
	}
	if left, _ := filepath.Glob(filepath.Join(state, "*", "oci-gvisor", "runsc", "*.state")); len(left) > 0 {
		t.Errorf("runsc's containers left: %v", left)
	}
	for _, id := range []string{podID, ctrID, unstarted} {
		if left, _ := filepath.Glob("/sys/fs/cgroup/*/k8s.io/" + id); len(left) > 0 {
			t.Errorf("cgroups left: %v", left)
		}
	}
}
