//go:build cgo

package seccomp

import (
	"os"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	libseccomp "github.com/seccomp/libseccomp-golang"
)

// newerThanLibseccomp are syscalls the profile names that libseccomp 2.5.4
// (Debian 12, what warden links) does not know yet. runc skips unknown names,
// so they stay refused by the default action until libseccomp learns them.
// Anything else libseccomp does not know is a typo.
var newerThanLibseccomp = map[string]string{
	"uretprobe":         "6.11",
	"futex_wait":        "6.7",
	"futex_requeue":     "6.7",
	"statmount":         "6.8",
	"listmount":         "6.8",
	"lsm_set_self_attr": "6.8",
	"mseal":             "6.10",
	"setxattrat":        "6.13",
	"getxattrat":        "6.13",
	"listxattrat":       "6.13",
	"removexattrat":     "6.13",
	"open_tree_attr":    "6.15",
	"file_getattr":      "6.17",
	"file_setattr":      "6.17",
}

func TestNamesKnownToLibseccomp(t *testing.T) {
	seen := map[string]bool{}
	for _, rule := range Default().Syscalls {
		for _, name := range rule.Names {
			if seen[name] {
				continue
			}
			seen[name] = true
			nr, err := libseccomp.GetSyscallFromNameByArch(name, libseccomp.ArchAMD64)
			_, tolerated := newerThanLibseccomp[name]
			switch {
			case err != nil && !tolerated:
				t.Errorf("%s: unknown to libseccomp on x86-64 (typo? if it is newer than libseccomp, add it to newerThanLibseccomp)", name)
			case err == nil && nr < 0:
				t.Errorf("%s: not an x86-64 syscall (libseccomp pseudo-number %d)", name, nr)
			}
		}
	}
}

// TestLibseccompCompiles builds the filter the way runc does (one rule per
// name, argument comparisons ANDed) so a rule libseccomp rejects fails here
// rather than at container start.
func TestLibseccompCompiles(t *testing.T) {
	p := Default()
	filter, err := libseccomp.NewFilter(action(t, p.DefaultAction, p.DefaultErrnoRet))
	if err != nil {
		t.Fatal(err)
	}
	defer filter.Release()
	for _, arch := range p.Architectures {
		a, ok := map[specs.Arch]libseccomp.ScmpArch{specs.ArchX86_64: libseccomp.ArchAMD64}[arch]
		if !ok {
			t.Fatalf("unexpected architecture %s", arch)
		}
		if err := filter.AddArch(a); err != nil {
			t.Fatal(err)
		}
	}
	defaultAction := action(t, p.DefaultAction, p.DefaultErrnoRet)
	for i, rule := range p.Syscalls {
		act := action(t, rule.Action, rule.ErrnoRet)
		if act == defaultAction {
			continue // runc skips these too (clone3: ENOSYS is documentation)
		}
		var conds []libseccomp.ScmpCondition
		for _, a := range rule.Args {
			op := map[specs.LinuxSeccompOperator]libseccomp.ScmpCompareOp{
				specs.OpEqualTo:     libseccomp.CompareEqual,
				specs.OpMaskedEqual: libseccomp.CompareMaskedEqual,
			}[a.Op]
			c, err := libseccomp.MakeCondition(a.Index, op, a.Value, a.ValueTwo)
			if err != nil {
				t.Fatalf("syscalls[%d]: %v", i, err)
			}
			conds = append(conds, c)
		}
		for _, name := range rule.Names {
			nr, err := libseccomp.GetSyscallFromNameByArch(name, libseccomp.ArchAMD64)
			if err != nil {
				continue // covered by TestNamesKnownToLibseccomp
			}
			if len(conds) == 0 {
				err = filter.AddRuleExact(nr, act)
			} else {
				err = filter.AddRuleConditionalExact(nr, act, conds)
			}
			if err != nil {
				t.Errorf("syscalls[%d] %s: %v", i, name, err)
			}
		}
	}
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	if err := filter.ExportBPF(devNull); err != nil {
		t.Fatalf("exporting BPF: %v", err)
	}
}

func action(t *testing.T, a specs.LinuxSeccompAction, errnoRet *uint) libseccomp.ScmpAction {
	t.Helper()
	switch a {
	case specs.ActAllow:
		return libseccomp.ActAllow
	case specs.ActErrno:
		if errnoRet == nil {
			t.Fatal("SCMP_ACT_ERRNO without errnoRet returns EPERM by runc's default; say which")
		}
		return libseccomp.ActErrno.SetReturnCode(int16(*errnoRet))
	}
	t.Fatalf("unexpected action %s", a)
	return libseccomp.ActInvalid
}

// The numbers laterSyscalls takes from golang.org/x/sys are libseccomp's
// where libseccomp knows the name, and X86_64Syscalls names every number
// the profile names.
func TestLaterSyscallsAgree(t *testing.T) {
	for n, name := range laterSyscalls {
		if nr, err := libseccomp.GetSyscallFromNameByArch(name, libseccomp.ArchAMD64); err == nil && int(nr) != n {
			t.Errorf("%s: %d in laterSyscalls, %d to libseccomp", name, n, nr)
		}
	}
	all, err := X86_64Syscalls()
	if err != nil {
		t.Fatal(err)
	}
	for _, rule := range Default().Syscalls {
		for _, name := range rule.Names {
			if !slices.Contains(all, name) {
				t.Errorf("%s: named by the profile, not by X86_64Syscalls", name)
			}
		}
	}
}
