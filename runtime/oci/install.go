package oci

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/BurntSushi/toml"
)

// RuntimeEntry is how an engine should call warden.
type RuntimeEntry struct {
	Name   string   // the runtime's name in the engine ("warden")
	Binary string   // absolute path of the warden binary
	Args   []string // global arguments (--policy, --policy-dir, --cap-allow)
}

// InstallDocker returns dockerd's daemon.json with the runtime added (or
// replaced), keeping every other setting as it was. A missing file counts
// as empty.
func InstallDocker(current []byte, e RuntimeEntry) ([]byte, error) {
	cfg := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(current)) > 0 {
		if err := json.Unmarshal(current, &cfg); err != nil {
			return nil, fmt.Errorf("not valid JSON (%v); fix the file first, nothing was changed", err)
		}
	}
	runtimes := map[string]json.RawMessage{}
	if raw, ok := cfg["runtimes"]; ok {
		if err := json.Unmarshal(raw, &runtimes); err != nil {
			return nil, fmt.Errorf("\"runtimes\" is not an object (%v); fix the file first, nothing was changed", err)
		}
	}
	entry := map[string]any{"path": e.Binary}
	if len(e.Args) > 0 {
		entry["runtimeArgs"] = e.Args
	}
	raw, err := json.Marshal(entry)
	if err != nil {
		return nil, err
	}
	runtimes[e.Name] = raw
	if cfg["runtimes"], err = json.Marshal(runtimes); err != nil {
		return nil, err
	}
	out, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// criPlugin is the CRI runtime table's plugin for each containerd config
// version.
var criPlugin = map[int64]string{2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}

// InstallContainerd returns containerd's config.toml with a CRI runtime
// entry for warden (runc shim, warden as its binary) added or replaced.
// The rest of the file, comments included, stays as it was. containerd
// passes a runtime no arguments, so warden's policy directory comes from
// its default (/etc/warden/policies) or containerd's environment.
func InstallContainerd(current []byte, e RuntimeEntry) ([]byte, error) {
	var doc map[string]any
	if _, err := toml.Decode(string(current), &doc); err != nil {
		return nil, fmt.Errorf("not valid TOML (%v); fix the file first, nothing was changed", err)
	}
	text := string(current)
	version, _ := doc["version"].(int64)
	if len(strings.TrimSpace(text)) == 0 {
		version = 2
		text = "version = 2\n"
	}
	plugin, ok := criPlugin[version]
	if !ok {
		return nil, fmt.Errorf("config version %d is not supported (2 and 3 are); run `containerd config migrate` first, nothing was changed", version)
	}
	table := fmt.Sprintf("plugins.%q.containerd.runtimes.%s", plugin, e.Name)
	text = strings.TrimRight(removeTables(text, table), "\n\t ") + "\n"
	text += fmt.Sprintf("\n# warden: run containers under warden's policies (warden install containerd)\n[%s]\n  runtime_type = \"io.containerd.runc.v2\"\n  pod_annotations = [\"dev.warden.*\"]\n[%s.options]\n  BinaryName = %q\n", table, table, e.Binary)
	var check map[string]any
	if _, err := toml.Decode(text, &check); err != nil {
		return nil, fmt.Errorf("the file defines the %s runtime in a form warden cannot replace (%v); remove that entry by hand, nothing was changed", e.Name, err)
	}
	return []byte(text), nil
}

// removeTables drops the TOML tables named table and its sub-tables,
// with their keys, up to the next table header.
func removeTables(text, table string) string {
	var out []string
	skipping := false
	for _, line := range strings.SplitAfter(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "[") {
			name := strings.TrimSpace(strings.Trim(trimmed, "[]"))
			skipping = name == table || strings.HasPrefix(name, table+".")
			if skipping && len(out) > 0 && strings.HasPrefix(strings.TrimSpace(out[len(out)-1]), "# warden:") {
				out = out[:len(out)-1]
			}
		}
		if !skipping {
			out = append(out, line)
		}
	}
	return strings.Join(out, "")
}

// WriteConfig replaces an engine's configuration file atomically, keeping
// its mode; a missing file (and folder) is created 0644.
func WriteConfig(path string, data []byte) error {
	mode := fs.FileMode(0o644)
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".warden-tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
