package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// enginePolicies writes the operator's policy directory: "locked" grants
// one host folder for writing and low limits; "tiny" lowers them further.
func enginePolicies(t *testing.T) (dir, grant string) {
	t.Helper()
	dir = tempDir(t)
	// Under a policy a container's root is an unprivileged host uid: the
	// write grant must be writable for it.
	grant = writableGrant(t)
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name+".toml"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// readable: granted for reading only (testDockerPolicy binds it).
	readable := filepath.Join(dir, "readable")
	if err := os.Mkdir(readable, 0o755); err != nil {
		t.Fatal(err)
	}
	write("locked", fmt.Sprintf("name = \"locked\"\n[fs]\nwrite = [%q]\nread = [%q]\n[limits]\nmemory = \"64MiB\"\npids = 32\n", grant, readable))
	write("tiny", "name = \"tiny\"\n[limits]\nmemory = \"48MiB\"\npids = 16\n")
	write("hostile", "name = \"hostile\"\n[sandbox]\nengine = \"gvisor\"\n")
	return dir, grant
}

// ociEngine is an isolation engine the OCI face runs the engines'
// containers on, and what differs on it.
type ociEngine struct {
	name string // warden's --engine
	// runtime and locked are dockerd's runtimes for it, without a policy
	// and under the "locked" policy.
	runtime, locked string
	// stateDir is where warden keeps a container, under its --root.
	stateDir string
	// top is what docker top shows of a running container: its process,
	// or under gVisor runsc's on the host (the container's own processes
	// live in gVisor's kernel).
	top string
	// memory and pids are the host cgroup's limits under the "locked"
	// policy (64MiB, 32): under gVisor they hold runsc's sentry and gofer
	// too, and the policy's pids are held inside gVisor.
	memory, pids string
	// kernel is what /proc/version says inside.
	kernel string
	// tty is what `docker exec -it` shows of its terminal: under gVisor
	// the terminal is runsc's host one, a terminal without a /dev/pts
	// name or a window size (as with runsc itself).
	tty string
	// stopCode is docker stop's exit code for sleep as PID 1: the host's
	// kernel keeps SIGTERM from a namespace's init that has no handler
	// (stop waits, then kills: 137); gVisor's delivers it (143), as with
	// runsc itself.
	stopCode string
}

var ociEngines = []ociEngine{
	{name: "container", runtime: "warden", locked: "warden-locked", stateDir: "oci", top: "sleep 300", memory: "67108864", pids: "32", kernel: "Linux version", tty: "/dev/pts/", stopCode: "137"},
	{name: "gvisor", runtime: "warden-gvisor", locked: "warden-gvisor-locked", stateDir: "oci-gvisor/containers", top: "runsc-sandbox", memory: "117440512", pids: "288", kernel: "gvisor", tty: "is-a-tty", stopCode: "143"},
}

func TestEngines(t *testing.T) {
	requireRunsc(t)
	policyDir, grant := enginePolicies(t)
	e := startEngines(t, policyDir)
	for _, ec := range ociEngines {
		t.Run(ec.name, func(t *testing.T) {
			t.Run("containerd", func(t *testing.T) { testContainerd(t, e, ec) })
			t.Run("containerd-policy", func(t *testing.T) { testContainerdPolicy(t, e, ec) })
			t.Run("docker", func(t *testing.T) { testDocker(t, e, ec) })
			t.Run("docker-policy", func(t *testing.T) { testDockerPolicy(t, e, ec, grant) })
		})
	}
}

func testContainerd(t *testing.T, e *engines, ec ociEngine) {
	bin := e.wrappers[ec.name]
	id := "ctr-" + randomHex(4)
	r := e.ctrRun(t, bin, []string{"--rm"}, id, "sh", "-c", "echo hi from ctr; cat /proc/version")
	if r.Exit != 0 || !strings.HasPrefix(r.Stdout, "hi from ctr\n") || !strings.Contains(r.Stdout, ec.kernel) {
		t.Fatalf("ctr run: exit %d, stdout %q, stderr %q", r.Exit, r.Stdout, r.Stderr)
	}
	// The shim ran warden: its state root holds (held) the container.
	if _, err := os.Stat(filepath.Join(e.runcRoot, ctrNamespace, ec.stateDir)); err != nil {
		t.Fatalf("warden's state root under --runc-root is missing: %v", err)
	}

	id = "ctr-" + randomHex(4)
	if r := e.ctrRun(t, bin, []string{"-d"}, id, "sleep", "300"); r.Exit != 0 {
		t.Fatalf("ctr run -d: %s", r.Stderr)
	}
	if r := e.ctr(t, "task", "exec", "--exec-id", "e1", id, "sh", "-c", "echo exec $((6*7))"); r.Exit != 0 || strings.TrimSpace(r.Stdout) != "exec 42" {
		t.Fatalf("ctr task exec: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	if r := e.ctr(t, "task", "exec", "--exec-id", "e2", id, "sh", "-c", "exit 7"); r.Exit != 7 {
		t.Fatalf("ctr task exec exit 7: got %d (%s)", r.Exit, r.Stderr)
	}
	ps := e.ctr(t, "task", "ps", id)
	if ps.Exit != 0 || len(strings.Fields(ps.Stdout)) < 3 {
		t.Fatalf("ctr task ps: %q %q", ps.Stdout, ps.Stderr)
	}
	if r := e.ctr(t, "task", "pause", id); r.Exit != 0 {
		t.Fatalf("ctr task pause: %s", r.Stderr)
	}
	if r := e.ctr(t, "task", "resume", id); r.Exit != 0 {
		t.Fatalf("ctr task resume: %s", r.Stderr)
	}
	if r := e.ctr(t, "task", "kill", "-s", "SIGKILL", id); r.Exit != 0 {
		t.Fatalf("ctr task kill: %s", r.Stderr)
	}
	e.waitTaskGone(t, ctrNamespace, id)
	if r := e.ctr(t, "container", "delete", id); r.Exit != 0 {
		t.Fatalf("ctr container delete: %s", r.Stderr)
	}
	for _, dir := range []string{"oci", "oci-gvisor/containers"} {
		if ents, _ := os.ReadDir(filepath.Join(e.runcRoot, ctrNamespace, dir)); len(ents) != 0 {
			t.Fatalf("warden state left after delete in %s: %v", dir, ents)
		}
	}
}

func testContainerdPolicy(t *testing.T, e *engines, ec ociEngine) {
	bin := e.wrappers[ec.name]
	// Without a policy the container runs as configured: its root is
	// writable and memfd_create works.
	id := "ctr-" + randomHex(4)
	r := e.ctrRun(t, bin, []string{"--rm"}, id, "sh", "-c", "echo x > /etc/x && echo wrote; probe | grep memfd_create")
	if r.Exit != 0 || !strings.Contains(r.Stdout, "wrote") || !strings.Contains(r.Stdout, "memfd_create errno=0") {
		t.Fatalf("ctr run without policy: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	// Chosen by annotation from the operator's directory: read-only root,
	// warden's seccomp profile, the policy's limits.
	id = "ctr-" + randomHex(4)
	r = e.ctrRun(t, bin, []string{"--rm", "--annotation", "dev.warden.policy=tiny"}, id, "sh", "-c",
		"echo x > /etc/x && echo wrote; probe | grep memfd_create; cat /proc/self/status | grep CapEff; cat /proc/version")
	if strings.Contains(r.Stdout, "wrote") || !strings.Contains(r.Stdout, "memfd_create errno=1") || !strings.Contains(r.Stdout, "0000000000000000") || !strings.Contains(r.Stdout, ec.kernel) {
		t.Fatalf("ctr run with dev.warden.policy=tiny: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	// A policy asking for gVisor gets it, even from a runtime whose
	// --engine says container: a flag only strengthens.
	id = "ctr-" + randomHex(4)
	r = e.ctrRun(t, bin, []string{"--rm", "--annotation", "dev.warden.policy=hostile"}, id, "cat", "/proc/version")
	if r.Exit != 0 || !strings.Contains(r.Stdout, "gvisor") {
		t.Fatalf("ctr run with dev.warden.policy=hostile (engine gvisor) on --engine %s: exit %d, %q %q", ec.name, r.Exit, r.Stdout, r.Stderr)
	}
	// An annotation can lower a limit, never raise it, and cannot name a
	// file outside the directory.
	for _, bad := range []struct{ ann, want string }{
		{"dev.warden.policy=../../etc/passwd", "not a policy name"},
		{"dev.warden.policy=absent", "no policy absent.toml"},
		{"dev.warden.limits.memory=1GiB", "can only lower"},
	} {
		id = "ctr-" + randomHex(4)
		flags := []string{"--rm", "--annotation", bad.ann}
		if !strings.HasPrefix(bad.ann, "dev.warden.policy=") {
			flags = append(flags, "--annotation", "dev.warden.policy=tiny")
		}
		r = e.ctrRun(t, bin, flags, id, "true")
		if r.Exit == 0 || !strings.Contains(r.Stderr, bad.want) {
			t.Errorf("ctr run --annotation %s: exit %d, want an error with %q, got %q", bad.ann, r.Exit, bad.want, r.Stderr)
		}
		e.ctr(t, "container", "delete", id)
	}
}

func testDocker(t *testing.T, e *engines, ec ociEngine) {
	r := e.docker(t, "run", "--rm", "--runtime="+ec.runtime, "busybox", "sh", "-c", "echo hi; cat /proc/version")
	if r.Exit != 0 || !strings.HasPrefix(r.Stdout, "hi\n") || !strings.Contains(r.Stdout, ec.kernel) {
		t.Fatalf("docker run --rm: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	name := "d-" + randomHex(4)
	if r := e.docker(t, "run", "-d", "--runtime="+ec.runtime, "--name", name, "busybox", "sh", "-c", "echo logged; exec sleep 300"); r.Exit != 0 {
		t.Fatalf("docker run -d: %s", r.Stderr)
	}
	if logs := e.docker(t, "logs", name); logs.Exit != 0 || logs.Stdout != "logged\n" {
		t.Fatalf("docker logs: exit %d, %q %q", logs.Exit, logs.Stdout, logs.Stderr)
	}
	if r := e.docker(t, "exec", name, "sh", "-c", "echo exec $((6*7))"); r.Exit != 0 || strings.TrimSpace(r.Stdout) != "exec 42" {
		t.Fatalf("docker exec: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	// docker exec -it needs a terminal on our side: script(1) gives one.
	cmd := fmt.Sprintf("/usr/bin/docker -H unix://%s exec -it %s sh -c 'tty; [ -t 0 ] && [ -t 1 ] && echo is-a-tty; echo cols $(stty size)'", e.dockerSock, name)
	tty := run(t, []string{"PATH=/usr/bin:/bin", "HOME=" + e.dir, "DOCKER_CONFIG=" + filepath.Join(e.dir, "docker-client"), "TERM=dumb"},
		"script", "-qec", cmd, "/dev/null")
	if tty.Exit != 0 || !strings.Contains(tty.Stdout, ec.tty) || !strings.Contains(tty.Stdout, "is-a-tty") {
		t.Fatalf("docker exec -it: exit %d, %q %q", tty.Exit, tty.Stdout, tty.Stderr)
	}
	if top := e.docker(t, "top", name); top.Exit != 0 || !strings.Contains(top.Stdout, ec.top) {
		t.Fatalf("docker top: %q %q", top.Stdout, top.Stderr)
	}
	if r := e.docker(t, "pause", name); r.Exit != 0 {
		t.Fatalf("docker pause: %s", r.Stderr)
	}
	if st := e.dockerQuiet(t, "inspect", "-f", "{{.State.Status}}", name); st != "paused" {
		t.Fatalf("after docker pause: status %q", st)
	}
	if r := e.docker(t, "unpause", name); r.Exit != 0 {
		t.Fatalf("docker unpause: %s", r.Stderr)
	}
	if r := e.docker(t, "update", "--memory", "32m", "--memory-swap", "32m", name); r.Exit != 0 {
		t.Fatalf("docker update: %s", r.Stderr)
	}
	full := e.dockerQuiet(t, "inspect", "-f", "{{.Id}}", name)
	if got := readCgroup(t, "memory", "docker/"+full, "memory.limit_in_bytes"); got != "33554432" {
		t.Fatalf("after docker update --memory 32m: memory.limit_in_bytes %s", got)
	}
	start := time.Now()
	if r := e.docker(t, "stop", "-t", "1", name); r.Exit != 0 {
		t.Fatalf("docker stop: %s", r.Stderr)
	}
	// On the host's kernel sleep as PID 1 ignores SIGTERM: the stop must
	// have waited, then killed.
	if took := time.Since(start); ec.stopCode == "137" && took < time.Second {
		t.Fatalf("docker stop returned after %s: SIGTERM should not have stopped sleep as PID 1", took)
	}
	if code := e.dockerQuiet(t, "inspect", "-f", "{{.State.ExitCode}}", name); code != ec.stopCode {
		t.Fatalf("after docker stop: exit code %s, want %s", code, ec.stopCode)
	}
	if r := e.docker(t, "start", name); r.Exit != 0 {
		t.Fatalf("docker start: %s", r.Stderr)
	}
	if r := e.docker(t, "rm", "-f", name); r.Exit != 0 {
		t.Fatalf("docker rm -f: %s", r.Stderr)
	}
	if ids := e.dockerQuiet(t, "ps", "-aq"); ids != "" {
		t.Fatalf("containers left: %s", ids)
	}
}

func readCgroup(t *testing.T, controller, path, file string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", controller, path, file))
	if err != nil {
		t.Fatalf("cgroup: %v", err)
	}
	return strings.TrimSpace(string(data))
}

func testDockerPolicy(t *testing.T, e *engines, ec ociEngine, grant string) {
	other := filepath.Join(e.policyDir, "readable")
	os.Remove(filepath.Join(grant, "f"))
	// Under the runtime configured with the "locked" policy: the granted
	// folder is writable, the rest (root, an ungranted bind) is not.
	r := e.docker(t, "run", "--rm", "--runtime="+ec.locked, "-v", grant+":/work", "-v", other+":/other", "busybox", "sh", "-c",
		"echo ok > /work/f && echo granted; echo no > /other/f || echo other-refused; echo no > /etc/f || echo root-refused")
	if r.Exit != 0 || !strings.Contains(r.Stdout, "granted") || !strings.Contains(r.Stdout, "other-refused") || !strings.Contains(r.Stdout, "root-refused") {
		t.Fatalf("docker run under locked: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	if data, err := os.ReadFile(filepath.Join(grant, "f")); err != nil || string(data) != "ok\n" {
		t.Fatalf("granted write did not reach the host: %q %v", data, err)
	}
	if _, err := os.Stat(filepath.Join(other, "f")); err == nil {
		t.Fatal("a write into an ungranted bind reached the host")
	}
	// docker run --init binds the host's docker-init, read-only.
	if r := e.docker(t, "run", "--rm", "--init", "--runtime="+ec.locked, "busybox", "sh", "-c", "cat /proc/1/comm; echo x > /sbin/docker-init || echo init-read-only"); r.Exit != 0 || !strings.HasPrefix(r.Stdout, "docker-init\n") || !strings.Contains(r.Stdout, "init-read-only") {
		t.Fatalf("docker run --init under locked: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	// Host paths the policy does not grant cannot be bound at all, even
	// read-only: the host's / (its /proc, /etc/shadow, cgroups beneath)
	// and dockerd's own socket.
	for _, v := range []string{"/:/host", e.dockerSock + ":/docker.sock"} {
		r := e.docker(t, "run", "--rm", "--runtime="+ec.locked, "-v", v, "busybox", "sh", "-c",
			"P=$(cat /host/proc/sys/kernel/core_pattern) && echo \"$P\" > /host/proc/sys/kernel/core_pattern && echo HOST-WRITABLE; head -c1 /host/etc/shadow && echo SHADOW-READABLE")
		if r.Exit == 0 || strings.Contains(r.Stdout, "WRITABLE") || strings.Contains(r.Stdout, "READABLE") || !strings.Contains(r.Stderr, "grants no access") {
			t.Fatalf("docker run -v %s under locked: exit %d, %q %q", v, r.Exit, r.Stdout, r.Stderr)
		}
	}
	// Syscalls and capabilities: the reference runc allows memfd_create
	// and gives docker's default capabilities; the policy takes both away,
	// even a capability the container asks for.
	ref := e.docker(t, "run", "--rm", "--runtime=runc-ref", "--cap-add", "SYS_ADMIN", "busybox", "sh", "-c", "probe | grep memfd_create; grep CapEff /proc/self/status")
	locked := e.docker(t, "run", "--rm", "--runtime="+ec.locked, "--cap-add", "SYS_ADMIN", "busybox", "sh", "-c", "probe | grep memfd_create; grep CapEff /proc/self/status")
	if !strings.Contains(ref.Stdout, "memfd_create errno=0") || strings.Contains(ref.Stdout, "0000000000000000") {
		t.Fatalf("reference runtime: %q %q", ref.Stdout, ref.Stderr)
	}
	if !strings.Contains(locked.Stdout, "memfd_create errno=1") || !strings.Contains(locked.Stdout, "CapEff:\t0000000000000000") {
		t.Fatalf("under the locked policy memfd_create and capabilities must be gone: %q %q", locked.Stdout, locked.Stderr)
	}
	// --privileged asks for everything; the policy still gives nothing:
	// no capabilities, no host devices, a read-only /sys, masked /proc.
	priv := e.docker(t, "run", "--rm", "--privileged", "--runtime="+ec.locked, "busybox", "sh", "-c",
		"grep CapEff /proc/self/status; ls /dev; echo 1 > /sys/kernel/mm/ksm/run || echo sys-refused; cat /proc/kcore | head -c1 | wc -c")
	if priv.Exit != 0 || !strings.Contains(priv.Stdout, "CapEff:\t0000000000000000") || !strings.Contains(priv.Stdout, "sys-refused") ||
		strings.Contains(priv.Stdout, "vda") || strings.Contains(priv.Stdout, "sda") || strings.Contains(priv.Stdout, "kmsg") ||
		!strings.HasSuffix(strings.TrimSpace(priv.Stdout), "\n0") {
		t.Fatalf("docker run --privileged under a policy: exit %d, %q %q", priv.Exit, priv.Stdout, priv.Stderr)
	}
	// Limits: the policy's memory limit holds against docker update.
	name := "d-" + randomHex(4)
	if r := e.docker(t, "run", "-d", "--runtime="+ec.locked, "--memory", "1g", "--name", name, "busybox", "sleep", "300"); r.Exit != 0 {
		t.Fatalf("docker run -d under locked: %s", r.Stderr)
	}
	full := e.dockerQuiet(t, "inspect", "-f", "{{.Id}}", name)
	if got := readCgroup(t, "memory", "docker/"+full, "memory.limit_in_bytes"); got != ec.memory {
		t.Fatalf("docker run --memory 1g under a 64MiB policy: limit %s, want %s", got, ec.memory)
	}
	if r := e.docker(t, "update", "--memory", "512m", "--memory-swap", "512m", name); r.Exit != 0 {
		t.Fatalf("docker update: %s", r.Stderr)
	}
	if got := readCgroup(t, "memory", "docker/"+full, "memory.limit_in_bytes"); got != ec.memory {
		t.Fatalf("docker update --memory 512m raised the limit above the policy: %s, want %s", got, ec.memory)
	}
	if got := readCgroup(t, "pids", "docker/"+full, "pids.max"); got != ec.pids {
		t.Fatalf("pids.max %s, want %s for the policy's 32", got, ec.pids)
	}
	// docker exec --privileged asks for every capability for one process.
	if r := e.docker(t, "exec", "--privileged", name, "grep", "CapEff", "/proc/self/status"); r.Exit != 0 || !strings.Contains(r.Stdout, "0000000000000000") {
		t.Fatalf("docker exec --privileged under a policy: %q %q", r.Stdout, r.Stderr)
	}
	// The policy's 32 processes hold inside: a shell cannot start 40.
	if r := e.docker(t, "exec", name, "sh", "-c", "i=0; while [ $i -lt 40 ]; do sleep 30 & i=$((i+1)); done; echo forked"); r.Exit == 0 || strings.Contains(r.Stdout, "forked") || !strings.Contains(r.Stderr, "can't fork") {
		t.Fatalf("40 processes under a 32-process policy: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	e.docker(t, "rm", "-f", name)
	if ec.name != "container" {
		// What follows joins other containers' namespaces by path and
		// strips the engine's interfaces: the container engine's ways.
		// Under gVisor a policy without network runs runsc with
		// --network=none (loopback only), and a namespace of a runsc
		// container is not one warden finds to join.
		return
	}
	name = "d-" + randomHex(4)
	if r := e.docker(t, "run", "-d", "--runtime="+ec.locked, "--name", name, "busybox", "sleep", "300"); r.Exit != 0 {
		t.Fatalf("docker run -d under locked: %s", r.Stderr)
	}
	// Network: docker's libnetwork puts an interface into the container
	// from a prestart hook; a policy without network leaves loopback only.
	net := "wnet-" + randomHex(3)
	if r := e.docker(t, "network", "create", "--driver", "bridge", net); r.Exit != 0 {
		t.Fatalf("docker network create: %s", r.Stderr)
	}
	defer e.docker(t, "network", "rm", net)
	open := e.docker(t, "run", "--rm", "--runtime="+ec.runtime, "--network", net, "busybox", "sh", "-c", "ls /sys/class/net")
	closed := e.docker(t, "run", "--rm", "--runtime="+ec.locked, "--network", net, "busybox", "sh", "-c", "ls /sys/class/net; ip -o addr")
	if open.Exit != 0 || !strings.Contains(open.Stdout, "eth0") {
		t.Fatalf("without a policy the container should have docker's eth0: %q %q", open.Stdout, open.Stderr)
	}
	if closed.Exit != 0 || strings.Contains(closed.Stdout, "eth0") || !strings.Contains(closed.Stdout, "lo") {
		t.Fatalf("under a policy without network: %q %q", closed.Stdout, closed.Stderr)
	}
	// The container's root is an unprivileged host uid of its own (its
	// user namespace's), for its init and docker exec alike; inside, the
	// image (docker's overlay, id-mapped) is root's, and the granted
	// folder's file is that uid's on the host.
	pid := e.dockerQuiet(t, "inspect", "-f", "{{.State.Pid}}", name)
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	hostUID := field(string(status), "Uid:")
	if len(hostUID) != 4 || hostUID[0] == "0" || hostUID[3] != hostUID[0] {
		t.Fatalf("docker container's root on the host: %v", hostUID)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(grant, "f"), &st); err != nil || st.Uid == 0 {
		t.Fatalf("a granted write landed as host uid %d (%v), want the container's", st.Uid, err)
	}
	if r := e.docker(t, "exec", name, "sh", "-c", "id -u; ls -ln /bin/busybox; cat /proc/self/uid_map; sleep 1 & grep Uid /proc/$!/status"); r.Exit != 0 || !strings.HasPrefix(r.Stdout, "0\n") || !strings.Contains(r.Stdout, " 0        0 ") || !strings.Contains(r.Stdout, hostUID[0]+" ") {
		t.Fatalf("docker exec under a policy: exit %d %q %q (host uid %s)", r.Exit, r.Stdout, r.Stderr, hostUID[0])
	}
	// --network and --pid container:X join the namespaces of a container
	// of the same runtime root: allowed under a policy, and in its user
	// namespace.
	if r := e.docker(t, "run", "--rm", "--runtime="+ec.locked, "--network", "container:"+name, "--pid", "container:"+name, "busybox", "sh", "-c", "cat /proc/1/comm; ls /sys/class/net; cat /proc/self/uid_map"); r.Exit != 0 || !strings.HasPrefix(r.Stdout, "sleep\nlo\n") || !strings.Contains(r.Stdout, hostUID[0]+" ") {
		t.Fatalf("docker run --network/--pid container:X under a policy: exit %d %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	// --ipc container:Y joins Y's IPC namespace and binds Y's /dev/shm
	// (read-only, like every engine file under a policy).
	ipcName := "wipc-" + randomHex(3)
	if r := e.docker(t, "run", "-d", "--name", ipcName, "--ipc", "shareable", "--runtime="+ec.locked, "busybox", "sleep", "300"); r.Exit != 0 {
		t.Fatalf("docker run --ipc shareable: %s", r.Stderr)
	}
	defer e.docker(t, "rm", "-f", ipcName)
	if r := e.docker(t, "run", "--rm", "--runtime="+ec.locked, "--ipc", "container:"+ipcName, "busybox", "sh", "-c", "test -d /dev/shm && echo ok"); r.Exit != 0 || r.Stdout != "ok\n" {
		t.Fatalf("docker run --ipc container:Y under a policy: exit %d %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	e.docker(t, "rm", "-f", name)
}
