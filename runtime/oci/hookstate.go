package oci

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// runsc reads config.json from the bundle it is given, which on the
// gVisor engine is warden's own folder (the tightened spec), and hands
// that folder to the hooks it runs on the host as the state's bundle.
// Hooks read the caller's bundle there (runc's behaviour, and `state`'s),
// so warden puts itself in front of each: `warden relay-hook BUNDLE PATH
// ARGS...` sets the bundle and then becomes the hook.

// RelayHookCommand is the hidden command that relays a hook's state.
const RelayHookCommand = "relay-hook"

// maxHookState bounds the state a hook gets on stdin (annotations
// included); runc's state is a few hundred bytes.
const maxHookState = 4 << 20

// relayHooks puts warden (at exe) in front of the hooks runsc runs on the
// host, to give them bundle as the state's bundle. runsc skips NVIDIA's
// prestart hook by its path: that one is left as it is.
func relayHooks(h *specs.Hooks, exe, bundle string) {
	if h == nil {
		return
	}
	//lint:ignore SA1019 engines still write prestart hooks
	for _, list := range []*[]specs.Hook{&h.Prestart, &h.CreateRuntime, &h.Poststart, &h.Poststop} {
		for i, hk := range *list {
			if strings.HasSuffix(hk.Path, "/nvidia-container-runtime-hook") {
				continue
			}
			args := hk.Args
			if len(args) == 0 {
				args = []string{hk.Path}
			}
			(*list)[i].Path = exe
			(*list)[i].Args = append([]string{"warden", RelayHookCommand, bundle, hk.Path}, args...)
		}
	}
}

// RelayHook becomes the hook at path with args (args[0] its name), with
// the state read from stdin, its bundle set to bundle, as its stdin. It
// returns only on failure.
func RelayHook(bundle, path string, args []string, stdin io.Reader) error {
	data, err := io.ReadAll(io.LimitReader(stdin, maxHookState+1))
	if err != nil {
		return fmt.Errorf("hook %s: reading its state: %w", path, err)
	}
	if len(data) > maxHookState {
		return fmt.Errorf("hook %s: its state is over %d bytes", path, maxHookState)
	}
	var state map[string]json.RawMessage
	if err := json.Unmarshal(data, &state); err != nil {
		return fmt.Errorf("hook %s: its state is not a JSON object: %w", path, err)
	}
	state["bundle"], _ = json.Marshal(bundle)
	out, err := json.Marshal(state)
	if err != nil {
		return err
	}
	// The hook reads its state from stdin: a memfd holds all of it,
	// whatever its size, with nobody left to feed a pipe.
	fd, err := unix.MemfdCreate("hook-state", unix.MFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("hook %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), "hook-state")
	defer f.Close()
	if _, err := f.Write(out); err != nil {
		return fmt.Errorf("hook %s: %w", path, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("hook %s: %w", path, err)
	}
	if err := unix.Dup3(fd, 0, 0); err != nil {
		return fmt.Errorf("hook %s: %w", path, err)
	}
	if len(args) == 0 {
		return errors.New("relay-hook: no hook arguments")
	}
	return fmt.Errorf("hook %s: %w", path, unix.Exec(path, args, os.Environ()))
}
