package oci

import (
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// The host hooks runsc runs get warden in front of them; the hook that
// runs in the container's mount namespace (createContainer, where warden's
// binary is not) and NVIDIA's (skipped by runsc by its path) do not.
func TestRelayHooks(t *testing.T) {
	nvidia := specs.Hook{Path: "/usr/bin/nvidia-container-runtime-hook", Args: []string{"nvidia-container-runtime-hook", "prestart"}}
	h := &specs.Hooks{
		//lint:ignore SA1019 engines still write prestart hooks
		Prestart:        []specs.Hook{{Path: "/bin/a", Args: []string{"a", "--", "-x"}, Env: []string{"K=V"}}, nvidia},
		CreateRuntime:   []specs.Hook{{Path: "/bin/b"}},
		CreateContainer: []specs.Hook{{Path: "/bin/c"}},
		Poststart:       []specs.Hook{{Path: "/bin/d", Args: []string{"d"}}},
		Poststop:        []specs.Hook{{Path: "/bin/e", Args: []string{"e"}}},
	}
	relayHooks(h, "/usr/bin/warden", "/caller/bundle")
	want := func(path string, args ...string) []string {
		return append([]string{"warden", RelayHookCommand, "/caller/bundle", path}, args...)
	}
	//lint:ignore SA1019 engines still write prestart hooks
	pre := h.Prestart
	for _, c := range []struct {
		got  specs.Hook
		args []string
	}{
		{pre[0], want("/bin/a", "a", "--", "-x")},
		{h.CreateRuntime[0], want("/bin/b", "/bin/b")},
		{h.Poststart[0], want("/bin/d", "d")},
		{h.Poststop[0], want("/bin/e", "e")},
	} {
		if c.got.Path != "/usr/bin/warden" || !slices.Equal(c.got.Args, c.args) {
			t.Errorf("hook %+v, want warden with %q", c.got, c.args)
		}
	}
	if !slices.Equal(pre[0].Env, []string{"K=V"}) {
		t.Errorf("the hook's environment changed: %q", pre[0].Env)
	}
	if pre[1].Path != nvidia.Path || !slices.Equal(pre[1].Args, nvidia.Args) {
		t.Errorf("NVIDIA's hook changed: %+v", pre[1])
	}
	if h.CreateContainer[0].Path != "/bin/c" || h.CreateContainer[0].Args != nil {
		t.Errorf("createContainer changed: %+v", h.CreateContainer[0])
	}
	relayHooks(nil, "/usr/bin/warden", "/caller/bundle") // no hooks: nothing to do
}

// RelayHook becomes the hook with its arguments and the state on stdin,
// the bundle replaced and the rest kept; a state that is not JSON fails
// before the hook runs. It runs in a child (it replaces the process).
func TestRelayHook(t *testing.T) {
	if os.Getenv("WARDEN_TEST_RELAY_HOOK") != "" {
		err := RelayHook("/caller/bundle", "/bin/sh", []string{"sh", "-c", `cat; echo; echo "$0 $*"`, "hook", "--", "-x"}, os.Stdin)
		os.Stderr.WriteString(err.Error())
		os.Exit(3)
	}
	relay := func(stdin string) (string, string, error) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRelayHook$")
		cmd.Env = append(os.Environ(), "WARDEN_TEST_RELAY_HOOK=1")
		cmd.Stdin = strings.NewReader(stdin)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		return string(out), stderr.String(), err
	}
	out, stderr, err := relay(`{"ociVersion":"1.0.2","id":"c1","status":"created","pid":42,"bundle":"/run/warden/oci-gvisor/containers/c1","annotations":{"k":"v"}}`)
	if err != nil {
		t.Fatalf("relay: %v %s", err, stderr)
	}
	stateLine, argsLine, _ := strings.Cut(strings.TrimSpace(out), "\n")
	var st specs.State
	if err := json.Unmarshal([]byte(stateLine), &st); err != nil {
		t.Fatalf("the hook's stdin %q: %v", stateLine, err)
	}
	if st.Bundle != "/caller/bundle" || st.ID != "c1" || st.Pid != 42 || st.Status != "created" || st.Version != "1.0.2" || st.Annotations["k"] != "v" {
		t.Errorf("the hook got %+v", st)
	}
	if argsLine != "hook -- -x" {
		t.Errorf("the hook's arguments: %q, want %q", argsLine, "hook -- -x")
	}
	out, stderr, err = relay("not json")
	if err == nil || out != "" || !strings.Contains(stderr, "not a JSON object") {
		t.Errorf("a state that is not JSON: %v, output %q, %q", err, out, stderr)
	}
}
