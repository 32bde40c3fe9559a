package runtime

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/opencontainers/runc/libcontainer/exeseal"
	"golang.org/x/sys/unix"
)

// sealedFromEnv carries the path of warden's binary on disk into a daemon
// re-executed from its sealed copy, whose /proc/self/exe names a memfd.
const sealedFromEnv = "_WARDEN_SEALED_FROM"

// ReexecSealed re-executes the process from a sealed in-memory copy of its
// binary, unless it already runs from one. Every container start re-execs
// the binary as the container's init, and libcontainer protects that from
// being overwritten from inside (CVE-2019-5736) by sealing a fresh copy of
// the binary per start (an overlayfs mount and its teardown here: 10-15 ms
// of every cold create and refill, measured interleaved) unless the
// process already runs from a sealed memfd.
// The daemon makes its copy once, at start (one 7 MB memfd).
func ReexecSealed() error {
	if exeseal.IsSelfExeCloned() {
		return nil
	}
	onDisk, err := os.Executable()
	if err != nil {
		return err
	}
	self, err := os.Open("/proc/self/exe")
	if err != nil {
		return err
	}
	defer self.Close()
	st, err := self.Stat()
	if err != nil {
		return err
	}
	sealed, err := exeseal.CloneBinary(self, st.Size(), "/proc/self/exe", os.TempDir())
	if err != nil {
		return fmt.Errorf("sealed copy of warden's binary: %w", err)
	}
	defer sealed.Close()
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, sealedFromEnv+"=") })
	env = append(env, sealedFromEnv+"="+onDisk)
	return unix.Exec(fmt.Sprintf("/proc/self/fd/%d", sealed.Fd()), os.Args, env)
}

// executable is warden's binary on disk, also in a daemon that runs from
// its sealed copy.
func executable() (string, error) {
	if p := os.Getenv(sealedFromEnv); p != "" && exeseal.IsSelfExeCloned() {
		return p, nil
	}
	return os.Executable()
}
