package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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

// SessionContainer is the libcontainer id of a session: its own id, or
// the pooled container's it was claimed from. Reaping a session whose
// session.json is damaged must still find that container: a claimed
// session's folder also holds the pool.json it was started with, and
// every session's config.json names its cgroup, which is the
// container's id.
func (rt *Runtime) SessionContainer(id string) string {
	dir := rt.SessionDir(id)
	for _, f := range []struct {
		file string
		id   func(data []byte) string
	}{
		{"session.json", func(data []byte) string {
			var s struct {
				Container string `json:"container"`
			}
			if json.Unmarshal(data, &s) != nil || s.Container == "" {
				return id // a cold session: it names no other container
			}
			return s.Container
		}},
		{"pool.json", func(data []byte) string {
			var p struct {
				ID string `json:"id"`
			}
			json.Unmarshal(data, &p)
			return p.ID
		}},
		{filepath.Join("bundle", "config.json"), func(data []byte) string {
			var c struct {
				Linux struct {
					CgroupsPath string `json:"cgroupsPath"`
				} `json:"linux"`
			}
			json.Unmarshal(data, &c)
			if filepath.Dir(c.Linux.CgroupsPath) != filepath.Dir(rt.cgroupPath("x")) {
				return ""
			}
			return filepath.Base(c.Linux.CgroupsPath)
		}},
	} {
		data, err := ReadStateFile(filepath.Join(dir, f.file))
		if err != nil || !json.Valid(data) {
			continue
		}
		if c := f.id(data); c != "" && CheckID(c) == nil {
			return c
		}
	}
	return id
}
