/*
 * seccomp_probe tries one representative syscall of each family warden's
 * seccomp profile denies, plus a few controls that must keep working, and
 * prints one line per attempt:
 *
 *   FAMILY NAME errno=N     the syscall returned; N is its errno, 0 on success
 *   FAMILY NAME signal=N    the attempt was killed by signal N
 *
 * Every attempt runs in a forked child, so one that succeeds (a new user
 * namespace, PTRACE_TRACEME, a new personality) cannot change the ones after
 * it, and one the filter kills (i386 and x32 entry) is reported as a signal.
 * Arguments are harmless: where the kernel would otherwise act (reboot, the
 * clock), they are invalid or leave things as they are. Always exits 0.
 *
 * With the argument "sweep" it makes every syscall number 0-511, and the
 * same numbers with the x32 bit, once each with every argument all ones
 * (invalid as a pointer, a descriptor, a length or flags), and prints
 *
 *   sweep N RESULT          N decimal, RESULT as above, or exit=N when the
 *                           call ended the child (exit, exit_group)
 *
 * A child that blocks is ended by an alarm (signal=14).
 *
 * Built by integration/seccomp_test.go with: gcc -static -O1 -o probe seccomp_probe.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/timex.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Returns the errno of the attempt, 0 if it succeeded. */
typedef int (*attempt)(void);

static int result(long r) { return r < 0 ? errno : 0; }

/* For a raw clone: the child (r == 0) leaves at once, the parent reaps it. */
static int cloned(long r) {
	if (r == 0)
		_exit(0);
	if (r > 0)
		waitpid((pid_t)r, NULL, 0);
	return result(r);
}

static int t_mount(void) { return result(syscall(SYS_mount, "none", "/nonexistent-warden-probe", "tmpfs", 0L, NULL)); }
static int t_umount2(void) { return result(syscall(SYS_umount2, "/nonexistent-warden-probe", 0)); }
static int t_pivot_root(void) { return result(syscall(SYS_pivot_root, "/nonexistent-warden-probe", "/nonexistent-warden-probe")); }
static int t_chroot(void) { return result(syscall(SYS_chroot, "/nonexistent-warden-probe")); }
static int t_fsopen(void) { return result(syscall(SYS_fsopen, "tmpfs", 0)); }
/* Without OPEN_TREE_CLONE this needs no privilege: allowed, it succeeds. */
static int t_open_tree(void) { return result(syscall(SYS_open_tree, AT_FDCWD, "/", 0)); }
static int t_move_mount(void) { return result(syscall(SYS_move_mount, -1, "", -1, "", 0)); }

static int t_unshare_user(void) { return result(syscall(SYS_unshare, CLONE_NEWUSER)); }
static int t_unshare_mnt(void) { return result(syscall(SYS_unshare, CLONE_NEWNS)); }
static int t_setns(void) { return result(syscall(SYS_setns, -1, 0)); }

static int t_clone_newuser(void) { return cloned(syscall(SYS_clone, (long)(CLONE_NEWUSER | SIGCHLD), 0L, 0L, 0L, 0L)); }

struct probe_clone_args {
	uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
};

static int t_clone3(void) {
	struct probe_clone_args args = {.exit_signal = SIGCHLD};
	return cloned(syscall(SYS_clone3, &args, sizeof args));
}

static int t_bpf(void) { return result(syscall(SYS_bpf, 0x7fff, NULL, 0)); }
static int t_perf_event_open(void) { return result(syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0UL)); }

static int t_keyctl(void) { return result(syscall(SYS_keyctl, 0 /* KEYCTL_GET_KEYRING_ID */, -3 /* session */, 0)); }
static int t_add_key(void) { return result(syscall(SYS_add_key, NULL, "warden-probe", "x", 1, -2 /* process */)); }
static int t_request_key(void) { return result(syscall(SYS_request_key, "user", "warden-probe-none", NULL, 0)); }

static int t_ptrace(void) { return result(syscall(SYS_ptrace, 0 /* PTRACE_TRACEME */, 0, 0, 0)); }
static int t_process_vm_readv(void) {
	char src[8] = "warden", dst[8];
	struct iovec local = {dst, sizeof dst}, remote = {src, sizeof src};
	return result(syscall(SYS_process_vm_readv, getpid(), &local, 1UL, &remote, 1UL, 0UL));
}

static int t_kexec_load(void) { return result(syscall(SYS_kexec_load, 0UL, 0UL, NULL, 0UL)); }
static int t_init_module(void) { return result(syscall(SYS_init_module, NULL, 0UL, "")); }
static int t_finit_module(void) { return result(syscall(SYS_finit_module, -1, "", 0)); }
static int t_delete_module(void) { return result(syscall(SYS_delete_module, "warden_probe_none", 0)); }

static int t_io_uring_setup(void) {
	char params[120]; /* struct io_uring_params, zeroed */
	memset(params, 0, sizeof params);
	return result(syscall(SYS_io_uring_setup, 1, params));
}
static int t_userfaultfd(void) { return result(syscall(SYS_userfaultfd, 1 /* UFFD_USER_MODE_ONLY */)); }

static int t_open_by_handle_at(void) { return result(syscall(SYS_open_by_handle_at, -1, NULL, 0)); }
static int t_name_to_handle_at(void) {
	struct { unsigned int bytes; int type; } handle = {0, 0};
	int mount_id;
	return result(syscall(SYS_name_to_handle_at, AT_FDCWD, "/", &handle, &mount_id, 0));
}

/* Wrong magic and an invalid command: even if permitted it can only fail. */
static int t_reboot(void) { return result(syscall(SYS_reboot, 0xfee1deadU, 0x0badbadU, 0x0badbadU, NULL)); }
static int t_swapon(void) { return result(syscall(SYS_swapon, "/nonexistent-warden-probe", 0)); }
static int t_acct(void) { return result(syscall(SYS_acct, NULL)); }
static int t_quotactl(void) { return result(syscall(SYS_quotactl, 0x800007 /* QCMD(Q_GETQUOTA, USRQUOTA) */, "/nonexistent-warden-probe", 0, NULL)); }
static int t_syslog(void) { return result(syscall(SYS_syslog, 10 /* SYSLOG_ACTION_SIZE_BUFFER */, NULL, 0)); }

static int t_settimeofday(void) {
	struct timeval now;
	gettimeofday(&now, NULL);
	return result(syscall(SYS_settimeofday, &now, NULL));
}
static int t_clock_settime(void) {
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	return result(syscall(SYS_clock_settime, CLOCK_REALTIME, &now));
}
/* An invalid tick: refused by the kernel even with CAP_SYS_TIME. */
static int t_adjtimex(void) {
	struct timex tx;
	memset(&tx, 0, sizeof tx);
	tx.modes = ADJ_TICK;
	tx.tick = 1;
	return result(syscall(SYS_adjtimex, &tx));
}

static int t_personality(void) { return result(syscall(SYS_personality, 0x0400000UL /* READ_IMPLIES_EXEC */)); }
static int t_personality_norandom(void) { return result(syscall(SYS_personality, 0x0040000UL /* ADDR_NO_RANDOMIZE */)); }
static int t_socket_alg(void) { return result(socket(38 /* AF_ALG */, SOCK_SEQPACKET, 0)); }
static int t_socket_packet(void) { return result(socket(17 /* AF_PACKET */, SOCK_DGRAM, 0)); }
static int t_socket_vsock(void) { return result(socket(40 /* AF_VSOCK */, SOCK_STREAM, 0)); }
static int t_memfd_create(void) { return result(syscall(SYS_memfd_create, "warden-probe", 0U)); }

/* On an invalid fd: if the filter let it through the kernel says EBADF. */
static int t_ioctl_tiocsti(void) {
	char c = 'x';
	return result(syscall(SYS_ioctl, -1, (unsigned long)TIOCSTI, &c));
}
/* The kernel reads the command as 32 bits: high bits must not slip past. */
static int t_ioctl_tiocsti_high(void) {
	char c = 'x';
	return result(syscall(SYS_ioctl, -1, 0x100000000UL | TIOCSTI, &c));
}

/* getpid through the i386 entry point (i386 __NR_getpid is 20). */
static int t_i386_getpid(void) {
	long r;
	__asm__ volatile("int $0x80" : "=a"(r) : "a"(20L) : "memory", "r8", "r9", "r10", "r11");
	if (r < 0 && r > -4096) {
		errno = (int)-r;
		return errno;
	}
	return 0;
}
/* getpid (x86-64 nr 39) with the x32 bit set. */
static int t_x32_getpid(void) { return result(syscall(39 | 0x40000000L)); }

static int t_getpid(void) { return result(syscall(SYS_getpid)); }
static int t_socket_inet(void) { return result(socket(AF_INET, SOCK_STREAM, 0)); }
static int t_socket_inet6(void) { return result(socket(AF_INET6, SOCK_DGRAM, 0)); }
static int t_socket_unix(void) { return result(socket(AF_UNIX, SOCK_STREAM, 0)); }
static int t_socket_netlink(void) { return result(socket(AF_NETLINK, SOCK_RAW, 0 /* NETLINK_ROUTE */)); }
static int t_socketpair_unix(void) {
	int sv[2];
	return result(socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
}
static int t_fork(void) { return cloned(syscall(SYS_clone, (long)SIGCHLD, 0L, 0L, 0L, 0L)); }
static int t_personality_query(void) { return result(syscall(SYS_personality, 0xffffffffUL)); }
static int t_ioctl_fionread(void) {
	int p[2], n;
	if (pipe(p) < 0)
		return errno;
	return result(ioctl(p[0], FIONREAD, &n));
}
static int t_landlock(void) { return result(syscall(SYS_landlock_create_ruleset, NULL, 0UL, 1U /* VERSION */)); }

static const struct {
	const char *family, *name;
	attempt fn;
} attempts[] = {
	{"mount", "mount", t_mount},
	{"mount", "umount2", t_umount2},
	{"mount", "pivot_root", t_pivot_root},
	{"mount", "chroot", t_chroot},
	{"mount", "fsopen", t_fsopen},
	{"mount", "open_tree", t_open_tree},
	{"mount", "move_mount", t_move_mount},
	{"namespaces", "unshare_newuser", t_unshare_user},
	{"namespaces", "unshare_newns", t_unshare_mnt},
	{"namespaces", "setns", t_setns},
	{"namespaces", "clone_newuser", t_clone_newuser},
	{"namespaces", "clone3", t_clone3},
	{"bpf", "bpf", t_bpf},
	{"perf", "perf_event_open", t_perf_event_open},
	{"keyring", "keyctl", t_keyctl},
	{"keyring", "add_key", t_add_key},
	{"keyring", "request_key", t_request_key},
	{"ptrace", "ptrace_traceme", t_ptrace},
	{"ptrace", "process_vm_readv", t_process_vm_readv},
	{"kexec", "kexec_load", t_kexec_load},
	{"modules", "init_module", t_init_module},
	{"modules", "finit_module", t_finit_module},
	{"modules", "delete_module", t_delete_module},
	{"io_uring", "io_uring_setup", t_io_uring_setup},
	{"userfaultfd", "userfaultfd", t_userfaultfd},
	{"file-handles", "open_by_handle_at", t_open_by_handle_at},
	{"file-handles", "name_to_handle_at", t_name_to_handle_at},
	{"reboot", "reboot", t_reboot},
	{"swap", "swapon", t_swapon},
	{"accounting", "acct", t_acct},
	{"quota", "quotactl", t_quotactl},
	{"syslog", "syslog", t_syslog},
	{"clock", "settimeofday", t_settimeofday},
	{"clock", "clock_settime", t_clock_settime},
	{"clock", "adjtimex", t_adjtimex},
	{"personality", "read_implies_exec", t_personality},
	{"personality", "addr_no_randomize", t_personality_norandom},
	{"socket", "af_alg", t_socket_alg},
	{"socket", "af_packet", t_socket_packet},
	{"socket", "af_vsock", t_socket_vsock},
	{"memfd", "memfd_create", t_memfd_create},
	{"ioctl", "tiocsti", t_ioctl_tiocsti},
	{"ioctl", "tiocsti_high_bits", t_ioctl_tiocsti_high},
	{"arch", "i386_getpid", t_i386_getpid},
	{"arch", "x32_getpid", t_x32_getpid},
	{"allowed", "getpid", t_getpid},
	{"allowed", "socket_af_inet", t_socket_inet},
	{"allowed", "socket_af_inet6", t_socket_inet6},
	{"allowed", "socket_af_unix", t_socket_unix},
	{"allowed", "socket_af_netlink", t_socket_netlink},
	{"allowed", "socketpair_af_unix", t_socketpair_unix},
	{"allowed", "clone_fork", t_fork},
	{"allowed", "personality_query", t_personality_query},
	{"allowed", "ioctl_fionread", t_ioctl_fionread},
	{"allowed", "landlock_create_ruleset", t_landlock},
};

/* sweep makes syscall nr with all-ones arguments in a child. */
static void sweep(long nr) {
	int fds[2];
	if (pipe(fds) < 0) {
		printf("sweep %ld pipe-errno=%d\n", nr, errno);
		return;
	}
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0) {
		printf("sweep %ld fork-errno=%d\n", nr, errno);
		close(fds[0]);
		close(fds[1]);
		return;
	}
	if (pid == 0) {
		pid_t self = getpid();
		close(fds[0]);
		alarm(3);
		long all = -1;
		long r = syscall(nr, all, all, all, all, all, all);
		int e = r < 0 ? errno : 0;
		if (getpid() != self) /* a new process (fork, vfork, clone) */
			_exit(0);
		if (write(fds[1], &e, sizeof e) != sizeof e)
			_exit(1);
		_exit(0);
	}
	close(fds[1]);
	int e, status;
	ssize_t n = read(fds[0], &e, sizeof e);
	close(fds[0]);
	if (waitpid(pid, &status, 0) < 0)
		printf("sweep %ld wait-errno=%d\n", nr, errno);
	else if (n == sizeof e)
		printf("sweep %ld errno=%d\n", nr, e);
	else if (WIFSIGNALED(status))
		printf("sweep %ld signal=%d\n", nr, WTERMSIG(status));
	else
		printf("sweep %ld exit=%d\n", nr, WEXITSTATUS(status));
}

int main(int argc, char **argv) {
	if (argc > 1 && strcmp(argv[1], "sweep") == 0) {
		for (long nr = 0; nr < 512; nr++)
			sweep(nr);
		for (long nr = 0; nr < 512; nr++)
			sweep(nr | 0x40000000L);
		return 0;
	}
	for (size_t i = 0; i < sizeof attempts / sizeof attempts[0]; i++) {
		fflush(stdout);
		pid_t pid = fork();
		if (pid < 0) {
			printf("%s %s fork-errno=%d\n", attempts[i].family, attempts[i].name, errno);
			continue;
		}
		if (pid == 0)
			_exit(attempts[i].fn() & 0xff);
		int status;
		if (waitpid(pid, &status, 0) < 0) {
			printf("%s %s wait-errno=%d\n", attempts[i].family, attempts[i].name, errno);
			continue;
		}
		if (WIFSIGNALED(status))
			printf("%s %s signal=%d\n", attempts[i].family, attempts[i].name, WTERMSIG(status));
		else
			printf("%s %s errno=%d\n", attempts[i].family, attempts[i].name, WEXITSTATUS(status));
	}
	return 0;
}
