//go:build cgo

package seccomp

import (
	"os"
	"path/filepath"
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
