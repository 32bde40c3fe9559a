package integration

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
)

// probeScript runs each check as `p NAME CMD...` and prints NAME=ok or
// NAME=fail:STATUS, so one container run answers many questions.
const probeScript = `p() { n=$1; shift; if "$@" >/dev/null 2>&1; then echo "$n=ok"; else echo "$n=fail:$?"; fi; }
`

func probes(out string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	return m
}

func expectProbes(t *testing.T, got map[string]string, want map[string]string) {
	t.Helper()
	for name, w := range want {
		g := got[name]
		if w == "fail" && strings.HasPrefix(g, "fail") {
			continue
		}
		if g != w {
			t.Errorf("%s: got %q, want %q", name, g, w)
		}
	}
}

func listTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil {
			out = append(out, strings.TrimPrefix(p, dir)+" "+fi.Mode().String())
		}
		return nil
	})
	sort.Strings(out)
	return out
}

const viewPolicy = `name = "view"
[fs]
read = ["$SKILL_DIR"]
write = ["$WORK_DIR"]
deny = ["$SKILL_DIR/secret"]
[exec]
allow = ["sh", "cat", "ls", "id", "touch", "cp", "chmod", "grep", "head", "tr", "cut", "tail", "mkdir"]
[env]
allow = ["LANG"]
[limits]
memory = "128MiB"
pids = 64
`

// TestBundleUnderRunc runs a generated bundle under the reference runtime
// and checks a command inside sees exactly the policy's view: each allowed
// action works, each forbidden one fails, and the host is unchanged.
func TestBundleUnderRunc(t *testing.T) {
	skill := tempDir(t)
	os.WriteFile(filepath.Join(skill, "hello.txt"), []byte("hello"), 0o644)
	os.MkdirAll(filepath.Join(skill, "secret"), 0o755)
	os.WriteFile(filepath.Join(skill, "secret", "key"), []byte("TOPSECRET"), 0o600)
	ws := tempDir(t)
	os.WriteFile(filepath.Join(ws, "input.txt"), []byte("input"), 0o644)
	// The workspace belongs to an ordinary user: files the sandbox writes
	// must belong to that user on the host.
	const owner = 1234
	if err := os.Chown(ws, owner, owner); err != nil {
		t.Fatal(err)
	}
	skillBefore := listTree(t, skill)

	script := probeScript + `
p read_skill cat /skill/hello.txt
p read_secret cat /skill/secret/key
p list_secret sh -c 'test -z "$(ls -A /skill/secret)"'
p write_skill touch /skill/new
p read_ws cat /workspace/input.txt
p write_ws sh -c 'echo out > /workspace/out.txt'
p mkdir_ws mkdir /workspace/sub
p write_usr touch /usr/x
p write_etc touch /etc/x
p write_root touch /x
p write_tmp sh -c 'echo t > /tmp/t'
p shadow cat /etc/shadow
p host_root ls /root
p host_home ls /home
p host_var ls /var
p host_run ls /run
p sys ls /sys/kernel
p python_abs /usr/bin/python3 -c 1
p python_path sh -c 'python3 -c 1'
p python_loader /lib64/ld-linux-x86-64.so.2 /usr/bin/python3.11 -c 1
p copied_ws sh -c 'cp /usr/bin/cat /workspace/mycat && chmod 755 /workspace/mycat && /workspace/mycat /dev/null'
p copied_ws_loader /lib64/ld-linux-x86-64.so.2 /workspace/mycat /dev/null
p copied_tmp sh -c 'cp /usr/bin/cat /tmp/mycat && chmod 755 /tmp/mycat && /tmp/mycat /dev/null'
p copied_shm sh -c 'cp /usr/bin/cat /dev/shm/mycat && chmod 755 /dev/shm/mycat && /dev/shm/mycat /dev/null'
p cat_allowed /usr/bin/cat /dev/null
echo "uid=$(id -u)"
echo "caps=$(grep ^CapEff /proc/self/status | tr -d '\t' | cut -d: -f2)"
echo "bnd=$(grep ^CapBnd /proc/self/status | tr -d '\t' | cut -d: -f2)"
echo "nnp=$(grep ^NoNewPrivs /proc/self/status | tr -d '\t' | cut -d: -f2)"
echo "seccomp=$(grep ^Seccomp: /proc/self/status | tr -d '\t' | cut -d: -f2)"
echo "ifaces=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\n' ' ')"
echo "root=$(ls / | tr '\n' ' ')"
echo "lang=$LANG"
echo "token=$SECRET_TOKEN"
echo "home=$HOME"
`
	res := runSandbox(t, sandboxRun{
		Policy:   viewPolicy,
		SkillDir: skill,
		WorkDir:  ws,
		Argv:     []string{"sh", "-c", script},
		Env:      []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "SECRET_TOKEN=hunter2", "HOME=/root"},
	})
	if res.Exit != 0 {
		t.Fatalf("sandbox exited %d\nstdout:\n%s\nstderr:\n%s", res.Exit, res.Stdout, res.Stderr)
	}
	got := probes(res.Stdout)
	expectProbes(t, got, map[string]string{
		// allowed
		"read_skill": "ok", "read_ws": "ok", "write_ws": "ok", "mkdir_ws": "ok", "write_tmp": "ok", "cat_allowed": "ok",
		"list_secret": "ok",
		// forbidden
		"read_secret": "fail", "write_skill": "fail", "write_usr": "fail", "write_etc": "fail", "write_root": "fail",
		"shadow": "fail", "host_root": "fail", "host_home": "fail", "host_var": "fail", "host_run": "fail", "sys": "fail",
		"python_abs": "fail:127", "python_path": "fail:127", "python_loader": "fail",
		"copied_ws": "fail:126", "copied_ws_loader": "fail", "copied_tmp": "fail:126", "copied_shm": "fail:126",
		// identity and confinement
		"uid": "0", "caps": "0000000000000000", "bnd": "0000000000000000", "nnp": "1", "seccomp": "2",
		"ifaces": "lo ", "lang": "C.UTF-8", "token": "", "home": "/tmp",
	})
	for _, name := range strings.Fields(got["root"]) {
		switch name {
		case "bin", "dev", "etc", "lib", "lib64", "proc", "sbin", "skill", "tmp", "usr", "workspace", "lib32", "libx32":
		default:
			t.Errorf("unexpected entry /%s in the sandbox's root (root: %s)", name, got["root"])
		}
	}

	// On the host: the sandbox's writes belong to the workspace's owner,
	// the skill folder is untouched, nothing leaked onto the host's /usr.
	for _, f := range []string{"out.txt", "sub"} {
		fi, err := os.Stat(filepath.Join(ws, f))
		if err != nil {
			t.Fatalf("workspace write missing on the host: %v", err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != owner || st.Gid != owner {
			t.Errorf("%s is owned by %d:%d on the host, want the workspace owner %d:%d", f, st.Uid, st.Gid, owner, owner)
		}
	}
	if after := listTree(t, skill); strings.Join(after, "\n") != strings.Join(skillBefore, "\n") {
		t.Errorf("skill folder changed:\nbefore %q\nafter  %q", skillBefore, after)
	}
	for _, p := range []string{"/usr/x", "/etc/x", "/x"} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s appeared on the host", p)
		}
	}
}

// TestHostRootFilesUnreadable grants /etc/shadow explicitly: the user
// namespace still keeps the host's root-only file unreadable, while a
// world-readable grant beside it works.
func TestHostRootFilesUnreadable(t *testing.T) {
	res := runSandbox(t, sandboxRun{
		Policy: `name = "shadow"
[fs]
read = ["/etc/shadow", "/etc/os-release"]
`,
		Argv: []string{"sh", "-c", probeScript + "p shadow cat /etc/shadow\np osrel cat /etc/os-release\n"},
	})
	expectProbes(t, probes(res.Stdout), map[string]string{"shadow": "fail", "osrel": "ok"})
}

// TestAllSystemBinariesWithoutExecSection: without [exec] every system
// binary runs, but writable places still cannot hold programs.
func TestAllSystemBinariesWithoutExecSection(t *testing.T) {
	res := runSandbox(t, sandboxRun{
		Policy: `name = "open-exec"
[fs]
write = ["$WORK_DIR"]
`,
		Argv: []string{"sh", "-c", probeScript + `
p python python3 -c 'print(1)'
p copied_ws sh -c 'cp /usr/bin/true /workspace/t && chmod 755 /workspace/t && /workspace/t'
p usr_nosuid sh -c 'grep " /usr " /proc/self/mountinfo | grep -q nosuid'
p usr_ro sh -c 'grep " /usr " /proc/self/mountinfo | grep -q " ro,"'
`},
	})
	expectProbes(t, probes(res.Stdout), map[string]string{"python": "ok", "copied_ws": "fail:126", "usr_nosuid": "ok", "usr_ro": "ok"})
}
