package spec

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/spec/hostfs"
)

// check is one property every spec warden runs must have. It returns an
// error naming the spec field at fault.
type check func(s *specs.Spec, p *policies.Policy) error

var checks = []check{
	checkRoot,
	checkCapabilities,
	checkNoNewPrivileges,
	checkNamespaces,
	checkIdentity,
	checkMounts,
	checkProc,
	checkResources,
	checkSeccomp,
	checkEnv,
}

// Validate runs every check over a finished spec and joins what fails.
func Validate(s *specs.Spec, p *policies.Policy) error {
	if s == nil || s.Process == nil || s.Linux == nil || s.Root == nil {
		return errors.New("spec: process, root and linux sections are required")
	}
	var errs []error
	for _, c := range checks {
		if err := c(s, p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func checkRoot(s *specs.Spec, _ *policies.Policy) error {
	if !s.Root.Readonly {
		return errors.New("root.readonly: the root must be read-only")
	}
	return nil
}

func checkCapabilities(s *specs.Spec, _ *policies.Policy) error {
	c := s.Process.Capabilities
	if c == nil {
		return errors.New("process.capabilities: must be present and empty (absent means the runtime's default set)")
	}
	sets := map[string][]string{"bounding": c.Bounding, "effective": c.Effective,
		"inheritable": c.Inheritable, "permitted": c.Permitted, "ambient": c.Ambient}
	for name, set := range sets {
		if len(set) > 0 {
			return fmt.Errorf("process.capabilities.%s: must be empty, has %v", name, set)
		}
	}
	return nil
}

func checkNoNewPrivileges(s *specs.Spec, _ *policies.Policy) error {
	if !s.Process.NoNewPrivileges {
		return errors.New("process.noNewPrivileges: must be true")
	}
	return nil
}

var requiredNamespaces = []specs.LinuxNamespaceType{
	specs.PIDNamespace, specs.IPCNamespace, specs.UTSNamespace, specs.MountNamespace,
	specs.NetworkNamespace, specs.CgroupNamespace, specs.UserNamespace,
}

func checkNamespaces(s *specs.Spec, _ *policies.Policy) error {
	for _, want := range requiredNamespaces {
		i := slices.IndexFunc(s.Linux.Namespaces, func(ns specs.LinuxNamespace) bool { return ns.Type == want })
		if i < 0 {
			return fmt.Errorf("linux.namespaces: %s namespace missing", want)
		}
		if s.Linux.Namespaces[i].Path != "" {
			return fmt.Errorf("linux.namespaces[%d]: %s namespace must be new, not joined from %s", i, want, s.Linux.Namespaces[i].Path)
		}
	}
	return nil
}

func checkIdentity(s *specs.Spec, _ *policies.Policy) error {
	for field, maps := range map[string][]specs.LinuxIDMapping{"linux.uidMappings": s.Linux.UIDMappings, "linux.gidMappings": s.Linux.GIDMappings} {
		if len(maps) == 0 {
			return fmt.Errorf("%s: a user namespace mapping is required", field)
		}
		for i, m := range maps {
			if m.HostID == 0 || m.Size != 1 {
				return fmt.Errorf("%s[%d]: must map one id to an unprivileged host id, got host %d size %d", field, i, m.HostID, m.Size)
			}
		}
	}
	return nil
}

// checkMounts: anything writable is noexec,nosuid,nodev (but the
// workspace and /tmp under exec.workspace may lack noexec); no /sys; no
// recursive view of the host's root.
func checkMounts(s *specs.Spec, p *policies.Policy) error {
	for i, m := range s.Mounts {
		field := fmt.Sprintf("mounts[%d] (%s)", i, m.Destination)
		if m.Type == "sysfs" || hostfs.UnderAny(m.Destination, "/sys") {
			return fmt.Errorf("%s: the sandbox has no /sys", field)
		}
		if m.Source == "/" && (m.Type == "bind" || slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind")) {
			return fmt.Errorf("%s: binds the host's whole root", field)
		}
		if slices.Contains(m.Options, "ro") || m.Type == "proc" || m.Type == "mqueue" {
			continue
		}
		for _, opt := range []string{"noexec", "nosuid"} {
			if opt == "noexec" && p.Exec.Workspace && slices.Contains(ExecWritablePaths, m.Destination) {
				continue
			}
			if !slices.Contains(m.Options, opt) {
				return fmt.Errorf("%s: writable mount without %s", field, opt)
			}
		}
		if m.Type != "devpts" && m.Destination != "/dev" && !slices.Contains(m.Options, "nodev") {
			return fmt.Errorf("%s: writable mount without nodev", field)
		}
		if m.Type == "tmpfs" && !slices.ContainsFunc(m.Options, func(o string) bool { return strings.HasPrefix(o, "size=") }) {
			return fmt.Errorf("%s: tmpfs without a size limit", field)
		}
	}
	return nil
}

func checkProc(s *specs.Spec, _ *policies.Policy) error {
	for _, p := range maskedPaths {
		if !slices.Contains(s.Linux.MaskedPaths, p) {
			return fmt.Errorf("linux.maskedPaths: %s must be masked", p)
		}
	}
	for _, p := range readonlyPaths {
		if !slices.Contains(s.Linux.ReadonlyPaths, p) {
			return fmt.Errorf("linux.readonlyPaths: %s must be read-only", p)
		}
	}
	return nil
}

func checkResources(s *specs.Spec, p *policies.Policy) error {
	r := s.Linux.Resources
	switch {
	case r == nil:
		return errors.New("linux.resources: required")
	case r.Memory == nil || r.Memory.Limit == nil || *r.Memory.Limit <= 0:
		return errors.New("linux.resources.memory.limit: required")
	case *r.Memory.Limit > p.Limits.Memory:
		return fmt.Errorf("linux.resources.memory.limit: %d exceeds the policy's %d", *r.Memory.Limit, p.Limits.Memory)
	case r.Pids == nil || r.Pids.Limit == nil || *r.Pids.Limit <= 0 || *r.Pids.Limit > p.Limits.Pids:
		return errors.New("linux.resources.pids.limit: required, at most the policy's limits.pids")
	case r.CPU == nil || r.CPU.Quota == nil || *r.CPU.Quota <= 0:
		return errors.New("linux.resources.cpu.quota: required")
	case len(r.Devices) == 0 || r.Devices[0].Allow || r.Devices[0].Access != "rwm":
		return errors.New("linux.resources.devices[0]: must deny all devices first")
	}
	return nil
}

func checkSeccomp(s *specs.Spec, _ *policies.Policy) error {
	sc := s.Linux.Seccomp
	if sc == nil {
		return errors.New("linux.seccomp: a profile is required")
	}
	if sc.DefaultAction == specs.ActAllow || sc.DefaultAction == specs.ActLog {
		return fmt.Errorf("linux.seccomp.defaultAction: %s allows unknown syscalls; use an errno action", sc.DefaultAction)
	}
	return nil
}

// warden's own variables, always present.
var fixedEnv = []string{"PATH", "HOME", "USER"}

func checkEnv(s *specs.Spec, p *policies.Policy) error {
	for i, kv := range s.Process.Env {
		name, value, _ := strings.Cut(kv, "=")
		_, set := p.Env.Set[name]
		proxy := len(p.Network.Allow) > 0 && slices.Contains(proxyEnvNames, name)
		folder := slices.ContainsFunc(folders, func(f folderVar) bool {
			return f.name == name && f.inside == value && grantsUnder(p, "$"+name)
		})
		if !set && !proxy && !folder && !slices.Contains(p.Env.Allow, name) && !slices.Contains(fixedEnv, name) {
			return fmt.Errorf("process.env[%d]: %s is not allowed by the policy", i, name)
		}
	}
	return nil
}
