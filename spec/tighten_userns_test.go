package spec

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// The user namespace Tighten adds: the container's own engine files are
// bound id-mapped (root's inside, as on disk), a policy grant is not (the
// container's root writes there as its host uid), sysfs becomes a bind
// where the network namespace is the host user namespace's, and docker's
// ping_group_range is cut to the mapped groups. A config with a user
// namespace of its own keeps it.
func TestTightenUserNamespace(t *testing.T) {
	root, grant := t.TempDir(), t.TempDir()
	id := "0123456789abcdef0123"
	own := filepath.Join(root, "containers", id)
	os.MkdirAll(own, 0o755)
	os.WriteFile(filepath.Join(own, "hosts"), []byte("x"), 0o644)
	p := mustPolicy(t, "name = \"t\"\n[fs]\nwrite = [\""+grant+"\"]\n")
	m := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 3_145_728, Size: 65_536}}
	for _, tc := range []struct {
		name       string
		u          *UserNamespace
		ownUserns  bool
		wantUserns bool
		wantSys    string // the type of the /sys mount
	}{
		{"new", &UserNamespace{UIDMappings: m, GIDMappings: m}, false, true, "sysfs"},
		{"host-owned network namespace", &UserNamespace{UIDMappings: m, GIDMappings: m, HostSysfs: true}, false, true, "bind"},
		{"none", nil, false, false, "sysfs"},
		{"the config's own", &UserNamespace{UIDMappings: m, GIDMappings: m}, true, true, "sysfs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := engineConfig(bind(filepath.Join(own, "hosts"), "/etc/hosts"), bind(grant, "/work"))
			s.Linux.Sysctl = map[string]string{"net.ipv4.ping_group_range": "0 2147483647"}
			if tc.ownUserns {
				s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace})
				s.Linux.UIDMappings = []specs.LinuxIDMapping{{ContainerID: 0, HostID: 1000, Size: 1}}
			}
			if _, err := Tighten(s, p, TightenOptions{Bundle: testBundle, SameNamespace: notHost, ID: id, UserNamespace: tc.u}); err != nil {
				t.Fatal(err)
			}
			users := 0
			for _, ns := range s.Linux.Namespaces {
				if ns.Type == specs.UserNamespace {
					users++
				}
			}
			if users != map[bool]int{true: 1, false: 0}[tc.wantUserns] {
				t.Fatalf("%d user namespaces: %v", users, s.Linux.Namespaces)
			}
			added := tc.u != nil && !tc.ownUserns
			if added != slices.Equal(s.Linux.UIDMappings, m) {
				t.Fatalf("uid mappings %v", s.Linux.UIDMappings)
			}
			if got := slices.Contains(findOpts(s, "/etc/hosts"), "ridmap"); got != added {
				t.Fatalf("engine file id-mapped %v, want %v: %v", got, added, findOpts(s, "/etc/hosts"))
			}
			if opts := findOpts(s, "/work"); slices.Contains(opts, "idmap") || slices.Contains(opts, "ridmap") {
				t.Fatalf("a policy grant was id-mapped: %v", opts)
			}
			for _, mnt := range s.Mounts {
				if mnt.Destination == "/sys" && mnt.Type != tc.wantSys {
					t.Fatalf("/sys is %s %v, want %s", mnt.Type, mnt.Options, tc.wantSys)
				}
			}
			want := "0 2147483647"
			if added {
				want = "0 65535"
			}
			if got := s.Linux.Sysctl["net.ipv4.ping_group_range"]; got != want {
				t.Fatalf("ping_group_range %q, want %q", got, want)
			}
		})
	}
}
