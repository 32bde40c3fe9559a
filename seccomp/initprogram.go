package seccomp

import specs "github.com/opencontainers/runtime-spec/specs-go"

// InitProgramFits reports whether libcontainer's container init would load
// profile s as nothing more than libseccomp's program for it (the one
// WriteInitProgram writes): no filter flags, no listener and no notify
// action (which make init hand a descriptor to its parent), and ENOSYS as
// the default refusal, without which runc prepends an -ENOSYS stub of its
// own for syscalls newer than the profile. warden's profiles (ForPolicy,
// and Intersect of one with a container's) fit.
func InitProgramFits(s *specs.LinuxSeccomp) bool {
	if s == nil || len(s.Flags) > 0 || s.ListenerPath != "" || s.ListenerMetadata != "" {
		return false
	}
	if s.DefaultAction != specs.ActErrno || s.DefaultErrnoRet == nil || *s.DefaultErrnoRet != errnoENOSYS {
		return false
	}
	for _, r := range s.Syscalls {
		if r.Action == specs.ActNotify {
			return false
		}
	}
	return true
}
