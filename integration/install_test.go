package integration

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The default policy folder `warden install` uses when no policy is named.
const installPolicyDir = "/etc/warden/policies"

// restoreEtcWarden puts /etc/warden back as the test found it: what the
// test made there is removed, nothing else.
func restoreEtcWarden(t *testing.T) {
	t.Helper()
	var made []string
	for _, p := range []string{"/etc/warden", installPolicyDir, filepath.Join(installPolicyDir, "default.toml")} {
		if _, err := os.Lstat(p); os.IsNotExist(err) {
			made = append(made, p)
		}
	}
	if len(made) < 3 {
		t.Fatalf("%s/default.toml exists on this machine: the test would not see warden write it; move it away first", installPolicyDir)
	}
	t.Cleanup(func() {
		for i := len(made) - 1; i >= 0; i-- {
			os.Remove(made[i])
		}
	})
}

// TestInstallBaseline: registering warden without naming a policy gives
// containers the shipped baseline policy, never plain runc behaviour;
// --allow-unconfined asks for that explicitly. An operator's own
// default.toml is kept, one that does not load is refused, and --dry-run
// writes nothing.
func TestInstallBaseline(t *testing.T) {
	restoreEtcWarden(t)
	dir := tempDir(t)
	daemonJSON := filepath.Join(dir, "daemon.json")
	defaultToml := filepath.Join(installPolicyDir, "default.toml")
	shipped, err := os.ReadFile(examplePath("baseline-container"))
	if err != nil {
		t.Fatal(err)
	}
	runtimeArgs := func() []string {
		t.Helper()
		data, err := os.ReadFile(daemonJSON)
		if err != nil {
			t.Fatal(err)
		}
		var cfg struct {
			Runtimes map[string]struct {
				Args []string `json:"runtimeArgs"`
			} `json:"runtimes"`
		}
		if err := json.Unmarshal(data, &cfg); err != nil {
			t.Fatalf("%v\n%s", err, data)
		}
		return cfg.Runtimes["warden"].Args
	}

	// --dry-run: the configuration is printed, nothing is written.
	res := runWarden(t, nil, "install", "docker", "--config", daemonJSON, "--dry-run")
	expectOK(t, res)
	if !strings.Contains(res.Stdout, `"--policy-dir"`) || !strings.Contains(res.Stderr, "would write "+defaultToml) {
		t.Errorf("dry run: stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	for _, p := range []string{daemonJSON, "/etc/warden"} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("--dry-run made %s", p)
		}
	}

	// No policy named: the baseline is written and registered.
	res = runWarden(t, nil, "install", "docker", "--config", daemonJSON)
	expectOK(t, res)
	got, err := os.ReadFile(defaultToml)
	if err != nil || !bytes.Equal(got, shipped) {
		t.Fatalf("%s after install: %v; want the shipped baseline-container policy", defaultToml, err)
	}
	if fi, _ := os.Stat(defaultToml); fi.Mode().Perm() != 0o644 {
		t.Errorf("%s mode %v, want 0644", defaultToml, fi.Mode().Perm())
	}
	if args := runtimeArgs(); strings.Join(args, " ") != "--policy-dir "+installPolicyDir {
		t.Errorf("runtimeArgs %q, want --policy-dir %s", args, installPolicyDir)
	}
	if !strings.Contains(res.Stderr, "baseline-container") {
		t.Errorf("install does not say which policy containers get: %q", res.Stderr)
	}

	// The operator's own default.toml is kept as it is.
	own := []byte("name = \"own\"\n")
	if err := os.WriteFile(defaultToml, own, 0o644); err != nil {
		t.Fatal(err)
	}
	res = runWarden(t, nil, "install", "containerd", "--config", filepath.Join(dir, "config.toml"))
	expectOK(t, res)
	if got, _ := os.ReadFile(defaultToml); !bytes.Equal(got, own) || !strings.Contains(res.Stderr, "kept as it is") {
		t.Errorf("install replaced the operator's default.toml (%q), stderr %q", got, res.Stderr)
	}

	// One that others may write is refused: its writer would choose every
	// container's policy.
	if err := os.Chmod(defaultToml, 0o666); err != nil {
		t.Fatal(err)
	}
	res = runWarden(t, nil, "install", "docker", "--config", daemonJSON)
	if res.Exit != 125 || !strings.Contains(res.Stderr, "chmod go-w") {
		t.Errorf("a world-writable default.toml: exit %d, stderr %q; want 125 and how to fix it", res.Exit, res.Stderr)
	}
	if err := os.Chmod(defaultToml, 0o644); err != nil {
		t.Fatal(err)
	}

	// One that does not load is refused, and the engine's file is left.
	if err := os.WriteFile(defaultToml, []byte("name = 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(daemonJSON)
	res = runWarden(t, nil, "install", "docker", "--config", daemonJSON)
	if res.Exit != 125 || strings.Count(strings.TrimSpace(res.Stderr), "\n") != 0 || !strings.Contains(res.Stderr, "--allow-unconfined") {
		t.Errorf("a broken default.toml: exit %d, stderr %q; want 125 and one line naming the way out", res.Exit, res.Stderr)
	}
	if after, _ := os.ReadFile(daemonJSON); !bytes.Equal(before, after) {
		t.Errorf("a refused install changed %s", daemonJSON)
	}

	// --allow-unconfined: plain runc behaviour, asked for by name.
	expectOK(t, runWarden(t, nil, "--allow-unconfined", "install", "docker", "--config", daemonJSON))
	if args := runtimeArgs(); strings.Join(args, " ") != "--allow-unconfined" {
		t.Errorf("--allow-unconfined: runtimeArgs %q", args)
	}
	expectOK(t, runWarden(t, nil, "--allow-unconfined", "install", "containerd", "--config", filepath.Join(dir, "config.toml")))
	// A named policy: as before, no baseline.
	expectOK(t, runWarden(t, nil, "--policy", examplePath("inspector"), "install", "docker", "--config", daemonJSON))
	if args := runtimeArgs(); len(args) != 2 || args[0] != "--policy" {
		t.Errorf("--policy: runtimeArgs %q", args)
	}
}

// TestInstallEngine: install docker --engine gvisor passes the engine on
// as a runtime argument; containerd, which passes a runtime no arguments,
// refuses it in one line saying what to use instead; an unknown engine is
// refused before anything is written.
func TestInstallEngine(t *testing.T) {
	requireRunsc(t)
	dir := tempDir(t)
	daemonJSON := filepath.Join(dir, "daemon.json")
	env := append(runscEnv(), "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
	res := runWarden(t, env, "--engine", "gvisor", "--allow-unconfined", "install", "docker", "--config", daemonJSON, "--name", "warden-gvisor")
	if res.Exit != 0 {
		t.Fatalf("install docker --engine gvisor: exit %d, %s", res.Exit, res.Stderr)
	}
	var cfg struct {
		Runtimes map[string]struct {
			Path string   `json:"path"`
			Args []string `json:"runtimeArgs"`
		} `json:"runtimes"`
	}
	data, _ := os.ReadFile(daemonJSON)
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	if args := strings.Join(cfg.Runtimes["warden-gvisor"].Args, " "); !strings.Contains(args, "--engine gvisor") {
		t.Fatalf("runtimeArgs %q lack --engine gvisor:\n%s", args, data)
	}
	ctrConfig := filepath.Join(dir, "config.toml")
	res = runWarden(t, env, "--engine", "gvisor", "--allow-unconfined", "install", "containerd", "--config", ctrConfig)
	if res.Exit != 125 || !strings.Contains(res.Stderr, "containerd passes a runtime no arguments") || strings.Count(strings.TrimSpace(res.Stderr), "\n") != 0 {
		t.Fatalf("install containerd --engine gvisor: exit %d, %q", res.Exit, res.Stderr)
	}
	if _, err := os.Stat(ctrConfig); err == nil {
		t.Fatal("the refused install wrote containerd's config")
	}
	before, _ := os.ReadFile(daemonJSON)
	res = runWarden(t, env, "--engine", "kvm", "--allow-unconfined", "install", "docker", "--config", daemonJSON)
	if res.Exit != 125 || !strings.Contains(res.Stderr, `--engine: unknown engine "kvm"`) {
		t.Fatalf("--engine kvm: exit %d, %q", res.Exit, res.Stderr)
	}
	if after, _ := os.ReadFile(daemonJSON); !bytes.Equal(before, after) {
		t.Fatal("--engine kvm changed daemon.json")
	}
}
