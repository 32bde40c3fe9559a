package seccomp

import (
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestInitProgramFits: warden's profiles, alone or joined with a
// container's, are loaded by libcontainer as libseccomp's program for them;
// a profile with flags, a listener, a notify action or another default
// refusal gets more from libcontainer and must stay with it.
func TestInitProgramFits(t *testing.T) {
	eperm := uint(errnoEPERM)
	docker := &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, DefaultErrnoRet: &eperm,
		Syscalls: []specs.LinuxSyscall{{Names: []string{"read"}, Action: specs.ActAllow}}}
	if !InitProgramFits(Default()) || !InitProgramFits(Intersect(Default(), docker)) {
		t.Error("warden's profile does not fit")
	}
	for name, change := range map[string]func(*specs.LinuxSeccomp){
		"flags":       func(s *specs.LinuxSeccomp) { s.Flags = []specs.LinuxSeccompFlag{specs.LinuxSeccompFlagLog} },
		"listener":    func(s *specs.LinuxSeccomp) { s.ListenerPath = "/run/agent.sock" },
		"notify":      func(s *specs.LinuxSeccomp) { s.Syscalls[0].Action = specs.ActNotify },
		"EPERM":       func(s *specs.LinuxSeccomp) { s.DefaultErrnoRet = &eperm },
		"no errno":    func(s *specs.LinuxSeccomp) { s.DefaultErrnoRet = nil },
		"kill":        func(s *specs.LinuxSeccomp) { s.DefaultAction = specs.ActKillProcess },
		"allow first": func(s *specs.LinuxSeccomp) { s.DefaultAction = specs.ActAllow },
	} {
		s := Default()
		change(s)
		if InitProgramFits(s) {
			t.Errorf("%s: fits, but libcontainer loads more than the program", name)
		}
	}
	if InitProgramFits(nil) {
		t.Error("no profile fits")
	}
}
