//go:build cgo

package seccomp

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	libseccomp "github.com/seccomp/libseccomp-golang"
)

// WriteBPF compiles an OCI seccomp profile to a classic BPF program (the
// form seccomp(2) loads) in path. gVisor's runsc would apply an OCI
// profile too, but answers every refusal with EPERM, where warden's
// refusals carry their own errno (ENOSYS for clone3, which libc then
// replaces with clone); a program loaded inside the sandbox keeps them.
//
// The program is a binary tree over the syscall numbers (libseccomp's
// optimize level 2), not one comparison after another: gVisor runs a
// task's filter for every syscall number each time the task clones (to
// cache the actions that do not depend on arguments), so a linear
// program of a few hundred rules cost every fork, thread and command
// several milliseconds there. The tree decides the same.
//
// A program once compiled is kept (by the profile's content) for the
// next sandbox of the same policy: libseccomp takes milliseconds to
// build one, on every cold start.
func WriteBPF(s *specs.LinuxSeccomp, path string) error {
	text, err := json.Marshal(s)
	if err != nil {
		return err
	}
	key := sha256.Sum256(text)
	compiled.Lock()
	prog, ok := compiled.byKey[key]
	compiled.Unlock()
	if ok {
		return os.WriteFile(path, prog, 0o644)
	}
	if err := writeBPF(s, path, 2); err != nil {
		return err
	}
	prog, err = os.ReadFile(path)
	if err != nil {
		return err
	}
	compiled.Lock()
	defer compiled.Unlock()
	compiled.compiles++
	if compiled.byKey == nil || len(compiled.byKey) >= 64 {
		compiled.byKey = map[[32]byte][]byte{}
	}
	compiled.byKey[key] = prog
	return nil
}

// compiled holds the programs WriteBPF built, by their profile's sum.
var compiled struct {
	sync.Mutex
	byKey    map[[32]byte][]byte
	compiles int // how many it built, for the tests
}

// WriteInitProgram writes to path the program libcontainer's container
// init (runc v1.5.2, libcontainer/seccomp.InitSeccomp) builds from s and
// loads with prctl(PR_SET_SECCOMP): libseccomp's binary tree where the
// profile names more than 32 syscalls, no no_new_privs bit, a rule whose
// action is the default's left out. It is the same program only for a
// profile InitProgramFits accepts; runtime/oci compiles it once and has
// the container's first process load it, where libcontainer would build
// it again in every start.
func WriteInitProgram(s *specs.LinuxSeccomp, path string) error {
	if !InitProgramFits(s) {
		return errors.New("this seccomp profile is loaded by libcontainer only")
	}
	names := 0
	for _, r := range s.Syscalls {
		names += len(r.Names)
	}
	optimize := 1 // libseccomp's default
	if names > 32 {
		optimize = 2
	}
	return writeBPF(s, path, optimize)
}

func writeBPF(s *specs.LinuxSeccomp, path string, optimize int) error {
	def, err := bpfAction(s.DefaultAction, s.DefaultErrnoRet)
	if err != nil {
		return err
	}
	f, err := libseccomp.NewFilter(def)
	if err != nil {
		return err
	}
	defer f.Release()
	// The sandbox's processes have no_new_privs already; the loader sets
	// nothing else.
	if err := f.SetNoNewPrivsBit(false); err != nil {
		return err
	}
	if err := f.SetOptimize(optimize); err != nil {
		return err
	}
	for _, a := range s.Architectures {
		arch, err := libseccomp.GetArchFromString(archName(a))
		if err != nil {
			return err
		}
		if err := f.AddArch(arch); err != nil {
			return err
		}
	}
	for _, r := range s.Syscalls {
		act, err := bpfAction(r.Action, r.ErrnoRet)
		if err != nil {
			return err
		}
		if act == def {
			continue // what the default does already (libseccomp refuses it)
		}
		for _, name := range r.Names {
			call, err := libseccomp.GetSyscallFromName(name)
			if err != nil {
				continue // not on this architecture (or this libseccomp)
			}
			if err := addRule(f, call, act, r.Args); err != nil {
				return fmt.Errorf("seccomp rule for %s: %w", name, err)
			}
		}
	}
	out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if err := f.ExportBPF(out); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// addRule adds one rule; conditions on one argument given twice are each
// a rule of their own (libseccomp takes one condition per argument), as
// runc does.
func addRule(f *libseccomp.ScmpFilter, call libseccomp.ScmpSyscall, act libseccomp.ScmpAction, args []specs.LinuxSeccompArg) error {
	var conds []libseccomp.ScmpCondition
	seen := map[uint]bool{}
	repeated := false
	for _, a := range args {
		op, err := compareOp(a.Op)
		if err != nil {
			return err
		}
		c, err := libseccomp.MakeCondition(a.Index, op, a.Value, a.ValueTwo)
		if err != nil {
			return err
		}
		repeated = repeated || seen[a.Index]
		seen[a.Index] = true
		conds = append(conds, c)
	}
	switch {
	case len(conds) == 0:
		return f.AddRule(call, act)
	case !repeated:
		return f.AddRuleConditional(call, act, conds)
	}
	for _, c := range conds {
		if err := f.AddRuleConditional(call, act, []libseccomp.ScmpCondition{c}); err != nil {
			return err
		}
	}
	return nil
}

func bpfAction(a specs.LinuxSeccompAction, errnoRet *uint) (libseccomp.ScmpAction, error) {
	switch a {
	case specs.ActAllow:
		return libseccomp.ActAllow, nil
	case specs.ActErrno:
		n := uint(errnoEPERM)
		if errnoRet != nil {
			n = *errnoRet
		}
		return libseccomp.ActErrno.SetReturnCode(int16(n)), nil
	case specs.ActKill, specs.ActKillThread:
		return libseccomp.ActKillThread, nil
	case specs.ActKillProcess:
		return libseccomp.ActKillProcess, nil
	case specs.ActLog:
		return libseccomp.ActLog, nil
	}
	return libseccomp.ActInvalid, fmt.Errorf("seccomp action %s is not one warden compiles", a)
}

func compareOp(op specs.LinuxSeccompOperator) (libseccomp.ScmpCompareOp, error) {
	switch op {
	case specs.OpEqualTo:
		return libseccomp.CompareEqual, nil
	case specs.OpNotEqual:
		return libseccomp.CompareNotEqual, nil
	case specs.OpLessThan:
		return libseccomp.CompareLess, nil
	case specs.OpLessEqual:
		return libseccomp.CompareLessOrEqual, nil
	case specs.OpGreaterThan:
		return libseccomp.CompareGreater, nil
	case specs.OpGreaterEqual:
		return libseccomp.CompareGreaterEqual, nil
	case specs.OpMaskedEqual:
		return libseccomp.CompareMaskedEqual, nil
	}
	return libseccomp.CompareInvalid, fmt.Errorf("seccomp operator %s is not one warden compiles", op)
}

// archName is libseccomp's name of an OCI architecture.
func archName(a specs.Arch) string {
	switch a {
	case specs.ArchX86_64:
		return "amd64"
	case specs.ArchX86:
		return "x86"
	case specs.ArchX32:
		return "x32"
	case specs.ArchAARCH64:
		return "arm64"
	}
	return string(a)
}

// X86_64Syscalls are the names of every x86-64 syscall (numbers 0-511;
// those above are x32's) in number order, from libseccomp and, for those
// it may not know, laterSyscalls: what a profile must name to refuse
// every syscall one by one. It fails when one is left without a name.
func X86_64Syscalls() ([]string, error) {
	return x86_64Names(func(n int) string {
		name, err := libseccomp.ScmpSyscall(n).GetNameByArch(libseccomp.ArchAMD64)
		if err != nil {
			return ""
		}
		return name
	})
}
