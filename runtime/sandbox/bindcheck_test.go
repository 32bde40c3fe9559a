package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestPinBinds: a source is pinned only along a path without symlinks (a
// symlink swapped onto a checked path is refused), and a destination that
// shows another file than the pinned one is caught.
func TestPinBinds(t *testing.T) {
	dir := t.TempDir()
	ws, other := filepath.Join(dir, "ws"), filepath.Join(dir, "other")
	for _, d := range []string{filepath.Join(ws, "out"), other} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	none := func(string) bool { return false }
	bind := func(source, dest string) []specs.Mount {
		return []specs.Mount{{Type: "bind", Source: source, Destination: dest}}
	}
	pins, err := PinBinds(bind(filepath.Join(ws, "out"), filepath.Join(ws, "out")), none)
	if err != nil || len(pins) != 1 {
		t.Fatalf("pin a plain folder: %v, %v", pins, err)
	}
	// The container's root here is the test's own: the destination shows
	// the pinned folder.
	if err := CheckBinds(os.Getpid(), pins); err != nil {
		t.Errorf("the destination shows the pinned folder: %v", err)
	}
	// The folder swapped for a symlink to another: pinning refuses it, and
	// a check of the old pin sees another file.
	if err := os.Rename(filepath.Join(ws, "out"), filepath.Join(ws, "out.d")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, filepath.Join(ws, "out")); err != nil {
		t.Fatal(err)
	}
	if _, err := PinBinds(bind(filepath.Join(ws, "out"), "/x"), none); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("pin through a symlink: %v, want a refusal", err)
	}
	if _, err := openSource(filepath.Join(ws, "out", ".")); err == nil {
		t.Error("openSource followed a symlink in the middle of the path")
	}
	if err := CheckBinds(os.Getpid(), pins); err == nil || !strings.Contains(err.Error(), "replaced") {
		t.Errorf("the destination shows another folder: %v, want it caught", err)
	}
	// Every bind is pinned, a hidden one too (its check then fails
	// closed); skipped sources are not pinned.
	os.Mkdir(filepath.Join(ws, "out.d"), 0o755)
	three := append(append(bind(other, "/d"), bind(filepath.Join(ws, "out.d"), "/d")...), bind(ws, "/e")...)
	pins, err = PinBinds(three, func(s string) bool { return s == other })
	if err != nil || len(pins) != 2 || pins[0].dest != "/d" || pins[1].dest != "/e" {
		t.Fatalf("binds on one place and another: %v, %v", pins, err)
	}
}
