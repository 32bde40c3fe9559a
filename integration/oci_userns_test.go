package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Under a policy a container whose config has no user namespace gets one
// (runtime/oci/userns.go): inside, its root still does what an image's
// root needs (its files are root's, runc makes missing mountpoints in the
// image as root on disk, chown within its ids works, with CAP_CHOWN); from the host its
// processes run as an unprivileged uid of its own, a write through a
// (mistaken) write grant lands as that uid, a root-only host file stays
// unreadable, and the host is as before once it is deleted.
func TestOCIPolicyUserNamespace(t *testing.T) {
	o := newOCIEnv(t)
	open, closed, secret := tempDir(t), tempDir(t), tempDir(t)
	if err := os.Chmod(open, 0o1777); err != nil { // a grant anyone may write
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secret, "shadow"), []byte("root only\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	policy := filepath.Join(tempDir(t), "p.toml")
	text := fmt.Sprintf("name = \"p\"\n[fs]\nwrite = [%q, %q]\nread = [%q]\n", open, closed, secret)
	if err := os.WriteFile(policy, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	script := strings.Join([]string{
		"id -u; id -g",
		"ls -ln /bin/busybox",
		"echo w > /open/f && echo open-written",
		"echo w > /closed/f || echo closed-refused",
		"cat /secret/shadow || echo secret-refused",
		"echo x > /tmp/x && chown 1000:1000 /tmp/x && ls -ln /tmp/x",
		"chown 70000 /tmp/x || echo unmapped-refused",
		"echo script-done",
		"sleep 300",
	}, "; ")
	id := "userns-" + randomHex(4)
	bundle := busyboxBundle(t, id, func(s *specs.Spec) {
		s.Process.Args = []string{"sh", "-c", script}
		c := s.Process.Capabilities
		c.Bounding, c.Effective, c.Permitted = append(c.Bounding, "CAP_CHOWN"), append(c.Effective, "CAP_CHOWN"), append(c.Permitted, "CAP_CHOWN")
		s.Mounts = append(s.Mounts,
			specs.Mount{Destination: "/open", Type: "bind", Source: open, Options: []string{"rbind", "rw"}},
			specs.Mount{Destination: "/closed", Type: "bind", Source: closed, Options: []string{"rbind", "rw"}},
			// No such folder in the image: runc makes it in the root
			// file system, as the container's root.
			specs.Mount{Destination: "/secret", Type: "bind", Source: secret, Options: []string{"rbind", "ro"}})
	})
	rootfs := filepath.Join(bundle, "rootfs")
	out := filepath.Join(tempDir(t), "out")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Detached, the container writes to warden's stdout: a file here.
	cmd := exec.Command(wardenBinary, "--root", o.root, "--policy", policy, "--cap-allow", "CAP_CHOWN", "run", "-d", "--bundle", bundle, id)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Run(); err != nil {
		data, _ := os.ReadFile(out)
		t.Fatalf("run under policy: %v %s", err, data)
	}
	waitFor(t, 10*time.Second, "the container's script", func() bool {
		data, _ := os.ReadFile(out)
		return strings.Contains(string(data), "script-done")
	})
	data, _ := os.ReadFile(out)
	got := string(data)
	for _, want := range []string{"0\n0\n", " 0        0 ", "open-written", "closed-refused", "secret-refused", " 1000     1000 ", "unmapped-refused"} {
		if !strings.Contains(got, want) {
			t.Errorf("inside: want %q in:\n%s", want, got)
		}
	}
	// From the host: an unprivileged uid and gid, holding only CAP_CHOWN,
	// which counts in its own user namespace only.
	pid := o.state(t, id).Pid
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	uid := field(string(status), "Uid:")
	if len(uid) != 4 || uid[0] != uid[3] || uid[0] == "0" {
		t.Fatalf("host uid of the container's root: %v", uid)
	}
	hostUID, _ := strconv.Atoi(uid[0])
	if hostUID < 3_145_728 || field(string(status), "Gid:")[0] != uid[0] || field(string(status), "CapEff:")[0] != "0000000000000001" {
		t.Fatalf("host identity: %s", status)
	}
	// The write through the grant belongs to that uid on the host; the
	// folder only root may write is unchanged.
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(open, "f"), &st); err != nil || int(st.Uid) != hostUID || int(st.Gid) != hostUID {
		t.Fatalf("the grant's file on the host: %v uid %d gid %d, want %d", err, st.Uid, st.Gid, hostUID)
	}
	if _, err := os.Stat(filepath.Join(closed, "f")); err == nil {
		t.Fatal("a root-only grant was written")
	}
	// The mountpoint runc made in the image is root's on disk.
	if err := syscall.Stat(filepath.Join(rootfs, "secret"), &st); err != nil || st.Uid != 0 || st.Gid != 0 {
		t.Fatalf("mountpoint made in the image: %v uid %d gid %d, want root's", err, st.Uid, st.Gid)
	}
	// A second container gets other ids.
	id2 := "userns-" + randomHex(4)
	if r := o.warden(t, "--policy", policy, "run", "-d", "--bundle", busyboxBundle(t, id2, nil), id2); r.Exit != 0 {
		t.Fatalf("second container: %s", r.Stderr)
	}
	status2, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", o.state(t, id2).Pid))
	if u2 := field(string(status2), "Uid:"); len(u2) == 0 || u2[0] == uid[0] || u2[0] == "0" {
		t.Fatalf("second container's host uid %v (first %s)", u2, uid[0])
	}
	// Without a policy the container runs as configured (runc's way).
	id3 := "plain-" + randomHex(4)
	if r := o.warden(t, "run", "-d", "--bundle", busyboxBundle(t, id3, nil), id3); r.Exit != 0 {
		t.Fatalf("without a policy: %s", r.Stderr)
	}
	status3, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", o.state(t, id3).Pid))
	if u3 := field(string(status3), "Uid:"); len(u3) == 0 || u3[0] != "0" {
		t.Fatalf("without a policy the container's root is host root, got %v", u3)
	}
	// Deleted, nothing of its user namespace is left: no lease, no mount;
	// nor after a run in the foreground, which frees them itself.
	for _, c := range []string{id, id2, id3} {
		if r := o.warden(t, "delete", "--force", c); r.Exit != 0 {
			t.Fatalf("delete %s: %s", c, r.Stderr)
		}
	}
	// Refused by the policy after its root was checked (and, meanwhile,
	// mounted id-mapped): nothing is left either.
	id5 := "userns-refused-" + randomHex(4)
	bundle5 := busyboxBundle(t, id5, func(s *specs.Spec) {
		s.Mounts = append(s.Mounts, specs.Mount{Destination: "/host-root", Type: "bind", Source: "/root", Options: []string{"rbind", "ro"}})
	})
	if r := o.warden(t, "--policy", policy, "run", "--bundle", bundle5, id5); r.Exit == 0 || !strings.Contains(r.Stderr, "/root") {
		t.Fatalf("a bind of /root the policy does not grant: exit %d, %s", r.Exit, r.Stderr)
	}
	id4 := "userns-" + randomHex(4)
	bundle4 := busyboxBundle(t, id4, func(s *specs.Spec) { s.Process.Args = []string{"sh", "-c", "ls -ln /bin/busybox"} })
	if r := o.warden(t, "--policy", policy, "run", "--bundle", bundle4, id4); r.Exit != 0 || !strings.Contains(r.Stdout, " 0 ") {
		t.Fatalf("a run in the foreground: exit %d %q %s", r.Exit, r.Stdout, r.Stderr)
	}
	if ents, _ := os.ReadDir(filepath.Join(o.root, "userns")); len(ents) != 0 {
		t.Errorf("user namespace leases left: %d", len(ents))
	}
	if ents, _ := os.ReadDir(filepath.Join(o.root, "idroot")); len(ents) != 0 {
		t.Errorf("id-mapped roots left: %d", len(ents))
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), o.root) {
		t.Errorf("mounts left under the state root:\n%s", mi)
	}
	if ents, _ := os.ReadDir(closed); len(ents) != 0 {
		t.Errorf("the root-only grant changed: %d entries", len(ents))
	}
}

// field returns the fields after a "Name:" line of a /proc status file.
func field(status, name string) []string {
	for _, l := range strings.Split(status, "\n") {
		if rest, ok := strings.CutPrefix(l, name); ok {
			return strings.Fields(rest)
		}
	}
	return nil
}

// writableGrant is a folder for a policy's write grant that a container's
// root, an unprivileged host uid under a policy, may write.
func writableGrant(t *testing.T) string {
	t.Helper()
	d := tempDir(t)
	if err := os.Chmod(d, 0o1777); err != nil {
		t.Fatal(err)
	}
	return d
}

// Where the root file system cannot be id-mapped (here a ramfs, which the
// kernel does not id-map), the container runs as before, as the host's
// root without capabilities, and warden says so; `warden install` tells
// the operator when the host cannot do it at all (tried in $TMPDIR) and
// what to use instead.
func TestOCIPolicyUserNamespaceUnavailable(t *testing.T) {
	o := newOCIEnv(t)
	policy := filepath.Join(tempDir(t), "p.toml")
	if err := os.WriteFile(policy, []byte("name = \"p\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ramfs := func() string {
		d := tempDir(t)
		if r := run(t, nil, "mount", "-t", "ramfs", "-o", "mode=755", "ramfs", d); r.Exit != 0 {
			t.Fatalf("mount ramfs: %s", r.Stderr)
		}
		t.Cleanup(func() { run(t, nil, "umount", d) })
		return d
	}
	id := "noidmap-" + randomHex(4)
	bundle := busyboxBundle(t, id, func(s *specs.Spec) { s.Process.Args = []string{"sh", "-c", "id -u; grep Uid /proc/self/status"} })
	rootfs := filepath.Join(bundle, "rootfs")
	onRamfs := ramfs()
	if r := run(t, nil, "cp", "-a", rootfs+"/.", onRamfs); r.Exit != 0 {
		t.Fatalf("cp: %s", r.Stderr)
	}
	// The root stays in the bundle (a policy refuses a host folder).
	if r := run(t, nil, "mount", "--bind", onRamfs, rootfs); r.Exit != 0 {
		t.Fatalf("bind: %s", r.Stderr)
	}
	t.Cleanup(func() { run(t, nil, "umount", rootfs) })
	r := o.warden(t, "--policy", policy, "run", "--bundle", bundle, id)
	if r.Exit != 0 || !strings.Contains(r.Stdout, "Uid:\t0\t0\t0\t0") || !strings.Contains(r.Stderr, "runs without a user namespace") {
		t.Fatalf("a root that cannot be id-mapped: exit %d %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	if ents, _ := os.ReadDir(filepath.Join(o.root, "userns")); len(ents) != 0 {
		t.Errorf("user namespace leases left: %d", len(ents))
	}
	// install: a host that can (this one, in the usual $TMPDIR) and one
	// that cannot (a ramfs $TMPDIR).
	daemonJSON := filepath.Join(tempDir(t), "daemon.json")
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}
	res := runWarden(t, env, "--policy", policy, "install", "docker", "--config", daemonJSON, "--dry-run")
	if res.Exit != 0 || !strings.Contains(res.Stderr, "run in a user namespace of their own") {
		t.Fatalf("install on a host that gives user namespaces: exit %d %q", res.Exit, res.Stderr)
	}
	res = runWarden(t, append(env, "TMPDIR="+ramfs()), "--policy", policy, "install", "docker", "--config", daemonJSON, "--dry-run")
	if res.Exit != 0 || !strings.Contains(res.Stderr, "cannot give containers a user namespace") || !strings.Contains(res.Stderr, "--engine gvisor") || !strings.Contains(res.Stderr, "userns-remap") {
		t.Fatalf("install where the root cannot be id-mapped: exit %d %q", res.Exit, res.Stderr)
	}
	if _, err := os.Stat(daemonJSON); err == nil {
		t.Fatal("install --dry-run wrote the engine's config")
	}
}

// A Kubernetes pod under a policy (containerd CRI's configs, in short):
// its sandbox joins the network namespace CNI made, which belongs to the
// host's user namespace, where the kernel refuses a new sysfs: it gets a
// user namespace of its own and /sys is a read-only bind of the host's.
// The pod's container joins the sandbox's namespaces and with them its
// user namespace: both run as the same unprivileged host uid.
func TestOCIPolicyUserNamespacePod(t *testing.T) {
	o := newOCIEnv(t)
	policy := filepath.Join(tempDir(t), "p.toml")
	if err := os.WriteFile(policy, []byte("name = \"p\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	netns := "cni-warden-test-" + randomHex(4)
	if r := run(t, nil, "ip", "netns", "add", netns); r.Exit != 0 {
		t.Fatalf("ip netns add: %s", r.Stderr)
	}
	defer run(t, nil, "ip", "netns", "del", netns)
	sb := "sandbox" + randomHex(8)
	bundle := busyboxBundle(t, sb, func(s *specs.Spec) {
		s.Annotations = map[string]string{"io.kubernetes.cri.container-type": "sandbox"}
		for i := range s.Linux.Namespaces {
			if s.Linux.Namespaces[i].Type == specs.NetworkNamespace {
				s.Linux.Namespaces[i].Path = "/run/netns/" + netns
			}
		}
	})
	if r := o.warden(t, "--policy", policy, "run", "-d", "--bundle", bundle, sb); r.Exit != 0 {
		t.Fatalf("pod sandbox: %s", r.Stderr)
	}
	pid := o.state(t, sb).Pid
	uidOf := func(pid int) string {
		status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if u := field(string(status), "Uid:"); len(u) > 0 {
			return u[0]
		}
		return ""
	}
	sbUID := uidOf(pid)
	if sbUID == "" || sbUID == "0" {
		t.Fatalf("pod sandbox's host uid %q", sbUID)
	}
	ctr := "container" + randomHex(8)
	bundle = busyboxBundle(t, ctr, func(s *specs.Spec) {
		s.Annotations = map[string]string{"io.kubernetes.cri.container-type": "container", "io.kubernetes.cri.sandbox-id": sb}
		s.Process.Args = []string{"sh", "-c", "id -u; cat /proc/self/uid_map; ls /sys/class/net; echo x > /sys/kernel/x || echo sys-read-only; ls /sys/fs/cgroup | head -1"}
		for i := range s.Linux.Namespaces {
			if f := map[specs.LinuxNamespaceType]string{specs.NetworkNamespace: "net", specs.IPCNamespace: "ipc", specs.UTSNamespace: "uts"}[s.Linux.Namespaces[i].Type]; f != "" {
				s.Linux.Namespaces[i].Path = fmt.Sprintf("/proc/%d/ns/%s", pid, f)
			}
		}
	})
	r := o.warden(t, "--policy", policy, "run", "--bundle", bundle, ctr)
	if r.Exit != 0 || !strings.HasPrefix(r.Stdout, "0\n") || !strings.Contains(r.Stdout, " "+sbUID+" ") || !strings.Contains(r.Stdout, "sys-read-only") {
		t.Fatalf("pod container: exit %d %q %q (sandbox uid %s)", r.Exit, r.Stdout, r.Stderr, sbUID)
	}
}

// A user namespace id lease whose container does not exist (its create
// died between taking the lease and making the container, or its state
// was removed without a delete) is collected by the next delete, its
// id-mapped root unmounted; so is every such lease when a create finds no
// block free. A lease a running create holds (locked), a young one, and a
// living container's are kept, and that container goes on working.
func TestOCIPolicyUserNamespaceLeaseCollected(t *testing.T) {
	o := newOCIEnv(t)
	policy := filepath.Join(tempDir(t), "p.toml")
	if err := os.WriteFile(policy, []byte("name = \"p\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	living := "living-" + randomHex(4)
	if r := o.warden(t, "--policy", policy, "run", "-d", "--bundle", busyboxBundle(t, living, nil), living); r.Exit != 0 {
		t.Fatalf("run: %s", r.Stderr)
	}
	t.Cleanup(func() { o.warden(t, "delete", "--force", living) })
	leases := filepath.Join(o.root, "userns")
	ents, err := os.ReadDir(leases)
	if err != nil || len(ents) != 1 {
		t.Fatalf("the living container's lease: %v %v", ents, err)
	}
	livingLease := ents[0].Name()

	// What a crash leaves: leases of blocks no container has.
	old := time.Now().Add(-time.Minute)
	lease := func(block int, id string) string {
		path := filepath.Join(leases, strconv.Itoa(3_145_728+block*65_536))
		if err := os.WriteFile(path, []byte(id), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	crashed := "crashed-" + randomHex(4)
	crashedLease := lease(1, crashed)
	idroot := filepath.Join(o.root, "idroot", crashed)
	if err := os.MkdirAll(idroot, 0o755); err != nil {
		t.Fatal(err)
	}
	if r := run(t, nil, "mount", "-t", "tmpfs", "tmpfs", idroot); r.Exit != 0 {
		t.Fatalf("mount: %s", r.Stderr)
	}
	t.Cleanup(func() { syscall.Unmount(idroot, syscall.MNT_DETACH) })
	creatingLease := lease(2, "creating-"+randomHex(4))
	youngLease := lease(3, "young-"+randomHex(4))
	for _, p := range []string{crashedLease, creatingLease, filepath.Join(leases, livingLease)} {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	held, err := os.Open(creatingLease)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := syscall.Flock(int(held.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}

	// The next delete (of any container) collects.
	other := "other-" + randomHex(4)
	if r := o.warden(t, "--policy", policy, "run", "--bundle", busyboxBundle(t, other, func(s *specs.Spec) { s.Process.Args = []string{"true"} }), other); r.Exit != 0 {
		t.Fatalf("run: %s", r.Stderr)
	}
	if r := o.warden(t, "delete", other); r.Exit != 0 && !strings.Contains(r.Stderr, "does not exist") {
		t.Fatalf("delete: %s", r.Stderr)
	}
	if r := o.warden(t, "delete", "--force", "never-made-"+randomHex(4)); r.Exit != 0 {
		t.Fatalf("delete --force of a container that does not exist: %s", r.Stderr)
	}
	if _, err := os.Stat(crashedLease); err == nil {
		t.Error("a crashed create's lease was kept")
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), idroot) {
		t.Error("a crashed create's id-mapped root is still mounted")
	}
	for _, p := range []string{creatingLease, youngLease, filepath.Join(leases, livingLease)} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("lease %s was collected: %v", filepath.Base(p), err)
		}
	}
	if r := o.warden(t, "exec", living, "id", "-u"); r.Exit != 0 || strings.TrimSpace(r.Stdout) != "0" {
		t.Fatalf("the living container after the collection: exit %d %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	held.Close()
	os.Remove(creatingLease)
	os.Remove(youngLease)

	// Every other block leased by containers that are gone: a create
	// collects them and gets one.
	for b := range 4_096 {
		p := filepath.Join(leases, strconv.Itoa(3_145_728+b*65_536))
		if filepath.Base(p) == livingLease {
			continue
		}
		if err := os.WriteFile(p, []byte("gone-"+strconv.Itoa(b)), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	full := "full-" + randomHex(4)
	if r := o.warden(t, "--policy", policy, "run", "--bundle", busyboxBundle(t, full, func(s *specs.Spec) { s.Process.Args = []string{"id", "-u"} }), full); r.Exit != 0 || strings.TrimSpace(r.Stdout) != "0" {
		t.Fatalf("create with every block leased by containers that are gone: exit %d %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	o.warden(t, "delete", "--force", full)
	if ents, _ := os.ReadDir(leases); len(ents) != 1 || ents[0].Name() != livingLease {
		t.Errorf("leases after the collection: %d (want only the living container's)", len(ents))
	}
}
