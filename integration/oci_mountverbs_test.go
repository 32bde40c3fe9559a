package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// A config.json may only describe new mounts under a policy: an entry
// whose options change a mount already there or its file system
// ("remount"), an option unknown for its type, or a second mount at one
// destination is refused, and the host is unchanged. The grants are
// tmpfs the test makes, so a remount that got through would reconfigure
// only them.

// privateTmpfs mounts a small tmpfs of the test's own and returns it.
func privateTmpfs(t *testing.T) string {
	t.Helper()
	dir := tempDir(t)
	if r := run(t, nil, "mount", "-t", "tmpfs", "-o", "size=8m,mode=0755", "tmpfs", dir); r.Exit != 0 {
		t.Fatalf("mount tmpfs: %s", r.Stderr)
	}
	t.Cleanup(func() { run(t, nil, "umount", "-l", dir) })
	return dir
}

// writableOnHost tells whether the host can still create a file in dir.
func writableOnHost(dir string) bool {
	f := filepath.Join(dir, ".host-probe")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		return false
	}
	os.Remove(f)
	return true
}

func TestOCIPolicyMountVerbs(t *testing.T) {
	o := newOCIEnv(t)
	write, read := privateTmpfs(t), privateTmpfs(t)
	os.WriteFile(filepath.Join(read, "f"), []byte("host\n"), 0o644)
	policy := escapePolicy(t, write, fmt.Sprintf("read = [%q]\n", read))
	grants := []specs.Mount{
		{Destination: "/w", Type: "bind", Source: write, Options: []string{"rbind", "rw"}},
		{Destination: "/r", Type: "bind", Source: read, Options: []string{"rbind", "ro"}},
	}
	// What each trick would show if it got through; the allowed half is
	// the same script without the trick: nothing of it is printed.
	script := `echo changed > /r/f && echo read-grant-written
cp /bin/busybox /w/bb 2>/dev/null && /w/bb true && echo write-grant-exec
grep -q ' /sys sysfs rw' /proc/mounts && echo sys-writable
echo ran`
	id := "oci-" + randomHex(4)
	b := busyboxBundle(t, id, func(s *specs.Spec) {
		s.Process.Args = []string{"sh", "-c", script}
		s.Mounts = append(s.Mounts, grants...)
	})
	r := o.warden(t, "--policy", policy, "run", "--bundle", b, id)
	if r.Exit != 0 || strings.TrimSpace(r.Stdout) != "ran" {
		t.Fatalf("the grants alone: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	for name, tc := range map[string]struct {
		m    specs.Mount
		want string
	}{
		"read grant made writable": {specs.Mount{Destination: "/r", Type: "tmpfs", Source: "tmpfs", Options: []string{"remount", "rw"}}, `"remount"`},
		"write grant made exec":    {specs.Mount{Destination: "/w", Type: "mqueue", Source: "mqueue", Options: []string{"remount", "exec"}}, `"remount"`},
		"source superblock ro":     {specs.Mount{Destination: "/w", Type: "devpts", Source: "devpts", Options: []string{"remount", "ro"}}, `"remount"`},
		"sysfs made writable":      {specs.Mount{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"remount", "rw"}}, `"remount"`},
		"bind remounted":           {specs.Mount{Destination: "/r", Type: "bind", Source: read, Options: []string{"bind", "remount"}}, `"remount"`},
		"data on a bind":           {specs.Mount{Destination: "/x", Type: "bind", Source: write, Options: []string{"rbind", "size=1m"}}, "not accepted for a bind"},
		// The container's uid 0 would own the grant's files as host root.
		"own id mappings": {specs.Mount{Destination: "/x", Type: "bind", Source: write, Options: []string{"rbind"},
			UIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: 0, Size: 1}}, GIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: 0, Size: 1}}}, "uidMappings/gidMappings of its own"},
		// A later bind on a destination would leave the earlier one's
		// source unchecked after the start.
		"second bind on a grant": {specs.Mount{Destination: "/r", Type: "bind", Source: write, Options: []string{"rbind"}}, "destination of two mounts"},
	} {
		id := "oci-" + randomHex(4)
		b := busyboxBundle(t, id, func(s *specs.Spec) {
			s.Process.Args = []string{"sh", "-c", script}
			s.Mounts = append(s.Mounts, grants...)
			s.Mounts = append(s.Mounts, tc.m)
		})
		r := o.warden(t, "--policy", policy, "run", "--bundle", b, id)
		if r.Exit != 125 || !strings.Contains(r.Stderr, tc.want) || r.Stdout != "" {
			t.Errorf("%s: exit %d, %q %q, want 125 and %q", name, r.Exit, r.Stdout, r.Stderr, tc.want)
		}
		o.warden(t, "delete", "--force", id)
		if data, _ := os.ReadFile(filepath.Join(read, "f")); string(data) != "host\n" {
			t.Fatalf("%s: the read-only grant's file changed on the host: %q", name, data)
		}
		if !writableOnHost(write) || !writableOnHost(read) {
			t.Fatalf("%s: a grant's file system is no longer writable on the host", name)
		}
	}
}

// A destination that reaches an earlier bind's place through a symlink in
// the image hides that bind; its source check then fails closed and the
// container does not start.
func TestOCIPolicyHiddenBind(t *testing.T) {
	o := newOCIEnv(t)
	write := privateTmpfs(t)
	policy := escapePolicy(t, write, "")
	id := "oci-" + randomHex(4)
	b := busyboxBundle(t, id, func(s *specs.Spec) {
		s.Process.Args = []string{"true"}
		s.Mounts = append(s.Mounts,
			specs.Mount{Destination: "/work", Type: "bind", Source: write, Options: []string{"rbind"}},
			specs.Mount{Destination: "/alias", Type: "tmpfs", Source: "tmpfs", Options: []string{"size=1m"}})
	})
	if err := os.Symlink("/work", filepath.Join(b, "rootfs", "alias")); err != nil {
		t.Fatal(err)
	}
	r := o.warden(t, "--policy", policy, "run", "--bundle", b, id)
	if r.Exit != 125 || !strings.Contains(r.Stderr, "mount /work") {
		t.Fatalf("a bind hidden by a mount through a symlink: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	o.warden(t, "delete", "--force", id)
	if out := o.warden(t, "list", "-q"); strings.Contains(out.Stdout, id) {
		t.Fatalf("the refused container is still listed: %q", out.Stdout)
	}
}

// A container under a policy cannot put its cgroup inside another
// container's (it would be charged to that one's limits: a victim with
// pids 10 could no longer fork) or a host service's; a cgroup of its own
// beside them works, and the victim is unchanged.
func TestOCIPolicyCgroupInsideAnother(t *testing.T) {
	o := newOCIEnv(t)
	policy := escapePolicy(t, tempDir(t), "[limits]\npids = 10\n")
	victim := "oci-" + randomHex(4)
	if r := o.warden(t, "--policy", policy, "run", "-d", "--bundle", busyboxBundle(t, victim, nil), victim); r.Exit != 0 {
		t.Fatalf("victim: %s", r.Stderr)
	}
	pidsMax := filepath.Join("/sys/fs/cgroup/pids", ociCgroupParent, victim, "pids.max")
	before, err := os.ReadFile(pidsMax)
	if err != nil {
		t.Fatal(err)
	}
	for _, inside := range []string{victim + "/evil", victim + "/a/b"} {
		id := "oci-" + randomHex(4)
		b := busyboxBundle(t, id, func(s *specs.Spec) {
			s.Process.Args = []string{"sh", "-c", "sleep 30 & sleep 30 & sleep 30 & sleep 30 & sleep 30 & sleep 30 & sleep 30 & sleep 30 & sleep 30 & sleep 30 & wait"}
			s.Linux.CgroupsPath = ociCgroupParent + "/" + inside
		})
		if r := o.warden(t, "--policy", policy, "run", "-d", "--bundle", b, id); r.Exit != 125 || !strings.Contains(r.Stderr, "holds processes") {
			t.Errorf("cgroup %s: exit %d, %q, want 125 and a refusal", inside, r.Exit, r.Stderr)
		}
		o.warden(t, "delete", "--force", id)
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/pids", ociCgroupParent, inside)); err == nil {
			t.Errorf("cgroup %s was made inside the victim's", inside)
		}
	}
	if after, _ := os.ReadFile(pidsMax); string(after) != string(before) {
		t.Fatalf("the victim's pids.max changed: %q -> %q", before, after)
	}
	exec := filepath.Join(tempDir(t), "p.json")
	writeJSON(t, exec, &specs.Process{Args: []string{"sh", "-c", "true && echo forked"}, Cwd: "/", Env: []string{"PATH=/bin"}})
	if r := o.warden(t, "exec", "--process", exec, victim); r.Exit != 0 || !strings.Contains(r.Stdout, "forked") {
		t.Fatalf("the victim can no longer fork: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	own := "oci-" + randomHex(4)
	if r := o.warden(t, "--policy", policy, "run", "--bundle", busyboxBundle(t, own, func(s *specs.Spec) { s.Process.Args = []string{"true"} }), own); r.Exit != 0 {
		t.Fatalf("a cgroup of its own beside the victim's: exit %d, %q", r.Exit, r.Stderr)
	}
}

// root.path naming a host folder is refused under a policy (the container
// would read what no grant gives), a mounted file system that is not an
// overlay too; a root in the bundle, or an overlay mounted for the
// container elsewhere (as docker's overlay2/ID/merged), works.
func TestOCIPolicyHostFolderRoot(t *testing.T) {
	o := newOCIEnv(t)
	policy := escapePolicy(t, tempDir(t), "")
	for _, root := range []string{"/etc", "/root", "/usr/share/../share"} {
		id := "oci-" + randomHex(4)
		b := busyboxBundle(t, id, func(s *specs.Spec) {
			s.Root.Path = root
			s.Process.Args = []string{"/bin/busybox", "ls", "/"}
		})
		if r := o.warden(t, "--policy", policy, "run", "--bundle", b, id); r.Exit != 125 || !strings.Contains(r.Stderr, "a folder of the host's") || r.Stdout != "" {
			t.Errorf("root.path %s under a policy: exit %d, %q %q", root, r.Exit, r.Stdout, r.Stderr)
		}
		o.warden(t, "delete", "--force", id)
	}
	image := filepath.Join(busyboxBundle(t, "oci-image", nil), "rootfs")
	// A tmpfs holding an image is a mount of the host's, not an overlay.
	plain := filepath.Join(privateTmpfs(t), "plain")
	if r := run(t, nil, "cp", "-a", image, plain); r.Exit != 0 {
		t.Fatal(r.Stderr)
	}
	if r := run(t, nil, "mount", "--bind", plain, plain); r.Exit != 0 {
		t.Fatal(r.Stderr)
	}
	t.Cleanup(func() { run(t, nil, "umount", plain) })
	id := "oci-" + randomHex(4)
	b := busyboxBundle(t, id, func(s *specs.Spec) { s.Root.Path = plain })
	if r := o.warden(t, "--policy", policy, "run", "--bundle", b, id); r.Exit != 125 || !strings.Contains(r.Stderr, "a folder of the host's") {
		t.Errorf("root.path a bind-mounted tmpfs under a policy: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	o.warden(t, "delete", "--force", id)
	layers := privateTmpfs(t)
	snapshot := filepath.Join(layers, "merged")
	for _, d := range []string{"upper", "work", "merged"} {
		os.Mkdir(filepath.Join(layers, d), 0o755)
	}
	if r := run(t, nil, "mount", "-t", "overlay", "overlay", "-o", "lowerdir="+image+",upperdir="+filepath.Join(layers, "upper")+",workdir="+filepath.Join(layers, "work"), snapshot); r.Exit != 0 {
		t.Fatal(r.Stderr)
	}
	t.Cleanup(func() { run(t, nil, "umount", snapshot) })
	for _, root := range []string{"rootfs", snapshot} {
		id := "oci-" + randomHex(4)
		b := busyboxBundle(t, id, func(s *specs.Spec) {
			s.Root.Path = root
			s.Process.Args = []string{"echo", "own-root"}
		})
		if r := o.warden(t, "--policy", policy, "run", "--bundle", b, id); r.Exit != 0 || strings.TrimSpace(r.Stdout) != "own-root" {
			t.Errorf("root.path %s: exit %d, %q %q", root, r.Exit, r.Stdout, r.Stderr)
		}
	}
}
