package seccomp

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// laterSyscalls are the x86-64 syscalls a libseccomp build may not know
// yet (2.5.4 names none past 450), numbered by golang.org/x/sys, which
// go.mod pins: X86_64Syscalls adds their names, so a profile can refuse
// every one of them by name whatever libseccomp warden was linked with.
var laterSyscalls = map[int]string{
	unix.SYS_URETPROBE:               "uretprobe",
	unix.SYS_FUTEX_WAITV:             "futex_waitv",
	unix.SYS_SET_MEMPOLICY_HOME_NODE: "set_mempolicy_home_node",
	unix.SYS_CACHESTAT:               "cachestat",
	unix.SYS_FCHMODAT2:               "fchmodat2",
	unix.SYS_MAP_SHADOW_STACK:        "map_shadow_stack",
	unix.SYS_FUTEX_WAKE:              "futex_wake",
	unix.SYS_FUTEX_WAIT:              "futex_wait",
	unix.SYS_FUTEX_REQUEUE:           "futex_requeue",
	unix.SYS_STATMOUNT:               "statmount",
	unix.SYS_LISTMOUNT:               "listmount",
	unix.SYS_LSM_GET_SELF_ATTR:       "lsm_get_self_attr",
	unix.SYS_LSM_SET_SELF_ATTR:       "lsm_set_self_attr",
	unix.SYS_LSM_LIST_MODULES:        "lsm_list_modules",
	unix.SYS_MSEAL:                   "mseal",
	unix.SYS_SETXATTRAT:              "setxattrat",
	unix.SYS_GETXATTRAT:              "getxattrat",
	unix.SYS_LISTXATTRAT:             "listxattrat",
	unix.SYS_REMOVEXATTRAT:           "removexattrat",
	unix.SYS_OPEN_TREE_ATTR:          "open_tree_attr",
	unix.SYS_FILE_GETATTR:            "file_getattr",
	unix.SYS_FILE_SETATTR:            "file_setattr",
	unix.SYS_LISTNS:                  "listns",
	unix.SYS_RSEQ_SLICE_YIELD:        "rseq_slice_yield",
}

// x86-64 numbers no syscall has: those after uretprobe up to the numbers
// every architecture shares (from pidfd_send_signal, 424).
const x86_64GapFirst, x86_64GapLast = 336, 423

// x86_64Names merges the names a libseccomp build gives numbers 0-511
// (name, empty where it knows none) with laterSyscalls, in number order.
// It fails when a number up to the newest syscall warden knows of, the
// gap aside, is left without a name: a profile stated as allowed by
// default with refusals by name would let that syscall through.
func x86_64Names(name func(n int) string) ([]string, error) {
	newest := 0
	for n := range laterSyscalls {
		newest = max(newest, n)
	}
	var names []string
	for n := range 512 {
		known, later := name(n), laterSyscalls[n]
		if known != "" {
			names = append(names, known)
		}
		if later != "" && later != known {
			names = append(names, later)
		}
		if known == "" && later == "" && n <= newest && (n < x86_64GapFirst || n > x86_64GapLast) {
			return nil, fmt.Errorf("libseccomp knows no name of x86-64 syscall %d: link warden with libseccomp 2.5.4 or newer (make deps)", n)
		}
	}
	return names, nil
}
