package oci

// seccompexec.c's constructor is linked into every binary with this
// package: a container's first process may be warden-seccomp-exec.

// #cgo CFLAGS: -Wall -Wextra -O2
import "C"
