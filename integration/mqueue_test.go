package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// mqScript opens (or, with "create", makes) the POSIX message queue named
// by its second argument, sends or receives one message, and prints what
// it did or the error: Python's own modules have no message queues, so it
// calls librt through ctypes.
const mqScript = `import ctypes, os, sys
rt = ctypes.CDLL("librt.so.1", use_errno=True)
name = sys.argv[2].encode()
flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if sys.argv[1] == "create" else 0)
q = rt.mq_open(name, flags, 0o600, None)
if q < 0:
    print("mq_open:", os.strerror(ctypes.get_errno()))
    sys.exit(1)
if sys.argv[1] == "create":
    rt.mq_send(q, b"hello", 5, 0)
    print("sent")
else:
    buf = ctypes.create_string_buffer(8192)
    n = rt.mq_receive(q, buf, 8192, None)
    print("received", buf.raw[:n].decode())
    rt.mq_unlink(name)
`

// POSIX message queues work in a session (they once failed with EACCES:
// Landlock had no rule for the kernel's own mqueue mount), and they are
// the session's own: another session does not see them, nor does the
// host.
func TestPOSIXMessageQueues(t *testing.T) {
	r := newRoot(t)
	policy := r.policy(`name = "mq"
[fs]
write = ["$WORK_DIR"]
[exec]
allow = ["python3"]
`)
	ws := tempDir(t)
	if err := os.WriteFile(filepath.Join(ws, "mq.py"), []byte(mqScript), 0o644); err != nil {
		t.Fatal(err)
	}
	name := "/warden-test-" + randomHex(4)
	hostBefore, _ := os.ReadDir("/dev/mqueue")
	a, b := r.create("mq-a", policy, ws), r.create("mq-b", policy, ws)
	if res := r.exec(a, nil, "python3", "mq.py", "create", name); res.Exit != 0 || res.Stdout != "sent\n" {
		t.Fatalf("creating a queue in a session: exit %d, %q %q", res.Exit, res.Stdout, res.Stderr)
	}
	// Another session has its own IPC namespace: no such queue there.
	if res := r.exec(b, nil, "python3", "mq.py", "open", name); res.Exit == 0 || !strings.Contains(res.Stdout, "No such file") {
		t.Errorf("another session opened the first's queue: exit %d, %q %q", res.Exit, res.Stdout, res.Stderr)
	}
	if _, err := os.Stat(filepath.Join("/dev/mqueue", name)); err == nil {
		t.Errorf("the session's queue %s is on the host's /dev/mqueue", name)
	}
	if res := r.exec(a, nil, "python3", "mq.py", "open", name); res.Exit != 0 || res.Stdout != "received hello\n" {
		t.Errorf("reading the queue back in its session: exit %d, %q %q", res.Exit, res.Stdout, res.Stderr)
	}
	hostAfter, _ := os.ReadDir("/dev/mqueue")
	if len(hostAfter) != len(hostBefore) {
		t.Errorf("the host's /dev/mqueue changed: %d entries before, %d after", len(hostBefore), len(hostAfter))
	}
}
