package runtime

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
)

// rootTag names a state root in cgroup paths, /warden/<tag>/<container>:
// two roots on one host never share a cgroup name, and gc under one root
// never touches another's.
func (rt *Runtime) rootTag() string {
	sum := sha256.Sum256([]byte(rt.Root))
	return hex.EncodeToString(sum[:6])
}

// cgroupPath is a container's cgroup, relative to each hierarchy's root.
func (rt *Runtime) cgroupPath(container string) string {
	return cgroupParent + "/" + rt.rootTag() + "/" + container
}

// sessionContainer is the libcontainer id of a session: its own id, or
// the pooled container's it was claimed from.
func (rt *Runtime) sessionContainer(id string) string {
	data, err := os.ReadFile(filepath.Join(rt.sessionDir(id), "session.json"))
	if err != nil {
		return id
	}
	var s struct {
		Container string `json:"container"`
	}
	if json.Unmarshal(data, &s) != nil || s.Container == "" || CheckID(s.Container) != nil {
		return id
	}
	return s.Container
}
