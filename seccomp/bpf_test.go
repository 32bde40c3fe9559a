//go:build cgo

package seccomp

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestWriteBPF(t *testing.T) {
	path := filepath.Join(t.TempDir(), "filter.bpf")
	if err := WriteBPF(Default(), path); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Size() == 0 || fi.Size()%8 != 0 {
		t.Fatalf("the program: %v, %v; want whole 8-byte instructions", fi, err)
	}
	bad := Default()
	bad.Syscalls = append(bad.Syscalls, specs.LinuxSyscall{Names: []string{"read"}, Action: specs.ActTrace})
	if err := WriteBPF(bad, path); err == nil || !strings.Contains(err.Error(), "SCMP_ACT_TRACE is not one warden compiles") {
		t.Errorf("an action warden does not compile: %v", err)
	}
}

// TestWriteBPFKept: a profile compiled once is not compiled again, and a
// profile that differs in one rule gets a program of its own.
func TestWriteBPFKept(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, s *specs.LinuxSeccomp) []byte {
		path := filepath.Join(dir, name)
		if err := WriteBPF(s, path); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	first := write("first.bpf", Default())
	compiles := compiled.compiles
	again := write("again.bpf", Default())
	if compiled.compiles != compiles {
		t.Errorf("the same profile was compiled again")
	}
	if string(again) != string(first) {
		t.Errorf("the kept program differs from the first")
	}
	other := Default()
	for i, r := range other.Syscalls {
		if r.Action == specs.ActAllow && len(r.Args) == 0 {
			other.Syscalls[i].Names = slices.DeleteFunc(slices.Clone(r.Names), func(n string) bool { return n == "getpid" })
			break
		}
	}
	if string(write("other.bpf", other)) == string(first) {
		t.Errorf("a profile without getpid got the program that allows it")
	}
	if compiled.compiles != compiles+1 {
		t.Errorf("%d compiles for a new profile, want 1", compiled.compiles-compiles)
	}
}

// TestWriteBPFTree runs the program warden writes, and libseccomp's
// linear program of the same profile, on every syscall number (and on
// arguments the filtered calls look at): both decide alike, and the tree
// takes a few dozen instructions a number on average, where the linear
// program takes hundreds for the calls at its end. gVisor runs the
// filter on every syscall number at every clone (seccomp.go's
// populateCache): the sum is what each fork costs there.
func TestWriteBPFTree(t *testing.T) {
	dir := t.TempDir()
	load := func(name string, optimize int) []sockFilter {
		path := filepath.Join(dir, name)
		var err error
		if optimize == 0 {
			err = WriteBPF(Default(), path)
		} else { // not kept: libseccomp's own program
			err = writeBPF(Default(), path, optimize)
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		prog := make([]sockFilter, len(data)/8)
		for i := range prog {
			b := data[i*8:]
			prog[i] = sockFilter{code: binary.LittleEndian.Uint16(b), jt: b[2], jf: b[3], k: binary.LittleEndian.Uint32(b[4:])}
		}
		return prog
	}
	tree, linear := load("tree.bpf", 0), load("linear.bpf", 1)
	const auditArchX86_64 = 0xc000003e
	args := [][6]uint64{{}, {1, 2, 3, 4, 5, 6}, {0x10000000}, {0x7e020000}, {0x5401, 0x5412, 0x800, 0xc00}, {^uint64(0), ^uint64(0)}}
	var treeSum, linearSum, treeMax, linearMax int
	for nr := 0; nr < 512; nr++ {
		for i, a := range args {
			data := seccompData(uint32(nr), auditArchX86_64, a)
			gotTree, stepsTree, err := runBPF(tree, data)
			if err != nil {
				t.Fatalf("syscall %d: the tree: %v", nr, err)
			}
			gotLinear, stepsLinear, err := runBPF(linear, data)
			if err != nil {
				t.Fatalf("syscall %d: the linear program: %v", nr, err)
			}
			if gotTree != gotLinear {
				t.Errorf("syscall %d, args %x: the tree answers %#x, the linear program %#x", nr, a, gotTree, gotLinear)
			}
			if i == 0 {
				treeSum, linearSum = treeSum+stepsTree, linearSum+stepsLinear
				treeMax, linearMax = max(treeMax, stepsTree), max(linearMax, stepsLinear)
			}
		}
	}
	// Another architecture's calls take the bad-arch action either way.
	for _, arch := range []uint32{0x40000003 /* i386 */, 0} {
		got, _, _ := runBPF(tree, seccompData(0, arch, [6]uint64{}))
		want, _, _ := runBPF(linear, seccompData(0, arch, [6]uint64{}))
		if got != want {
			t.Errorf("arch %#x: the tree answers %#x, the linear program %#x", arch, got, want)
		}
	}
	t.Logf("instructions run over 512 syscall numbers: tree %d (at most %d for one), linear %d (at most %d)", treeSum, treeMax, linearSum, linearMax)
	// ~17 a number for the tree, ~240 for the linear program.
	if treeSum > 512*32 {
		t.Errorf("the program warden writes is not a tree: %d instructions over 512 syscall numbers (at most %d for one); the linear one %d (at most %d)", treeSum, treeMax, linearSum, linearMax)
	}
}

type sockFilter struct {
	code   uint16
	jt, jf uint8
	k      uint32
}

// seccompData is struct seccomp_data, as the kernel lays it out (x86-64).
func seccompData(nr, arch uint32, args [6]uint64) []byte {
	b := make([]byte, 64)
	binary.LittleEndian.PutUint32(b[0:], nr)
	binary.LittleEndian.PutUint32(b[4:], arch)
	for i, a := range args {
		binary.LittleEndian.PutUint64(b[16+8*i:], a)
	}
	return b
}

// runBPF runs a classic BPF program as seccomp does: its answer, and how
// many instructions it took.
func runBPF(prog []sockFilter, data []byte) (uint32, int, error) {
	var a, x uint32
	var mem [16]uint32
	for pc, steps := 0, 1; pc < len(prog); pc, steps = pc+1, steps+1 {
		in := prog[pc]
		switch in.code & 0x07 {
		case 0x00, 0x01: // ld, ldx
			var v uint32
			switch in.code & 0xe0 {
			case 0x00: // imm
				v = in.k
			case 0x20: // abs
				if in.code&0x18 != 0 || in.k%4 != 0 || int(in.k)+4 > len(data) {
					return 0, steps, fmt.Errorf("instruction %d: load %#x at %d", pc, in.code, in.k)
				}
				v = binary.LittleEndian.Uint32(data[in.k:])
			case 0x60: // mem
				v = mem[in.k%16]
			case 0x80: // len
				v = uint32(len(data))
			default:
				return 0, steps, fmt.Errorf("instruction %d: load mode %#x", pc, in.code)
			}
			if in.code&0x07 == 0 {
				a = v
			} else {
				x = v
			}
		case 0x02: // st
			mem[in.k%16] = a
		case 0x03: // stx
			mem[in.k%16] = x
		case 0x04: // alu
			v := in.k
			if in.code&0x08 != 0 {
				v = x
			}
			switch in.code & 0xf0 {
			case 0x00:
				a += v
			case 0x10:
				a -= v
			case 0x20:
				a *= v
			case 0x40:
				a |= v
			case 0x50:
				a &= v
			case 0x60:
				a <<= v
			case 0x70:
				a >>= v
			case 0x80:
				a = -a
			case 0xa0:
				a ^= v
			default:
				return 0, steps, fmt.Errorf("instruction %d: alu %#x", pc, in.code)
			}
		case 0x05: // jmp
			v := in.k
			if in.code&0x08 != 0 {
				v = x
			}
			var taken bool
			switch in.code & 0xf0 {
			case 0x00:
				pc += int(in.k)
				continue
			case 0x10:
				taken = a == v
			case 0x20:
				taken = a > v
			case 0x30:
				taken = a >= v
			case 0x40:
				taken = a&v != 0
			default:
				return 0, steps, fmt.Errorf("instruction %d: jump %#x", pc, in.code)
			}
			if taken {
				pc += int(in.jt)
			} else {
				pc += int(in.jf)
			}
		case 0x06: // ret
			if in.code&0x18 == 0x10 {
				return a, steps, nil
			}
			return in.k, steps, nil
		case 0x07: // misc
			if in.code&0xf8 == 0 {
				x = a
			} else {
				a = x
			}
		}
	}
	return 0, len(prog), fmt.Errorf("ran off the end of the program")
}
