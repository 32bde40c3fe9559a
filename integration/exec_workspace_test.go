package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A coding agent builds and runs what it writes only where the policy
// opts in with [exec] workspace = true: then go test, cc && ./a.out and a
// script written then run all work in a session; without it each is
// refused, with warden's one-line reason for a direct run. Under an
// exec.allow list the opt-in opens the workspace to the exec rules too,
// and nothing else.
func TestExecWorkspaceOptIn(t *testing.T) {
	if _, err := os.Stat("/usr/local/go/bin/go"); err != nil {
		t.Fatalf("this test runs the Go toolchain at /usr/local/go inside a session: %v", err)
	}
	r := newRoot(t)
	project := func() string {
		ws := tempDir(t)
		os.MkdirAll(filepath.Join(ws, "mod"), 0o755)
		writeFile(t, ws, "mod/go.mod", "module example.com/m\n\ngo 1.22\n")
		writeFile(t, ws, "mod/m.go", "package m\n\nfunc Add(a, b int) int { return a + b }\n")
		writeFile(t, ws, "mod/m_test.go", "package m\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(1, 2) != 3 {\n\t\tt.Fatal(\"bad\")\n\t}\n}\n")
		writeFile(t, ws, "hello.c", "#include <stdio.h>\nint main(void) { puts(\"hello from c\"); return 0; }\n")
		return ws
	}
	steps := []struct {
		name string
		argv []string
		want string
	}{
		{"go test", []string{"sh", "-c", "cd mod && /usr/local/go/bin/go test -vet=off ./..."}, "ok  \texample.com/m"},
		{"cc", []string{"sh", "-c", "cc hello.c -o a.out && ./a.out"}, "hello from c"},
		{"script", []string{"sh", "-c", `printf '#!/bin/sh\necho script ran\n' > s.sh && chmod +x s.sh && ./s.sh`}, "script ran"},
		{"tmp", []string{"sh", "-c", "cp a.out /tmp/b && /tmp/b"}, "hello from c"},
	}

	// Two cores and time for a cold build of the test's packages.
	const limits = "[limits]\ncpu = 2\ntimeout = \"50s\"\n"
	open := r.create("coder", r.policy("name = \"coder\"\n[fs]\nwrite = [\"$WORK_DIR\"]\n[exec]\nworkspace = true\n"+limits), project())
	for _, s := range steps {
		if res := r.exec(open, nil, s.argv...); res.Exit != 0 || !strings.Contains(res.Stdout, s.want) {
			t.Errorf("opted in: %s: exit %d, %q %q", s.name, res.Exit, res.Stdout, res.Stderr)
		}
	}
	if res := r.exec(open, nil, "./a.out"); res.Exit != 0 || !strings.Contains(res.Stdout, "hello from c") {
		t.Errorf("opted in: ./a.out directly: exit %d, %q %q", res.Exit, res.Stdout, res.Stderr)
	}

	strictWS := project()
	strict := r.create("strict", r.policy("name = \"strict\"\n[fs]\nwrite = [\"$WORK_DIR\"]\n"+limits), strictWS)
	// go test fails the same way as a.out below (fork/exec of its test
	// binary in /tmp: permission denied); its cold build is left out here.
	for _, s := range steps[1:] {
		if res := r.exec(strict, nil, s.argv...); res.Exit == 0 || strings.Contains(res.Stdout, s.want) {
			t.Errorf("not opted in: %s ran: exit %d, %q", s.name, res.Exit, res.Stdout)
		}
	}
	// The binary cc wrote is there, and a direct run says why it cannot.
	if _, err := os.Stat(filepath.Join(strictWS, "a.out")); err != nil {
		t.Fatalf("cc did not write a.out in the strict session: %v", err)
	}
	res := r.exec(strict, nil, "./a.out")
	if res.Exit != 126 || !strings.Contains(res.Stderr, "noexec") || strings.Count(res.Stderr, "\n") != 1 {
		t.Errorf("not opted in: ./a.out: exit %d, %q; want 126 and one line naming the noexec mount", res.Exit, res.Stderr)
	}

	// Under exec.allow the opt-in lets the workspace's programs run, and
	// the system's unlisted ones still cannot.
	listed := r.create("listed", r.policy("name = \"listed\"\n[fs]\nwrite = [\"$WORK_DIR\"]\n[exec]\nallow = [\"sh\", \"chmod\"]\nworkspace = true\n"), tempDir(t))
	if res := r.exec(listed, nil, "sh", "-c", `printf '#!/bin/sh\necho listed ran\n' > s.sh && chmod +x s.sh && ./s.sh && /workspace/s.sh`); res.Exit != 0 || strings.Count(res.Stdout, "listed ran") != 2 {
		t.Errorf("exec.allow and workspace: a script written then run: exit %d, %q %q", res.Exit, res.Stdout, res.Stderr)
	}
	if res := r.exec(listed, nil, "./s.sh"); res.Exit != 0 || !strings.Contains(res.Stdout, "listed ran") {
		t.Errorf("exec.allow and workspace: ./s.sh directly: exit %d, %q %q", res.Exit, res.Stdout, res.Stderr)
	}
	if res := r.exec(listed, nil, "sh", "-c", "cat /etc/passwd"); res.Exit != 127 {
		t.Errorf("exec.allow and workspace: an unlisted program: exit %d, %q %q; want 127", res.Exit, res.Stdout, res.Stderr)
	}
}

// A read grant that shows the workspace again (its own host path, or a
// folder above it) is noexec like the workspace: a program written
// through /workspace cannot be run through the alias. Reading through it
// still works.
func TestReadGrantAliasingWorkspace(t *testing.T) {
	r := newRoot(t)
	parent := tempDir(t)
	ws := filepath.Join(parent, "project")
	os.Mkdir(ws, 0o755)
	writeFile(t, ws, "notes.txt", "seen through the alias\n")
	for name, grant := range map[string]string{"the workspace itself": ws, "a folder above it": parent} {
		policy := r.policy("name = \"alias\"\n[fs]\nread = [\"" + grant + "\"]\nwrite = [\"$WORK_DIR\"]\n")
		id := r.create("alias", policy, ws)
		res := r.exec(id, nil, "sh", "-c", "cat "+ws+"/notes.txt && cp /bin/true /workspace/t && chmod +x /workspace/t && "+ws+"/t && echo alias-ran")
		if !strings.Contains(res.Stdout, "seen through the alias") {
			t.Errorf("%s: the read grant does not show the workspace's files: exit %d, %q %q", name, res.Exit, res.Stdout, res.Stderr)
		}
		if res.Exit == 0 || strings.Contains(res.Stdout, "alias-ran") {
			t.Errorf("%s: a program written into the workspace ran through the read grant: exit %d, %q", name, res.Exit, res.Stdout)
		}
		os.Remove(filepath.Join(ws, "t"))
		r.warden("session", "rm", id)
	}
}
