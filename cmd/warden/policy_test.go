package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPolicyCheckTmpdirAnywhere: policy check's placeholder for the session
// folders is a folder of its own in $TMPDIR, never mounted, so it passes
// wherever $TMPDIR is, also in a folder no grant may name (/run/user/N,
// here /dev/shm, which needs no root).
func TestPolicyCheckTmpdirAnywhere(t *testing.T) {
	tmp, err := os.MkdirTemp("/dev/shm", "warden-tmpdir-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	t.Setenv("TMPDIR", tmp)
	file, err := filepath.Abs("../../policies/web-fetch.toml")
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := run(t, "policy", "check", file)
	if err != nil || !strings.Contains(stdout, "ok ") {
		t.Errorf("policy check with TMPDIR=%s: %v, stdout %q, stderr %q", tmp, err, stdout, stderr)
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "warden-policy-check-*")); len(left) > 0 {
		t.Errorf("policy check left %v", left)
	}
}
