package client

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// goCmd runs the go command in this package's folder with extra
// environment; a missing go command fails the test.
func goCmd(t *testing.T, env []string, args ...string) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to check the import graph: %v", err)
	}
	cmd := exec.Command(gobin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// The client must link into a program built without cgo: nothing in its
// import graph starts containers (libcontainer, runtime/sandbox) or needs
// cgo, in either build mode.
func TestImportGraph(t *testing.T) {
	for _, cgo := range []string{"0", "1"} {
		out := goCmd(t, []string{"CGO_ENABLED=" + cgo}, "list", "-deps",
			"-f", "{{.ImportPath}} {{.Standard}} {{len .CgoFiles}}", ".")
		seen := false
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(line)
			path, std, cgoFiles := f[0], f[1] == "true", f[2] != "0"
			switch {
			case path == "C":
				t.Errorf("CGO_ENABLED=%s: the import graph holds the cgo package C", cgo)
			case strings.Contains(path, "libcontainer"), strings.HasSuffix(path, "/runtime/sandbox"),
				strings.HasSuffix(path, "/runtime/daemon"), strings.HasSuffix(path, "/warden/spec"):
				t.Errorf("CGO_ENABLED=%s: the import graph holds %s", cgo, path)
			case !std && cgoFiles:
				t.Errorf("CGO_ENABLED=%s: %s uses cgo", cgo, path)
			}
			seen = seen || strings.HasSuffix(path, "/runtime/internal/protocol")
		}
		if !seen {
			t.Errorf("CGO_ENABLED=%s: go list shows no runtime/internal/protocol; the check looks at the wrong graph:\n%s", cgo, out)
		}
	}
	goCmd(t, []string{"CGO_ENABLED=0"}, "build", "-o", os.DevNull, ".")
}
