package integration

import (
	"bufio"
	"os/exec"
	"strings"
	"testing"
)

// TestSandboxCannotDrainHostPools: kernel AIO contexts (one host-wide
// pool, fs.aio-max-nr) are not available in a sandbox, and a sandbox's
// terminals come from its own devpts with a small cap, so it cannot use up
// the host's ptys: another sandbox still gets one meanwhile.
func TestSandboxCannotDrainHostPools(t *testing.T) {
	r := newRoot(t)
	policy := r.policy("name = \"pools\"\n[exec]\nallow = [\"python3\"]\n")
	a := r.create("pools-a", policy, tempDir(t))
	b := r.create("pools-b", policy, tempDir(t))
	aio := r.exec(a, nil, "python3", "-c", `
import ctypes, ctypes.util
libc = ctypes.CDLL(None, use_errno=True)
ctx = ctypes.c_ulong(0)
r = libc.syscall(206, 128, ctypes.byref(ctx))
print(r, ctypes.get_errno())
`)
	if strings.TrimSpace(aio.Stdout) != "-1 38" {
		t.Errorf("io_setup in a sandbox: %q %q, want -1 ENOSYS (38)", aio.Stdout, aio.Stderr)
	}
	// Session a holds as many terminals as it can while b opens one.
	hold := r.command("exec", "--session", a, "--", "python3", "-c", `
import os, sys, time
fds = []
try:
    while len(fds) < 5000:
        fds.append(os.open("/dev/ptmx", os.O_RDWR))
except OSError as e:
    print(len(fds), e.errno, flush=True)
time.sleep(3)
`)
	out, err := hold.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := hold.Start(); err != nil {
		t.Fatal(err)
	}
	defer hold.Wait()
	line, _ := bufio.NewReader(out).ReadString('\n')
	if got := strings.TrimSpace(line); got != "64 28" {
		t.Errorf("terminals one sandbox can open: %q, want 64 then ENOSPC (28)", got)
	}
	other := r.exec(b, nil, "python3", "-c", `import os; os.open("/dev/ptmx", os.O_RDWR); print("ok")`)
	if strings.TrimSpace(other.Stdout) != "ok" {
		t.Errorf("another sandbox's terminal while the first holds its cap: %q %q", other.Stdout, other.Stderr)
	}
}

// TestSubmountsOfReadGrantsReadOnly: a file system mounted inside a
// read-only grant (a disk, a tmpfs) is read-only in the sandbox too.
func TestSubmountsOfReadGrantsReadOnly(t *testing.T) {
	r := newRoot(t)
	dir := tempDir(t)
	sub := dir + "/sub"
	if err := exec.Command("mkdir", sub).Run(); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m,mode=0777", "tmpfs", sub).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v %s", err, out)
	}
	defer exec.Command("umount", sub).Run()
	policy := r.policy("name = \"sub\"\n[fs]\nread = [\"" + dir + "\"]\n[exec]\nallow = [\"sh\", \"touch\", \"ls\"]\n")
	res := r.warden("do", "--policy", policy, "--workspace", tempDir(t), "--", "sh", "-c",
		"ls "+dir+" >/dev/null || exit 3; touch "+sub+"/x 2>/dev/null && exit 4; exit 0")
	if res.Exit != 0 {
		t.Errorf("exit %d (3: the grant is not readable, 4: its submount is writable), %s", res.Exit, res.Stderr)
	}
	if out, _ := exec.Command("ls", "-A", sub).Output(); len(out) != 0 {
		t.Errorf("the sandbox wrote into the submount: %q", out)
	}
}
