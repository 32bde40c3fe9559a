package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestOCIGVisorHookState runs the host hooks of a container on the gVisor
// engine and checks the state each reads on stdin names the caller's
// bundle, as runc's and `warden state` do (runsc would name warden's own
// copy of it), with the hook's own arguments ("--" and a leading dash
// included) and the rest of the state as runsc gives it.
func TestOCIGVisorHookState(t *testing.T) {
	o := newOCIEnv(t)
	id := "oci-" + randomHex(4)
	shared := tempDir(t)
	hook := func(name string) specs.Hook {
		script := `cat > "$0"; echo "$*" > "$0.args"`
		return specs.Hook{Path: "/bin/sh", Args: []string{"sh", "-c", script, filepath.Join(shared, name+".json"), "--", "-x"}}
	}
	bundle := busyboxBundle(t, id, func(s *specs.Spec) {
		s.Process.Args = []string{"true"}
		s.Hooks = &specs.Hooks{
			//lint:ignore SA1019 docker 20.10 still sends prestart hooks: warden must run them
			Prestart:      []specs.Hook{hook("prestart")},
			CreateRuntime: []specs.Hook{hook("createRuntime")},
			Poststart:     []specs.Hook{hook("poststart")},
			Poststop:      []specs.Hook{hook("poststop")},
		}
	})
	if r := o.warden(t, "--engine", "gvisor", "create", "--bundle", bundle, id); r.Exit != 0 {
		t.Fatalf("create: %s", r.Stderr)
	}
	if st := o.state(t, id); st.Bundle != bundle {
		t.Fatalf("state's bundle %q, want %q", st.Bundle, bundle)
	}
	if r := o.warden(t, "start", id); r.Exit != 0 {
		t.Fatalf("start: %s", r.Stderr)
	}
	o.waitStatus(t, id, "stopped")
	if r := o.warden(t, "delete", id); r.Exit != 0 {
		t.Fatalf("delete: %s", r.Stderr)
	}
	for _, name := range []string{"prestart", "createRuntime", "poststart", "poststop"} {
		data, err := os.ReadFile(filepath.Join(shared, name+".json"))
		if err != nil {
			t.Errorf("%s hook did not run: %v", name, err)
			continue
		}
		var st specs.State
		if err := json.Unmarshal(data, &st); err != nil {
			t.Errorf("%s hook's stdin %q: %v", name, data, err)
			continue
		}
		if st.Bundle != bundle || st.ID != id || st.Version == "" || st.Status == "" {
			t.Errorf("%s hook's state: %+v, want bundle %s and id %s", name, st, bundle, id)
		}
		if args, _ := os.ReadFile(filepath.Join(shared, name+".json.args")); strings.TrimSpace(string(args)) != "-- -x" {
			t.Errorf("%s hook's arguments %q, want %q", name, args, "-- -x")
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(o.root, "oci-gvisor", "containers")); len(ents) != 0 {
		t.Errorf("gVisor containers left in the state root: %d", len(ents))
	}
}
