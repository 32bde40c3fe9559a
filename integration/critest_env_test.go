package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// criEnv is a private containerd with its CRI plugin, a loopback registry
// mirror and a CNI bridge, all in network and IPC namespaces of their own
// (held by a sleeping process): the bridge, its NAT chains, the host ports
// the specs map (12000-12003) and the shared-memory segments critest makes
// with ipcmk never touch the host's, and vanish with the namespaces.
type criEnv struct {
	dir     string
	sock    string
	netns   string // /proc/PID/ns/net of the holder
	ipcns   string
	holder  *exec.Cmd
	procs   []*exec.Cmd // registry, containerd: stopped in reverse
	crictl  string
	before  hostSnapshot
	handler map[string]string // CRI handler name -> the runtime binary runc's shim runs
	// ginkgoDir holds the ginkgo CLI critest -parallel runs.
	ginkgoDir string
}

// criBridge names the CNI bridge (inside the private namespace).
const criBridge = "wcri0"

// hostSnapshot is what the run could leave on the host, taken before and
// compared after.
type hostSnapshot struct {
	netns    []string // /run/netns entries
	cniCache []string // /var/lib/cni files
	cgroups  []string // containerd CRI pod cgroups
	shm      []string // System V shared-memory ids
	rules    []string // host iptables and nft lines naming CNI or the bridge
}

func takeHostSnapshot() hostSnapshot {
	var s hostSnapshot
	s.netns, _ = filepath.Glob("/run/netns/*")
	filepath.Walk("/var/lib/cni", func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			s.cniCache = append(s.cniCache, p)
		}
		return nil
	})
	s.cgroups = criCgroups()
	if out, err := exec.Command("ipcs", "-m").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[0], "0x") {
				s.shm = append(s.shm, f[1])
			}
		}
	}
	for _, cmd := range [][]string{{"iptables-save"}, {"ip6tables-save"}, {"nft", "list", "ruleset"}, {"ip", "-o", "link"}} {
		out, _ := exec.Command(cmd[0], cmd[1:]...).Output()
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "CNI") || strings.Contains(line, criBridge) {
				s.rules = append(s.rules, strings.Join(cmd, " ")+": "+strings.TrimSpace(line))
			}
		}
	}
	return s
}

// criID matches the pod sandbox or container a CNI cache file
// (NETWORK-ID-IFNAME: warden-critest-ID-eth0, cni-loopback-ID-lo) or a
// cgroup (test.slice:cri-containerd:ID, or k8s.io/ID for a pod without a
// cgroup parent) is of.
var criID = regexp.MustCompile(`(?:^|[-:])([0-9a-f]{64})(-[^-]+)?$`)

// ownIDs are the pod sandboxes and containers this run's containerd made,
// from its log: another critest run may share the host, and only this
// run's leftovers are this run's to report and remove.
func (e *criEnv) ownIDs() map[string]bool {
	data, _ := os.ReadFile(filepath.Join(e.dir, "containerd.log"))
	ids := map[string]bool{}
	for _, m := range regexp.MustCompile(`returns (?:sandbox|container) id \\"([0-9a-f]{64})\\"`).FindAllStringSubmatch(string(data), -1) {
		ids[m[1]] = true
	}
	return ids
}

// owned keeps the paths whose ID is among ids.
func owned(paths []string, ids map[string]bool) []string {
	var out []string
	for _, p := range paths {
		if m := criID.FindStringSubmatch(filepath.Base(p)); m != nil && ids[m[1]] {
			out = append(out, p)
		}
	}
	return out
}

// cniCacheNetns lists the network namespaces a CNI cache file's result
// names (as /run/netns/NAME).
func cniCacheNetns(path string) []string {
	var cache struct {
		Result struct {
			Interfaces []struct {
				Sandbox string `json:"sandbox"`
			} `json:"interfaces"`
		} `json:"result"`
	}
	data, _ := os.ReadFile(path)
	if json.Unmarshal(data, &cache) != nil {
		return nil
	}
	var out []string
	for _, i := range cache.Result.Interfaces {
		if i.Sandbox != "" {
			out = append(out, strings.Replace(i.Sandbox, "/var/run/", "/run/", 1))
		}
	}
	return out
}

// criCgroups lists the pods' and containers' cgroups. With the cgroupfs
// driver containerd 1.6 names them "test.slice:cri-containerd:ID" (critest's
// parent, in systemd's form), which runc and runsc take as a path relative
// to their own cgroup: the shim's, which is this test's.
func criCgroups() []string {
	out, _ := filepath.Glob("/sys/fs/cgroup/*/k8s.io/*")
	data, _ := os.ReadFile("/proc/self/cgroup")
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		hierarchy := strings.TrimPrefix(f[1], "name=")
		if hierarchy == "" {
			hierarchy = "unified"
		}
		for _, name := range strings.Split(hierarchy, ",") {
			found, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", name, f[2], "*cri-containerd*"))
			out = append(out, found...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// added lists what after has and before had not.
func added(before, after []string) []string {
	var out []string
	for _, a := range after {
		if !slices.Contains(before, a) {
			out = append(out, a)
		}
	}
	return out
}

// startCRI starts the namespace holder, the registry (and fills it), and
// containerd with the given runtime handlers (name -> runc binary).
func startCRI(t *testing.T, crictl, busybox string, handlers map[string]string) *criEnv {
	t.Helper()
	for _, bin := range []string{"containerd", "containerd-shim-runc-v2", "docker-registry", "nsenter", "ipcmk", "iptables", "nft", "gcc", "/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/usr/lib/cni/portmap", "/usr/lib/cni/loopback"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not found: run `make deps` (containerd, docker-registry, containernetworking-plugins, nftables, util-linux)", bin)
		}
	}
	dir, err := os.MkdirTemp("", "warden-critest-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	e := &criEnv{dir: dir, sock: filepath.Join(dir, "containerd.sock"), crictl: crictl, before: takeHostSnapshot(), handler: handlers}
	t.Cleanup(func() { e.stop(t) })
	for _, d := range []string{"tmp", "cni-conf", "certs.d", "registry", "policies", "opt"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	e.holder = exec.Command("sleep", "infinity")
	e.holder.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC}
	if err := e.holder.Start(); err != nil {
		t.Fatalf("starting the namespace holder: %v", err)
	}
	e.netns = fmt.Sprintf("/proc/%d/ns/net", e.holder.Process.Pid)
	e.ipcns = fmt.Sprintf("/proc/%d/ns/ipc", e.holder.Process.Pid)
	if r := e.inNS(t, "ip", "link", "set", "lo", "up"); r.Exit != 0 {
		t.Fatalf("ip link set lo up: %s", r.Stderr)
	}

	e.startRegistry(t, busybox)
	e.startContainerd(t)
	return e
}

// nsArgv runs argv inside the private namespaces.
func (e *criEnv) nsArgv(argv ...string) []string {
	return append([]string{"nsenter", "--net=" + e.netns, "--ipc=" + e.ipcns, "--"}, argv...)
}

func (e *criEnv) inNS(t *testing.T, argv ...string) sandboxResult {
	t.Helper()
	a := e.nsArgv(argv...)
	return run(t, nil, a[0], a[1:]...)
}

// netnsClient is an HTTP client whose connections are made inside the
// private network namespace: each dial runs on a thread that enters it and
// is never unlocked, so the thread ends with its goroutine.
func (e *criEnv) netnsClient() *http.Client {
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		type result struct {
			c   net.Conn
			err error
		}
		ch := make(chan result, 1)
		go func() {
			goruntime.LockOSThread()
			fd, err := unix.Open(e.netns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err == nil {
				err = unix.Setns(fd, unix.CLONE_NEWNET)
				unix.Close(fd)
			}
			if err != nil {
				ch <- result{nil, fmt.Errorf("entering %s: %w", e.netns, err)}
				return
			}
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			ch <- result{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
	return &http.Client{Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}, Timeout: 30 * time.Second}
}

const criRegistry = "127.0.0.1:5000"

// startRegistry serves Debian's docker-registry on loopback (inside the
// namespace) and pushes the test images to it.
func (e *criEnv) startRegistry(t *testing.T, busybox string) {
	t.Helper()
	cfg := fmt.Sprintf("version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n",
		filepath.Join(e.dir, "registry"), criRegistry)
	path := filepath.Join(e.dir, "registry.yml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	e.launch(t, exec.Command("docker-registry", "serve", path), "registry.log", nil)
	client := e.netnsClient()
	base := "http://" + criRegistry
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := client.Get(base + "/v2/")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(e.dir, "registry.log"))
			t.Fatalf("docker-registry did not answer within 20s (%v); its log:\n%s", err, lastLines(string(log), 20))
		}
		time.Sleep(100 * time.Millisecond)
	}
	bins := buildCritestHelpers(t, filepath.Join(e.dir, "tmp"))
	pushCritestImages(t, client, base, busybox, bins)

	// containerd's CRI plugin contacts a registry on every pull, even of an
	// image it holds: mirror every upstream the specs name.
	for _, upstream := range []string{"registry.k8s.io", "gcr.io", "k8s.gcr.io"} {
		hosts := fmt.Sprintf("server = \"https://%s\"\n\n[host.\"http://%s\"]\n  capabilities = [\"pull\", \"resolve\"]\n", upstream, criRegistry)
		d := filepath.Join(e.dir, "certs.d", upstream)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "hosts.toml"), []byte(hosts), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// startContainerd writes the CNI and containerd configuration and starts
// containerd inside the namespaces.
func (e *criEnv) startContainerd(t *testing.T) {
	t.Helper()
	conflist := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "warden-critest",
  "plugins": [
    {"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16"}]], "routes": [{"dst": "0.0.0.0/0"}], "dataDir": %q}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, criBridge, filepath.Join(e.dir, "cni-ipam"))
	if err := os.WriteFile(filepath.Join(e.dir, "cni-conf", "10-warden-critest.conflist"), []byte(conflist), 0o644); err != nil {
		t.Fatal(err)
	}
	cri := `plugins."io.containerd.grpc.v1.cri"`
	var b strings.Builder
	fmt.Fprintf(&b, "version = 2\nroot = %q\nstate = %q\n", filepath.Join(e.dir, "root"), filepath.Join(e.dir, "state"))
	fmt.Fprintf(&b, "[grpc]\n  address = %q\n[ttrpc]\n  address = %q\n[debug]\n  address = %q\n", e.sock, e.sock+".ttrpc", filepath.Join(e.dir, "debug.sock"))
	fmt.Fprintf(&b, "[plugins.\"io.containerd.internal.v1.opt\"]\n  path = %q\n", filepath.Join(e.dir, "opt"))
	// No CAP_SYS_RESOURCE here: the plugin's -998 for sandboxes would
	// fail under every runtime.
	fmt.Fprintf(&b, "[%s]\n  sandbox_image = \"registry.k8s.io/pause:3.9\"\n  restrict_oom_score_adj = true\n  stream_server_address = \"127.0.0.1\"\n", cri)
	fmt.Fprintf(&b, "[%s.cni]\n  bin_dir = \"/usr/lib/cni\"\n  conf_dir = %q\n", cri, filepath.Join(e.dir, "cni-conf"))
	fmt.Fprintf(&b, "[%s.registry]\n  config_path = %q\n", cri, filepath.Join(e.dir, "certs.d"))
	fmt.Fprintf(&b, "[%s.containerd]\n  default_runtime_name = \"runc\"\n", cri)
	names := make([]string, 0, len(e.handler))
	for name := range e.handler {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		fmt.Fprintf(&b, "[%s.containerd.runtimes.%s]\n  runtime_type = \"io.containerd.runc.v2\"\n  pod_annotations = [\"dev.warden.*\"]\n", cri, name)
		fmt.Fprintf(&b, "[%s.containerd.runtimes.%s.options]\n  BinaryName = %q\n  Root = %q\n", cri, name, e.handler[name], filepath.Join(e.dir, "runtime-root", name))
	}
	path := filepath.Join(e.dir, "containerd.toml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("containerd", "--config", path)
	// The shims pass this environment on to the runtimes: a policy
	// directory without default.toml, and containers that name no policy
	// run as configured (the "warden" handler); the baseline handler's
	// wrapper names its policy.
	cmd.Env = append(runscEnv(), "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "WARDEN_POLICY_DIR="+filepath.Join(e.dir, "policies"), "WARDEN_ALLOW_UNCONFINED=1")
	e.launch(t, cmd, "containerd.log", func() bool {
		c, err := net.Dial("unix", e.sock)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	if r := e.crictlRun(t, "info"); r.Exit != 0 || !strings.Contains(r.Stdout, `"NetworkReady"`) {
		t.Fatalf("crictl info: %s %s", r.Stdout, r.Stderr)
	}
}

// writeWrapper writes a script that runs warden with args before the
// shim's: containerd passes a runtime no arguments of its own.
func writeWrapper(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	script := fmt.Sprintf("#!/bin/sh\nexec %s %s \"$@\"\n", wardenBinary, strings.Join(args, " "))
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// launch starts a daemon inside the namespaces and waits until ready says so.
func (e *criEnv) launch(t *testing.T, cmd *exec.Cmd, logName string, ready func() bool) {
	t.Helper()
	argv := e.nsArgv(cmd.Args...)
	ns := exec.Command(argv[0], argv[1:]...)
	ns.Env = cmd.Env
	logf, err := os.Create(filepath.Join(e.dir, logName))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	ns.Stdout, ns.Stderr = logf, logf
	ns.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := ns.Start(); err != nil {
		t.Fatalf("%s: %v", cmd.Args[0], err)
	}
	e.procs = append(e.procs, ns)
	if ready == nil {
		return
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if ready() {
			return
		}
	}
	log, _ := os.ReadFile(logf.Name())
	t.Fatalf("%s did not start within 30s; its log:\n%s", cmd.Args[0], lastLines(string(log), 20))
}

// crictlRun runs crictl inside the private namespaces, where the CRI
// plugin's streaming server (exec, attach, port-forward) listens.
func (e *criEnv) crictlRun(t *testing.T, args ...string) sandboxResult {
	t.Helper()
	return e.inNS(t, append([]string{e.crictl, "--runtime-endpoint", "unix://" + e.sock, "--image-endpoint", "unix://" + e.sock, "--timeout", "30s"}, args...)...)
}

// removePods removes every pod and container critest left behind (it
// skips its own cleanup when a spec fails) and says how many there were.
func (e *criEnv) removePods(t *testing.T) int {
	t.Helper()
	pods := strings.Fields(e.crictlRun(t, "pods", "-q").Stdout)
	ctrs := strings.Fields(e.crictlRun(t, "ps", "-aq").Stdout)
	if len(ctrs) > 0 {
		e.crictlRun(t, append([]string{"rm", "-f"}, ctrs...)...)
	}
	if len(pods) > 0 {
		e.crictlRun(t, append([]string{"rmp", "-f"}, pods...)...)
	}
	if left := strings.Fields(e.crictlRun(t, "pods", "-q").Stdout + " " + e.crictlRun(t, "ps", "-aq").Stdout); len(left) > 0 {
		t.Errorf("pods or containers could not be removed: %v", left)
	}
	return len(pods) + len(ctrs)
}

// stop removes the pods, stops the daemons by pid, ends the namespaces,
// unmounts what is left below the private folder, and fails the test for
// anything the run left on the host.
func (e *criEnv) stop(t *testing.T) {
	if len(e.procs) == 2 {
		e.removePods(t)
	}
	stopInReverse(e.procs)
	var problems []string
	if shims := shimsFor(e.sock); len(shims) > 0 {
		problems = append(problems, fmt.Sprintf("shims still running: %v", shims))
		for _, pid := range shims {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	// runsc's sandboxes (sentry, gofer) are the shims' children, named by
	// their runsc root below the private folder.
	if left := processesNaming(e.dir + "/"); len(left) > 0 {
		problems = append(problems, fmt.Sprintf("processes still running: %v", left))
		for _, pid := range left {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if e.holder != nil && e.holder.Process != nil {
		e.holder.Process.Kill()
		e.holder.Wait()
	}
	below := mountsBelow(e.dir)
	for i := len(below) - 1; i >= 0; i-- {
		syscall.Unmount(below[i], syscall.MNT_DETACH)
		if strings.HasSuffix(below[i], "/rootfs") || strings.Contains(below[i], "/shm") {
			problems = append(problems, "mount left: "+below[i])
		}
	}
	after := takeHostSnapshot()
	// Only this run's pods' CNI cache files and network namespaces are
	// removed.
	ids := e.ownIDs()
	newNetns := added(e.before.netns, after.netns)
	for _, f := range owned(added(e.before.cniCache, after.cniCache), ids) {
		for _, ns := range cniCacheNetns(f) {
			if slices.Contains(newNetns, ns) {
				syscall.Unmount(ns, syscall.MNT_DETACH)
				os.Remove(ns)
				problems = append(problems, "network namespace left: "+ns)
			}
		}
		os.Remove(f)
		problems = append(problems, "CNI cache file left: "+f)
	}
	// A shim removes its container's cgroup as it ends; the pod cgroups'
	// parent stays (libcontainer never removes parents) and goes if empty.
	for i := 0; i < 50 && len(owned(added(e.before.cgroups, after.cgroups), ids)) > 0; i++ {
		time.Sleep(100 * time.Millisecond)
		after.cgroups = criCgroups()
	}
	for _, c := range owned(added(e.before.cgroups, after.cgroups), ids) {
		problems = append(problems, "cgroup left: "+c)
		syscall.Rmdir(c) // its processes were killed above
	}
	if len(e.before.cgroups) == 0 {
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*/k8s.io")
		for _, d := range dirs {
			syscall.Rmdir(d)
		}
	}
	for _, id := range added(e.before.shm, after.shm) {
		problems = append(problems, "shared-memory segment on the host: "+id)
	}
	for _, r := range added(e.before.rules, after.rules) {
		problems = append(problems, "host network rule or link: "+r)
	}
	if len(problems) > 0 {
		t.Errorf("the critest run left things behind:\n  %s", strings.Join(problems, "\n  "))
	}
	if t.Failed() {
		// Keep the logs of a failed run, without the images and roots.
		keep := filepath.Join(os.TempDir(), "warden-critest-logs")
		os.MkdirAll(keep, 0o755)
		logs, _ := filepath.Glob(filepath.Join(e.dir, "*.log"))
		reports, _ := filepath.Glob(filepath.Join(e.dir, "*.xml"))
		for _, f := range append(logs, reports...) {
			if data, err := os.ReadFile(f); err == nil {
				os.WriteFile(filepath.Join(keep, filepath.Base(f)), data, 0o644)
			}
		}
		t.Logf("logs and reports kept in %s", keep)
	}
	if err := os.RemoveAll(e.dir); err != nil {
		t.Errorf("removing %s: %v", e.dir, err)
	}
}
