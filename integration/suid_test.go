package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// suidPolicy grants a workspace and the two programs the probe uses.
const suidPolicy = `name = "suid-test"
[fs]
write = ["$WORK_DIR"]
[exec]
allow = ["python3", "chmod"]
`

// suidProbe tries, in the workspace, every way of setting S_ISUID or
// S_ISGID the profile refuses and the ordinary mode changes it allows, and
// prints one line per attempt: NAME errno=N, or NAME ok.
const suidProbe = `
import os, subprocess
os.umask(0)
W = "/workspace/"
def attempt(name, f):
    try:
        f()
        print(name, "ok")
    except OSError as e:
        print(name, "errno=%d" % e.errno)
def chmod_program(name, mode, path):
    r = subprocess.run(["/bin/chmod", mode, path], capture_output=True)
    if r.returncode == 0:
        print(name, "ok")
    elif b"Operation not permitted" in r.stderr:
        print(name, "errno=1")
    else:
        print(name, "exit=%d" % r.returncode)
for m in ("4755", "2755", "6755", "0755", "0644", "0700"):
    for how in ("py", "bin", "fchmod"):
        p = W + how + m
        open(p, "w").close()
        os.chmod(p, 0o600)
        if how == "py":
            attempt("chmod-py-" + m, lambda: os.chmod(p, int(m, 8)))
        elif how == "bin":
            chmod_program("chmod-bin-" + m, m, p)
        else:
            fd = os.open(p, os.O_RDONLY)
            attempt("fchmod-" + m, lambda: os.fchmod(fd, int(m, 8)))
            os.close(fd)
attempt("chmod-workspace-7777", lambda: os.chmod("/workspace", 0o7777))
attempt("open-creat-4755", lambda: os.close(os.open(W + "open4755", os.O_CREAT | os.O_WRONLY, 0o4755)))
attempt("open-creat-2755", lambda: os.close(os.open(W + "open2755", os.O_CREAT | os.O_WRONLY, 0o2755)))
attempt("open-creat-0640", lambda: os.close(os.open(W + "open0640", os.O_CREAT | os.O_WRONLY, 0o640)))
attempt("open-read", lambda: os.close(os.open(W + "open0640", os.O_RDONLY)))
attempt("mkdir-2755", lambda: os.mkdir(W + "dir2755", 0o2755))
attempt("mkdir-4755", lambda: os.mkdir(W + "dir4755", 0o4755))
attempt("mkdir-0750", lambda: os.mkdir(W + "dir0750", 0o750))
def write():
    with open(W + "written", "w") as f:
        f.write("hello")
attempt("write", write)
`

// suidWant is each attempt's expected result and, for the host side, the
// file it leaves: its permission bits (with setuid, setgid and sticky),
// or -1 when it must not exist.
var suidWant = map[string]struct {
	result string
	file   string
	mode   int
}{
	"chmod-py-4755":        {"errno=1", "py4755", 0o600},
	"chmod-py-2755":        {"errno=1", "py2755", 0o600},
	"chmod-py-6755":        {"errno=1", "py6755", 0o600},
	"chmod-bin-4755":       {"errno=1", "bin4755", 0o600},
	"chmod-bin-2755":       {"errno=1", "bin2755", 0o600},
	"chmod-bin-6755":       {"errno=1", "bin6755", 0o600},
	"fchmod-4755":          {"errno=1", "fchmod4755", 0o600},
	"fchmod-2755":          {"errno=1", "fchmod2755", 0o600},
	"fchmod-6755":          {"errno=1", "fchmod6755", 0o600},
	"open-creat-4755":      {"errno=1", "open4755", -1},
	"open-creat-2755":      {"errno=1", "open2755", -1},
	"mkdir-2755":           {"errno=1", "dir2755", -1},
	"mkdir-4755":           {"errno=1", "dir4755", -1},
	"chmod-workspace-7777": {"errno=1", ".", 0o755},
	"chmod-py-0755":        {"ok", "py0755", 0o755},
	"chmod-py-0644":        {"ok", "py0644", 0o644},
	"chmod-py-0700":        {"ok", "py0700", 0o700},
	"chmod-bin-0755":       {"ok", "bin0755", 0o755},
	"chmod-bin-0644":       {"ok", "bin0644", 0o644},
	"chmod-bin-0700":       {"ok", "bin0700", 0o700},
	"fchmod-0755":          {"ok", "fchmod0755", 0o755},
	"fchmod-0644":          {"ok", "fchmod0644", 0o644},
	"fchmod-0700":          {"ok", "fchmod0700", 0o700},
	"open-creat-0640":      {"ok", "open0640", 0o640},
	"open-read":            {"ok", "open0640", 0o640},
	"mkdir-0750":           {"ok", "dir0750", 0o750},
	"write":                {"ok", "written", 0o666},
}

// TestSetuidBitsRefused: a workspace is the host folder, idmapped to its
// owner (root here), so a setuid file made in it would be a setuid-root
// program on the host. In a session, a pooled session and `warden do`,
// every attempt to set S_ISUID or S_ISGID fails with EPERM and leaves no
// such bit on the host, while ordinary modes are set as asked.
func TestSetuidBitsRefused(t *testing.T) {
	for _, face := range []string{"session", "pool", "do"} {
		t.Run(face, func(t *testing.T) {
			r := newRoot(t)
			policy := r.policy(suidPolicy)
			ws := tempDir(t) // owned by root: the worst case
			var res sandboxResult
			switch face {
			case "session", "pool":
				if face == "pool" {
					r.fill(policy, 1)
					r.waitPool(1)
				}
				id := r.create("suid", policy, ws)
				if face == "pool" {
					if st := r.poolStatus()[0]; st.Hits != 1 {
						t.Fatalf("the session did not come from the pool: %+v", st)
					}
				}
				res = r.exec(id, nil, "python3", "-c", suidProbe)
			case "do":
				res = r.warden("do", "--policy", policy, "--workspace", ws, "--", "python3", "-c", suidProbe)
			}
			if res.Exit != 0 {
				t.Fatalf("probe exited %d\nstdout:\n%s\nstderr:\n%s", res.Exit, res.Stdout, res.Stderr)
			}
			checkSuidProbe(t, res.Stdout, ws)
		})
	}
}

func checkSuidProbe(t *testing.T, out, ws string) {
	t.Helper()
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		name, result, _ := strings.Cut(line, " ")
		got[name] = result
	}
	for name, want := range suidWant {
		if got[name] != want.result {
			t.Errorf("%s: %q, want %s", name, got[name], want.result)
		}
		var st syscall.Stat_t
		err := syscall.Lstat(filepath.Join(ws, want.file), &st)
		switch {
		case want.mode < 0 && err == nil:
			t.Errorf("%s: %s exists on the host (mode %#o), want none", name, want.file, st.Mode&0o7777)
		case want.mode < 0:
		case err != nil:
			t.Errorf("%s: %v", name, err)
		case int(st.Mode&0o7777) != want.mode:
			t.Errorf("%s: %s has mode %#o on the host, want %#o", name, want.file, st.Mode&0o7777, want.mode)
		case st.Uid != 0 || st.Gid != 0:
			t.Errorf("%s: %s belongs to %d:%d on the host, want the workspace's owner 0:0", name, want.file, st.Uid, st.Gid)
		}
	}
	for name := range got {
		if _, known := suidWant[name]; !known {
			t.Errorf("%s: the probe tries it but the test expects nothing", name)
		}
	}
	// Whatever the probe printed, no file in the workspace may carry a
	// setuid or setgid bit.
	filepath.Walk(ws, func(path string, info os.FileInfo, err error) error {
		if err == nil && info.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("%s is %v on the host", path, info.Mode())
		}
		return nil
	})
}

// TestOCISetuidBitsRefused: under a policy, a container's root is the
// host's root, so a setuid file in a granted bind would be a setuid-root
// program on the host. Setting the bits fails with EPERM; an ordinary
// chmod works.
func TestOCISetuidBitsRefused(t *testing.T) {
	o := newOCIEnv(t)
	grant := writableGrant(t)
	policy := filepath.Join(tempDir(t), "p.toml")
	if err := os.WriteFile(policy, []byte(fmt.Sprintf("name = \"p\"\n[fs]\nwrite = [%q]\n", grant)), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `busybox cp /bin/busybox /work/x || exit 9
for m in 4755 2755 6755 755; do busybox chmod $m /work/x && echo "chmod-$m ok"; done
busybox mkdir -m 2755 /work/d && echo "mkdir-2755 ok"
busybox mkdir -m 750 /work/e && echo "mkdir-750 ok"`
	id := "oci-" + randomHex(4)
	bundle := busyboxBundle(t, id, func(s *specs.Spec) {
		s.Process.Args = []string{"sh", "-c", script}
		s.Mounts = append(s.Mounts, specs.Mount{Destination: "/work", Type: "bind", Source: grant, Options: []string{"rbind", "rw"}})
	})
	r := o.warden(t, "--policy", policy, "run", "--bundle", bundle, id)
	if r.Exit != 0 || strings.TrimSpace(r.Stdout) != "chmod-755 ok\nmkdir-750 ok" || strings.Count(r.Stderr, "Operation not permitted") != 4 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s\nwant chmod 755 and mkdir 750 to work, the four others to fail with EPERM", r.Exit, r.Stdout, r.Stderr)
	}
	// busybox's mkdir -m makes the folder first, then sets its mode.
	for name, want := range map[string]int{"x": 0o755, "e": 0o750, "d": 0o755} {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(grant, name), &st); err != nil {
			t.Error(err)
		} else if int(st.Mode&0o7777) != want {
			t.Errorf("%s has mode %#o on the host, want %#o", name, st.Mode&0o7777, want)
		}
	}
}
