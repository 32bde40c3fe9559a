package seccomp

import (
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/warden-sandbox/warden/policies"
)

// Errno values the profile returns (x86-64 numbering).
const (
	errnoEPERM        = 1
	errnoENOSYS       = 38
	errnoEAFNOSUPPORT = 97
)

// Flags the argument filters compare against (linux/sched.h, linux/socket.h,
// asm-generic/ioctls.h).
const (
	cloneNewNS     = 0x00020000
	cloneNewCgroup = 0x02000000
	cloneNewUTS    = 0x04000000
	cloneNewIPC    = 0x08000000
	cloneNewUser   = 0x10000000
	cloneNewPID    = 0x20000000
	cloneNewNet    = 0x40000000
	// CLONE_NEWTIME (0x80) is left out on purpose: for clone(2) the low byte
	// is the exit signal, and the kernel accepts a time namespace only from
	// clone3 and unshare, both refused.
	cloneNewAny = cloneNewNS | cloneNewCgroup | cloneNewUTS | cloneNewIPC |
		cloneNewUser | cloneNewPID | cloneNewNet

	afUnix    = 1
	afInet    = 2
	afInet6   = 10
	afNetlink = 16
	afMax     = 46 // AF_MAX: families at or above it do not exist

	tiocsti = 0x5412
)

// File mode and open flags the setuid rules compare against (linux/stat.h,
// asm-generic/fcntl.h).
const (
	sISUID = 0o4000
	sISGID = 0o2000

	oCreat   = 0o100
	oTmpfile = 0o20000000 // __O_TMPFILE, the bit O_TMPFILE adds to O_DIRECTORY
)

// personalities are the personality(2) arguments allowed: the query value
// 0xffffffff, PER_LINUX, PER_LINUX32, UNAME26 and UNAME26|PER_LINUX32.
var personalities = []uint64{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

// modeArgs are the syscalls that take a file mode, by the index of the mode
// argument.
var modeArgs = []struct {
	mode  uint
	names []string
}{
	{1, []string{"chmod", "fchmod", "mkdir", "mknod", "creat"}},
	{2, []string{"fchmodat", "fchmodat2", "mkdirat", "mknodat"}},
}

// openArgs are the open calls that create files: the index of their flags
// and of their mode argument.
var openArgs = []struct {
	name        string
	flags, mode uint
}{
	{"open", 1, 2},
	{"openat", 2, 3},
}

// allowed are the syscalls permitted with any arguments: Docker's default
// profile for x86-64 without the capability-gated entries, minus what
// DeniedFamilies takes away. Some names are newer than the libseccomp a
// runtime links; runc skips those and they stay refused (ENOSYS).
var allowed = []string{
	// files and file descriptors
	"read", "write", "readv", "writev", "pread64", "pwrite64",
	"preadv", "preadv2", "pwritev", "pwritev2",
	"close", "close_range",
	"lseek", "dup", "dup2", "dup3", "pipe", "pipe2", "fcntl", "flock",
	"fsync", "fdatasync", "sync", "syncfs", "sync_file_range",
	"fallocate", "fadvise64", "readahead", "truncate", "ftruncate",
	"sendfile", "splice", "tee", "vmsplice", "copy_file_range",
	"stat", "fstat", "lstat", "newfstatat", "statx", "statfs", "fstatfs",
	"access", "faccessat", "faccessat2",
	"getdents", "getdents64", "getcwd", "chdir", "fchdir",
	"rmdir", "rename", "renameat", "renameat2",
	"link", "linkat", "unlink", "unlinkat", "symlink", "symlinkat",
	"readlink", "readlinkat", "umask",
	"chown", "fchown", "fchownat", "lchown",
	"utime", "utimes", "utimensat", "futimesat",
	"getxattr", "lgetxattr", "fgetxattr", "getxattrat",
	"setxattr", "lsetxattr", "fsetxattr", "setxattrat",
	"listxattr", "llistxattr", "flistxattr", "listxattrat",
	"removexattr", "lremovexattr", "fremovexattr", "removexattrat",
	"file_getattr", "file_setattr", "cachestat",
	"inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch",
	"statmount", "listmount",

	// memory
	"brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "mincore",
	"msync", "mlock", "mlock2", "mlockall", "munlock", "munlockall",
	"membarrier", "remap_file_pages", "mseal", "map_shadow_stack",
	"pkey_alloc", "pkey_free", "pkey_mprotect",

	// processes and threads (clone is filtered, see rules)
	"fork", "vfork", "execve", "execveat", "exit", "exit_group",
	"wait4", "waitid", "kill", "tkill", "tgkill",
	"pidfd_open", "pidfd_send_signal", "process_mrelease",
	"getpid", "getppid", "gettid", "getpgid", "setpgid", "getpgrp",
	"getsid", "setsid", "set_tid_address", "set_robust_list",
	"get_robust_list", "rseq", "arch_prctl", "get_thread_area",
	"set_thread_area", "restart_syscall", "uretprobe",
	"futex", "futex_waitv", "futex_wake", "futex_wait", "futex_requeue",
	"getrlimit", "setrlimit", "prlimit64", "getrusage",
	"getpriority", "setpriority", "ioprio_get", "ioprio_set",
	"sched_yield", "sched_getaffinity", "sched_setaffinity",
	"sched_getparam", "sched_setparam", "sched_getscheduler",
	"sched_setscheduler", "sched_get_priority_max", "sched_get_priority_min",
	"sched_rr_get_interval", "sched_getattr", "sched_setattr",
	"getcpu", "uname", "sysinfo", "times", "capget", "capset", "getrandom",

	// identity (the sandbox holds no capabilities, so these only move
	// between ids it already has)
	"getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid",
	"getgroups", "setuid", "setgid", "setreuid", "setregid",
	"setresuid", "setresgid", "setfsuid", "setfsgid", "setgroups",

	// signals
	"rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending",
	"rt_sigsuspend", "rt_sigtimedwait", "rt_sigqueueinfo",
	"rt_tgsigqueueinfo", "sigaltstack", "signalfd", "signalfd4",
	"pause", "alarm", "getitimer", "setitimer",

	// time
	"time", "gettimeofday", "clock_gettime", "clock_getres",
	"clock_nanosleep", "nanosleep",
	"timer_create", "timer_delete", "timer_gettime", "timer_settime",
	"timer_getoverrun", "timerfd_create", "timerfd_gettime", "timerfd_settime",

	// waiting for events
	"poll", "ppoll", "select", "pselect6",
	"epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait",
	"epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2",

	// Kernel AIO (io_setup and the rest) is left out, like io_uring: its
	// contexts come from one host-wide pool (fs.aio-max-nr) a sandbox
	// could use up for every database on the host. It gets ENOSYS, and
	// glibc's POSIX AIO (threads) and libaio users fall back.

	// System V and POSIX IPC (private to the sandbox's IPC namespace)
	"msgget", "msgsnd", "msgrcv", "msgctl",
	"semget", "semop", "semtimedop", "semctl",
	"shmget", "shmat", "shmdt", "shmctl",
	"mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive",
	"mq_notify", "mq_getsetattr",

	// sockets (socket and socketpair are filtered, see rules)
	"bind", "connect", "listen", "accept", "accept4",
	"getsockname", "getpeername", "getsockopt", "setsockopt",
	"sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg",
	"shutdown",

	// self-sandboxing: warden applies Landlock inside, and programs may add
	// their own filters (no_new_privs is always set)
	"landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
	"seccomp", "prctl",
}

// Default returns warden's seccomp profile for x86-64: an allow list that
// refuses everything else with ENOSYS, so new syscalls look unimplemented and
// libc falls back, and refuses DeniedFamilies and setuid/setgid modes with
// EPERM. clone3 and openat2 get ENOSYS explicitly: their flags and mode are
// in memory seccomp cannot read, and libc falls back to clone and openat,
// whose arguments it can. Each call returns a fresh copy the caller may
// change.
func Default() *specs.LinuxSeccomp {
	syscalls := []specs.LinuxSyscall{
		{Names: append([]string(nil), allowed...), Action: specs.ActAllow},
		{Names: []string{"clone3", "openat2"}, Action: specs.ActErrno, ErrnoRet: errno(errnoENOSYS)},
		{
			Names:  []string{"clone"},
			Action: specs.ActAllow,
			Args:   []specs.LinuxSeccompArg{{Index: 0, Value: cloneNewAny, ValueTwo: 0, Op: specs.OpMaskedEqual}},
		},
	}
	syscalls = append(syscalls, refusedCloneRules()...)
	syscalls = append(syscalls, socketRules()...)
	syscalls = append(syscalls, personalityRules()...)
	syscalls = append(syscalls, ioctlRules()...)
	syscalls = append(syscalls, setuidRules()...)
	for _, f := range DeniedFamilies {
		syscalls = append(syscalls, specs.LinuxSyscall{
			Names:    append([]string(nil), f.Syscalls...),
			Action:   specs.ActErrno,
			ErrnoRet: errno(errnoEPERM),
		})
	}
	return &specs.LinuxSeccomp{
		DefaultAction:   specs.ActErrno,
		DefaultErrnoRet: errno(errnoENOSYS),
		Architectures:   []specs.Arch{specs.ArchX86_64},
		Syscalls:        syscalls,
	}
}

// Refusals answer with the errno programs are written for, as the kernel
// or Docker's profile would: a program that handles "not permitted" or
// "family not supported" falls back, where ENOSYS reads as a broken system
// (Go's tests: "function not implemented"). Each rule set is disjoint from
// its allow rules, so no call matches two actions.

// refusedCloneRules: clone with any CLONE_NEW* flag gets EPERM, as unshare
// does (the allow rule takes clone without them).
func refusedCloneRules() []specs.LinuxSyscall {
	var rules []specs.LinuxSyscall
	for bit := uint64(1); bit != 0 && bit <= cloneNewNet; bit <<= 1 {
		if bit&cloneNewAny == 0 {
			continue
		}
		rules = append(rules, specs.LinuxSyscall{
			Names: []string{"clone"}, Action: specs.ActErrno, ErrnoRet: errno(errnoEPERM),
			Args: []specs.LinuxSeccompArg{{Index: 0, Value: bit, ValueTwo: bit, Op: specs.OpMaskedEqual}},
		})
	}
	return rules
}

// socketRules allow the unix, inet, inet6 and netlink families; every
// other family the kernel knows gets EAFNOSUPPORT, its answer for a family
// it lacks. A number past AF_MAX, or with high bits set (the kernel reads
// an int), stays refused by the default.
func socketRules() []specs.LinuxSyscall {
	allowed := []uint64{afUnix, afInet, afInet6, afNetlink}
	var rules []specs.LinuxSyscall
	for _, family := range allowed {
		rules = append(rules, specs.LinuxSyscall{
			Names: []string{"socket", "socketpair"}, Action: specs.ActAllow,
			Args: []specs.LinuxSeccompArg{{Index: 0, Value: family, Op: specs.OpEqualTo}},
		})
	}
	for family := uint64(0); family < afMax; family++ {
		if !slices.Contains(allowed, family) {
			rules = append(rules, specs.LinuxSyscall{
				Names: []string{"socket", "socketpair"}, Action: specs.ActErrno, ErrnoRet: errno(errnoEAFNOSUPPORT),
				Args: []specs.LinuxSeccompArg{{Index: 0, Value: family, Op: specs.OpEqualTo}},
			})
		}
	}
	return rules
}

// personalityRules allow the personalities Docker allows; one with any
// other bit below bit 31 (ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC...) gets
// EPERM, as in Docker. Each refusal also requires bit 31 clear, which
// keeps it apart from the query value 0xffffffff.
func personalityRules() []specs.LinuxSyscall {
	var rules []specs.LinuxSyscall
	for _, p := range personalities {
		rules = append(rules, specs.LinuxSyscall{
			Names: []string{"personality"}, Action: specs.ActAllow,
			Args: []specs.LinuxSeccompArg{{Index: 0, Value: p, Op: specs.OpEqualTo}},
		})
	}
	const known = 0x20008 // PER_LINUX32 | UNAME26: the bits the allowed values use
	for i := range 31 {
		bit := uint64(1) << i
		if bit&known != 0 {
			continue
		}
		rules = append(rules, specs.LinuxSyscall{
			Names: []string{"personality"}, Action: specs.ActErrno, ErrnoRet: errno(errnoEPERM),
			Args: []specs.LinuxSeccompArg{{Index: 0, Value: 1<<31 | bit, ValueTwo: bit, Op: specs.OpMaskedEqual}},
		})
	}
	return rules
}

// ioctlRules allow ioctl for every command except TIOCSTI, which gets EPERM.
//
// libseccomp drops argument filters for a syscall that also has an
// unconditional rule, and it cannot say "not equal" on the 32 bits the kernel
// reads (ioctl's command is an unsigned int; a plain 64-bit comparison is
// bypassed by setting high bits). So "command != TIOCSTI" is written as 32
// rules, one per bit: allow when bit i differs from TIOCSTI's bit i.
func ioctlRules() []specs.LinuxSyscall {
	rules := []specs.LinuxSyscall{{
		Names:    []string{"ioctl"},
		Action:   specs.ActErrno,
		ErrnoRet: errno(errnoEPERM),
		Args:     []specs.LinuxSeccompArg{{Index: 1, Value: 0xffffffff, ValueTwo: tiocsti, Op: specs.OpMaskedEqual}},
	}}
	for i := range 32 {
		bit := uint64(1) << i
		rules = append(rules, specs.LinuxSyscall{
			Names:  []string{"ioctl"},
			Action: specs.ActAllow,
			Args:   []specs.LinuxSeccompArg{{Index: 1, Value: bit, ValueTwo: ^uint64(tiocsti) & bit, Op: specs.OpMaskedEqual}},
		})
	}
	return rules
}

// setuidRules refuse with EPERM every mode argument with S_ISUID or S_ISGID
// and allow the others, as systemd's RestrictSUIDSGID= does. A writable
// grant is the host folder itself, idmapped to its owner, and nosuid holds
// only for the sandbox's mount: a setuid file made there would run with the
// owner's rights on the host.
//
// Every call matches an allow or an EPERM rule, never the default (ENOSYS).
// Each rule has at most one comparison per argument (libcontainer would turn
// two into an OR), so "either bit set" is two EPERM rules; rules of one
// syscall are OR'ed. open and openat use their mode only with O_CREAT or
// O_TMPFILE: allowed when neither flag is set, or when the mode has neither
// bit. openat2 passes its mode in memory seccomp cannot read, so it gets
// ENOSYS (see Default) and libc falls back to openat.
func setuidRules() []specs.LinuxSyscall {
	noBits := func(i uint, mask uint64) specs.LinuxSeccompArg {
		return specs.LinuxSeccompArg{Index: i, Value: mask, ValueTwo: 0, Op: specs.OpMaskedEqual}
	}
	bit := func(i uint, b uint64) specs.LinuxSeccompArg {
		return specs.LinuxSeccompArg{Index: i, Value: b, ValueTwo: b, Op: specs.OpMaskedEqual}
	}
	refuse := func(names []string, args ...specs.LinuxSeccompArg) specs.LinuxSyscall {
		return specs.LinuxSyscall{Names: names, Action: specs.ActErrno, ErrnoRet: errno(errnoEPERM), Args: args}
	}
	var rules []specs.LinuxSyscall
	for _, m := range modeArgs {
		rules = append(rules, specs.LinuxSyscall{Names: slices.Clone(m.names), Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{noBits(m.mode, sISUID|sISGID)}})
		for _, b := range []uint64{sISUID, sISGID} {
			rules = append(rules, refuse(slices.Clone(m.names), bit(m.mode, b)))
		}
	}
	for _, o := range openArgs {
		rules = append(rules,
			specs.LinuxSyscall{Names: []string{o.name}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{noBits(o.flags, oCreat|oTmpfile)}},
			specs.LinuxSyscall{Names: []string{o.name}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{noBits(o.mode, sISUID|sISGID)}},
		)
		for _, f := range []uint64{oCreat, oTmpfile} {
			for _, b := range []uint64{sISUID, sISGID} {
				rules = append(rules, refuse([]string{o.name}, bit(o.flags, f), bit(o.mode, b)))
			}
		}
	}
	return rules
}

// ForPolicy returns the profile for a sandbox running under p.
//
// Today every policy gets Default(): nothing a policy can say needs a
// syscall Default refuses. This is the hook for tightening by policy (for
// example refusing AF_INET sockets to a policy without network access); it
// must never return anything wider than Default.
func ForPolicy(p *policies.Policy) *specs.LinuxSeccomp {
	_ = p
	return Default()
}

func errno(n uint) *uint { return &n }
