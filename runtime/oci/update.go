package oci

import (
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"

	"github.com/warden-sandbox/warden/spec"
)

// Update changes a container's resources. Under a policy no limit can go
// above the policy's (the values are lowered to it).
func (o *Runtime) Update(id string, r *specs.LinuxResources) error {
	if g, ok, err := o.loadGVisor(id); ok {
		if err != nil {
			return err
		}
		return g.update(r)
	}
	c, err := o.Load(id)
	if err != nil {
		return err
	}
	rec, err := readRecord(c, o.stateDir())
	if err != nil {
		return err
	}
	if rec != nil {
		spec.ClampResources(r, rec.Limits, func(format string, args ...any) {
			logrus.WithField("policy", rec.Policy).Debugf("update: "+format, args...)
		})
	}
	cfg := c.Config()
	res := cfg.Cgroups.Resources
	if m := r.Memory; m != nil {
		if m.Limit != nil {
			res.Memory = *m.Limit
		}
		if m.Reservation != nil {
			res.MemoryReservation = *m.Reservation
		}
		if m.Swap != nil {
			res.MemorySwap = *m.Swap
		}
	}
	if p := r.Pids; p != nil && p.Limit != nil {
		res.PidsLimit = p.Limit
	}
	if cpu := r.CPU; cpu != nil {
		if cpu.Shares != nil {
			res.CpuShares = *cpu.Shares
		}
		if cpu.Quota != nil && *cpu.Quota != 0 {
			res.CpuQuota = *cpu.Quota
		}
		if cpu.Period != nil && *cpu.Period != 0 {
			res.CpuPeriod = *cpu.Period
		}
		if cpu.Cpus != "" {
			res.CpusetCpus = cpu.Cpus
		}
		if cpu.Mems != "" {
			res.CpusetMems = cpu.Mems
		}
	}
	if b := r.BlockIO; b != nil && b.Weight != nil {
		res.BlkioWeight = *b.Weight
	}
	return c.Set(cfg)
}
