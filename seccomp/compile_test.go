//go:build cgo

package seccomp

import (
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// compileLikeInit builds the filter of profile s the way libcontainer's
// container init does on every start (libcontainer/seccomp.InitSeccomp
// and patchbpf.PatchAndLoad, runc v1.5.2): one rule per syscall name,
// the binary tree over more than 32 rules, the program exported through a
// pipe, read back one instruction at a time, disassembled and assembled
// again; everything but loading it. It returns the program's length.
func compileLikeInit(tb testing.TB, s *specs.LinuxSeccomp) int {
	def, err := bpfAction(s.DefaultAction, s.DefaultErrnoRet)
	if err != nil {
		tb.Fatal(err)
	}
	f, err := libseccomp.NewFilter(def)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Release()
	for _, a := range s.Architectures {
		arch, err := libseccomp.GetArchFromString(archName(a))
		if err != nil {
			tb.Fatal(err)
		}
		if err := f.AddArch(arch); err != nil {
			tb.Fatal(err)
		}
	}
	rules := 0
	for _, r := range s.Syscalls {
		rules += len(r.Names)
	}
	if rules > 32 {
		if err := f.SetOptimize(2); err != nil {
			tb.Fatal(err)
		}
	}
	if err := f.SetNoNewPrivsBit(false); err != nil {
		tb.Fatal(err)
	}
	for _, r := range s.Syscalls {
		act, err := bpfAction(r.Action, r.ErrnoRet)
		if err != nil {
			tb.Fatal(err)
		}
		if act == def {
			continue
		}
		for _, name := range r.Names {
			call, err := libseccomp.GetSyscallFromName(name)
			if err != nil {
				continue
			}
			if err := addRule(f, call, act, r.Args); err != nil {
				tb.Fatalf("%s: %v", name, err)
			}
		}
	}
	rd, wr, err := os.Pipe()
	if err != nil {
		tb.Fatal(err)
	}
	defer rd.Close()
	var buf bytes.Buffer
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(&buf, rd)
		done <- err
	}()
	if err := f.ExportBPF(wr); err != nil {
		tb.Fatal(err)
	}
	wr.Close()
	if err := <-done; err != nil {
		tb.Fatal(err)
	}
	var raw []bpf.RawInstruction
	for {
		var in unix.SockFilter
		if err := binary.Read(&buf, binary.NativeEndian, &in); err != nil {
			break
		}
		raw = append(raw, bpf.RawInstruction{Op: in.Code, Jt: in.Jt, Jf: in.Jf, K: in.K})
	}
	prog, ok := bpf.Disassemble(raw)
	if !ok {
		tb.Fatal("could not disassemble the program")
	}
	if _, err := bpf.Assemble(prog); err != nil {
		tb.Fatal(err)
	}
	return len(prog)
}

// BenchmarkCompileLikeInit: what compiling warden's profile costs every
// container start (libcontainer's init, in the container), and the same
// profile without its argument filters. Measured on the project's machine
// (libseccomp 2.5.4): ~4.7 ms, ~2.1 ms without the argument filters. Most
// of the cost is libseccomp's program generator, which grows faster than
// the number of blocks (every syscall, and every argument comparison, is
// one): the allow list's ~400 syscalls take the first ~2 ms whatever their
// order, and each filtered family adds its share (socket and socketpair
// ~0.9 ms, ioctl ~0.6, personality ~0.5, open and openat ~0.5, the mode
// calls ~0.3, clone ~0.05). Writing the socket families as aligned ranges
// (17 rules a call instead of 46, the same decisions) saved ~0.15 ms.
func BenchmarkCompileLikeInit(b *testing.B) {
	withoutArgs := Default()
	withoutArgs.Syscalls = slices.DeleteFunc(withoutArgs.Syscalls, func(r specs.LinuxSyscall) bool { return len(r.Args) > 0 })
	for _, p := range []struct {
		name    string
		profile *specs.LinuxSeccomp
	}{{"profile", Default()}, {"without-argument-filters", withoutArgs}} {
		b.Run(p.name, func(b *testing.B) {
			n := 0
			for b.Loop() {
				n = compileLikeInit(b, p.profile)
			}
			b.ReportMetric(float64(n), "instructions")
		})
	}
}
