package spec

import (
	"os"
	"strings"
	"testing"
)

// TestPlaceholderInRefusedFolder: a pooled sandbox's placeholder lives in
// warden's state root, which may lie where no grant may be (/run/warden by
// default). The placeholder stands at /workspace and /data only, and is
// accepted there; the same folder named by its path, or a session that
// gives it as its workspace (no Placeholder), is refused as before.
// /dev/shm stands for such a folder: writable without root, and refused
// for every grant.
func TestPlaceholderInRefusedFolder(t *testing.T) {
	placeholder, err := os.MkdirTemp("/dev/shm", "warden-placeholder-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(placeholder)
	vars, _ := testVars(t)
	vars.WorkDir, vars.DataDir = placeholder, placeholder
	generate := func(policy, ph string) error {
		_, err := Generate(Options{Policy: mustParse(t, "name = \"t\"\n[fs]\n"+policy+"\n"), Vars: vars, Host: fakeHost(t), BundleDir: "/bundle", Placeholder: ph})
		return err
	}
	for _, policy := range []string{`write = ["$WORK_DIR"]`, `write = ["$WORK_DIR", "$DATA_DIR"]`, `read = ["$DATA_DIR"]`} {
		if err := generate(policy, placeholder); err != nil {
			t.Errorf("pooled %s: %v", policy, err)
		}
		if err := generate(policy, ""); err == nil || !strings.Contains(err.Error(), "kernel interface") {
			t.Errorf("a session with the folder as its own %s: got %v, want it refused", policy, err)
		}
	}
	// By its path the folder is a plain grant (and inside the sandbox
	// the path is /dev's, warden's own): refused, pooled or not.
	for _, policy := range []string{`write = ["` + placeholder + `"]`, `read = ["` + placeholder + `"]`} {
		if err := generate(policy, placeholder); err == nil || !strings.Contains(err.Error(), placeholder) {
			t.Errorf("pooled %s (the placeholder by its path): got %v, want it refused", policy, err)
		}
	}
}
