// Package seccomp owns warden's seccomp profiles, as runtime-spec data
// (specs.LinuxSeccomp) for the spec package to put into config.json. The
// runtime's libcontainer (through libseccomp) turns a profile into BPF; in
// cgo builds bpf.go does too, where warden loads a program itself: in a
// gVisor session (WriteBPF) and in the first process of a container on the
// OCI face (WriteInitProgram: the program libcontainer's init would build).
//
// The policy:
//
//   - Allow list. Only the syscalls ordinary programs need (Docker's default
//     profile for x86-64 with no capabilities, tightened) are allowed;
//     everything else fails with ENOSYS, so a syscall newer than the profile
//     looks unimplemented and libc falls back to an older one (clone3 gets
//     ENOSYS explicitly for that reason: glibc then uses clone, whose flags
//     seccomp can inspect).
//   - The dangerous families (DeniedFamilies: mounts, namespaces, bpf,
//     perf, keyrings, ptrace, kernel modules, kexec, io_uring, userfaultfd,
//     file handles, memfd, clock, ...) fail with EPERM, so they read as "not
//     permitted" rather than missing. They are also absent from the allow
//     list; the explicit rules make the refusal visible and listable.
//   - A few syscalls are allowed only with certain arguments (Filtered):
//     clone without CLONE_NEW* flags, socket for AF_UNIX, AF_INET, AF_INET6
//     and AF_NETLINK only, a handful of personality values, ioctl except
//     TIOCSTI, and the calls that set a file mode (chmod, mkdir, mknod,
//     creat, open with O_CREAT, ...) without S_ISUID and S_ISGID, as
//     systemd's RestrictSUIDSGID=: a workspace is a host folder, and a
//     setuid file made there would be one on the host. openat2, whose mode
//     seccomp cannot read, reads as unimplemented like clone3.
//   - Architecture: x86-64 only. The filter lists SCMP_ARCH_X86_64 and
//     nothing else, so a syscall entering through the i386 ABI (int $0x80,
//     AUDIT_ARCH_I386) or with the x32 bit set (nr | 0x40000000) does not
//     match the filter's architecture and takes libseccomp's bad-arch action,
//     which runc leaves at its default: the calling thread is killed with
//     SIGSYS. Without this, 32-bit entry points would reach syscalls by other
//     numbers than the ones the rules name.
//
// Syscall names are x86-64 names. libseccomp (and so runc) skips names it does
// not know; such syscalls are refused by the default action, so a runtime
// linked against an older libseccomp is stricter, never looser.
//
// ForPolicy is the entry point for the spec package: it returns the profile
// for one policy and is where policy-dependent tightening belongs.
package seccomp
