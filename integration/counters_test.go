package integration

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// The kernel keeps per-user counters: pending signals, message queue
// bytes, inotify instances and watches (per user namespace, charged to
// the namespace's owner at every level up to the host's), pipe buffer
// pages and epoll watches (per host uid). Each test below uses one up in
// a session and checks that host root (this test process's own probe)
// and a second session can still take more: each sandbox runs as a host
// uid of its own, in a user namespace that uid owns, with rlimits
// bounding what it queues.

// counterProbe compiles testdata/counters_probe.c into a folder sessions
// can read and returns the folder.
func counterProbe(t *testing.T) string {
	t.Helper()
	dir := tempDir(t)
	out, err := exec.Command("gcc", "-static", "-O1", "-o", filepath.Join(dir, "probe"), "testdata/counters_probe.c", "-lrt").CombinedOutput()
	if err != nil {
		t.Fatalf("compiling the probe (needs gcc and libc6-dev): %v\n%s", err, out)
	}
	return dir
}

// exhaustCounter uses resource up in one session and checks host root and
// a second session are unaffected. used checks the first session's
// "RESOURCE COUNT ERRNO" line: it must show the counter exhausted.
func exhaustCounter(t *testing.T, resource string, used func(count int, errno string) bool) {
	r := newRoot(t)
	dir := counterProbe(t)
	policy := r.policy("name = \"counters\"\n[fs]\nread = [\"" + dir + "\"]\n")
	a := r.create("a", policy, tempDir(t))
	b := r.create("b", policy, tempDir(t))
	probe := filepath.Join(dir, "probe")

	hold := r.command("exec", "--session", a, "--", probe, resource, "use")
	stdin, err := hold.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := hold.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	hold.Stderr = os.Stderr
	if err := hold.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		hold.Wait()
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	f := strings.Fields(line)
	if err != nil || len(f) != 3 || f[0] != resource {
		t.Fatalf("session a's probe: %q, %v", line, err)
	}
	n, _ := strconv.Atoi(f[1])
	if !used(n, f[2]) {
		t.Fatalf("session a did not use up %s: %q", resource, line)
	}
	t.Logf("session a holds: %s", strings.TrimSpace(line))

	// While a holds it all: host root and session b get more.
	host, err := exec.Command(probe, resource, "check").Output()
	if err != nil || strings.TrimSpace(string(host)) != resource+" ok" {
		t.Errorf("host root while session a holds %s: %q, %v", resource, host, err)
	}
	res := r.exec(b, nil, probe, resource, "check")
	if res.Exit != 0 || strings.TrimSpace(res.Stdout) != resource+" ok" {
		t.Errorf("session b while session a holds %s: exit %d, %q %q", resource, res.Exit, res.Stdout, res.Stderr)
	}
}

// A session queues real-time signals until the kernel refuses: it stops
// at its own RLIMIT_SIGPENDING (1024), where it once queued 96,364 and
// host root could neither queue a signal nor create a timer.
func TestCountersPendingSignals(t *testing.T) {
	exhaustCounter(t, "sigq", func(n int, errno string) bool { return errno == "EAGAIN" && n > 0 && n <= 1024 })
}

// Pipes: a session holding 1,100 empty pipes runs past its uid's
// pipe-user-pages-soft (its new pipes shrink to 8 KiB); another session's
// new pipes stay 64 KiB and F_SETPIPE_SZ works.
func TestCountersPipeBuffers(t *testing.T) {
	exhaustCounter(t, "pipe", func(n int, errno string) bool { return errno == "ENOSPC" && n > 0 })
}

// inotify instances: a session gets fs.inotify.max_user_instances of its
// own; host root's are not charged for them.
func TestCountersInotifyInstances(t *testing.T) {
	exhaustCounter(t, "inotify", func(n int, errno string) bool { return errno == "EMFILE" && n > 0 })
}

// inotify watches: a session can use up fs.inotify.max_user_watches, its
// own uid's, not host root's.
func TestCountersInotifyWatches(t *testing.T) {
	exhaustCounter(t, "iwatch", func(n int, errno string) bool { return errno == "ENOSPC" && n > 0 })
}

// epoll watches are counted per host uid against fs.epoll.max_user_watches
// (millions by default: lowered to 20000 for the test, back afterwards).
func TestCountersEpollWatches(t *testing.T) {
	const sysctl = "/proc/sys/fs/epoll/max_user_watches"
	old, err := os.ReadFile(sysctl)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sysctl, []byte("20000"), 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(sysctl, old, 0); err != nil {
			t.Errorf("restore %s: %v", sysctl, err)
		}
	})
	exhaustCounter(t, "epoll", func(n int, errno string) bool { return errno == "ENOSPC" && n > 0 && n <= 20000 })
}

// POSIX message queues, in a container under a policy (a session's
// Landlock rules leave it no message queue to open): the container's
// root is host root, so its queues are counted in host root's own count,
// checked against each process's RLIMIT_MSGQUEUE. The policy holds a
// container to 200 KiB, where it once took host root's whole 800 KiB.
// Containers whose root is host root share that count among themselves
// (README: a container holding its 200 KiB leaves the others less).
func TestCountersMessageQueuesOCI(t *testing.T) {
	o := newOCIEnv(t)
	policy := escapePolicy(t, tempDir(t), "")
	probe := filepath.Join(counterProbe(t), "probe")
	bundle := func(id string, args ...string) string {
		return busyboxBundle(t, id, func(s *specs.Spec) {
			s.Process.Args = args
			s.Mounts = append(s.Mounts, specs.Mount{Destination: "/probe", Type: "bind", Source: probe, Options: []string{"bind", "ro"}})
		})
	}
	a := "oci-" + randomHex(4)
	if r := o.warden(t, "--policy", policy, "--bind-allow", probe, "run", "-d", "--bundle", bundle(a, "sh", "-c", "/probe mq keep > /tmp/out; sleep 300"), a); r.Exit != 0 {
		t.Fatalf("run -d: %s", r.Stderr)
	}
	var line string
	for range 100 {
		if line = strings.TrimSpace(o.warden(t, "exec", a, "cat", "/tmp/out").Stdout); line != "" {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if f := strings.Fields(line); len(f) != 3 || f[2] != "EMFILE" || f[1] == "0" {
		t.Fatalf("container a did not use up its message queues: %q", line)
	}
	t.Logf("container a holds: %s", line)
	if host, err := exec.Command(probe, "mq", "check").Output(); err != nil || strings.TrimSpace(string(host)) != "mq ok" {
		t.Errorf("host root while container a holds queues: %q, %v", host, err)
	}
}
