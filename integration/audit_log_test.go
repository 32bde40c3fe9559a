package integration

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestAuditLogNotRegular: a FIFO, a symbolic link or a folder where the
// root's audit log goes is refused in one line before any sandbox starts,
// by `do` and by the daemon a session's create or exec starts: nothing
// hangs, nothing runs, no sandbox is left, the link's target is not
// written.
func TestAuditLogNotRegular(t *testing.T) {
	for _, c := range []struct {
		name string
		make func(path, target string) error
		want string
	}{
		{"fifo", func(path, _ string) error { return syscall.Mkfifo(path, 0o600) }, "is a named pipe (FIFO), not a regular file; remove it"},
		{"symlink", func(path, target string) error { return os.Symlink(target, path) }, "is a symbolic link, not a regular file; warden does not follow it: remove the link"},
		{"dir", func(path, _ string) error { return os.Mkdir(path, 0o700) }, "is a directory, not a regular file; remove it"},
		// (looked at, not opened: opening a device has effects of its own)
		{"device", func(path, _ string) error { return syscall.Mknod(path, syscall.S_IFCHR|0o600, 1<<8|3) }, "is a device, not a regular file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRoot(t)
			if err := os.Mkdir(r.root, 0o711); err != nil {
				t.Fatal(err)
			}
			target := filepath.Join(tempDir(t), "target.log")
			if err := os.WriteFile(target, []byte("kept\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(r.root, "audit.log")
			if err := c.make(path, target); err != nil {
				t.Fatal(err)
			}
			// Runs before the root's teardown: a warden that ran the
			// command anyway may have left its sandbox, and a daemon
			// blocked opening the FIFO for good; with the daemon gone and
			// the audit log usable again, gc clears the rest.
			t.Cleanup(func() {
				for _, pid := range r.processes() {
					syscall.Kill(pid, syscall.SIGKILL)
				}
				r.waitGone(r.processes, "the daemon of "+r.root)
				os.RemoveAll(path)
				r.warden("gc")
			})
			p, ws, id := r.policy(sessionPolicy), tempDir(t), r.id("audit")
			for _, args := range [][]string{
				{"do", "--policy", p, "--workspace", ws, "--", "sh", "-c", "echo ran"},
				{"session", "create", "--policy", p, "--workspace", ws, "--id", id},
				{"exec", "--session", id, "--policy", p, "--workspace", ws, "--", "sh", "-c", "echo ran"},
			} {
				what := strings.Join(args[:2], " ")
				res := r.within(5*time.Second, args...)
				if strings.Contains(res.Stdout, "ran") || strings.Contains(res.Stdout, id) {
					t.Errorf("%s ran: stdout %q", what, res.Stdout)
				}
				oneLine(t, what, res, "audit log: "+path+" "+c.want)
				if entries, _ := os.ReadDir(filepath.Join(r.root, "sessions")); len(entries) > 0 {
					t.Errorf("%s left sessions/%s", what, entries[0].Name())
				}
			}
			if data, err := os.ReadFile(target); err != nil || string(data) != "kept\n" {
				t.Errorf("the link's target holds %q (%v)", data, err)
			}
		})
	}
}

// within runs the CLI against this root and fails the test if it has not
// finished within d, killing it (SIGKILL: a warden waiting for its
// command's end forwards SIGTERM instead of dying).
func (r *wardenRoot) within(d time.Duration, args ...string) sandboxResult {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, wardenBinary, append([]string{"--root", r.root}, args...)...)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/root"}
	cmd.WaitDelay = time.Second
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := sandboxResult{Stdout: stdout.String(), Stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		r.t.Errorf("warden %s: still running after %s (stdout %q, stderr %q)", strings.Join(args, " "), d, res.Stdout, res.Stderr)
		res.Exit = -1
	case errors.As(err, &ee):
		res.Exit = ee.ExitCode()
	case err != nil:
		r.t.Fatalf("warden %s: %v", strings.Join(args, " "), err)
	}
	return res
}
