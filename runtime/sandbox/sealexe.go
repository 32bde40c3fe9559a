package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
// the binary per start (an overlayfs mount and its teardown, a large part
// of a cold create) unless the process already runs from a sealed memfd.
// The daemon makes its copy once, at start (one memfd of the binary's size).
func ReexecSealed() error {
	if exeseal.IsSelfExeCloned() {
		// exec of /proc/self/fd/N named the process "N": give it its name
		// back for ps, pgrep and the logs, on every thread the Go runtime
		// has started so far (a thread takes its name from the one that
		// starts it).
		if onDisk, err := executable(); err == nil {
			nameThreads(filepath.Base(onDisk))
		}
		return nil
	}
	if os.Getenv(sealedFromEnv) != "" {
		// Re-executed already, yet not from a sealed memfd: never loop.
		return errors.New("the re-executed binary is not a sealed memfd")
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
	// Where an executable memfd cannot be made (vm.memfd_noexec=2),
	// CloneBinary falls back to a plain temporary file, which libcontainer
	// would not trust: running from it gains nothing.
	if !exeseal.IsCloned(sealed) {
		return errors.New("no executable sealed memfd on this host (vm.memfd_noexec?)")
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, sealedFromEnv+"=") })
	env = append(env, sealedFromEnv+"="+onDisk)
	return unix.Exec(fmt.Sprintf("/proc/self/fd/%d", sealed.Fd()), os.Args, env)
}

// nameThreads sets the name of each of the process's threads.
func nameThreads(name string) {
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, t := range tasks {
		os.WriteFile(filepath.Join("/proc/self/task", t.Name(), "comm"), []byte(name), 0)
	}
}

// executable is warden's binary on disk, also in a daemon that runs from
// its sealed copy.
func executable() (string, error) {
	if p := os.Getenv(sealedFromEnv); p != "" && exeseal.IsSelfExeCloned() {
		return p, nil
	}
	return os.Executable()
}
