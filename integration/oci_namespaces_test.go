package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// joinNamespaces sets the paths of a config's namespaces (adding the
// namespace when the config has none of that type).
func joinNamespaces(paths map[specs.LinuxNamespaceType]string) func(*specs.Spec) {
	return func(s *specs.Spec) {
		for typ, path := range paths {
			found := false
			for i := range s.Linux.Namespaces {
				if s.Linux.Namespaces[i].Type == typ {
					s.Linux.Namespaces[i].Path, found = path, true
				}
			}
			if !found {
				s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: typ, Path: path})
			}
		}
	}
}

// TestOCINamespacePaths: under a policy a config may not join another
// process's mount namespace, nor a network namespace no container of the
// same warden holds (whose interfaces the no-network cleanup would
// remove); it may join the pid, ipc and network namespaces of another
// container of the same state root.
func TestOCINamespacePaths(t *testing.T) {
	o := newOCIEnv(t)
	policy := filepath.Join(tempDir(t), "p.toml")
	os.WriteFile(policy, []byte("name = \"p\"\n[limits]\nmemory = \"64MiB\"\npids = 20\n"), 0o644)

	t.Run("another process's mount namespace", func(t *testing.T) {
		victim := exec.Command("unshare", "-m", "sleep", "300")
		if err := victim.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { victim.Process.Kill(); victim.Wait() }()
		vp := victim.Process.Pid
		mountinfo := func() string {
			data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", vp))
			return string(data)
		}
		// Wait until unshare has become sleep in its own namespace: after
		// the namespace, unshare makes its mounts private, which changes
		// their lines, and only then runs sleep.
		own, _ := os.Readlink("/proc/self/ns/mnt")
		for i := 0; i < 500; i++ {
			ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", vp))
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", vp))
			if ns != own && ns != "" && strings.TrimSpace(string(comm)) == "sleep" {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		before := mountinfo()
		root, _ := os.Readlink(fmt.Sprintf("/proc/%d/root", vp))
		id := "oci-" + randomHex(4)
		b := busyboxBundle(t, id, joinNamespaces(map[specs.LinuxNamespaceType]string{specs.MountNamespace: fmt.Sprintf("/proc/%d/ns/mnt", vp)}))
		r := o.warden(t, "--policy", policy, "run", "--bundle", b, id)
		if r.Exit != 125 || !strings.Contains(r.Stderr, "mount namespace") || strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0 {
			t.Errorf("joining a host process's mount namespace: exit %d %q", r.Exit, r.Stderr)
		}
		if after, _ := os.Readlink(fmt.Sprintf("/proc/%d/root", vp)); mountinfo() != before || after != root {
			t.Errorf("the victim's mounts or root changed (root %s -> %s)", root, after)
		}
	})

	t.Run("a named network namespace", func(t *testing.T) {
		name := "warden-test-" + randomHex(4)
		if r := runTB(t, nil, "ip", "netns", "add", name); r.Exit != 0 {
			t.Fatalf("ip netns add: %s", r.Stderr)
		}
		defer runTB(t, nil, "ip", "netns", "del", name)
		if r := runTB(t, nil, "ip", "-n", name, "link", "add", "wt0", "type", "veth", "peer", "name", "wt1"); r.Exit != 0 {
			t.Fatalf("veth pair: %s", r.Stderr)
		}
		id := "oci-" + randomHex(4)
		b := busyboxBundle(t, id, joinNamespaces(map[specs.LinuxNamespaceType]string{specs.NetworkNamespace: "/var/run/netns/" + name}))
		r := o.warden(t, "--policy", policy, "run", "--bundle", b, id)
		if r.Exit != 125 || !strings.Contains(r.Stderr, "network namespace /var/run/netns/"+name) {
			t.Errorf("joining a named network namespace: exit %d %q", r.Exit, r.Stderr)
		}
		if r := runTB(t, nil, "ip", "-n", name, "link", "show", "wt0"); r.Exit != 0 {
			t.Errorf("the namespace's interface is gone: %s", r.Stderr)
		}
	})

	t.Run("another container of the same root", func(t *testing.T) {
		a := "oci-" + randomHex(4)
		if r := o.warden(t, "--policy", policy, "run", "-d", "--bundle", busyboxBundle(t, a, nil), a); r.Exit != 0 {
			t.Fatalf("container A: %s", r.Stderr)
		}
		pid := o.state(t, a).Pid
		b := "oci-" + randomHex(4)
		paths := map[specs.LinuxNamespaceType]string{}
		for typ, f := range map[specs.LinuxNamespaceType]string{specs.PIDNamespace: "pid", specs.IPCNamespace: "ipc", specs.NetworkNamespace: "net"} {
			paths[typ] = fmt.Sprintf("/proc/%d/ns/%s", pid, f)
		}
		bundle := busyboxBundle(t, b, func(s *specs.Spec) {
			joinNamespaces(paths)(s)
			s.Process.Args = []string{"sh", "-c", "cat /proc/1/cmdline; echo; ls /sys/class/net"}
		})
		r := o.warden(t, "--policy", policy, "run", "--bundle", bundle, b)
		if r.Exit != 0 || !strings.HasPrefix(r.Stdout, "sleep\x00300\x00\n") || strings.TrimSpace(strings.SplitN(r.Stdout, "\n", 2)[1]) != "lo" {
			t.Fatalf("joining container A's namespaces: exit %d %q %q", r.Exit, r.Stdout, r.Stderr)
		}
		if st := o.state(t, a); st.Status != "running" {
			t.Errorf("container A after B: %s", st.Status)
		}
	})
}
