package oci

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/opencontainers/runc/libcontainer"
	libseccomp "github.com/opencontainers/runc/libcontainer/seccomp"

	"github.com/warden-sandbox/warden/policies"
)

// Runtime is warden's runc-compatible face: containers whose config.json comes
// from an engine (containerd's shim, dockerd) or a user's bundle, each
// tightened by a warden policy when the runtime is configured with one.
// Their libcontainer state lives under Root/oci, apart from sessions.
type Runtime struct {
	Root string
	// Policy is applied to every container that does not choose one by
	// annotation; nil with no PolicyDir: containers run as configured.
	Policy *policies.Policy
	// PolicyFile is where Policy came from ($SKILL_DIR is its folder).
	PolicyFile string
	// PolicyDir holds the policies a container may choose by annotation
	// (AnnotationSelect), as NAME.toml.
	PolicyDir string
	// CapAllow lists the capabilities a container under a policy may keep.
	CapAllow []string
	// AllowUnconfined lets a container that selects no policy run as
	// configured when a PolicyDir is set but holds no default.toml;
	// without it such a container is refused (fail closed).
	AllowUnconfined bool
	// HookAllow are host programs a container's hooks may run under a
	// policy, besides docker's own.
	HookAllow []string
	// BindAllow are host path patterns (filepath.Match) a container under
	// a policy may bind read-only though its policy does not grant them.
	BindAllow []string
	// Engine is the isolation every container gets at least; a policy
	// asking for a stronger one gets that (policies.Strongest).
	Engine policies.Engine
	// LogFile and LogFormat are the caller's --log and --log-format,
	// handed on to the processes warden leaves running (a gVisor
	// sub-container's keeper).
	LogFile, LogFormat string
}

// checkContainerID accepts what runc accepts (every id an engine makes)
// but nothing that could leave the state root: no "/", ".", "..", NUL.
func checkContainerID(id string) error {
	if id == "" {
		return errors.New("container id cannot be empty")
	}
	if len(id) > 1024 || id == "." || id == ".." || strings.ContainsAny(id, "/\x00") || filepath.Base(id) != id {
		return fmt.Errorf("invalid container id %q", id)
	}
	return nil
}

func (o *Runtime) stateDir() string { return filepath.Join(o.Root, "oci") }

func (o *Runtime) prepare() error {
	if !libseccomp.Enabled {
		return errors.New("this warden binary was built without seccomp support; build it with `make build` (go build -tags seccomp)")
	}
	if err := os.MkdirAll(o.stateDir(), 0o711); err != nil {
		return fmt.Errorf("state root: %w", err)
	}
	return nil
}

// Load returns an existing container.
func (o *Runtime) Load(id string) (*libcontainer.Container, error) {
	if err := checkContainerID(id); err != nil {
		return nil, err
	}
	c, err := libcontainer.Load(o.stateDir(), id)
	if errors.Is(err, libcontainer.ErrNotExist) {
		return nil, fmt.Errorf("container %s does not exist", id)
	}
	return c, err
}
