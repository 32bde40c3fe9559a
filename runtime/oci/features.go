package oci

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/opencontainers/runc/libcontainer/capabilities"
	"github.com/opencontainers/runc/libcontainer/configs"
	libseccomp "github.com/opencontainers/runc/libcontainer/seccomp"
	"github.com/opencontainers/runc/libcontainer/specconv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/opencontainers/runtime-spec/specs-go/features"
)

// Features says what the OCI face supports. warden runs cgroupfs only
// (no systemd), without AppArmor, SELinux or checkpointing.
func Features(version, commit string) *features.Features {
	t, f := true, false
	feat := &features.Features{
		OCIVersionMin: "1.0.0",
		OCIVersionMax: specs.Version,
		Hooks:         configs.KnownHookNames(),
		MountOptions:  specconv.KnownMountOptions(),
		Annotations: map[string]string{
			"dev.warden.version":                         version,
			"dev.warden.commit":                          commit,
			"org.opencontainers.runc.checkpoint.enabled": "false",
		},
		Linux: &features.Linux{
			Namespaces:      specconv.KnownNamespaces(),
			Capabilities:    capabilities.KnownCapabilities(),
			Cgroup:          &features.Cgroup{V1: &t, V2: &t, Systemd: &f, SystemdUser: &f},
			Apparmor:        &features.Apparmor{Enabled: &f},
			Selinux:         &features.Selinux{Enabled: &f},
			MountExtensions: &features.MountExtensions{IDMap: &features.IDMap{Enabled: &t}},
		},
		PotentiallyUnsafeConfigAnnotations: []string{"bundle", "org.systemd.property.", "org.criu.config"},
	}
	if libseccomp.Enabled {
		feat.Linux.Seccomp = &features.Seccomp{
			Enabled: &t, Actions: libseccomp.KnownActions(), Operators: libseccomp.KnownOperators(),
			Archs: libseccomp.KnownArchs(), KnownFlags: libseccomp.KnownFlags(), SupportedFlags: libseccomp.SupportedFlags(),
		}
		major, minor, patch := libseccomp.Version()
		feat.Annotations["io.github.seccomp.libseccomp.version"] = fmt.Sprintf("%d.%d.%d", major, minor, patch)
	}
	return feat
}

// WriteExampleSpec writes libcontainer's example config.json (the one
// `runc spec` writes) into a bundle, refusing to replace one.
func WriteExampleSpec(bundle string) error {
	path := filepath.Join(bundle, "config.json")
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("%s exists already; remove it first", path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	data, err := json.MarshalIndent(specconv.Example(), "", "\t")
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o666)
}
