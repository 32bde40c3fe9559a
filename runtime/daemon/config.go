package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/runtime/sandbox"
)

// ConfigPath is the daemon's configuration file for a state root:
// /etc/warden/config.toml for the default root, ROOT/config.toml for any
// other.
func ConfigPath(root string) string {
	if filepath.Clean(root) == sandbox.DefaultRoot {
		return "/etc/warden/config.toml"
	}
	return filepath.Join(root, "config.toml")
}

// Config is the daemon's configuration file:
//
//	[[pool]]
//	policy = "/etc/warden/skills/web-fetch.toml"   # a file, or a list merged
//	size = 4                                       # containers kept ready
//	skill_dir = "/opt/skills/web-fetch"            # optional: $SKILL_DIR (default: the policy file's folder)
//	home = "/root"                                 # optional: $HOME (default: the daemon's)
//
// and, at the top, cgroup_favordynmods = false to leave the kernel's
// cgroup locking as it is (see FavorCgroupMoves).
type Config struct {
	Pools        []PoolRequest
	FavorDynmods bool
}

var poolConfigKeys = []string{"policy", "size", "skill_dir", "home"}

// LoadConfig reads a configuration file; a missing file is an empty
// configuration. Keys are checked exactly: an unknown or misspelt one is
// an error naming it.
func LoadConfig(path string) (*Config, error) {
	data, err := policies.ReadFile(path, "config", policies.MaxPolicyFile)
	if errors.Is(err, fs.ErrNotExist) {
		return &Config{FavorDynmods: true}, nil
	} else if err != nil {
		return nil, err
	}
	var raw map[string]any
	if _, err := toml.Decode(string(data), &raw); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("config %s: %s", path, fmt.Sprintf(format, args...))
	}
	cfg := &Config{FavorDynmods: true}
	for key, v := range raw {
		if key == "cgroup_favordynmods" {
			b, ok := v.(bool)
			if !ok {
				return nil, bad("cgroup_favordynmods must be true or false")
			}
			cfg.FavorDynmods = b
			continue
		}
		if key != "pool" {
			return nil, bad("unknown key %q; valid: cgroup_favordynmods (at the top of the file), [[pool]] tables", key)
		}
		tables, ok := v.([]map[string]any)
		if !ok {
			return nil, bad("pool must be an array of tables ([[pool]])")
		}
		for i, t := range tables {
			req, err := poolFromConfig(t, filepath.Dir(path))
			if err != nil {
				return nil, bad("pool %d: %v", i+1, err)
			}
			cfg.Pools = append(cfg.Pools, req)
		}
	}
	return cfg, nil
}

func poolFromConfig(t map[string]any, base string) (PoolRequest, error) {
	var req PoolRequest
	for key := range t {
		if key == "cgroup_favordynmods" {
			return req, fmt.Errorf("cgroup_favordynmods belongs at the top of the file, before any [[pool]]")
		}
		if !slices.Contains(poolConfigKeys, key) {
			return req, fmt.Errorf("unknown key %q; valid: %s", key, strings.Join(poolConfigKeys, ", "))
		}
	}
	switch p := t["policy"].(type) {
	case string:
		req.Files = []string{p}
	case []any:
		for _, f := range p {
			s, ok := f.(string)
			if !ok {
				return req, errors.New("policy: use a file name or a list of file names")
			}
			req.Files = append(req.Files, s)
		}
	case nil:
		return req, errors.New("policy is missing; name the policy file to keep containers for")
	default:
		return req, errors.New("policy: use a file name or a list of file names")
	}
	if len(req.Files) == 0 {
		return req, errors.New("policy: the list is empty")
	}
	for i, f := range req.Files {
		if !filepath.IsAbs(f) {
			f = filepath.Join(base, f)
		}
		req.Files[i] = filepath.Clean(f)
	}
	size, ok := t["size"].(int64)
	if !ok || size < 0 || size > MaxPoolSize {
		return req, fmt.Errorf("size: use a whole number from 0 to %d", MaxPoolSize)
	}
	req.Size = int(size)
	req.Vars = policies.Vars{SkillDir: filepath.Dir(req.Files[0])}
	req.Vars.Home, _ = os.UserHomeDir()
	for key, dst := range map[string]*string{"skill_dir": &req.Vars.SkillDir, "home": &req.Vars.Home} {
		v, present := t[key]
		if !present {
			continue
		}
		s, ok := v.(string)
		if !ok || !filepath.IsAbs(s) {
			return req, fmt.Errorf("%s: use an absolute path", key)
		}
		*dst = filepath.Clean(s)
	}
	return req, nil
}
