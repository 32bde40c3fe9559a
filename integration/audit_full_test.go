package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestAuditLogFull: with the audit log's file system full, a command
// whose record cannot be written does not run: exit 125, one line saying
// the audit log could not be written and what to do, and the workspace
// shows it did not run. Once there is room again commands run, and every
// line of the log is a whole JSON record (none torn), so `logs --session`
// shows them all. The log lives on a small tmpfs in the daemon's private
// mount namespace.
func TestAuditLogFull(t *testing.T) {
	r := newRoot(t)
	dir := tempDir(t)
	fs := r.privateDaemon(dir, "128k", "--audit-log", filepath.Join(dir, "audit.log"))
	logPath := filepath.Join(fs, "audit.log")
	ws := tempDir(t)
	id := r.create("audit-full", r.policy(sessionPolicy), ws)
	r.sh(id, "true")

	// Full, but for the slack of the log's last page: the records that
	// still fit there are written, and only their commands run.
	fill(t, filepath.Join(fs, "fill"))
	ran, refused := 0, 0
	for i := 0; i < 20; i++ {
		res := r.exec(id, nil, "sh", "-c", "echo ran >>/workspace/ran")
		switch res.Exit {
		case 0:
			ran++
		case 125:
			refused++
			if refused == 1 {
				oneLine(t, "exec with the audit log's file system full", res,
					"the audit log could not be written", filepath.Join(dir, "audit.log"), "no space left on device", "the command was not run: free space")
			}
		default:
			t.Errorf("exec with the audit log's file system full: exit %d, stderr %q", res.Exit, res.Stderr)
		}
	}
	t.Logf("with the audit log's file system full: %d commands ran (their records fit), %d refused", ran, refused)
	if refused == 0 {
		t.Errorf("20 commands ran with the audit log's file system full; want those whose record does not fit refused")
	}
	if got := countLines(filepath.Join(ws, "ran")); got != ran {
		t.Errorf("%d commands ran in the workspace, %d exited 0", got, ran)
	}

	if err := os.Remove(filepath.Join(fs, "fill")); err != nil {
		t.Fatal(err)
	}
	r.sh(id, "echo ran >>/workspace/ran")
	if got := countLines(filepath.Join(ws, "ran")); got != ran+1 {
		t.Errorf("with room again, %d commands ran in all, want %d", got, ran+1)
	}
	checkAuditLines(t, logPath)
	recs, _ := r.logs("--session", id, "--audit-log", logPath)
	execs := 0
	for _, rec := range recs {
		if rec.Event == "exec" {
			execs++
		}
	}
	if execs != ran+2 { // with the first true and the last
		t.Errorf("%d exec records of %s; want one per command that ran, %d", execs, id, ran+2)
	}
}

// countLines counts the lines of a file, 0 when it does not exist.
func countLines(path string) int {
	data, _ := os.ReadFile(path)
	return strings.Count(string(data), "\n")
}

// privateDaemon starts the root's daemon (with args) in a mount namespace
// of its own, with a tmpfs of the given size on dir (the audit log's
// folder, the pool folder), and returns where the test reaches that tmpfs
// (through the daemon's /proc/PID/root). On the host dir stays as it was.
func (r *wardenRoot) privateDaemon(dir, size string, args ...string) string {
	r.t.Helper()
	daemon := exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c",
		`mount -t tmpfs -o size="$1",mode=0711 warden-test "$2" && shift 2 && exec "$@"`,
		"sh", size, dir, wardenBinary, "--root", r.root, "daemon"}, args...)...)
	var out bytes.Buffer
	daemon.Stdout, daemon.Stderr = &out, &out
	if err := daemon.Start(); err != nil {
		r.t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { daemon.Wait(); close(exited) }()
	r.t.Cleanup(func() {
		select {
		case <-exited:
		default: // (the test has not stopped it)
			syscall.Kill(daemon.Process.Pid, syscall.SIGTERM)
			<-exited
		}
	})
	// Any call before its socket is there would start another daemon.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(r.root, "warden.sock")); err == nil {
			break
		}
		select {
		case <-exited:
			r.t.Fatalf("the daemon in its own mount namespace ended: %s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("the daemon in its own mount namespace did not come up: %s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return filepath.Join("/proc", strconv.Itoa(daemon.Process.Pid), "root", dir)
}

// fill writes a file until its file system is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	// The last page can hold a little more: take that too.
	for {
		if _, err := f.Write(buf[:1]); err != nil {
			return
		}
	}
}

// checkAuditLines fails the test unless every line of the audit log is a
// whole JSON object and the file ends with a newline.
func checkAuditLines(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Errorf("the audit log ends in a torn line: %q", data[max(0, len(data)-200):])
	}
	for i, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("audit log line %d is not a JSON record: %q: %v", i+1, line, err)
		}
	}
}
