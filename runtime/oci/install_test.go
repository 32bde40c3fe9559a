package oci

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

func TestInstallDocker(t *testing.T) {
	e := RuntimeEntry{Name: "warden", Binary: "/usr/local/bin/warden", Args: []string{"--policy-dir", "/etc/warden/policies"}}
	for _, tc := range []struct {
		name, in string
	}{
		{"missing file", ""},
		{"other settings kept", `{"debug": true, "runtimes": {"runsc": {"path": "/usr/bin/runsc"}}, "log-opts": {"max-size": "10m"}}`},
		{"old entry replaced", `{"runtimes": {"warden": {"path": "/old/warden", "runtimeArgs": ["--policy", "/x"]}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := InstallDocker([]byte(tc.in), e)
			if err != nil {
				t.Fatal(err)
			}
			var got, before map[string]any
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("output is not JSON: %v\n%s", err, out)
			}
			json.Unmarshal([]byte(tc.in), &before)
			w := got["runtimes"].(map[string]any)["warden"].(map[string]any)
			if w["path"] != e.Binary || len(w["runtimeArgs"].([]any)) != 2 {
				t.Fatalf("warden entry %v", w)
			}
			for k, v := range before {
				if k == "runtimes" {
					for name := range v.(map[string]any) {
						if _, ok := got["runtimes"].(map[string]any)[name]; !ok {
							t.Errorf("runtime %s lost", name)
						}
					}
					continue
				}
				if _, ok := got[k]; !ok {
					t.Errorf("setting %s lost", k)
				}
			}
		})
	}
	for _, bad := range []string{`{"debug": tru`, `{"runtimes": []}`, `[1]`} {
		if _, err := InstallDocker([]byte(bad), e); err == nil || !strings.Contains(err.Error(), "nothing was changed") {
			t.Errorf("%q: err %v", bad, err)
		}
	}
}

func TestInstallContainerd(t *testing.T) {
	e := RuntimeEntry{Name: "warden", Binary: "/usr/local/bin/warden"}
	v2 := `version = 2
# keep me
[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "runc"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
`
	for _, tc := range []struct {
		name, in, plugin string
	}{
		{"empty", "", "io.containerd.grpc.v1.cri"},
		{"version 2", v2, "io.containerd.grpc.v1.cri"},
		{"version 3", "version = 3\n", "io.containerd.cri.v1.runtime"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := InstallContainerd([]byte(tc.in), e)
			if err != nil {
				t.Fatal(err)
			}
			// Installing twice gives the same file: the entry is replaced.
			again, err := InstallContainerd(out, e)
			if err != nil || string(again) != string(out) {
				t.Fatalf("second install differs (%v):\n%s\n---\n%s", err, out, again)
			}
			var doc map[string]any
			if _, err := toml.Decode(string(out), &doc); err != nil {
				t.Fatal(err)
			}
			rt := doc["plugins"].(map[string]any)[tc.plugin].(map[string]any)["containerd"].(map[string]any)["runtimes"].(map[string]any)
			w := rt["warden"].(map[string]any)
			if w["runtime_type"] != "io.containerd.runc.v2" || w["options"].(map[string]any)["BinaryName"] != e.Binary || len(w["pod_annotations"].([]any)) != 1 {
				t.Fatalf("warden entry %v", w)
			}
			if tc.in == v2 {
				if !strings.Contains(string(out), "# keep me") || rt["runc"] == nil {
					t.Fatalf("the rest of the file was not kept:\n%s", out)
				}
			}
		})
	}
	for _, bad := range []string{"version = 1\n[plugins.cri]\n", "version = = 2"} {
		if _, err := InstallContainerd([]byte(bad), e); err == nil || !strings.Contains(err.Error(), "nothing was changed") {
			t.Errorf("%q: err %v", bad, err)
		}
	}
}
