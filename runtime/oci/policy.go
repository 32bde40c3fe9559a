package oci

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sync"

	"github.com/opencontainers/runc/libcontainer"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/spec"
)

// DefaultPolicyName is the policy (DefaultPolicyName.toml in the policy
// directory) of a container that selects none, when the runtime has no
// --policy.
const DefaultPolicyName = "default"

// AnnotationSelect chooses a container's policy from the operator's policy
// directory by name.
const AnnotationSelect = spec.AnnotationPolicy

// policyRecord is what warden keeps beside libcontainer's state for a
// container under a policy: exec and update are held to it.
type policyRecord struct {
	Policy   string          `json:"policy"`
	Hash     string          `json:"hash"`
	Limits   policies.Limits `json:"limits"`
	Network  bool            `json:"network"` // the policy allows network
	CapAllow []string        `json:"capAllow"`
	// FirstSeccomp: the first process loads its filter itself
	// (seccompexec.go); until it has started, nothing may be exec'd.
	FirstSeccomp bool `json:"firstSeccomp,omitempty"`
}

const recordFile = "warden.json"

var policyNamePattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`) })

// choosePolicy decides which policy a container runs under: one it
// selects by annotation from the policy directory, else the runtime's.
func (o *Runtime) choosePolicy(s *specs.Spec) (*policies.Policy, string, error) {
	name, selected := s.Annotations[AnnotationSelect]
	if !selected {
		if o.Policy != nil || o.PolicyDir == "" {
			return o.Policy, o.PolicyFile, nil
		}
		// A policy directory without --policy: its default.toml, else
		// nothing runs unless the operator allows unconfined containers.
		file := filepath.Join(o.PolicyDir, DefaultPolicyName+".toml")
		p, err := policies.Load(file)
		switch {
		case err == nil:
			return p, file, nil
		case !errors.Is(err, fs.ErrNotExist):
			return nil, "", err
		case o.AllowUnconfined:
			return nil, "", nil
		}
		return nil, "", fmt.Errorf("no policy for this container: it selects none (annotation %s=NAME), the runtime has no --policy, and %s has no %s.toml; add that file, or configure --policy FILE, or --allow-unconfined to run such containers as configured", AnnotationSelect, o.PolicyDir, DefaultPolicyName)
	}
	if o.PolicyDir == "" {
		if o.Policy != nil && name == o.Policy.Name {
			return o.Policy, o.PolicyFile, nil
		}
		if o.Policy == nil && s.Annotations[spec.AnnotationPolicyHash] != "" {
			// A bundle warden generated carries its policy already applied.
			return nil, "", nil
		}
		return nil, "", fmt.Errorf("annotation %s=%q chooses a policy, but the runtime has no --policy-dir to choose from; configure one (runtimeArgs) or drop the annotation", AnnotationSelect, name)
	}
	if !policyNamePattern().MatchString(name) {
		return nil, "", fmt.Errorf("annotation %s=%q: not a policy name; use the name of a file NAME.toml in %s", AnnotationSelect, name, o.PolicyDir)
	}
	file := filepath.Join(o.PolicyDir, name+".toml")
	p, err := policies.Load(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", fmt.Errorf("annotation %s=%q: no policy %s in %s", AnnotationSelect, name, name+".toml", o.PolicyDir)
	} else if err != nil {
		return nil, "", err
	}
	return p, file, nil
}

// tighten applies the container's policy p (from file; nil: none) to
// its spec.
func (o *Runtime) tighten(id, bundle string, s *specs.Spec, p *policies.Policy, file string, userns *spec.UserNamespace, gvisor bool) (*policyRecord, error) {
	if p == nil {
		return nil, nil
	}
	if err := checkNewCgroup(id, s, p.Name); err != nil {
		return nil, err
	}
	owner := o.namespaceOwner
	if gvisor && subcontainer(s) {
		owner = o.gvisorNamespaceOwner(gvisorSandboxID(s))
	}
	home, _ := os.UserHomeDir()
	changes, err := spec.Tighten(s, p, spec.TightenOptions{
		Vars:           policies.Vars{SkillDir: filepath.Dir(file), Home: home},
		Capabilities:   o.CapAllow,
		ID:             id,
		Bundle:         bundle,
		BindAllow:      o.BindAllow,
		HookAllow:      o.HookAllow,
		NamespaceOwner: owner,
		IsContainer:    o.isContainer,
		UserNamespace:  userns,
	})
	if err != nil {
		return nil, err
	}
	for _, c := range changes {
		logrus.WithField("policy", p.Name).Debug(c)
	}
	lim := p.Limits
	lim.Memory, lim.Pids = *s.Linux.Resources.Memory.Limit, *s.Linux.Resources.Pids.Limit
	lim.CPU = float64(*s.Linux.Resources.CPU.Quota) / float64(*s.Linux.Resources.CPU.Period)
	return &policyRecord{Policy: p.Name, Hash: p.Hash(), Limits: lim, CapAllow: o.CapAllow, Network: len(p.Network.Allow) > 0}, nil
}

func readRecord(c *libcontainer.Container, stateDir string) (*policyRecord, error) {
	data, err := os.ReadFile(filepath.Join(stateDir, c.ID(), recordFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var r policyRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("container %s: %s: %w", c.ID(), recordFile, err)
	}
	return &r, nil
}
