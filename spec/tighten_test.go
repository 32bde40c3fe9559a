package spec

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/warden-sandbox/warden/policies"
)

// engineConfig is a config.json the way an engine writes one: docker's
// default capabilities plus one asked for, the host's network, a
// writable root, a device and generous limits.
func engineConfig(binds ...specs.Mount) *specs.Spec {
	mem, pids := int64(1<<30), int64(4096)
	major := int64(8)
	caps := []string{"CAP_CHOWN", "CAP_NET_RAW", "CAP_SYS_ADMIN"}
	return &specs.Spec{
		Version: specs.Version,
		Root:    &specs.Root{Path: filepath.Join(testBundle, "rootfs")},
		Process: &specs.Process{Args: []string{"sh"}, Cwd: "/", Capabilities: &specs.LinuxCapabilities{
			Bounding: caps, Effective: caps, Permitted: caps, Inheritable: caps, Ambient: []string{"CAP_SYS_ADMIN"}}},
		Mounts: append([]specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts"},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "rw"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm"},
		}, binds...),
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.MountNamespace}},
			Devices:    []specs.LinuxDevice{{Path: "/dev/sda", Type: "b", Major: 8, Minor: 0}, {Path: "/dev/null", Type: "c", Major: 1, Minor: 3}},
			Resources: &specs.LinuxResources{
				Memory:  &specs.LinuxMemory{Limit: &mem},
				Pids:    &specs.LinuxPids{Limit: &pids},
				Devices: []specs.LinuxDeviceCgroup{{Allow: true, Access: "rwm"}, {Allow: true, Type: "b", Major: &major, Access: "rw"}},
			},
		},
	}
}

func mustPolicy(t *testing.T, text string) *policies.Policy {
	t.Helper()
	p, err := policies.Parse("test.toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func bind(src, dst string, opts ...string) specs.Mount {
	return specs.Mount{Destination: dst, Type: "bind", Source: src, Options: append([]string{"rbind"}, opts...)}
}

func notHost(specs.LinuxNamespaceType, string) (bool, error) { return false, nil }

func TestTightenProcessAndNamespaces(t *testing.T) {
	for _, tc := range []struct {
		name     string
		allow    []string
		network  string
		wantCaps []string
		wantNet  bool
	}{
		{"no capabilities allowed", nil, "", []string{}, true},
		{"only allowed ones kept", []string{"CAP_CHOWN", "CAP_KILL"}, "", []string{"CAP_CHOWN"}, true},
		{"network allowed still gets its own network namespace", nil, "[network]\nallow = [\"example.com:443\"]\n", []string{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := engineConfig()
			p := mustPolicy(t, "name = \"t\"\n"+tc.network)
			if _, err := Tighten(s, p, TightenOptions{Bundle: testBundle, Capabilities: tc.allow, SameNamespace: notHost}); err != nil {
				t.Fatal(err)
			}
			c := s.Process.Capabilities
			for set, got := range map[string][]string{"bounding": c.Bounding, "effective": c.Effective, "permitted": c.Permitted, "inheritable": c.Inheritable} {
				if !slices.Equal(got, tc.wantCaps) {
					t.Errorf("%s: %v, want %v", set, got, tc.wantCaps)
				}
			}
			if len(c.Ambient) != 0 {
				t.Errorf("ambient: %v (CAP_SYS_ADMIN must never survive)", c.Ambient)
			}
			if !s.Process.NoNewPrivileges {
				t.Error("noNewPrivileges not set")
			}
			has := func(typ specs.LinuxNamespaceType) bool {
				return slices.ContainsFunc(s.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == typ })
			}
			for _, typ := range []specs.LinuxNamespaceType{specs.IPCNamespace, specs.UTSNamespace, specs.CgroupNamespace} {
				if !has(typ) {
					t.Errorf("%s namespace not added", typ)
				}
			}
			if has(specs.NetworkNamespace) != tc.wantNet {
				t.Errorf("network namespace present %v, want %v", has(specs.NetworkNamespace), tc.wantNet)
			}
		})
	}
}

func TestTightenRefusesHostNamespace(t *testing.T) {
	s := engineConfig()
	s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: "/proc/1/ns/net"})
	_, err := Tighten(s, mustPolicy(t, `name = "t"`), TightenOptions{Bundle: testBundle, SameNamespace: func(specs.LinuxNamespaceType, string) (bool, error) { return true, nil }})
	if err == nil || !strings.Contains(err.Error(), "host's own") {
		t.Fatalf("joining the host's network namespace: err %v", err)
	}
	// The real check: this process's own namespace is the host's.
	if same, err := sameAsOwnNamespace(specs.NetworkNamespace, "/proc/self/ns/net"); !same || err != nil {
		t.Fatalf("sameAsOwnNamespace does not recognise /proc/self/ns/net: %v", err)
	}
	if _, err := sameAsOwnNamespace(specs.NetworkNamespace, "/nonexistent/ns"); err == nil {
		t.Fatal("a namespace path that cannot be inspected passed")
	}
}

func TestTightenMounts(t *testing.T) {
	root := t.TempDir()
	mk := func(p string) string {
		d := filepath.Join(root, p)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	work, ro, other, secret := mk("work"), mk("ro"), mk("other"), mk("home/.ssh")
	home := filepath.Dir(secret)
	link := filepath.Join(root, "link-to-secret")
	os.Symlink(secret, link)
	p := mustPolicy(t, "name = \"t\"\n[fs]\nwrite = [\""+work+"\"]\nread = [\""+ro+"\", \""+home+"\"]\ndeny = [\""+secret+"\"]\n")
	// The same with a denied path that does not exist under the writable
	// folder: refused (below), while under a read-only bind it is fine.
	pAbsent := mustPolicy(t, "name = \"t\"\n[fs]\nwrite = [\""+work+"\"]\nread = [\""+ro+"\"]\ndeny = [\""+work+"/.ssh\", \""+ro+"/.ssh\"]\n")
	if _, err := Tighten(engineConfig(bind(ro, "/ro")), pAbsent, TightenOptions{Bundle: testBundle, SameNamespace: notHost}); err != nil {
		t.Errorf("an absent denied path under a read-only bind: %v", err)
	}

	s := engineConfig(bind(work, "/work", "rw"), bind(ro, "/ro", "rw"), bind(home, "/home"))
	if _, err := Tighten(s, p, TightenOptions{Bundle: testBundle, SameNamespace: notHost}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dst       string
		want, not []string
	}{
		{"/work", []string{"rw", "noexec", "nosuid", "nodev", "rnoexec", "rnosuid", "rnodev"}, []string{"ro", "rro"}},
		{"/ro", []string{"ro", "rro", "nosuid", "nodev", "rnosuid", "rnodev"}, []string{"rw"}},
		{"/home", []string{"ro", "rro"}, nil},
		{"/sys", []string{"ro"}, []string{"rw"}},
		{"/dev/shm", []string{"noexec", "nosuid", "nodev"}, nil},
		{"/tmp", []string{"noexec", "nosuid", "nodev"}, nil},
		{"/dev", []string{"nosuid"}, []string{"nodev"}},
	} {
		m := findMount(s, tc.dst)
		if m == nil {
			t.Errorf("%s: mount missing", tc.dst)
			continue
		}
		for _, o := range tc.want {
			if !slices.Contains(m.Options, o) {
				t.Errorf("%s: options %v lack %s", tc.dst, m.Options, o)
			}
		}
		for _, o := range tc.not {
			if slices.Contains(m.Options, o) {
				t.Errorf("%s: options %v must not hold %s", tc.dst, m.Options, o)
			}
		}
	}
	if !s.Root.Readonly {
		t.Error("root not read-only")
	}
	if !slices.Contains(s.Linux.MaskedPaths, "/home/.ssh") {
		t.Errorf("the denied folder under a bind is not masked: %v", s.Linux.MaskedPaths)
	}
	for _, m := range []string{"/proc/kcore", "/sys/firmware"} {
		if !slices.Contains(s.Linux.MaskedPaths, m) {
			t.Errorf("%s not masked", m)
		}
	}

	for _, tc := range []struct {
		name  string
		mount specs.Mount
		want  string
	}{
		{"denied folder", bind(secret, "/keys"), "denies"},
		{"denied folder through a symlink", bind(link, "/keys"), "denies"},
		{"block device file system", specs.Mount{Destination: "/disk", Type: "ext4", Source: "/dev/sda1"}, "not allowed"},
		{"missing source", bind(filepath.Join(root, "absent"), "/x"), "source"},
		{"folder the policy does not grant", bind(other, "/other"), "grants no access"},
		{"the host's root", bind("/", "/host"), "grants no access"},
		{"relative source", bind("work", "/w"), "relative source"},
		{"absent denied path under a writable bind", bind(work, "/w2", "rw"), "does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol := p
			if tc.mount.Destination == "/w2" {
				pol = pAbsent
			}
			_, err := Tighten(engineConfig(tc.mount), pol, TightenOptions{Bundle: testBundle, SameNamespace: notHost})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one with %q", err, tc.want)
			}
		})
	}
}

func TestTightenDevicesAndResources(t *testing.T) {
	s := engineConfig()
	p := mustPolicy(t, "name = \"t\"\n[limits]\nmemory = \"64MiB\"\npids = 32\ncpu = 0.5\n")
	if _, err := Tighten(s, p, TightenOptions{Bundle: testBundle, SameNamespace: notHost}); err != nil {
		t.Fatal(err)
	}
	if len(s.Linux.Devices) != 1 || s.Linux.Devices[0].Path != "/dev/null" {
		t.Errorf("devices %v, want /dev/null only", s.Linux.Devices)
	}
	for _, r := range s.Linux.Resources.Devices {
		if r.Allow && !isStandardDevice(r.Type, r.Major, r.Minor) {
			t.Errorf("device cgroup grant survived: %+v", r)
		}
	}
	if len(s.Linux.Resources.Devices) != 1+len(standardDevices) || s.Linux.Resources.Devices[0].Allow {
		t.Errorf("device rules %+v: want deny-all then the standard devices", s.Linux.Resources.Devices)
	}
	r := s.Linux.Resources
	if *r.Memory.Limit != 64<<20 || *r.Memory.Swap != 64<<20 {
		t.Errorf("memory %d swap %d, want the policy's 64MiB and no swap", *r.Memory.Limit, *r.Memory.Swap)
	}
	if *r.Pids.Limit != 32 {
		t.Errorf("pids %d", *r.Pids.Limit)
	}
	if *r.CPU.Quota != 50_000 || *r.CPU.Period != 100_000 {
		t.Errorf("cpu %d/%d", *r.CPU.Quota, *r.CPU.Period)
	}

	// Lower values of the config's own stay.
	low, lowPids, quota := int64(16<<20), int64(8), int64(10_000)
	r = &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &low}, Pids: &specs.LinuxPids{Limit: &lowPids}, CPU: &specs.LinuxCPU{Quota: &quota}}
	ClampResources(r, p.Limits, nil)
	if *r.Memory.Limit != low || *r.Pids.Limit != 8 || *r.CPU.Quota != 10_000 {
		t.Errorf("lower limits changed: %d %d %d", *r.Memory.Limit, *r.Pids.Limit, *r.CPU.Quota)
	}
	// An update asking for more (or for unlimited, -1) gets the policy's.
	high, unlimited := int64(1<<40), int64(-1)
	r = &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &high}, Pids: &specs.LinuxPids{Limit: &unlimited}}
	ClampResources(r, p.Limits, nil)
	if *r.Memory.Limit != 64<<20 || *r.Pids.Limit != 32 {
		t.Errorf("raising update: memory %d pids %d", *r.Memory.Limit, *r.Pids.Limit)
	}
}

func TestTightenAnnotations(t *testing.T) {
	p := mustPolicy(t, "name = \"t\"\n[limits]\nmemory = \"64MiB\"\npids = 32\n")
	for _, tc := range []struct {
		ann     map[string]string
		wantMem int64
		wantErr string
	}{
		{map[string]string{"dev.warden.limits.memory": "32MiB"}, 32 << 20, ""},
		{map[string]string{"dev.warden.limits.pids": "8"}, 64 << 20, ""},
		{map[string]string{"dev.warden.limits.memory": "1GiB"}, 0, "can only lower"},
		{map[string]string{"dev.warden.limits.pids": "33"}, 0, "can only lower"},
		{map[string]string{"dev.warden.limits.memory": "lots"}, 0, "not a size"},
		{map[string]string{"dev.warden.limits.pids": "1\nname = \"x\""}, 0, "annotation"},
		{map[string]string{"dev.warden.limits.swap": "1"}, 0, "annotation"},
	} {
		s := engineConfig()
		s.Annotations = tc.ann
		_, err := Tighten(s, p, TightenOptions{Bundle: testBundle, SameNamespace: notHost})
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: err %v, want %q", tc.ann, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v: %v", tc.ann, err)
			continue
		}
		if *s.Linux.Resources.Memory.Limit != tc.wantMem {
			t.Errorf("%v: memory %d, want %d", tc.ann, *s.Linux.Resources.Memory.Limit, tc.wantMem)
		}
		if s.Annotations[AnnotationPolicy] != "t" {
			t.Errorf("applied policy not recorded: %v", s.Annotations)
		}
	}
}

func TestTightenSeccomp(t *testing.T) {
	p := mustPolicy(t, `name = "t"`)
	s := engineConfig()
	if _, err := Tighten(s, p, TightenOptions{Bundle: testBundle, SameNamespace: notHost}); err != nil {
		t.Fatal(err)
	}
	if s.Linux.Seccomp == nil || s.Linux.Seccomp.DefaultAction == specs.ActAllow {
		t.Fatalf("no seccomp allow-list: %+v", s.Linux.Seccomp)
	}
	// A config's own profile that refuses a syscall warden allows keeps
	// it refused.
	s = engineConfig()
	s.Linux.Seccomp = &specs.LinuxSeccomp{DefaultAction: specs.ActAllow, Syscalls: []specs.LinuxSyscall{{Names: []string{"mkdir"}, Action: specs.ActErrno}}}
	if _, err := Tighten(s, p, TightenOptions{Bundle: testBundle, SameNamespace: notHost}); err != nil {
		t.Fatal(err)
	}
	for _, r := range s.Linux.Seccomp.Syscalls {
		if r.Action == specs.ActAllow && slices.Contains(r.Names, "mkdir") {
			t.Fatal("mkdir allowed although the config's profile refuses it")
		}
	}
}

// A config without process.capabilities would keep the runtime's full
// set in libcontainer: Tighten (and TightenProcess, for exec) gives it
// empty sets, while a listed capability the operator allows is kept.
func TestTightenNilCapabilitiesMeanNone(t *testing.T) {
	s := engineConfig()
	s.Process.Capabilities = nil
	if _, err := Tighten(s, mustPolicy(t, "name = \"t\"\n"), TightenOptions{Bundle: testBundle, Capabilities: []string{"CAP_CHOWN"}, SameNamespace: notHost}); err != nil {
		t.Fatal(err)
	}
	checkEmpty := func(what string, c *specs.LinuxCapabilities) {
		t.Helper()
		if c == nil {
			t.Fatalf("%s: capabilities still nil: the process would keep the runtime's own", what)
		}
		for set, got := range map[string][]string{"bounding": c.Bounding, "effective": c.Effective, "permitted": c.Permitted, "inheritable": c.Inheritable, "ambient": c.Ambient} {
			if got == nil || len(got) != 0 {
				t.Errorf("%s: %s set %#v, want empty (not nil)", what, set, got)
			}
		}
	}
	checkEmpty("init", s.Process.Capabilities)
	exec := &specs.Process{Args: []string{"sh"}}
	TightenProcess(exec, []string{"CAP_CHOWN"}, nil)
	checkEmpty("exec", exec.Capabilities)
	// The allowed half: a capability both asked for and allowed stays.
	asked := &specs.Process{Args: []string{"sh"}, Capabilities: &specs.LinuxCapabilities{Effective: []string{"CAP_CHOWN", "CAP_SYS_ADMIN"}}}
	TightenProcess(asked, []string{"CAP_CHOWN"}, nil)
	if !slices.Equal(asked.Capabilities.Effective, []string{"CAP_CHOWN"}) {
		t.Errorf("effective %v, want [CAP_CHOWN]", asked.Capabilities.Effective)
	}
}

func findOpts(s *specs.Spec, dst string) []string {
	if m := findMount(s, dst); m != nil {
		return m.Options
	}
	return nil
}

// libcontainer applies mount options in order: a later rw, exec, suid or
// dev (or their recursive forms) would undo what Tighten sets, and a
// shared mount would propagate the container's mounts to the host.
func TestTightenMountOptionOrder(t *testing.T) {
	dir := t.TempDir()
	p := mustPolicy(t, "name = \"t\"\n[fs]\nread = [\""+dir+"\"]\n")
	s := engineConfig(
		specs.Mount{Destination: "/a", Type: "bind", Source: dir, Options: []string{"bind", "ro", "rw"}},
		specs.Mount{Destination: "/b", Type: "bind", Source: dir, Options: []string{"rbind", "rrw", "rsuid", "rdev", "rshared"}},
		specs.Mount{Destination: "/c", Type: "tmpfs", Source: "tmpfs", Options: []string{"noexec", "exec", "nosuid", "suid", "nodev", "dev", "shared"}},
	)
	s.Mounts[0].Options = []string{"exec", "suid", "dev"} // /proc
	s.Mounts[3].Options = []string{"ro", "rw"}            // /sys
	if _, err := Tighten(s, p, TightenOptions{Bundle: testBundle, SameNamespace: notHost}); err != nil {
		t.Fatal(err)
	}
	for _, dst := range []string{"/proc", "/a", "/b", "/c", "/sys"} {
		opts := findOpts(s, dst)
		for _, bad := range []string{"rw", "rrw", "exec", "rexec", "suid", "rsuid", "dev", "rdev", "shared", "rshared"} {
			if slices.Contains(opts, bad) {
				t.Errorf("%s keeps %q after Tighten: %v", dst, bad, opts)
			}
		}
	}
	for dst, want := range map[string][]string{
		"/a": {"ro", "rro", "rnosuid"}, "/b": {"ro", "rro", "rnodev"}, "/c": {"noexec", "nosuid", "nodev"}, "/sys": {"ro"}, "/proc": {"noexec", "nosuid", "nodev"},
	} {
		for _, w := range want {
			if !slices.Contains(findOpts(s, dst), w) {
				t.Errorf("%s: options %v lack %s", dst, findOpts(s, dst), w)
			}
		}
	}
}

// A second procfs (at /mnt/proc) would have none of /proc's masked and
// read-only paths: procfs is allowed only at /proc.
func TestTightenProcOnlyAtProc(t *testing.T) {
	p := mustPolicy(t, "name = \"t\"\n")
	if _, err := Tighten(engineConfig(), p, TightenOptions{Bundle: testBundle, SameNamespace: notHost}); err != nil {
		t.Fatalf("proc at /proc refused: %v", err)
	}
	for _, dst := range []string{"/mnt/proc", "/proc/../mnt", "/proc/sys"} {
		_, err := Tighten(engineConfig(specs.Mount{Destination: dst, Type: "proc", Source: "proc"}), p, TightenOptions{Bundle: testBundle, SameNamespace: notHost})
		if err == nil || !strings.Contains(err.Error(), "only the one at /proc") {
			t.Errorf("proc at %s: err %v, want a refusal", dst, err)
		}
	}
	// sysfs too: a second one would escape the masks on /sys/firmware...
	for _, dst := range []string{"/h", "/sys/../h", "/sys/fs"} {
		_, err := Tighten(engineConfig(specs.Mount{Destination: dst, Type: "sysfs", Source: "sysfs"}), p, TightenOptions{Bundle: testBundle, SameNamespace: notHost})
		if err == nil || !strings.Contains(err.Error(), "only the one at /sys") {
			t.Errorf("sysfs at %s: err %v, want a refusal", dst, err)
		}
	}
}

// A bind the policy does not grant is refused, except the files an engine
// makes for this container (docker's containers/ID/hosts...) and what the
// operator's BindAllow lists; sockets and devices need a write grant.
func TestTightenBindSources(t *testing.T) {
	root := t.TempDir()
	id := "0123456789abcdef0123"
	engine := filepath.Join(root, "containers", id)
	other := filepath.Join(root, "containers", "fedcba98765432100000")
	readable, writable, allowed := filepath.Join(root, "r"), filepath.Join(root, "w"), filepath.Join(root, "allowed")
	for _, d := range []string{filepath.Join(engine, "mounts", "shm"), filepath.Join(other, "mounts", "shm"), readable, writable, allowed} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(engine, "hosts"), filepath.Join(engine, "resolv.conf"), filepath.Join(other, "hosts"), filepath.Join(engine, "config.v2.json")} {
		os.WriteFile(f, []byte("x"), 0o644)
	}
	sock := func(dir string) string {
		path := filepath.Join(dir, "s.sock")
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
			t.Fatal(err)
		}
		return path
	}
	rsock, wsock := sock(readable), sock(writable)
	p := mustPolicy(t, "name = \"t\"\n[fs]\nread = [\""+readable+"\"]\nwrite = [\""+writable+"\"]\n")
	opts := TightenOptions{Bundle: testBundle, SameNamespace: notHost, ID: id, BindAllow: []string{filepath.Join(root, "allow*")}}
	for _, src := range []string{filepath.Join(engine, "hosts"), filepath.Join(engine, "resolv.conf"), filepath.Join(engine, "mounts", "shm"), readable, writable, wsock, allowed, "/dev/null"} {
		s := engineConfig(bind(src, "/x"))
		if src == "/dev/null" {
			continue
		}
		if _, err := Tighten(s, p, opts); err != nil {
			t.Errorf("bind of %s refused: %v", src, err)
		} else if src != writable && src != wsock && !slices.Contains(findOpts(s, "/x"), "rro") {
			t.Errorf("bind of %s not read-only: %v", src, findOpts(s, "/x"))
		}
	}
	for src, want := range map[string]string{
		filepath.Join(other, "hosts"):           "grants no access",
		filepath.Join(engine, "config.v2.json"): "grants no access",
		rsock:                                   "socket or device",
		"/dev/null":                             "grants no access",
		"/":                                     "grants no access",
	} {
		if _, err := Tighten(engineConfig(bind(src, "/x")), p, opts); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("bind of %s: err %v, want one with %q", src, err, want)
		}
	}
	dp := mustPolicy(t, "name = \"t\"\n[fs]\nread = [\"/dev\"]\n")
	if _, err := Tighten(engineConfig(bind("/dev/null", "/x")), dp, opts); err == nil || !strings.Contains(err.Error(), "socket or device") {
		t.Errorf("read-granted device /dev/null: err %v, want a refusal", err)
	}
}

// Host network devices moved into the container would leave the host
// (and be deleted by the no-network cleanup): refused under a policy.
func TestTightenRefusesNetDevices(t *testing.T) {
	p := mustPolicy(t, "name = \"t\"\n[network]\nallow = [\"example.com:443\"]\n")
	s := engineConfig()
	s.Linux.NetDevices = map[string]specs.LinuxNetDevice{"eth1": {Name: "eth9"}}
	if _, err := Tighten(s, p, TightenOptions{Bundle: testBundle, SameNamespace: notHost}); err == nil || !strings.Contains(err.Error(), "netDevices") || !strings.Contains(err.Error(), "eth1") {
		t.Fatalf("netDevices under a policy: err %v, want a refusal naming eth1", err)
	}
	if _, err := Tighten(engineConfig(), p, TightenOptions{Bundle: testBundle, SameNamespace: notHost}); err != nil {
		t.Fatalf("the same config without netDevices: %v", err)
	}
}

// Real-time scheduling, a negative nice or OOM score, real-time I/O
// priority and rlimits allowing them would let a container run ahead of
// the host (a SCHED_FIFO task ignores the cpu quota); cgroup v2 files and
// huge pages would bypass the memory limit. Ordinary values are kept.
func TestTightenSchedulingAndRealtime(t *testing.T) {
	p := mustPolicy(t, "name = \"t\"\n")
	s := engineConfig()
	rt, per := int64(950000), uint64(1000000)
	burst := uint64(10_000_000)
	s.Linux.Resources.CPU = &specs.LinuxCPU{RealtimeRuntime: &rt, RealtimePeriod: &per, Burst: &burst}
	s.Linux.Resources.Unified = map[string]string{"memory.max": "max"}
	s.Linux.Resources.HugepageLimits = []specs.LinuxHugepageLimit{{Pagesize: "2MB", Limit: 1 << 40}}
	s.Process.Scheduler = &specs.Scheduler{Policy: specs.SchedFIFO, Priority: 99}
	s.Process.IOPriority = &specs.LinuxIOPriority{Class: specs.IOPRIO_CLASS_RT, Priority: 0}
	adj := -1000
	s.Process.OOMScoreAdj = &adj
	s.Process.Rlimits = []specs.POSIXRlimit{{Type: "RLIMIT_RTPRIO", Hard: 99, Soft: 99}, {Type: "RLIMIT_NICE", Hard: 40, Soft: 40}, {Type: "RLIMIT_NOFILE", Hard: 4096, Soft: 1024}, {Type: "RLIMIT_SIGPENDING", Hard: 1 << 20, Soft: 100}}
	if _, err := Tighten(s, p, TightenOptions{Bundle: testBundle, SameNamespace: notHost}); err != nil {
		t.Fatal(err)
	}
	if s.Process.Scheduler != nil || s.Process.IOPriority != nil || *s.Process.OOMScoreAdj != 0 {
		t.Errorf("scheduler %+v, ioPriority %+v, oomScoreAdj %d kept", s.Process.Scheduler, s.Process.IOPriority, *s.Process.OOMScoreAdj)
	}
	if c := s.Linux.Resources.CPU; c.RealtimeRuntime != nil || c.RealtimePeriod != nil || c.Burst != nil {
		t.Errorf("cpu real-time budget or burst kept: %+v", c)
	}
	if len(s.Linux.Resources.Unified) != 0 || s.Linux.Resources.HugepageLimits[0].Limit != 0 {
		t.Errorf("unified %v, hugepages %+v kept", s.Linux.Resources.Unified, s.Linux.Resources.HugepageLimits)
	}
	// RLIMIT_NICE: at most 20, and at most the runtime's own hard limit
	// (the container's init could not set more: "error setting rlimit").
	var own unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NICE, &own); err != nil {
		t.Fatal(err)
	}
	nice := min(20, own.Max)
	// Pending signals and message queue bytes: lowered, or added when
	// absent, under the runtime's own hard limits.
	if err := unix.Getrlimit(unix.RLIMIT_SIGPENDING, &own); err != nil {
		t.Fatal(err)
	}
	sig := min(1024, own.Max)
	if err := unix.Getrlimit(unix.RLIMIT_MSGQUEUE, &own); err != nil {
		t.Fatal(err)
	}
	mq := min(204800, own.Max)
	want := []specs.POSIXRlimit{{Type: "RLIMIT_RTPRIO"}, {Type: "RLIMIT_NICE", Hard: nice, Soft: nice}, {Type: "RLIMIT_NOFILE", Hard: 4096, Soft: 1024},
		{Type: "RLIMIT_SIGPENDING", Hard: sig, Soft: min(100, sig)}, {Type: "RLIMIT_MSGQUEUE", Hard: mq, Soft: mq}}
	if !slices.Equal(s.Process.Rlimits, want) {
		t.Errorf("rlimits %+v, want %+v", s.Process.Rlimits, want)
	}
	// The allowed half, for an exec'd process too: a batch scheduler with
	// a positive nice, best-effort I/O and a positive OOM score stay.
	ok := 500
	e := &specs.Process{Args: []string{"sh"}, Scheduler: &specs.Scheduler{Policy: specs.SchedBatch, Nice: 5},
		IOPriority: &specs.LinuxIOPriority{Class: specs.IOPRIO_CLASS_BE, Priority: 4}, OOMScoreAdj: &ok}
	TightenProcess(e, nil, nil)
	if e.Scheduler == nil || e.Scheduler.Nice != 5 || e.IOPriority == nil || *e.OOMScoreAdj != 500 {
		t.Errorf("ordinary scheduling changed: %+v %+v %d", e.Scheduler, e.IOPriority, *e.OOMScoreAdj)
	}
	e.Scheduler = &specs.Scheduler{Policy: specs.SchedRR, Priority: 1}
	TightenProcess(e, nil, nil)
	if e.Scheduler != nil {
		t.Errorf("exec: SCHED_RR kept")
	}
}

// Shared propagation (of the root or a bind) would carry the container's
// mounts to the host: the root becomes rslave, shared options go; a
// private or slave propagation asked for is kept.
func TestTightenPropagation(t *testing.T) {
	p := mustPolicy(t, "name = \"t\"\n[fs]\nwrite = [\"/tmp\"]\n")
	for asked, want := range map[string]string{"shared": "rslave", "rshared": "rslave", "private": "private", "rslave": "rslave", "": ""} {
		s := engineConfig(specs.Mount{Destination: "/w", Type: "bind", Source: t.TempDir(), Options: []string{"rbind", "rshared"}})
		s.Linux.RootfsPropagation = asked
		if _, err := Tighten(s, p, TightenOptions{Bundle: testBundle, SameNamespace: notHost}); err != nil {
			t.Fatal(err)
		}
		if s.Linux.RootfsPropagation != want {
			t.Errorf("rootfsPropagation %q became %q, want %q", asked, s.Linux.RootfsPropagation, want)
		}
		if opts := findOpts(s, "/w"); slices.Contains(opts, "rshared") || !slices.Contains(opts, "rbind") {
			t.Errorf("/w options %v: rshared kept or rbind lost", opts)
		}
	}
}

// Hooks run as root on the host: under a policy only docker's
// libnetwork-setkey (dockerd as /proc/PID/exe) and the operator's
// HookAllow programs may run; the path becomes the program checked.
func TestTightenHooks(t *testing.T) {
	p := mustPolicy(t, "name = \"t\"\n")
	allowed := filepath.Join(t.TempDir(), "hook")
	os.WriteFile(allowed, []byte("#!/bin/sh\n"), 0o755)
	opts := TightenOptions{Bundle: testBundle, SameNamespace: notHost, HookAllow: []string{allowed}}
	s := engineConfig()
	//lint:ignore SA1019 docker 20.10 still writes prestart hooks
	s.Hooks = &specs.Hooks{Prestart: []specs.Hook{{Path: allowed, Args: []string{"hook"}}}, Poststop: []specs.Hook{{Path: allowed}}}
	if _, err := Tighten(s, p, opts); err != nil {
		t.Fatalf("allowed hook refused: %v", err)
	}
	for name, h := range map[string]*specs.Hooks{
		"createRuntime shell":             {CreateRuntime: []specs.Hook{{Path: "/bin/sh", Args: []string{"sh", "-c", "id > /tmp/pwned"}}}},
		"poststop shell":                  {Poststop: []specs.Hook{{Path: "/bin/sh"}}},
		"relative path":                   {Prestart: []specs.Hook{{Path: "hook"}}},
		"another process's program":       {Prestart: []specs.Hook{{Path: "/proc/self/exe", Args: []string{"libnetwork-setkey"}}}},
		"startContainer in the container": {StartContainer: []specs.Hook{{Path: "/bin/sh"}}},
	} {
		s := engineConfig()
		s.Hooks = h
		if _, err := Tighten(s, p, opts); err == nil || !strings.Contains(err.Error(), "hook-allow") {
			t.Errorf("%s: err %v, want a refusal", name, err)
		}
	}
}

// The host's own / as the container's root would expose every host file
// to the container's uid 0: refused; a root of its own is kept. A resctrl
// group (intelRdt) is dropped.
func TestTightenRootAndRdt(t *testing.T) {
	p := mustPolicy(t, "name = \"t\"\n")
	for _, root := range []string{"/", "/tmp/../"} {
		s := engineConfig()
		s.Root.Path = root
		if _, err := Tighten(s, p, TightenOptions{Bundle: testBundle, SameNamespace: notHost}); err == nil || !strings.Contains(err.Error(), "host's own root") {
			t.Errorf("root.path %s: err %v, want a refusal", root, err)
		}
	}
	// A host folder is not a root of the container's own (an overlay
	// mounted for it would be: the integration tests show that); a folder
	// in the bundle is; a root that does not resolve is refused.
	bundle := t.TempDir()
	for _, root := range []string{"/etc", "/home", "/usr/share", bundle} {
		s := engineConfig()
		s.Root.Path = root
		if _, err := Tighten(s, p, TightenOptions{SameNamespace: notHost, Bundle: filepath.Join(bundle, "b")}); err == nil || !strings.Contains(err.Error(), "a folder of the host's") {
			t.Errorf("root.path %s: err %v, want a refusal", root, err)
		}
	}
	s := engineConfig()
	s.Root.Path = filepath.Join(bundle, "missing")
	if _, err := Tighten(s, p, TightenOptions{SameNamespace: notHost, Bundle: bundle}); err == nil || !strings.Contains(err.Error(), "root.path") {
		t.Errorf("a root that does not exist: err %v, want a refusal", err)
	}
	s = engineConfig()
	s.Root.Path = filepath.Join(bundle, "rootfs")
	os.Mkdir(s.Root.Path, 0o755)
	s.Linux.IntelRdt = &specs.LinuxIntelRdt{ClosID: "host-group"}
	if _, err := Tighten(s, p, TightenOptions{SameNamespace: notHost, Bundle: bundle}); err != nil {
		t.Fatalf("a root of its own: %v", err)
	}
	if s.Linux.IntelRdt != nil {
		t.Errorf("intelRdt kept: %+v", s.Linux.IntelRdt)
	}
}

// A namespace given by path: never a mount or user one; pid, ipc, uts and
// network only when a container of the same runtime holds it (its network
// closed when the policy allows none), or a CRI sandbox's fresh CNI
// network namespace.
func TestTightenJoinedNamespaces(t *testing.T) {
	closed := mustPolicy(t, "name = \"t\"\n")
	open := mustPolicy(t, "name = \"t\"\n[network]\nallow = [\"example.com:443\"]\n")
	cni := filepath.Join("/run/netns", "cni-"+filepath.Base(t.TempDir()))
	busy := cni + "-busy"
	if err := os.MkdirAll("/run/netns", 0o755); err == nil {
		for _, f := range []string{cni, busy} {
			if f, err := os.Create(f); err == nil {
				f.Close()
				defer os.Remove(f.Name())
			}
		}
	}
	owners := map[string]NamespaceOwner{
		"/proc/10/ns/net":    {Container: "pod", ClosedNetwork: true},
		"/proc/11/ns/net":    {Container: "web"},
		"/proc/10/ns/pid":    {Container: "pod"},
		"/proc/10/ns/user":   {Container: "pod"},
		"/proc/10/ns/cgroup": {Container: "pod"},
		"/proc/12/ns/pid":    {},
		busy:                 {InUse: true},
	}
	owner := func(_ specs.LinuxNamespaceType, path string) (NamespaceOwner, error) { return owners[path], nil }
	sandbox := map[string]string{"io.kubernetes.cri.container-type": "sandbox"}
	for _, tc := range []struct {
		name string
		typ  specs.LinuxNamespaceType
		path string
		p    *policies.Policy
		ann  map[string]string
		want string // "" allowed
	}{
		{"another process's mount namespace", specs.MountNamespace, "/proc/10/ns/mnt", closed, nil, "mount namespace is not allowed"},
		{"a user namespace outside the root", specs.UserNamespace, "/proc/12/ns/user", closed, nil, "not held by a container of this warden"},
		{"a time namespace", specs.TimeNamespace, "/proc/10/ns/time", closed, nil, "only pid, ipc, uts, network, cgroup and user"},
		{"a pod's user namespace", specs.UserNamespace, "/proc/10/ns/user", closed, nil, ""},
		{"a pod's cgroup namespace", specs.CgroupNamespace, "/proc/10/ns/cgroup", closed, nil, ""},
		{"a process outside the root", specs.PIDNamespace, "/proc/12/ns/pid", closed, nil, "not held by a container of this warden"},
		{"a named netns", specs.NetworkNamespace, "/var/run/netns/victim", closed, nil, "not held by a container of this warden"},
		{"a CNI netns outside a sandbox", specs.NetworkNamespace, cni, closed, nil, "not held by a container of this warden"},
		{"an open network under a closed policy", specs.NetworkNamespace, "/proc/11/ns/net", closed, nil, "not closed"},
		{"a busy CNI netns for a sandbox", specs.NetworkNamespace, busy, closed, sandbox, "must be a fresh one"},
		{"a pod's pid namespace", specs.PIDNamespace, "/proc/10/ns/pid", closed, nil, ""},
		{"a pod's closed network", specs.NetworkNamespace, "/proc/10/ns/net", closed, nil, ""},
		{"an open network under an open policy", specs.NetworkNamespace, "/proc/11/ns/net", open, nil, ""},
		{"a sandbox's fresh CNI netns", specs.NetworkNamespace, cni, closed, sandbox, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if strings.HasPrefix(tc.path, cni) {
				if _, err := os.Stat(cni); err != nil {
					t.Skip("needs root for /run/netns")
				}
			}
			s := engineConfig()
			s.Annotations = tc.ann
			s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: tc.typ, Path: tc.path})
			_, err := Tighten(s, tc.p, TightenOptions{Bundle: testBundle, SameNamespace: notHost, NamespaceOwner: owner})
			if tc.want == "" && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n")) {
				t.Fatalf("err %v, want one line with %q", err, tc.want)
			}
		})
	}
}

// docker's libnetwork-setkey hook connects the container named in its
// arguments: only the one being created.
func TestTightenSetkeyID(t *testing.T) {
	id := "0123456789abcdef0123"
	other := "fedcba98765432100000"
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"libnetwork-setkey", "-exec-root=/var/run/docker", id, "ctrl"}, true},
		{[]string{"libnetwork-setkey", id, "ctrl"}, true},
		{[]string{"libnetwork-setkey", "-exec-root=/var/run/docker", other, "ctrl"}, false},
		{[]string{"libnetwork-setkey", other, "ctrl"}, false},
		{[]string{"libnetwork-setkey", "-exec-root", id, other, "ctrl"}, false},
		{[]string{"libnetwork-setkey", id}, false},
		{[]string{"libnetwork-setkey", id, "ctrl", "extra"}, false},
	} {
		err := setkeyFor(tc.args, id)
		if tc.ok != (err == nil) || err != nil && !strings.Contains(err.Error(), "container being created") && !strings.Contains(err.Error(), "-flag=value") {
			t.Errorf("%v: err %v, want ok %v", tc.args, err, tc.ok)
		}
	}
	if err := setkeyFor([]string{"libnetwork-setkey", id, "ctrl"}, ""); err == nil {
		t.Error("a setkey hook passed with no container id known")
	}
	// Through Tighten, with a real dockerd when the host has one.
	for _, d := range dockerdPaths {
		if _, err := os.Stat(d); err != nil {
			continue
		}
		p := mustPolicy(t, "name = \"t\"\n")
		for hid, ok := range map[string]bool{id: true, other: false} {
			s := engineConfig()
			//lint:ignore SA1019 docker 20.10 still writes prestart hooks
			s.Hooks = &specs.Hooks{Prestart: []specs.Hook{{Path: d, Args: []string{"libnetwork-setkey", "-exec-root=/var/run/docker", hid, "ctrl"}}}}
			_, err := Tighten(s, p, TightenOptions{Bundle: testBundle, SameNamespace: notHost, ID: id})
			if ok != (err == nil) || err != nil && (!strings.Contains(err.Error(), "container being created") || strings.Contains(err.Error(), "\n")) {
				t.Errorf("setkey hook for %s: err %v, want ok %v", hid, err, ok)
			}
		}
		break
	}
}

// The io.kubernetes.cri.sandbox-id annotation names the pod whose engine
// files a container may bind: trusted only for a CRI container whose
// sandbox is a container of the same runtime; an engine file must be of
// its kind (shm a folder, the others regular files).
func TestTightenSandboxFiles(t *testing.T) {
	root := t.TempDir()
	id, sb := "0123456789abcdef0123", "5555555555555555aaaa"
	dir := filepath.Join(root, "sandboxes", sb)
	own := filepath.Join(root, "containers", id)
	for _, d := range []string{filepath.Join(dir, "shm"), filepath.Join(own, "hosts"), own} {
		os.MkdirAll(d, 0o755)
	}
	os.WriteFile(filepath.Join(dir, "hosts"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(own, "hostname"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(own, "shm"), []byte("x"), 0o644)
	p := mustPolicy(t, "name = \"t\"\n")
	ours := func(s string) bool { return s == sb }
	cri := map[string]string{"io.kubernetes.cri.sandbox-id": sb, "io.kubernetes.cri.container-type": "container"}
	noType := map[string]string{"io.kubernetes.cri.sandbox-id": sb}
	for _, tc := range []struct {
		name  string
		src   string
		ann   map[string]string
		isCtr func(string) bool
		ok    bool
	}{
		{"a CRI container's sandbox hosts", filepath.Join(dir, "hosts"), cri, ours, true},
		{"a CRI container's sandbox shm", filepath.Join(dir, "shm"), cri, ours, true},
		{"sandbox-id without a CRI container type", filepath.Join(dir, "hosts"), noType, ours, false},
		{"a sandbox this runtime does not run", filepath.Join(dir, "hosts"), cri, func(string) bool { return false }, false},
		{"no runtime check", filepath.Join(dir, "shm"), cri, nil, false},
		{"own hostname", filepath.Join(own, "hostname"), nil, nil, true},
		{"a folder named hosts", filepath.Join(own, "hosts"), nil, nil, false},
		{"a file named shm", filepath.Join(own, "shm"), nil, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := engineConfig(bind(tc.src, "/x"))
			s.Annotations = tc.ann
			_, err := Tighten(s, p, TightenOptions{Bundle: testBundle, SameNamespace: notHost, ID: id, IsContainer: tc.isCtr})
			if tc.ok != (err == nil) || err != nil && !strings.Contains(err.Error(), "grants no access") {
				t.Fatalf("err %v, want ok %v", err, tc.ok)
			}
		})
	}
}

// runc makes device nodes where their path says: only directly under the
// container's own /dev tmpfs, never in a bind mount (on the host).
func TestTightenDevicePaths(t *testing.T) {
	w := t.TempDir()
	p := mustPolicy(t, "name = \"t\"\n[fs]\nwrite = [\""+w+"\"]\n")
	console := func(path string) specs.LinuxDevice {
		return specs.LinuxDevice{Path: path, Type: "c", Major: 5, Minor: 1}
	}
	for _, tc := range []struct {
		name   string
		dev    specs.LinuxDevice
		devMnt *specs.Mount
		want   string // "" allowed
	}{
		{"console in /dev", console("/dev/console"), nil, ""},
		{"a non-standard device in a /dev folder is dropped", specs.LinuxDevice{Path: "/dev/dri/card0", Type: "c", Major: 226}, nil, ""},
		{"console in a write grant", console("/w/console"), nil, "not directly under /dev"},
		{"console in a /dev folder", console("/dev/w/console"), nil, "not directly under /dev"},
		{"console through ..", console("/dev/../w/console"), nil, "not directly under /dev"},
		{"a non-standard device outside /dev", specs.LinuxDevice{Path: "/w/sda", Type: "b", Major: 8}, nil, "not directly under /dev"},
		{"/dev a bind", console("/dev/console"), &specs.Mount{Destination: "/dev", Type: "bind", Source: w, Options: []string{"rbind"}}, "/dev must be a tmpfs"},
		{"no /dev", console("/dev/console"), &specs.Mount{}, "/dev must be a tmpfs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := engineConfig()
			s.Linux.Devices = append(s.Linux.Devices, tc.dev)
			if tc.devMnt != nil {
				s.Mounts = slices.DeleteFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == "/dev" })
				if tc.devMnt.Destination != "" {
					s.Mounts = append(s.Mounts, *tc.devMnt)
				}
			}
			_, err := Tighten(s, p, TightenOptions{Bundle: testBundle, SameNamespace: notHost})
			if tc.want == "" && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("err %v, want one with %q", err, tc.want)
			}
		})
	}
}

// docker --network container:X binds X's hosts and resolv.conf: the
// engine files of the container whose network namespace is joined.
func TestTightenNetworkOwnerFiles(t *testing.T) {
	id, x := "0123456789abcdef0123", "7777777777777777bbbb"
	resolv := filepath.Join(t.TempDir(), "containers", x, "resolv.conf")
	os.MkdirAll(filepath.Dir(resolv), 0o755)
	os.WriteFile(resolv, []byte("x"), 0o644)
	p := mustPolicy(t, "name = \"t\"\n")
	owner := func(specs.LinuxNamespaceType, string) (NamespaceOwner, error) {
		return NamespaceOwner{Container: x, ClosedNetwork: true}, nil
	}
	for join, ok := range map[bool]bool{true: true, false: false} {
		s := engineConfig(bind(resolv, "/etc/resolv.conf"))
		if join {
			s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: "/proc/10/ns/net"})
		}
		_, err := Tighten(s, p, TightenOptions{Bundle: testBundle, SameNamespace: notHost, ID: id, NamespaceOwner: owner})
		if ok != (err == nil) {
			t.Errorf("joining %s's network %v: err %v, want ok %v", x, join, err, ok)
		}
	}
	// docker --ipc container:X binds X's shm; of X's files only that.
	shm := filepath.Join(filepath.Dir(resolv), "mounts", "shm")
	os.MkdirAll(shm, 0o755)
	for src, ok := range map[string]bool{shm: true, resolv: false} {
		s := engineConfig(bind(src, "/x"))
		s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.IPCNamespace, Path: "/proc/10/ns/ipc"})
		_, err := Tighten(s, p, TightenOptions{Bundle: testBundle, SameNamespace: notHost, ID: id, NamespaceOwner: owner})
		if ok != (err == nil) {
			t.Errorf("joining %s's IPC, binding %s: err %v, want ok %v", x, filepath.Base(src), err, ok)
		}
	}
}

// A mount entry may only describe a new mount: "remount" (in any mount
// type, alone or inside a comma list) and options unknown for the type
// are refused, as are a mount at / and two mounts at one destination;
// the options engines write are accepted.
func TestTightenMountVerbs(t *testing.T) {
	grant := t.TempDir()
	p := mustPolicy(t, "name = \"t\"\n[fs]\nwrite = ["+strconv.Quote(grant)+"]\n")
	tmpfs := func(dst string, opts ...string) specs.Mount {
		return specs.Mount{Destination: dst, Type: "tmpfs", Source: "tmpfs", Options: opts}
	}
	for name, tc := range map[string]struct {
		m    []specs.Mount
		want string
	}{
		"remount tmpfs":          {[]specs.Mount{tmpfs("/x", "remount", "rw")}, `"remount"`},
		"remount in a list":      {[]specs.Mount{tmpfs("/x", "ro,remount")}, `"remount"`},
		"remount mqueue":         {[]specs.Mount{{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"remount"}}}, `"remount"`},
		"remount devpts":         {[]specs.Mount{{Destination: "/dev/pts2", Type: "devpts", Source: "devpts", Options: []string{"remount", "rw"}}}, `"remount"`},
		"remount bind":           {[]specs.Mount{bind(grant, "/w", "remount")}, `"remount"`},
		"unknown tmpfs data":     {[]specs.Mount{tmpfs("/x", "foo=bar")}, `option "foo=bar" is not accepted for a tmpfs`},
		"data on a bind":         {[]specs.Mount{bind(grant, "/w", "size=1m")}, `is not accepted for a bind`},
		"data on sysfs":          {[]specs.Mount{{Destination: "/sys/x", Type: "sysfs", Source: "sysfs", Options: []string{"x"}}}, `not accepted`},
		"mount at /":             {[]specs.Mount{tmpfs("/")}, "container's root"},
		"mount at /.":            {[]specs.Mount{tmpfs("/.")}, "container's root"},
		"same destination twice": {[]specs.Mount{bind(grant, "/w"), tmpfs("/w/")}, "destination of two mounts"},
		"over an engine mount":   {[]specs.Mount{tmpfs("/dev/shm/")}, "destination of two mounts"},
		"idmap without userns":   {[]specs.Mount{bind(grant, "/w", "idmap")}, `"idmap" without a user namespace`},
		"own id mappings": {[]specs.Mount{{Destination: "/w", Type: "bind", Source: grant, Options: []string{"rbind"},
			UIDMappings: []specs.LinuxIDMapping{{ContainerID: 1000, HostID: 0, Size: 1}}}}, "uidMappings/gidMappings of its own"},
	} {
		_, err := Tighten(engineConfig(tc.m...), p, TightenOptions{Bundle: testBundle, SameNamespace: notHost})
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: err %v, want one line with %q", name, err, tc.want)
		}
	}
	// What docker and containerd write passes.
	ok := engineConfig(
		bind(grant, "/w", "rprivate", "rw", "nosuid", "nodev", "noexec", "nomand", ""),
		tmpfs("/run", "nosuid", "strictatime", "mode=755", "size=65536k", "tmpcopyup", "uid=1000", "gid=1000"),
		specs.Mount{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		specs.Mount{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"ro", "nosuid", "noexec", "nodev", "relatime"}},
	)
	ok.Mounts[2].Options = []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}
	if _, err := Tighten(ok, p, TightenOptions{Bundle: testBundle, SameNamespace: notHost}); err != nil {
		t.Fatalf("an engine's usual mount options: %v", err)
	}
	// idmap alone, in a container with a user namespace, takes its mappings.
	withUserns := engineConfig(bind(grant, "/w", "idmap"))
	withUserns.Linux.Namespaces = append(withUserns.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace})
	if _, err := Tighten(withUserns, p, TightenOptions{Bundle: testBundle, SameNamespace: notHost}); err != nil {
		t.Fatalf("idmap in a container with a user namespace: %v", err)
	}
	// containerd's CRI plugin mounts its default /dev/shm tmpfs and then
	// binds the pod's shm folder there: the hidden tmpfs is dropped, the
	// bind checked like any other. The other way round stays refused.
	cri := engineConfig(bind(grant, "/dev/shm", "rbind"))
	changes, err := Tighten(cri, p, TightenOptions{Bundle: testBundle, SameNamespace: notHost})
	if err != nil {
		t.Fatalf("a bind over the engine's /dev/shm tmpfs: %v", err)
	}
	var shm []specs.Mount
	for _, m := range cri.Mounts {
		if filepath.Clean(m.Destination) == "/dev/shm" {
			shm = append(shm, m)
		}
	}
	if len(shm) != 1 || shm[0].Source != grant || !slices.Contains(shm[0].Options, "noexec") {
		t.Fatalf("/dev/shm after tightening: %+v, want the granted bind alone, noexec (changes %v)", shm, changes)
	}
}

// testBundle is a bundle folder with a rootfs, where engineConfig's root is.
var testBundle = func() string {
	dir, err := os.MkdirTemp("", "warden-spec-bundle-")
	if err != nil {
		panic(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "rootfs"), 0o755); err != nil {
		panic(err)
	}
	return dir
}()
