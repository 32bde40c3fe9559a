package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Ways a config.json author tried to get more than the operator's policy
// allows, each with the allowed half (the same container without the
// trick works) and the forbidden half (the trick fails or is refused).

// escapePolicy writes a policy granting grant for writing.
func escapePolicy(t *testing.T, grant string, extra string) string {
	t.Helper()
	path := filepath.Join(tempDir(t), "p.toml")
	text := fmt.Sprintf("name = \"p\"\n[fs]\nwrite = [%q]\n%s", grant, extra)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// A config without process.capabilities (init and exec) gets none under
// a policy, not the runtime's full set; the operator's --cap-allow still
// lets a listed, asked-for capability through.
func TestOCIPolicyNilCapabilities(t *testing.T) {
	o := newOCIEnv(t)
	policy := escapePolicy(t, tempDir(t), "")
	id := "oci-" + randomHex(4)
	b := busyboxBundle(t, id, func(s *specs.Spec) {
		s.Process.Capabilities = nil
		s.Process.Args = []string{"grep", "Cap[EPB]", "/proc/self/status"}
	})
	r := o.warden(t, "--policy", policy, "--cap-allow", "CAP_CHOWN", "run", "--bundle", b, id)
	if r.Exit != 0 || strings.Count(r.Stdout, "0000000000000000") != 3 {
		t.Fatalf("no capabilities object under a policy: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	id2 := "oci-" + randomHex(4)
	if r := o.warden(t, "--policy", policy, "--cap-allow", "CAP_CHOWN", "run", "-d", "--bundle", busyboxBundle(t, id2, nil), id2); r.Exit != 0 {
		t.Fatalf("run -d: %s", r.Stderr)
	}
	dir := tempDir(t)
	for name, caps := range map[string]*specs.LinuxCapabilities{
		"none.json":  nil,
		"chown.json": {Effective: []string{"CAP_CHOWN"}, Permitted: []string{"CAP_CHOWN"}, Bounding: []string{"CAP_CHOWN"}},
	} {
		writeJSON(t, filepath.Join(dir, name), &specs.Process{Args: []string{"grep", "CapEff", "/proc/self/status"}, Cwd: "/", Env: []string{"PATH=/bin"}, Capabilities: caps})
	}
	if r := o.warden(t, "exec", "--process", filepath.Join(dir, "none.json"), id2); r.Exit != 0 || !strings.Contains(r.Stdout, "CapEff:\t0000000000000000") {
		t.Fatalf("exec without capabilities: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	if r := o.warden(t, "exec", "--process", filepath.Join(dir, "chown.json"), id2); r.Exit != 0 || !strings.Contains(r.Stdout, "CapEff:\t0000000000000001") {
		t.Fatalf("exec asking for the allowed CAP_CHOWN: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
}

// Binds and kernel file systems under a policy: the granted folder is
// writable; an ungranted host path (the host's /), a second procfs and a
// trailing "rw" are refused or read-only, and a read-granted folder stays
// read-only down to the mounts beneath it (rro).
func TestOCIPolicyMounts(t *testing.T) {
	o := newOCIEnv(t)
	grant, readable := writableGrant(t), tempDir(t)
	sub := filepath.Join(readable, "sub")
	os.Mkdir(sub, 0o755)
	if r := run(t, nil, "mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", sub); r.Exit != 0 {
		t.Fatalf("mount tmpfs: %s", r.Stderr)
	}
	t.Cleanup(func() { run(t, nil, "umount", sub) })
	policy := escapePolicy(t, grant, fmt.Sprintf("read = [%q]\n", readable))
	script := "echo w > /work/f && echo granted; echo x > /r/f || echo read-refused; echo x > /r/sub/f || echo submount-refused; cat /r/sub/seen"
	os.WriteFile(filepath.Join(sub, "seen"), []byte("seen-below\n"), 0o644)
	id := "oci-" + randomHex(4)
	b := busyboxBundle(t, id, func(s *specs.Spec) {
		s.Process.Args = []string{"sh", "-c", script}
		s.Mounts = append(s.Mounts,
			specs.Mount{Destination: "/work", Type: "bind", Source: grant, Options: []string{"rbind", "rw"}},
			specs.Mount{Destination: "/r", Type: "bind", Source: readable, Options: []string{"rbind", "ro", "rw", "rrw"}})
	})
	r := o.warden(t, "--policy", policy, "run", "--bundle", b, id)
	for _, want := range []string{"granted", "read-refused", "submount-refused", "seen-below"} {
		if !strings.Contains(r.Stdout, want) {
			t.Fatalf("under a policy: %q missing: exit %d, %q %q", want, r.Exit, r.Stdout, r.Stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(sub, "f")); err == nil {
		t.Fatal("a write below a read-only bind reached the host")
	}
	for name, tc := range map[string]struct {
		m    specs.Mount
		want string
	}{
		"host root":     {specs.Mount{Destination: "/host", Type: "bind", Source: "/", Options: []string{"rbind", "rprivate"}}, "grants no access"},
		"second procfs": {specs.Mount{Destination: "/mnt", Type: "proc", Source: "proc"}, "only the one at /proc"},
	} {
		id := "oci-" + randomHex(4)
		b := busyboxBundle(t, id, func(s *specs.Spec) {
			s.Process.Args = []string{"true"}
			s.Mounts = append(s.Mounts, tc.m)
		})
		if r := o.warden(t, "--policy", policy, "run", "--bundle", b, id); r.Exit != 125 || !strings.Contains(r.Stderr, tc.want) {
			t.Errorf("%s under a policy: exit %d, %q, want 125 and %q", name, r.Exit, r.Stderr, tc.want)
		}
		o.warden(t, "delete", "--force", id)
	}
}

// With a policy directory but no --policy, a container that selects no
// policy runs under the directory's default.toml; without one it is
// refused unless the operator passes --allow-unconfined.
func TestOCIPolicyDirFailsClosed(t *testing.T) {
	o := newOCIEnv(t)
	dir := tempDir(t)
	os.WriteFile(filepath.Join(dir, "tiny.toml"), []byte("name = \"tiny\"\n"), 0o644)
	mk := func(id string) string {
		return busyboxBundle(t, id, func(s *specs.Spec) { s.Process.Args = []string{"grep", "CapEff", "/proc/self/status"} })
	}
	id := "oci-" + randomHex(4)
	if r := o.warden(t, "--policy-dir", dir, "run", "--bundle", mk(id), id); r.Exit != 125 || !strings.Contains(r.Stderr, "no policy for this container") {
		t.Fatalf("no annotation, no default.toml: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	o.warden(t, "delete", "--force", id)
	id = "oci-" + randomHex(4)
	if r := o.warden(t, "--policy-dir", dir, "--allow-unconfined", "run", "--bundle", mk(id), id); r.Exit != 0 || strings.Contains(r.Stdout, "CapEff:\t0000000000000000") {
		t.Fatalf("--allow-unconfined: the container should run as configured: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	os.WriteFile(filepath.Join(dir, "default.toml"), []byte("name = \"default\"\n"), 0o644)
	id = "oci-" + randomHex(4)
	if r := o.warden(t, "--policy-dir", dir, "--allow-unconfined", "run", "--bundle", mk(id), id); r.Exit != 0 || !strings.Contains(r.Stdout, "CapEff:\t0000000000000000") {
		t.Fatalf("with default.toml the container runs under it: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	id = "oci-" + randomHex(4)
	if r := o.warden(t, "--policy-dir", dir, "run", "-d", "--bundle", mk(id), id); r.Exit != 0 {
		t.Fatalf("run -d under default.toml: %s", r.Stderr)
	}
	if st := o.state(t, id); st.Policy != "default" {
		t.Fatalf("state names policy %q, want default", st.Policy)
	}
}

// A policy that allows network still gives the container its own network
// namespace (a config without one would share the host's), and host
// network devices (linux.netDevices) cannot be moved in: the host keeps
// its interface.
func TestOCIPolicyNetwork(t *testing.T) {
	o := newOCIEnv(t)
	policy := escapePolicy(t, tempDir(t), "[network]\nallow = [\"example.com:443\"]\n")
	dummy := "wd" + randomHex(4)
	if r := run(t, nil, "ip", "link", "add", dummy, "type", "veth", "peer", "name", dummy+"p"); r.Exit != 0 {
		t.Fatalf("ip link add: %s", r.Stderr)
	}
	t.Cleanup(func() { run(t, nil, "ip", "link", "del", dummy) })
	hostNet := func(s *specs.Spec) {
		s.Process.Args = []string{"ls", "/sys/class/net"}
		s.Linux.Namespaces = slices.DeleteFunc(s.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == specs.NetworkNamespace })
	}
	// Without a policy (warden as runc) the config shares the host's
	// network and sees the dummy interface; under the policy it does not.
	id := "oci-" + randomHex(4)
	if r := o.warden(t, "run", "--bundle", busyboxBundle(t, id, hostNet), id); r.Exit != 0 || !strings.Contains(r.Stdout, dummy) {
		t.Fatalf("host network without a policy: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	id = "oci-" + randomHex(4)
	if r := o.warden(t, "--policy", policy, "run", "--bundle", busyboxBundle(t, id, hostNet), id); r.Exit != 0 || strings.Contains(r.Stdout, dummy) || strings.TrimSpace(r.Stdout) != "lo" {
		t.Fatalf("host network under a policy allowing network: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	id = "oci-" + randomHex(4)
	b := busyboxBundle(t, id, func(s *specs.Spec) {
		s.Process.Args = []string{"true"}
		s.Linux.NetDevices = map[string]specs.LinuxNetDevice{dummy: {}}
	})
	if r := o.warden(t, "--policy", policy, "run", "--bundle", b, id); r.Exit != 125 || !strings.Contains(r.Stderr, "netDevices") {
		t.Fatalf("netDevices under a policy: exit %d, %q", r.Exit, r.Stderr)
	}
	o.warden(t, "delete", "--force", id)
	if r := run(t, nil, "ip", "link", "show", dummy); r.Exit != 0 {
		t.Fatalf("the host's %s is gone: %s", dummy, r.Stderr)
	}
}

// A relative bind source is the bundle's (runc runs from the bundle): the
// policy checks that folder, not the one the same path names from where
// warden was started. Here "../NAME" from warden's directory is a granted
// folder, while from the bundle it is a denied one.
func TestOCIPolicyRelativeBindSource(t *testing.T) {
	o := newOCIEnv(t)
	id := "oci-" + randomHex(4)
	var b string
	name := "sec-" + randomHex(4)
	b = busyboxBundle(t, id, func(s *specs.Spec) {
		s.Process.Args = []string{"cat", "/m/file"}
		s.Mounts = append(s.Mounts, specs.Mount{Destination: "/m", Type: "bind", Source: "../" + name, Options: []string{"rbind"}})
	})
	denied := filepath.Join(filepath.Dir(b), name)
	granted := tempDir(t)
	cwd := filepath.Join(granted, "cwd")
	for _, d := range []string{denied, filepath.Join(granted, name), cwd} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(denied, "file"), []byte("SECRET\n"), 0o644)
	os.WriteFile(filepath.Join(granted, name, "file"), []byte("granted\n"), 0o644)
	policy := escapePolicy(t, tempDir(t), fmt.Sprintf("read = [%q]\ndeny = [%q]\n", granted, denied))
	wardenFrom := func(dir string, args ...string) sandboxResult {
		quoted := make([]string, len(args))
		for i, a := range args {
			quoted[i] = "'" + a + "'"
		}
		return run(t, nil, "sh", "-c", fmt.Sprintf("cd %s && exec %s --root %s %s", dir, wardenBinary, o.root, strings.Join(quoted, " ")))
	}
	r := wardenFrom(cwd, "--policy", policy, "run", "--bundle", b, id)
	if r.Exit != 125 || strings.Contains(r.Stdout, "SECRET") || !strings.Contains(r.Stderr, "denies") {
		t.Fatalf("relative source naming a denied folder: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	o.warden(t, "delete", "--force", id)
	// The allowed half: once the bundle's folder is the granted one, the
	// same relative bind works and shows the bundle's neighbour.
	os.WriteFile(filepath.Join(denied, "file"), []byte("neighbour\n"), 0o644)
	policy2 := escapePolicy(t, tempDir(t), fmt.Sprintf("read = [%q]\n", denied))
	id2 := "oci-" + randomHex(4)
	b2 := filepath.Join(filepath.Dir(b), "b2")
	if r := run(t, nil, "cp", "-a", b, b2); r.Exit != 0 {
		t.Fatal(r.Stderr)
	}
	var s specs.Spec
	readJSON(t, filepath.Join(b2, "config.json"), &s)
	s.Linux.CgroupsPath = ociCgroupParent + "/" + id2
	writeJSON(t, filepath.Join(b2, "config.json"), &s)
	if r := wardenFrom(cwd, "--policy", policy2, "run", "--bundle", b2, id2); r.Exit != 0 || strings.TrimSpace(r.Stdout) != "neighbour" {
		t.Fatalf("relative source naming a granted folder: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
}

// Under a policy a config asking for SCHED_FIFO, a negative OOM score
// and a real-time rlimit gets an ordinary process; ordinary requests
// (SCHED_BATCH with nice 5, a positive OOM score, RLIMIT_NOFILE) hold.
func TestOCIPolicyScheduling(t *testing.T) {
	o := newOCIEnv(t)
	policy := escapePolicy(t, tempDir(t), "")
	script := `grep ^policy /proc/self/sched; echo oom $(cat /proc/self/oom_score_adj); grep -e "realtime priority" -e "open files" -e "pending signals" -e "msgqueue" /proc/self/limits; cut -d" " -f19 /proc/self/stat`
	id := "oci-" + randomHex(4)
	b := busyboxBundle(t, id, func(s *specs.Spec) {
		adj := -500
		s.Process.Args = []string{"sh", "-c", script}
		s.Process.Scheduler = &specs.Scheduler{Policy: specs.SchedFIFO, Priority: 10}
		s.Process.OOMScoreAdj = &adj
		s.Process.Rlimits = []specs.POSIXRlimit{{Type: "RLIMIT_RTPRIO", Hard: 99, Soft: 99}, {Type: "RLIMIT_NOFILE", Hard: 512, Soft: 512},
			{Type: "RLIMIT_SIGPENDING", Hard: 50000, Soft: 50000}}
	})
	r := o.warden(t, "--policy", policy, "run", "--bundle", b, id)
	// Pending signals and message queue bytes are counted per host user
	// (here host root): lowered when asked for, set when absent.
	if r.Exit != 0 || !strings.Contains(r.Stdout, "policy") || strings.Contains(r.Stdout, ":                    1") ||
		!strings.Contains(r.Stdout, "oom 0") || !strings.Contains(r.Stdout, "Max open files            512                  512") ||
		!strings.Contains(r.Stdout, "Max pending signals       1024                 1024") ||
		!strings.Contains(r.Stdout, "Max msgqueue size         204800               204800") ||
		!strings.Contains(r.Stdout, "Max realtime priority     0                    0") {
		t.Fatalf("real-time asked for under a policy: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	id = "oci-" + randomHex(4)
	b = busyboxBundle(t, id, func(s *specs.Spec) {
		adj := 300
		s.Process.Args = []string{"sh", "-c", script}
		s.Process.Scheduler = &specs.Scheduler{Policy: specs.SchedBatch, Nice: 5}
		s.Process.OOMScoreAdj = &adj
	})
	r = o.warden(t, "--policy", policy, "run", "--bundle", b, id)
	if r.Exit != 0 || !strings.Contains(r.Stdout, ":                    3") || !strings.Contains(r.Stdout, "oom 300") || !strings.HasSuffix(strings.TrimSpace(r.Stdout), "\n5") {
		t.Fatalf("batch scheduling under a policy: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
}

// Under a policy /proc is read-only as in a session: no writing a
// process's memory through /proc/PID/mem, no pressure triggers, and
// /proc/slabinfo is masked; reading /proc and the config's sysctls (which
// docker sets) still work, in the init and in an exec. Without a policy
// the same container can open them for writing.
func TestOCIPolicyProcReadOnly(t *testing.T) {
	o := newOCIEnv(t)
	policy := escapePolicy(t, tempDir(t), "")
	script := `echo x 2>&1 >/proc/self/mem | grep -o "Read-only file system" | sed s/^/mem:/;
echo "some 500000 1000000" 2>&1 >/proc/pressure/cpu | grep -o "Read-only file system" | sed s/^/pressure:/;
echo slab $(cat /proc/slabinfo 2>/dev/null | grep -c .);
grep -q "^some" /proc/pressure/cpu && echo pressure-readable; grep -q ^Name /proc/self/status && echo status-readable;
echo port $(cat /proc/sys/net/ipv4/ip_unprivileged_port_start)`
	mk := func(id string) string {
		return busyboxBundle(t, id, func(s *specs.Spec) {
			s.Process.Args = []string{"sh", "-c", script}
			s.Linux.Sysctl = map[string]string{"net.ipv4.ip_unprivileged_port_start": "0"}
		})
	}
	id := "oci-" + randomHex(4)
	r := o.warden(t, "run", "--bundle", mk(id), id)
	if r.Exit != 0 || strings.Contains(r.Stdout, "mem:") || strings.Contains(r.Stdout, "pressure:") || strings.Contains(r.Stdout, "slab 0") {
		t.Fatalf("without a policy /proc is writable and slabinfo readable: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	want := []string{"mem:Read-only file system", "pressure:Read-only file system", "slab 0", "pressure-readable", "status-readable", "port 0"}
	check := func(what string, r sandboxResult) {
		t.Helper()
		for _, w := range want {
			if r.Exit != 0 || !strings.Contains(r.Stdout, w+"\n") {
				t.Fatalf("%s under a policy: want %q; exit %d, %q %q", what, w, r.Exit, r.Stdout, r.Stderr)
			}
		}
	}
	id = "oci-" + randomHex(4)
	check("run", o.warden(t, "--policy", policy, "run", "--bundle", mk(id), id))
	id = "oci-" + randomHex(4)
	b := busyboxBundle(t, id, func(s *specs.Spec) { s.Linux.Sysctl = map[string]string{"net.ipv4.ip_unprivileged_port_start": "0"} })
	if r := o.warden(t, "--policy", policy, "run", "-d", "--bundle", b, id); r.Exit != 0 {
		t.Fatalf("run -d: %s", r.Stderr)
	}
	check("exec", o.warden(t, "exec", id, "sh", "-c", script))
}

// A config asking for shared root propagation gets a slave root under a
// policy: mounts made in the container cannot reach the host.
func TestOCIPolicyPropagation(t *testing.T) {
	o := newOCIEnv(t)
	policy := escapePolicy(t, tempDir(t), "")
	mk := func(id string) string {
		return busyboxBundle(t, id, func(s *specs.Spec) {
			s.Process.Args = []string{"busybox", "awk", "$5 == \"/\"", "/proc/self/mountinfo"}
			s.Linux.RootfsPropagation = "rshared"
		})
	}
	id := "oci-" + randomHex(4)
	r := o.warden(t, "run", "--bundle", mk(id), id)
	if r.Exit != 0 || !strings.Contains(r.Stdout, "shared:") {
		t.Fatalf("without a policy the root is shared as asked: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	id = "oci-" + randomHex(4)
	r = o.warden(t, "--policy", policy, "run", "--bundle", mk(id), id)
	if r.Exit != 0 || strings.Contains(r.Stdout, "shared:") {
		t.Fatalf("under a policy the root must not be shared: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
}

// A config's hooks run as root on the host: under a policy a hook whose
// program the operator did not list (--hook-allow) refuses the container
// and does not run; a listed one runs.
func TestOCIPolicyHooks(t *testing.T) {
	o := newOCIEnv(t)
	policy := escapePolicy(t, tempDir(t), "")
	marker := filepath.Join(tempDir(t), "hook-ran")
	sh, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	mk := func(id string) string {
		return busyboxBundle(t, id, func(s *specs.Spec) {
			s.Process.Args = []string{"true"}
			s.Hooks = &specs.Hooks{CreateRuntime: []specs.Hook{{Path: "/bin/sh", Args: []string{"sh", "-c", "echo ran >> " + marker}}}}
		})
	}
	id := "oci-" + randomHex(4)
	if r := o.warden(t, "--policy", policy, "run", "--bundle", mk(id), id); r.Exit != 125 || !strings.Contains(r.Stderr, "hook-allow") {
		t.Fatalf("unlisted hook under a policy: exit %d, %q", r.Exit, r.Stderr)
	}
	o.warden(t, "delete", "--force", id)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the refused hook ran on the host")
	}
	id = "oci-" + randomHex(4)
	if r := o.warden(t, "--policy", policy, "--hook-allow", sh, "run", "--bundle", mk(id), id); r.Exit != 0 {
		t.Fatalf("hook listed by --hook-allow: exit %d, %q", r.Exit, r.Stderr)
	}
	if data, err := os.ReadFile(marker); err != nil || string(data) != "ran\n" {
		t.Fatalf("the allowed hook did not run: %q %v", data, err)
	}
}

// A container under a policy may not join an existing cgroup (a host
// service's, another container's): libcontainer would write the policy's
// limits over that cgroup's. A new cgroup of its own works.
func TestOCIPolicyExistingCgroup(t *testing.T) {
	o := newOCIEnv(t)
	policy := escapePolicy(t, tempDir(t), "")
	existing := ociCgroupParent + "/exists-" + randomHex(4)
	dir := filepath.Join("/sys/fs/cgroup/pids", existing)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	os.WriteFile(filepath.Join(dir, "pids.max"), []byte("1234"), 0o644)
	id := "oci-" + randomHex(4)
	b := busyboxBundle(t, id, func(s *specs.Spec) {
		s.Process.Args = []string{"true"}
		s.Linux.CgroupsPath = existing
	})
	if r := o.warden(t, "--policy", policy, "run", "--bundle", b, id); r.Exit != 125 || !strings.Contains(r.Stderr, "exists already") {
		t.Fatalf("existing cgroup under a policy: exit %d, %q", r.Exit, r.Stderr)
	}
	o.warden(t, "delete", "--force", id)
	if data, _ := os.ReadFile(filepath.Join(dir, "pids.max")); strings.TrimSpace(string(data)) != "1234" {
		t.Fatalf("the existing cgroup's pids.max changed: %q", data)
	}
	id = "oci-" + randomHex(4)
	if r := o.warden(t, "--policy", policy, "run", "--bundle", busyboxBundle(t, id, func(s *specs.Spec) { s.Process.Args = []string{"true"} }), id); r.Exit != 0 {
		t.Fatalf("a new cgroup under a policy: exit %d, %q", r.Exit, r.Stderr)
	}
}

// root.path naming the host's / is refused under a policy (the bundle's
// own root works, as every other test here shows).
func TestOCIPolicyHostRootfs(t *testing.T) {
	o := newOCIEnv(t)
	policy := escapePolicy(t, tempDir(t), "")
	id := "oci-" + randomHex(4)
	b := busyboxBundle(t, id, func(s *specs.Spec) {
		s.Root.Path = "/"
		s.Process.Args = []string{"cat", "/etc/shadow"}
	})
	if r := o.warden(t, "--policy", policy, "run", "--bundle", b, id); r.Exit != 125 || !strings.Contains(r.Stderr, "host's own root") || r.Stdout != "" {
		t.Fatalf("root.path / under a policy: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	o.warden(t, "delete", "--force", id)
	id = "oci-" + randomHex(4)
	if r := o.warden(t, "--policy", policy, "run", "--bundle", busyboxBundle(t, id, func(s *specs.Spec) { s.Process.Args = []string{"true"} }), id); r.Exit != 0 {
		t.Fatalf("the bundle's own root: exit %d, %q", r.Exit, r.Stderr)
	}
}

// The operator's --bind-allow lets an ungranted host folder be bound,
// read-only; without it the same bind is refused.
func TestOCIPolicyBindAllow(t *testing.T) {
	o := newOCIEnv(t)
	policy := escapePolicy(t, tempDir(t), "")
	extra := tempDir(t)
	os.WriteFile(filepath.Join(extra, "f"), []byte("extra\n"), 0o644)
	mk := func(id string) string {
		return busyboxBundle(t, id, func(s *specs.Spec) {
			s.Process.Args = []string{"sh", "-c", "cat /x/f; echo no > /x/f || echo write-refused"}
			s.Mounts = append(s.Mounts, specs.Mount{Destination: "/x", Type: "bind", Source: extra, Options: []string{"rbind", "rw"}})
		})
	}
	id := "oci-" + randomHex(4)
	if r := o.warden(t, "--policy", policy, "run", "--bundle", mk(id), id); r.Exit != 125 || !strings.Contains(r.Stderr, "grants no access") {
		t.Fatalf("ungranted bind without --bind-allow: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	o.warden(t, "delete", "--force", id)
	id = "oci-" + randomHex(4)
	r := o.warden(t, "--policy", policy, "--bind-allow", filepath.Dir(extra)+"/*", "run", "--bundle", mk(id), id)
	if r.Exit != 0 || !strings.Contains(r.Stdout, "extra") || !strings.Contains(r.Stdout, "write-refused") {
		t.Fatalf("bind listed by --bind-allow: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	if data, _ := os.ReadFile(filepath.Join(extra, "f")); string(data) != "extra\n" {
		t.Fatalf("the allowed read-only bind was written: %q", data)
	}
}
