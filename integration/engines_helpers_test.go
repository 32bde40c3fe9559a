package integration

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// engines are a private containerd and dockerd, started from Debian's
// packages with their own roots and sockets, and stopped by pid.
type engines struct {
	dir        string
	ctrSock    string
	dockerSock string
	runcRoot   string // --runc-root for ctr
	policyDir  string
	// wrappers are ctr's --runc-binary for each engine: warden with
	// --engine, as a containerd BinaryName wrapper runs it.
	wrappers map[string]string
	procs    []*exec.Cmd
	// cgroupsBefore are the engines' container cgroups that existed
	// before the test (another user's): not this test's leaks.
	cgroupsBefore map[string]bool
}

func engineCgroups() []string {
	var out []string
	for _, parent := range []string{"docker", ctrNamespace} {
		kids, _ := filepath.Glob("/sys/fs/cgroup/*/" + parent + "/*/cgroup.procs")
		out = append(out, kids...)
	}
	return out
}

const (
	ctrNamespace = "warden-test"
	busyboxRef   = "docker.io/library/busybox:latest"
)

// startEngines starts containerd and dockerd with warden registered, and
// loads a busybox image built here. The test fails if either cannot start.
func startEngines(t testing.TB, policyDir string) *engines {
	t.Helper()
	for _, bin := range []string{"containerd", "dockerd", "ctr", "/usr/bin/docker", "containerd-shim-runc-v2"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not found: run `make deps` (installs containerd and docker.io)", bin)
		}
	}
	dir, err := os.MkdirTemp("", "warden-engines-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	e := &engines{dir: dir, ctrSock: filepath.Join(dir, "containerd.sock"), dockerSock: filepath.Join(dir, "docker.sock"),
		runcRoot: filepath.Join(dir, "runc-root"), policyDir: policyDir}
	e.cgroupsBefore = map[string]bool{}
	for _, c := range engineCgroups() {
		e.cgroupsBefore[c] = true
	}
	t.Cleanup(func() { e.stop(t) })
	e.wrappers = map[string]string{}
	for _, engine := range []string{"container", "gvisor"} {
		w := filepath.Join(dir, "warden-"+engine)
		text := fmt.Sprintf("#!/bin/sh\nexec %s --engine %s \"$@\"\n", wardenBinary, engine)
		if err := os.WriteFile(w, []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
		e.wrappers[engine] = w
	}
	e.startContainerd(t)
	e.startDockerd(t)
	image := buildImage(t, filepath.Join(dir, "image"))
	if r := e.ctr(t, "image", "import", image); r.Exit != 0 {
		t.Fatalf("ctr image import: %s", r.Stderr)
	}
	if r := e.docker(t, "load", "-i", image); r.Exit != 0 {
		t.Fatalf("docker load: %s %s", r.Stdout, r.Stderr)
	}
	return e
}

func (e *engines) startContainerd(t testing.TB) {
	t.Helper()
	cfg := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %q
[ttrpc]
  address = %q
[debug]
  address = %q
`, filepath.Join(e.dir, "containerd-root"), filepath.Join(e.dir, "containerd-state"), e.ctrSock, e.ctrSock+".ttrpc", filepath.Join(e.dir, "containerd-debug.sock"))
	path := filepath.Join(e.dir, "containerd.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// Registered the way an operator does it; containerd must accept the
	// result (its CRI plugin, which reads the entry, is off here).
	if r := runTB(t, nil, wardenBinary, "--allow-unconfined", "install", "containerd", "--config", path); r.Exit != 0 {
		t.Fatalf("warden install containerd: %s", r.Stderr)
	}
	if dump := runTB(t, nil, "containerd", "--config", path, "config", "dump"); dump.Exit != 0 {
		t.Fatalf("containerd does not accept the installed config: %s", dump.Stderr)
	}
	if data, _ := os.ReadFile(path); !strings.Contains(string(data), "BinaryName = \""+wardenBinary+"\"") || !strings.Contains(string(data), "containerd-root") {
		t.Fatalf("warden install containerd wrote:\n%s", data)
	}
	cmd := exec.Command("containerd", "--config", path)
	// The shim passes containerd's environment to the runtime: this is
	// how ctr (which cannot pass runtime arguments) gets warden's
	// policy directory; the directory has no default.toml, and the
	// unconfined half of the tests runs containers that select none.
	cmd.Env = append(runscEnv(), "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "WARDEN_POLICY_DIR="+e.policyDir, "WARDEN_ALLOW_UNCONFINED=1")
	e.launch(t, cmd, "containerd.log", e.ctrSock)
}

func (e *engines) startDockerd(t testing.TB) {
	t.Helper()
	daemon := map[string]any{
		"data-root":      filepath.Join(e.dir, "docker-data"),
		"exec-root":      filepath.Join(e.dir, "docker-exec"),
		"pidfile":        filepath.Join(e.dir, "docker.pid"),
		"hosts":          []string{"unix://" + e.dockerSock},
		"containerd":     e.ctrSock,
		"storage-driver": "overlay2",
		"iptables":       false,
		"ip-masq":        false,
		"bridge":         "none",
		"exec-opts":      []string{"native.cgroupdriver=cgroupfs"},
		"runtimes": map[string]any{
			"runc-ref": map[string]any{"path": runcBinary},
		},
	}
	data, _ := json.MarshalIndent(daemon, "", "  ")
	path := filepath.Join(e.dir, "daemon.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	// The warden runtimes are registered with warden install, which must
	// keep the rest of the file.
	for _, args := range [][]string{
		{"--allow-unconfined", "install", "docker", "--config", path},
		{"--policy", filepath.Join(e.policyDir, "locked.toml"), "--policy-dir", e.policyDir, "install", "docker", "--config", path, "--name", "warden-locked"},
		{"--engine", "gvisor", "--allow-unconfined", "install", "docker", "--config", path, "--name", "warden-gvisor"},
		{"--engine", "gvisor", "--policy", filepath.Join(e.policyDir, "locked.toml"), "--policy-dir", e.policyDir, "install", "docker", "--config", path, "--name", "warden-gvisor-locked"},
	} {
		if r := runTB(t, append(runscEnv(), "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/root"), wardenBinary, args...); r.Exit != 0 {
			t.Fatalf("warden %s: %s", strings.Join(args, " "), r.Stderr)
		}
	}
	cmd := exec.Command("dockerd", "--config-file", path, "--containerd-namespace", "warden-docker", "--containerd-plugins-namespace", "warden-docker-plugins")
	cmd.Env = append(runscEnv(), "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
	e.launch(t, cmd, "dockerd.log", e.dockerSock)
}

// runscEnv passes the test's WARDEN_RUNSC (the Makefile's runsc) on to
// warden under the engines; without it warden finds bin/tools/runsc.
func runscEnv() []string {
	if v := os.Getenv("WARDEN_RUNSC"); v != "" {
		return []string{"WARDEN_RUNSC=" + v}
	}
	return nil
}

// launch starts an engine and waits for its socket to answer.
func (e *engines) launch(t testing.TB, cmd *exec.Cmd, logName, sock string) {
	t.Helper()
	logf, err := os.Create(filepath.Join(e.dir, logName))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", cmd.Path, err)
	}
	e.procs = append(e.procs, cmd)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	log, _ := os.ReadFile(logf.Name())
	t.Fatalf("%s did not start within 30s; its log:\n%s", cmd.Path, lastLines(string(log), 20))
}

// runTB is the harness's run for tests and benchmarks alike.
func runTB(t testing.TB, env []string, name string, args ...string) sandboxResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	if env == nil {
		cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/root"}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %s: no answer within %s", name, strings.Join(args, " "), cliTimeout)
	}
	res := sandboxResult{Stdout: stdout.String(), Stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		res.Exit = ee.ExitCode()
	case err != nil:
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return res
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// stop removes every container the engines hold, stops them by pid
// (dockerd first, it uses containerd), and checks that no mount, shim or
// container process of theirs is left.
func (e *engines) stop(t testing.TB) {
	if ids := e.dockerQuiet(t, "ps", "-aq"); ids != "" {
		e.docker(t, append([]string{"rm", "-f"}, strings.Fields(ids)...)...)
	}
	for _, ns := range []string{ctrNamespace} {
		tasks := e.ctrNS(t, ns, "task", "ls", "-q")
		for _, id := range strings.Fields(tasks.Stdout) {
			e.ctrNS(t, ns, "task", "kill", "-s", "SIGKILL", id)
			e.waitTaskGone(t, ns, id)
		}
		for _, id := range strings.Fields(e.ctrNS(t, ns, "container", "ls", "-q").Stdout) {
			e.ctrNS(t, ns, "container", "delete", id)
		}
	}
	stopInReverse(e.procs)
	// Shims outlive containerd only while they hold a task; any left is
	// a leak this test made.
	leftover := shimsFor(e.ctrSock)
	for _, pid := range leftover {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	// dockerd may leave its own data-root bind behind when it is slow to
	// stop; a container's root file system left mounted is a leak.
	var mounts []string
	below := mountsBelow(e.dir)
	for i := len(below) - 1; i >= 0; i-- {
		m := below[i]
		syscall.Unmount(m, syscall.MNT_DETACH)
		if strings.HasSuffix(m, "/merged") || strings.HasSuffix(m, "/rootfs") || strings.Contains(m, "/oci/") || strings.Contains(m, "/oci-gvisor/") {
			mounts = append(mounts, m)
		}
	}
	// Engines leave the parent cgroups of their containers (libcontainer
	// never removes parents); only empty ones are removed.
	// A shim removes its container's cgroup as it ends, which may be just
	// after its engine has gone: allow it a few seconds.
	var cgroups []string
	for i := 0; i < 50; i++ {
		cgroups = nil
		for _, c := range engineCgroups() {
			if !e.cgroupsBefore[c] {
				cgroups = append(cgroups, filepath.Dir(c))
			}
		}
		if len(cgroups) == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, parent := range []string{"docker", ctrNamespace} {
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + parent)
		for _, d := range dirs {
			syscall.Rmdir(d)
		}
	}
	if t != nil && !t.Failed() {
		if len(leftover) > 0 {
			t.Errorf("engine teardown: shims still running: %v", leftover)
		}
		if len(cgroups) > 0 {
			t.Errorf("engine teardown: container cgroups left behind: %v", cgroups)
		}
		if len(mounts) > 0 {
			t.Errorf("engine teardown: container mounts left behind: %v", mounts)
		}
	}
	os.RemoveAll(e.dir)
}

func (e *engines) waitTaskGone(t testing.TB, ns, id string) {
	for i := 0; i < 100; i++ {
		if r := e.ctrNS(t, ns, "task", "delete", id); r.Exit == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// shimsFor lists the pids of containerd shims started for a socket.
func shimsFor(sock string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, en := range entries {
		var pid int
		if _, err := fmt.Sscanf(en.Name(), "%d", &pid); err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", en.Name(), "cmdline"))
		if bytes.Contains(cmdline, []byte("containerd-shim")) && bytes.Contains(cmdline, []byte(sock)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func (e *engines) ctr(t testing.TB, args ...string) sandboxResult {
	t.Helper()
	return e.ctrNS(t, ctrNamespace, args...)
}

func (e *engines) ctrNS(t testing.TB, ns string, args ...string) sandboxResult {
	t.Helper()
	return runTB(t, nil, "ctr", append([]string{"--address", e.ctrSock, "--namespace", ns}, args...)...)
}

// ctrRun is `ctr run` with binary (warden or a wrapper) as the runc
// binary.
func (e *engines) ctrRun(t testing.TB, binary string, flags []string, id string, argv ...string) sandboxResult {
	t.Helper()
	args := append([]string{"run", "--runtime", "io.containerd.runc.v2", "--runc-binary", binary, "--runc-root", e.runcRoot}, flags...)
	args = append(append(args, busyboxRef, id), argv...)
	return e.ctr(t, args...)
}

func (e *engines) docker(t testing.TB, args ...string) sandboxResult {
	t.Helper()
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=" + e.dir, "DOCKER_CONFIG=" + filepath.Join(e.dir, "docker-client")}
	return runTB(t, env, "/usr/bin/docker", append([]string{"-H", "unix://" + e.dockerSock}, args...)...)
}

func (e *engines) dockerQuiet(t testing.TB, args ...string) string {
	return strings.TrimSpace(e.docker(t, args...).Stdout)
}

// buildImage writes a one-layer busybox image (from the host's
// busybox-static, plus the seccomp probe) as one tar holding an OCI image
// layout and a docker-archive manifest.json, loadable by both `ctr image
// import` and `docker load`.
func buildImage(t testing.TB, dir string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	busybox, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatalf("busybox-static: %v (run `make deps`)", err)
	}
	probe := filepath.Join(dir, "probe")
	if out, err := exec.Command("gcc", "-static", "-O1", "-o", probe, "testdata/seccomp_probe.c").CombinedOutput(); err != nil {
		t.Fatalf("building the seccomp probe: %v\n%s", err, out)
	}
	probeData, err := os.ReadFile(probe)
	if err != nil {
		t.Fatal(err)
	}
	applets, err := exec.Command("/bin/busybox", "--list").Output()
	if err != nil {
		t.Fatal(err)
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	add := func(h *tar.Header, data []byte) {
		h.ModTime = time.Unix(0, 0)
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(data))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if len(data) > 0 {
			tw.Write(data)
		}
	}
	for _, d := range []string{"bin", "dev", "etc", "proc", "sys", "tmp", "root", "var", "work"} {
		mode := int64(0o755)
		if d == "tmp" {
			mode = 0o1777
		}
		add(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: mode}, nil)
	}
	add(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755}, busybox)
	add(&tar.Header{Name: "bin/probe", Typeflag: tar.TypeReg, Mode: 0o755}, probeData)
	for _, a := range strings.Fields(string(applets)) {
		if a != "busybox" {
			add(&tar.Header{Name: "bin/" + a, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777}, nil)
		}
	}
	add(&tar.Header{Name: "etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644}, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"))
	add(&tar.Header{Name: "etc/group", Typeflag: tar.TypeReg, Mode: 0o644}, []byte("root:x:0:\nnobody:x:65534:\n"))
	tw.Close()

	blobs := map[string][]byte{}
	put := func(data []byte) string {
		sum := sha256.Sum256(data)
		d := hex.EncodeToString(sum[:])
		blobs[d] = data
		return d
	}
	layerDigest := put(layer.Bytes())
	config, _ := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config":  map[string]any{"Env": []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, "Cmd": []string{"sh"}},
		"rootfs":  map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + layerDigest}},
		"history": []map[string]any{{"created_by": "warden integration test"}},
	})
	configDigest := put(config)
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": "sha256:" + configDigest, "size": len(config)},
		"layers": []map[string]any{{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": "sha256:" + layerDigest, "size": layer.Len()}},
	})
	manifestDigest := put(manifest)
	index, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"manifests": []map[string]any{{
			"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:" + manifestDigest, "size": len(manifest),
			"annotations": map[string]string{"io.containerd.image.name": busyboxRef, "org.opencontainers.image.ref.name": "latest"},
		}},
	})
	dockerManifest, _ := json.Marshal([]map[string]any{{
		"Config": "blobs/sha256/" + configDigest, "RepoTags": []string{"busybox:latest"}, "Layers": []string{"blobs/sha256/" + layerDigest},
	}})
	out := filepath.Join(dir, "busybox.tar")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	iw := tar.NewWriter(f)
	file := func(name string, data []byte) {
		iw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data)), ModTime: time.Unix(0, 0)})
		iw.Write(data)
	}
	file("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	file("index.json", index)
	file("manifest.json", dockerManifest)
	iw.WriteHeader(&tar.Header{Name: "blobs/", Typeflag: tar.TypeDir, Mode: 0o755})
	iw.WriteHeader(&tar.Header{Name: "blobs/sha256/", Typeflag: tar.TypeDir, Mode: 0o755})
	for d, data := range blobs {
		file("blobs/sha256/"+d, data)
	}
	if err := iw.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// stopInReverse ends the daemons a test started, last started first:
// SIGTERM, and SIGKILL after 15 s.
func stopInReverse(procs []*exec.Cmd) {
	for i := len(procs) - 1; i >= 0; i-- {
		p := procs[i]
		p.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			p.Process.Kill()
			<-done
		}
	}
}
