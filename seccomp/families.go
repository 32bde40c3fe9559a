package seccomp

// Family is a group of syscalls the profile treats alike, with the reason.
type Family struct {
	Name     string
	Syscalls []string
	Why      string
}

// DeniedFamilies are the syscalls the default profile refuses with EPERM.
//
// Everything not on the allow list is refused anyway (with ENOSYS); these get
// an explicit rule so that a program sees "not permitted" rather than "not
// implemented", and so that the list of what warden takes away is data the
// CLI and the documentation can print. Names are x86-64 syscall names only:
// the i386 and x32 entry points are refused as a whole (see doc.go), so their
// private syscalls (vm86, stime, umount, ...) cannot be reached.
var DeniedFamilies = []Family{
	{
		Name: "mount",
		Syscalls: []string{
			"mount", "umount2", "pivot_root", "chroot",
			"fsopen", "fsconfig", "fsmount", "fspick",
			"move_mount", "open_tree", "open_tree_attr", "mount_setattr",
		},
		Why: "changing the filesystem view would undo the bind mounts the policy is built from",
	},
	{
		Name:     "namespaces",
		Syscalls: []string{"unshare", "setns"},
		Why:      "new namespaces (a user namespace above all) expose kernel attack surface meant for root; clone with CLONE_NEW* flags gets EPERM too, and clone3 reads as unimplemented (libc falls back to clone)",
	},
	{
		Name:     "bpf",
		Syscalls: []string{"bpf"},
		Why:      "eBPF programs and maps are a large, often-exploited kernel surface",
	},
	{
		Name:     "perf",
		Syscalls: []string{"perf_event_open"},
		Why:      "performance counters leak information across processes and have a long CVE history",
	},
	{
		Name:     "keyring",
		Syscalls: []string{"keyctl", "add_key", "request_key"},
		Why:      "the kernel keyring is not namespaced: keys could leak between sandboxes and the host",
	},
	{
		Name:     "ptrace",
		Syscalls: []string{"ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "kcmp", "pidfd_getfd"},
		Why:      "inspecting or steering other processes' memory and file descriptors",
	},
	{
		Name:     "kexec",
		Syscalls: []string{"kexec_load", "kexec_file_load"},
		Why:      "replacing the running kernel",
	},
	{
		Name:     "modules",
		Syscalls: []string{"init_module", "finit_module", "delete_module", "create_module", "get_kernel_syms", "query_module"},
		Why:      "loading or unloading kernel code",
	},
	{
		Name:     "io_uring",
		Syscalls: []string{"io_uring_setup", "io_uring_enter", "io_uring_register"},
		Why:      "io_uring performs syscalls' work without syscalls, so seccomp cannot see it; also a frequent source of kernel bugs",
	},
	{
		Name:     "userfaultfd",
		Syscalls: []string{"userfaultfd"},
		Why:      "stalling kernel page faults at will is the usual way to win kernel races",
	},
	{
		Name:     "file-handles",
		Syscalls: []string{"open_by_handle_at", "name_to_handle_at"},
		Why:      "opening files by handle bypasses path lookup and so escapes bind mounts (the \"shocker\" escape)",
	},
	{
		Name:     "reboot",
		Syscalls: []string{"reboot"},
		Why:      "restarting or halting the machine",
	},
	{
		Name:     "swap",
		Syscalls: []string{"swapon", "swapoff"},
		Why:      "host-wide memory configuration",
	},
	{
		Name:     "accounting",
		Syscalls: []string{"acct"},
		Why:      "host-wide process accounting",
	},
	{
		Name:     "quota",
		Syscalls: []string{"quotactl", "quotactl_fd"},
		Why:      "host-wide filesystem quotas",
	},
	{
		Name:     "syslog",
		Syscalls: []string{"syslog"},
		Why:      "the kernel log is not namespaced and leaks kernel addresses and host activity",
	},
	{
		Name:     "clock",
		Syscalls: []string{"settimeofday", "clock_settime", "clock_adjtime", "adjtimex"},
		Why:      "the system clock is shared with the host and every other sandbox",
	},
	{
		Name:     "memfd",
		Syscalls: []string{"memfd_create", "memfd_secret"},
		Why:      "executing an anonymous memory file runs code that no mount flag or Landlock rule sees",
	},
	{
		Name:     "numa",
		Syscalls: []string{"mbind", "set_mempolicy", "set_mempolicy_home_node", "get_mempolicy", "move_pages", "migrate_pages"},
		Why:      "NUMA placement of memory, reserved to CAP_SYS_NICE in Docker's profile",
	},
	{
		Name:     "hostname",
		Syscalls: []string{"sethostname", "setdomainname"},
		Why:      "the sandbox's identity is fixed by warden",
	},
	{
		Name:     "x86-io",
		Syscalls: []string{"iopl", "ioperm", "modify_ldt"},
		Why:      "raw I/O ports and local descriptor tables: hardware access and an old exploit surface",
	},
	{
		Name:     "fanotify",
		Syscalls: []string{"fanotify_init", "fanotify_mark"},
		Why:      "filesystem-wide event monitoring",
	},
	{
		Name:     "lsm",
		Syscalls: []string{"lsm_set_self_attr"},
		Why:      "changing the process's security-module attributes",
	},
	{
		Name:     "legacy",
		Syscalls: []string{"vhangup", "lookup_dcookie", "nfsservctl", "uselib", "sysfs", "ustat", "_sysctl"},
		Why:      "obsolete or privileged interfaces no ordinary program needs",
	},
}

// Filtered are the syscalls the default profile allows only with certain
// arguments. Other arguments get EPERM (ioctl) or ENOSYS, the profile's
// default.
var Filtered = []Family{
	{
		Name:     "clone",
		Syscalls: []string{"clone"},
		Why:      "allowed only without CLONE_NEW* flags (no new namespaces); clone3 passes its flags in memory seccomp cannot read, so it reads as unimplemented and libc falls back to clone",
	},
	{
		Name:     "socket",
		Syscalls: []string{"socket", "socketpair"},
		Why:      "allowed only for AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK: no packet sockets, no vsock (the host is a VM reachable over vsock), no other protocol families",
	},
	{
		Name:     "personality",
		Syscalls: []string{"personality"},
		Why:      "allowed only to query or to select Linux, Linux32 and UNAME26 modes: READ_IMPLIES_EXEC and friends weaken memory protection",
	},
	{
		Name:     "ioctl",
		Syscalls: []string{"ioctl"},
		Why:      "TIOCSTI is refused: pushing input into a terminal the sandbox shares with its caller would run commands outside the sandbox",
	},
	{
		Name:     "setuid-bits",
		Syscalls: []string{"chmod", "fchmod", "fchmodat", "fchmodat2", "mkdir", "mkdirat", "mknod", "mknodat", "creat", "open", "openat"},
		Why:      "a mode with S_ISUID or S_ISGID gets EPERM (open and openat only with O_CREAT or O_TMPFILE): a writable grant is the host folder, idmapped to its owner, and nosuid holds only for the sandbox's mount, so a setuid file made there would run with the owner's rights on the host; openat2 passes its mode in memory seccomp cannot read, so it reads as unimplemented and libc falls back to openat",
	},
}
