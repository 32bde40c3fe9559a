package spec

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/warden-sandbox/warden/seccomp"
)

// seccomp: a syscall is allowed only when both warden's profile for the
// policy and the config's own profile allow it.
func (t *tightener) seccomp() error {
	w := seccomp.ForPolicy(t.p)
	if t.s.Linux.Seccomp != nil {
		w = seccomp.Intersect(w, t.s.Linux.Seccomp)
		t.changef("seccomp: the config's profile intersected with warden's")
	} else {
		t.changef("seccomp: warden's profile added")
	}
	t.s.Linux.Seccomp = w
	return nil
}

// dockerdPaths are where a Debian or Docker package puts dockerd; its
// prestart hook (Path /proc/PID/exe, args libnetwork-setkey ...) connects
// the container to docker's network.
var dockerdPaths = []string{"/usr/bin/dockerd", "/usr/sbin/dockerd", "/usr/local/bin/dockerd"}

// hooks run as root on the host (createRuntime, prestart, poststart,
// poststop) or with the runtime's rights in the container: under a policy
// only docker's libnetwork-setkey (for this very container) and the
// operator's --hook-allow programs may run; any other hook refuses the container. A hook's path is
// replaced by the program it was checked as (no /proc/PID/exe reuse).
func (t *tightener) hooks() error {
	h := t.s.Hooks
	if h == nil {
		return nil
	}
	for _, list := range []struct {
		name  string
		hooks []specs.Hook
	}{
		//lint:ignore SA1019 docker 20.10 still writes prestart hooks
		{"prestart", h.Prestart}, {"createRuntime", h.CreateRuntime}, {"createContainer", h.CreateContainer},
		{"startContainer", h.StartContainer}, {"poststart", h.Poststart}, {"poststop", h.Poststop},
	} {
		for i := range list.hooks {
			hk := &list.hooks[i]
			prog, err := t.hookProgram(list.name, *hk)
			if err != nil {
				return fmt.Errorf("%w: hooks.%s: %s: %v; under policy %s a hook runs only if the runtime's --hook-allow lists its program", ErrInvalid, list.name, hk.Path, err, t.p.Name)
			}
			hk.Path = prog
		}
	}
	return nil
}

// hookProgram returns the host program a hook runs, if it is allowed.
func (t *tightener) hookProgram(kind string, h specs.Hook) (string, error) {
	if !filepath.IsAbs(h.Path) {
		return "", fmt.Errorf("not an absolute path")
	}
	prog, err := filepath.EvalSymlinks(h.Path)
	if strings.HasPrefix(h.Path, "/proc/") {
		// /proc/PID/exe: the program that process runs.
		prog, err = os.Readlink(h.Path)
	}
	if err != nil {
		return "", err
	}
	if slices.Contains(t.o.HookAllow, prog) {
		return prog, nil
	}
	if (kind == "prestart" || kind == "createRuntime") && slices.Contains(dockerdPaths, prog) && len(h.Args) > 0 && h.Args[0] == "libnetwork-setkey" {
		if err := setkeyFor(h.Args, t.o.ID); err != nil {
			return "", err
		}
		return prog, nil
	}
	return "", fmt.Errorf("program %s is not allowed", prog)
}

// setkeyFor checks that docker's libnetwork-setkey hook connects the
// container being created (args: libnetwork-setkey [-flag=value...]
// CONTAINER-ID CONTROLLER-ID, read as dockerd reads them), not another
// container, whose network it would take.
func setkeyFor(args []string, id string) error {
	rest := args[1:]
	for len(rest) > 0 && strings.HasPrefix(rest[0], "-") {
		// A flag's value in the next argument would shift the ids.
		if !strings.Contains(rest[0], "=") {
			return fmt.Errorf("libnetwork-setkey flag %q: only -flag=value is accepted", rest[0])
		}
		rest = rest[1:]
	}
	if len(rest) != 2 || id == "" || rest[0] != id {
		return fmt.Errorf("libnetwork-setkey %s: it may only connect the container being created (%s)", strings.Join(args[1:], " "), id)
	}
	return nil
}

func (t *tightener) annotations() error {
	if t.s.Annotations == nil {
		t.s.Annotations = map[string]string{}
	}
	t.s.Annotations[AnnotationPolicy] = t.p.Name
	t.s.Annotations[AnnotationPolicyHash] = t.p.Hash()
	return nil
}
