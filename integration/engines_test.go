package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// enginePolicies writes the operator's policy directory: "locked" grants
// one host folder for writing and low limits; "tiny" lowers them further.
func enginePolicies(t *testing.T) (dir, grant string) {
	t.Helper()
	dir = tempDir(t)
	grant = tempDir(t)
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
	return dir, grant
}

func TestEngines(t *testing.T) {
	policyDir, grant := enginePolicies(t)
	e := startEngines(t, policyDir)
	t.Run("containerd", func(t *testing.T) { testContainerd(t, e) })
	t.Run("containerd-policy", func(t *testing.T) { testContainerdPolicy(t, e) })
	t.Run("docker", func(t *testing.T) { testDocker(t, e) })
	t.Run("docker-policy", func(t *testing.T) { testDockerPolicy(t, e, grant) })
}

func testContainerd(t *testing.T, e *engines) {
	id := "ctr-" + randomHex(4)
	r := e.ctrRun(t, []string{"--rm"}, id, "echo", "hi from ctr")
	if r.Exit != 0 || strings.TrimSpace(r.Stdout) != "hi from ctr" {
		t.Fatalf("ctr run: exit %d, stdout %q, stderr %q", r.Exit, r.Stdout, r.Stderr)
	}
	// The shim ran warden: its state root holds (held) the container.
	if _, err := os.Stat(filepath.Join(e.runcRoot, ctrNamespace, "oci")); err != nil {
		t.Fatalf("warden's state root under --runc-root is missing: %v", err)
	}

	id = "ctr-" + randomHex(4)
	if r := e.ctrRun(t, []string{"-d"}, id, "sleep", "300"); r.Exit != 0 {
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
	if ents, _ := os.ReadDir(filepath.Join(e.runcRoot, ctrNamespace, "oci")); len(ents) != 0 {
		t.Fatalf("warden state left after delete: %v", ents)
	}
}

func testContainerdPolicy(t *testing.T, e *engines) {
	// Without a policy the container runs as configured: its root is
	// writable and memfd_create works.
	id := "ctr-" + randomHex(4)
	r := e.ctrRun(t, []string{"--rm"}, id, "sh", "-c", "echo x > /etc/x && echo wrote; probe | grep memfd_create")
	if r.Exit != 0 || !strings.Contains(r.Stdout, "wrote") || !strings.Contains(r.Stdout, "memfd_create errno=0") {
		t.Fatalf("ctr run without policy: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	// Chosen by annotation from the operator's directory: read-only root,
	// warden's seccomp profile, the policy's limits.
	id = "ctr-" + randomHex(4)
	r = e.ctrRun(t, []string{"--rm", "--annotation", "dev.warden.policy=tiny"}, id, "sh", "-c",
		"echo x > /etc/x && echo wrote; probe | grep memfd_create; cat /proc/self/status | grep CapEff")
	if strings.Contains(r.Stdout, "wrote") || !strings.Contains(r.Stdout, "memfd_create errno=1") || !strings.Contains(r.Stdout, "0000000000000000") {
		t.Fatalf("ctr run with dev.warden.policy=tiny: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
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
		r = e.ctrRun(t, flags, id, "true")
		if r.Exit == 0 || !strings.Contains(r.Stderr, bad.want) {
			t.Errorf("ctr run --annotation %s: exit %d, want an error with %q, got %q", bad.ann, r.Exit, bad.want, r.Stderr)
		}
		e.ctr(t, "container", "delete", id)
	}
}

func testDocker(t *testing.T, e *engines) {
	r := e.docker(t, "run", "--rm", "--runtime=warden", "busybox", "echo", "hi")
	if r.Exit != 0 || strings.TrimSpace(r.Stdout) != "hi" {
		t.Fatalf("docker run --rm: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	name := "d-" + randomHex(4)
	if r := e.docker(t, "run", "-d", "--runtime=warden", "--name", name, "busybox", "sleep", "300"); r.Exit != 0 {
		t.Fatalf("docker run -d: %s", r.Stderr)
	}
	if r := e.docker(t, "exec", name, "sh", "-c", "echo exec $((6*7))"); r.Exit != 0 || strings.TrimSpace(r.Stdout) != "exec 42" {
		t.Fatalf("docker exec: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	// docker exec -it needs a terminal on our side: script(1) gives one.
	cmd := fmt.Sprintf("/usr/bin/docker -H unix://%s exec -it %s sh -c 'tty; echo cols $(stty size)'", e.dockerSock, name)
	tty := run(t, []string{"PATH=/usr/bin:/bin", "HOME=" + e.dir, "DOCKER_CONFIG=" + filepath.Join(e.dir, "docker-client"), "TERM=dumb"},
		"script", "-qec", cmd, "/dev/null")
	if tty.Exit != 0 || !strings.Contains(tty.Stdout, "/dev/pts/") {
		t.Fatalf("docker exec -it: exit %d, %q %q", tty.Exit, tty.Stdout, tty.Stderr)
	}
	if top := e.docker(t, "top", name); top.Exit != 0 || !strings.Contains(top.Stdout, "sleep 300") {
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
	// sleep as PID 1 ignores SIGTERM: the stop must have waited, then killed.
	if took := time.Since(start); took < time.Second {
		t.Fatalf("docker stop returned after %s: SIGTERM should not have stopped sleep as PID 1", took)
	}
	if code := e.dockerQuiet(t, "inspect", "-f", "{{.State.ExitCode}}", name); code != "137" {
		t.Fatalf("after docker stop: exit code %s, want 137 (SIGKILL)", code)
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

func testDockerPolicy(t *testing.T, e *engines, grant string) {
	other := filepath.Join(e.policyDir, "readable")
	// Under the runtime configured with the "locked" policy: the granted
	// folder is writable, the rest (root, an ungranted bind) is not.
	r := e.docker(t, "run", "--rm", "--runtime=warden-locked", "-v", grant+":/work", "-v", other+":/other", "busybox", "sh", "-c",
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
	if r := e.docker(t, "run", "--rm", "--init", "--runtime=warden-locked", "busybox", "sh", "-c", "cat /proc/1/comm; echo x > /sbin/docker-init || echo init-read-only"); r.Exit != 0 || !strings.HasPrefix(r.Stdout, "docker-init\n") || !strings.Contains(r.Stdout, "init-read-only") {
		t.Fatalf("docker run --init under locked: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	// Host paths the policy does not grant cannot be bound at all, even
	// read-only: the host's / (its /proc, /etc/shadow, cgroups beneath)
	// and dockerd's own socket.
	for _, v := range []string{"/:/host", e.dockerSock + ":/docker.sock"} {
		r := e.docker(t, "run", "--rm", "--runtime=warden-locked", "-v", v, "busybox", "sh", "-c",
			"P=$(cat /host/proc/sys/kernel/core_pattern) && echo \"$P\" > /host/proc/sys/kernel/core_pattern && echo HOST-WRITABLE; head -c1 /host/etc/shadow && echo SHADOW-READABLE")
		if r.Exit == 0 || strings.Contains(r.Stdout, "WRITABLE") || strings.Contains(r.Stdout, "READABLE") || !strings.Contains(r.Stderr, "grants no access") {
			t.Fatalf("docker run -v %s under locked: exit %d, %q %q", v, r.Exit, r.Stdout, r.Stderr)
		}
	}
	// Syscalls and capabilities: the reference runc allows memfd_create
	// and gives docker's default capabilities; the policy takes both away,
	// even a capability the container asks for.
	ref := e.docker(t, "run", "--rm", "--runtime=runc-ref", "--cap-add", "SYS_ADMIN", "busybox", "sh", "-c", "probe | grep memfd_create; grep CapEff /proc/self/status")
	locked := e.docker(t, "run", "--rm", "--runtime=warden-locked", "--cap-add", "SYS_ADMIN", "busybox", "sh", "-c", "probe | grep memfd_create; grep CapEff /proc/self/status")
	if !strings.Contains(ref.Stdout, "memfd_create errno=0") || strings.Contains(ref.Stdout, "0000000000000000") {
		t.Fatalf("reference runtime: %q %q", ref.Stdout, ref.Stderr)
	}
	if !strings.Contains(locked.Stdout, "memfd_create errno=1") || !strings.Contains(locked.Stdout, "CapEff:\t0000000000000000") {
		t.Fatalf("under the locked policy memfd_create and capabilities must be gone: %q %q", locked.Stdout, locked.Stderr)
	}
	// --privileged asks for everything; the policy still gives nothing:
	// no capabilities, no host devices, a read-only /sys, masked /proc.
	priv := e.docker(t, "run", "--rm", "--privileged", "--runtime=warden-locked", "busybox", "sh", "-c",
		"grep CapEff /proc/self/status; ls /dev; echo 1 > /sys/kernel/mm/ksm/run || echo sys-refused; cat /proc/kcore | head -c1 | wc -c")
	if priv.Exit != 0 || !strings.Contains(priv.Stdout, "CapEff:\t0000000000000000") || !strings.Contains(priv.Stdout, "sys-refused") ||
		strings.Contains(priv.Stdout, "vda") || strings.Contains(priv.Stdout, "sda") || strings.Contains(priv.Stdout, "kmsg") ||
		!strings.HasSuffix(strings.TrimSpace(priv.Stdout), "\n0") {
		t.Fatalf("docker run --privileged under a policy: exit %d, %q %q", priv.Exit, priv.Stdout, priv.Stderr)
	}
	// Network: docker's libnetwork puts an interface into the container
	// from a prestart hook; a policy without network leaves loopback only.
	net := "wnet-" + randomHex(3)
	if r := e.docker(t, "network", "create", "--driver", "bridge", net); r.Exit != 0 {
		t.Fatalf("docker network create: %s", r.Stderr)
	}
	defer e.docker(t, "network", "rm", net)
	open := e.docker(t, "run", "--rm", "--runtime=warden", "--network", net, "busybox", "sh", "-c", "ls /sys/class/net")
	closed := e.docker(t, "run", "--rm", "--runtime=warden-locked", "--network", net, "busybox", "sh", "-c", "ls /sys/class/net; ip -o addr")
	if open.Exit != 0 || !strings.Contains(open.Stdout, "eth0") {
		t.Fatalf("without a policy the container should have docker's eth0: %q %q", open.Stdout, open.Stderr)
	}
	if closed.Exit != 0 || strings.Contains(closed.Stdout, "eth0") || !strings.Contains(closed.Stdout, "lo") {
		t.Fatalf("under a policy without network: %q %q", closed.Stdout, closed.Stderr)
	}
	// Limits: the policy's memory limit holds against docker update.
	name := "d-" + randomHex(4)
	if r := e.docker(t, "run", "-d", "--runtime=warden-locked", "--memory", "1g", "--name", name, "busybox", "sleep", "300"); r.Exit != 0 {
		t.Fatalf("docker run -d under locked: %s", r.Stderr)
	}
	full := e.dockerQuiet(t, "inspect", "-f", "{{.Id}}", name)
	if got := readCgroup(t, "memory", "docker/"+full, "memory.limit_in_bytes"); got != "67108864" {
		t.Fatalf("docker run --memory 1g under a 64MiB policy: limit %s", got)
	}
	if r := e.docker(t, "update", "--memory", "512m", "--memory-swap", "512m", name); r.Exit != 0 {
		t.Fatalf("docker update: %s", r.Stderr)
	}
	if got := readCgroup(t, "memory", "docker/"+full, "memory.limit_in_bytes"); got != "67108864" {
		t.Fatalf("docker update --memory 512m raised the limit above the policy: %s", got)
	}
	if got := readCgroup(t, "pids", "docker/"+full, "pids.max"); got != "32" {
		t.Fatalf("pids.max %s, want the policy's 32", got)
	}
	// docker exec --privileged asks for every capability for one process.
	if r := e.docker(t, "exec", "--privileged", name, "grep", "CapEff", "/proc/self/status"); r.Exit != 0 || !strings.Contains(r.Stdout, "0000000000000000") {
		t.Fatalf("docker exec --privileged under a policy: %q %q", r.Stdout, r.Stderr)
	}
	// --network and --pid container:X join the namespaces of a container
	// of the same runtime root: allowed under a policy.
	if r := e.docker(t, "run", "--rm", "--runtime=warden-locked", "--network", "container:"+name, "--pid", "container:"+name, "busybox", "sh", "-c", "cat /proc/1/comm; ls /sys/class/net"); r.Exit != 0 || r.Stdout != "sleep\nlo\n" {
		t.Fatalf("docker run --network/--pid container:X under a policy: exit %d %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	// --ipc container:Y joins Y's IPC namespace and binds Y's /dev/shm
	// (read-only, like every engine file under a policy).
	ipcName := "wipc-" + randomHex(3)
	if r := e.docker(t, "run", "-d", "--name", ipcName, "--ipc", "shareable", "--runtime=warden-locked", "busybox", "sleep", "300"); r.Exit != 0 {
		t.Fatalf("docker run --ipc shareable: %s", r.Stderr)
	}
	defer e.docker(t, "rm", "-f", ipcName)
	if r := e.docker(t, "run", "--rm", "--runtime=warden-locked", "--ipc", "container:"+ipcName, "busybox", "sh", "-c", "test -d /dev/shm && echo ok"); r.Exit != 0 || r.Stdout != "ok\n" {
		t.Fatalf("docker run --ipc container:Y under a policy: exit %d %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	e.docker(t, "rm", "-f", name)
}
