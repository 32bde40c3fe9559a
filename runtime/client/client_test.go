package client

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// searchable makes t's temporary folders passable for the daemon's
// sandbox users, as a state root's parents must be.
func searchable(t *testing.T) string {
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// With no daemon and no warden to start one, a call fails at once with
// daemon_unavailable and says what is missing.
func TestNoWardenToStart(t *testing.T) {
	t.Setenv("PATH", searchable(t))
	c := New(filepath.Join(searchable(t), "root"))
	start := time.Now()
	_, err := c.Ping(context.Background())
	if CodeOf(err) != CodeDaemonUnavailable || !strings.Contains(err.Error(), `"warden"`) {
		t.Fatalf("ping without a warden binary: %v (code %q)", err, CodeOf(err))
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %s to fail", took)
	}
}

// A daemon that ends before serving is reported by the last line it
// wrote; the binary comes from PATH when Binary is empty.
func TestDaemonFromPath(t *testing.T) {
	bin := searchable(t)
	script := "#!/bin/sh\necho 'warden: config /c.toml: unknown key \"bogus\"' >&2\nexit 125\n"
	if err := os.WriteFile(filepath.Join(bin, "warden"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	_, err := New(filepath.Join(searchable(t), "root")).Sessions(context.Background())
	want := `the warden daemon did not start: config /c.toml: unknown key "bogus"`
	if err == nil || !strings.HasPrefix(err.Error(), want) || CodeOf(err) != CodeDaemonUnavailable {
		t.Fatalf("error %v (code %q), want %q", err, CodeOf(err), want)
	}
}

// Input the sandbox would not get as given is refused before any call.
func TestCmdRefused(t *testing.T) {
	s := &Session{ID: "x", c: New("/nonexistent-root")}
	for _, cmd := range []Cmd{
		{},
		{Argv: []string{"cat"}, Command: "cat"},
		{Argv: []string{"cat", "a\xffb"}},
		{Argv: []string{"cat"}, Cwd: "\xff"},
		{Argv: []string{"cat"}, Timeout: time.Microsecond},
	} {
		_, err := s.Exec(context.Background(), cmd)
		var e *Error
		if !errors.As(err, &e) || e.Code != CodeInvalidInput {
			t.Errorf("%+v: %v, want invalid_input", cmd, err)
		}
	}
	if _, err := os.Stat("/nonexistent-root"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused command made the root: %v", err)
	}
}
