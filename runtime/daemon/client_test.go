package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A daemon that ends before serving is reported at once, by the last line
// it wrote (main's error), not after the wait for its socket.
func TestClientDaemonEndsBeforeServing(t *testing.T) {
	for _, c := range []struct {
		name, script, want string
	}{
		{"error", "echo 'time=x level=info msg=starting'\necho 'warden: config /c.toml: unknown key \"bogus\"; valid: pool' >&2\nexit 125",
			`the warden daemon did not start: config /c.toml: unknown key "bogus"; valid: pool`},
		{"silent", "exit 3", "the warden daemon did not start (exit status 3); see "},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			// The state root and the folders above it must be searchable.
			for _, d := range []string{dir, filepath.Dir(dir)} {
				if err := os.Chmod(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			bin := filepath.Join(dir, "warden")
			if err := os.WriteFile(bin, []byte("#!/bin/sh\n"+c.script+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err := (&Client{Root: filepath.Join(dir, "root"), Binary: bin}).Sessions()
			if err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("took %s to report it", took)
			}
		})
	}
}
