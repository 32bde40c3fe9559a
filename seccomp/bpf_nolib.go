//go:build !cgo

package seccomp

import (
	"errors"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

var errNoLibseccomp = errors.New("this program was built without seccomp support: build it with cgo and `-tags seccomp`, as `make build` does")

// WriteBPF needs libseccomp: this build has none (see bpf.go).
func WriteBPF(*specs.LinuxSeccomp, string) error { return errNoLibseccomp }

// WriteInitProgram needs libseccomp: this build has none (see bpf.go).
func WriteInitProgram(*specs.LinuxSeccomp, string) error { return errNoLibseccomp }

// X86_64Syscalls needs libseccomp: this build has none (see bpf.go).
func X86_64Syscalls() ([]string, error) { return nil, errNoLibseccomp }
