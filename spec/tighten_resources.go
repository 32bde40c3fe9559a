package spec

import (
	"fmt"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/warden-sandbox/warden/policies"
)

// annotatedLimits lowers the policy's limits by the container's
// dev.warden.limits.* annotations; a value above the policy's is refused,
// so an annotation can never widen what the operator configured.
func annotatedLimits(l policies.Limits, ann map[string]string) (policies.Limits, error) {
	for k, v := range ann {
		name, ok := strings.CutPrefix(k, AnnotationLimitPrefix)
		if !ok {
			continue
		}
		q, err := policies.Parse(k, []byte(fmt.Sprintf("name = \"annotation\"\n[limits]\n%s = %s\n", tomlKey(name), tomlValue(name, v))))
		if err != nil {
			return l, fmt.Errorf("%w: annotation %s=%q: %v; valid keys are %smemory (\"128MiB\"), %spids (64), %scpu (0.5)",
				ErrInvalid, k, v, err, AnnotationLimitPrefix, AnnotationLimitPrefix, AnnotationLimitPrefix)
		}
		switch name {
		case "memory":
			if q.Limits.Memory > l.Memory {
				return l, fmt.Errorf("%w: annotation %s=%s is above the policy's %s; an annotation can only lower limits", ErrInvalid, k, v, policies.FormatSize(l.Memory))
			}
			l.Memory = q.Limits.Memory
		case "pids":
			if q.Limits.Pids > l.Pids {
				return l, fmt.Errorf("%w: annotation %s=%s is above the policy's %d; an annotation can only lower limits", ErrInvalid, k, v, l.Pids)
			}
			l.Pids = q.Limits.Pids
		case "cpu":
			if q.Limits.CPU > l.CPU {
				return l, fmt.Errorf("%w: annotation %s=%s is above the policy's %g; an annotation can only lower limits", ErrInvalid, k, v, l.CPU)
			}
			l.CPU = q.Limits.CPU
		default:
			return l, fmt.Errorf("%w: annotation %s: unknown limit; use %smemory, %spids or %scpu", ErrInvalid, k, AnnotationLimitPrefix, AnnotationLimitPrefix, AnnotationLimitPrefix)
		}
	}
	return l, nil
}

// tomlKey and tomlValue let the policy parser check an annotation's
// value with the same rules (units, bounds) as a policy file's.
func tomlKey(name string) string {
	if name == "memory" || name == "pids" || name == "cpu" {
		return name
	}
	return "unknown"
}

func tomlValue(name, v string) string {
	if name == "memory" {
		return fmt.Sprintf("%q", v)
	}
	for _, r := range v {
		if !strings.ContainsRune("0123456789.", r) {
			return `"bad"`
		}
	}
	if v == "" {
		return `"bad"`
	}
	return v
}

// standardDevices are the character devices (major, minor; -1 any) every
// container has; no other device node or device cgroup grant survives.
var standardDevices = [][2]int64{{1, 3}, {1, 5}, {1, 7}, {1, 8}, {1, 9}, {5, 0}, {5, 1}, {5, 2}, {136, -1}}

func isStandardDevice(typ string, major, minor *int64) bool {
	if typ != "c" || major == nil {
		return false
	}
	for _, d := range standardDevices {
		if *major == d[0] && (d[1] == -1 || minor != nil && *minor == d[1]) {
			return true
		}
	}
	return false
}

// devices: only the standard devices stay, directly under /dev, which
// must be the container's own tmpfs: runc makes device nodes where their
// path says, so one in a bind mount (or a /dev that is none) would be a
// node on the host, in a folder its users can reach.
func (t *tightener) devices() error {
	dev := -1
	for i, m := range t.s.Mounts {
		if filepath.Clean(m.Destination) == "/dev" {
			dev = i
		}
	}
	if dev == -1 || t.s.Mounts[dev].Type != "tmpfs" || isBind(t.s.Mounts[dev]) {
		return fmt.Errorf("%w: mounts: /dev must be a tmpfs of the container's own under policy %s (runc makes the device nodes there); add {\"destination\": \"/dev\", \"type\": \"tmpfs\", \"source\": \"tmpfs\"}", ErrInvalid, t.p.Name)
	}
	var devs []specs.LinuxDevice
	for _, d := range t.s.Linux.Devices {
		p := filepath.Clean(d.Path)
		inDev := strings.HasPrefix(p, "/dev/")
		std := isStandardDevice(d.Type, &d.Major, &d.Minor)
		if !inDev || std && filepath.Dir(p) != "/dev" {
			return fmt.Errorf("%w: linux.devices: %s is not directly under /dev; under policy %s a device node is made only in the container's own /dev (elsewhere it could be on the host); move it to /dev or remove it", ErrInvalid, d.Path, t.p.Name)
		}
		if std {
			devs = append(devs, d)
			continue
		}
		t.changef("devices: %s dropped", d.Path)
	}
	t.s.Linux.Devices = devs
	if t.s.Linux.Resources == nil {
		t.s.Linux.Resources = &specs.LinuxResources{}
	}
	// The device cgroup: everything denied, then the standard devices
	// (a privileged config asks for "all" instead, which goes).
	rules := []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}
	for _, r := range t.s.Linux.Resources.Devices {
		if r.Allow && !isStandardDevice(r.Type, r.Major, r.Minor) {
			t.changef("devices: cgroup grant %s %s dropped", r.Type, deviceNumber(r))
		}
	}
	for _, d := range standardDevices {
		major, minor := d[0], d[1]
		r := specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: &major, Access: "rwm"}
		if minor != -1 {
			r.Minor = &minor
		}
		rules = append(rules, r)
	}
	t.s.Linux.Resources.Devices = rules
	return nil
}

func deviceNumber(r specs.LinuxDeviceCgroup) string {
	f := func(p *int64) string {
		if p == nil {
			return "*"
		}
		return fmt.Sprint(*p)
	}
	return f(r.Major) + ":" + f(r.Minor)
}

// resources: memory, pids and cpu each become the smaller of the
// config's and the policy's; swap is off (memory+swap = memory).
func (t *tightener) resources() error {
	r := t.s.Linux.Resources
	ClampResources(r, t.limits, t.changef)
	return nil
}

// ClampResources lowers r to the limits (the policy's, after annotations):
// used at create and for every `update`, so no update can raise a limit
// above the policy.
func ClampResources(r *specs.LinuxResources, l policies.Limits, changef func(string, ...any)) {
	if changef == nil {
		changef = func(string, ...any) {}
	}
	if r.Memory == nil {
		r.Memory = &specs.LinuxMemory{}
	}
	mem := l.Memory
	if r.Memory.Limit != nil && *r.Memory.Limit > 0 && *r.Memory.Limit < mem {
		mem = *r.Memory.Limit
	} else if r.Memory.Limit == nil || *r.Memory.Limit <= 0 || *r.Memory.Limit > mem {
		changef("resources: memory limit %s (the policy's)", policies.FormatSize(mem))
	}
	r.Memory.Limit = &mem
	swap := mem
	r.Memory.Swap = &swap
	if r.Memory.Reservation != nil && *r.Memory.Reservation > mem {
		res := mem
		r.Memory.Reservation = &res
	}
	if r.Pids == nil {
		r.Pids = &specs.LinuxPids{}
	}
	pids := l.Pids
	if r.Pids.Limit != nil && *r.Pids.Limit > 0 && *r.Pids.Limit < pids {
		pids = *r.Pids.Limit
	} else {
		changef("resources: pids limit %d (the policy's)", pids)
	}
	r.Pids.Limit = &pids
	if r.CPU == nil {
		r.CPU = &specs.LinuxCPU{}
	}
	period := uint64(100_000)
	if r.CPU.Period != nil && *r.CPU.Period > 0 {
		period = *r.CPU.Period
	}
	quota := int64(l.CPU * float64(period))
	if r.CPU.Quota != nil && *r.CPU.Quota > 0 && *r.CPU.Quota < quota {
		quota = *r.CPU.Quota
	} else {
		changef("resources: cpu quota %d/%d (the policy's %g cores)", quota, period, l.CPU)
	}
	r.CPU.Period, r.CPU.Quota = &period, &quota
	// A burst lets unused quota pile up and be spent above the policy's
	// cores.
	if r.CPU.Burst != nil && *r.CPU.Burst > 0 {
		r.CPU.Burst = nil
		changef("resources: cpu burst dropped (it would run above the policy's quota)")
	}
	if r.CPU.RealtimeRuntime != nil || r.CPU.RealtimePeriod != nil {
		r.CPU.RealtimeRuntime, r.CPU.RealtimePeriod = nil, nil
		changef("resources: cpu real-time runtime and period dropped")
	}
	// cgroup v2 keys written after memory, pids and cpu would override
	// them ("memory.max": "max"): none are kept.
	if len(r.Unified) > 0 {
		r.Unified = nil
		changef("resources: unified (cgroup v2 files) dropped")
	}
	// Huge pages are not counted in the memory limit: none.
	for i := range r.HugepageLimits {
		if r.HugepageLimits[i].Limit != 0 {
			r.HugepageLimits[i].Limit = 0
			changef("resources: hugepage limit %s set to 0", r.HugepageLimits[i].Pagesize)
		}
	}
}
