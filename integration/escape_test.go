package integration

import (
	"os"
	"path/filepath"
	"testing"
)

// TestBundleDenyCoversEveryPlace runs a policy whose deny of ~/.ssh must
// hold when the workspace is $HOME itself, and when an absolute grant of
// the same folder is written differently from the deny.
func TestBundleDenyCoversEveryPlace(t *testing.T) {
	home := tempDir(t)
	os.MkdirAll(filepath.Join(home, ".ssh"), 0o755)
	os.WriteFile(filepath.Join(home, ".ssh", "id_rsa"), []byte("KEY"), 0o644)
	os.WriteFile(filepath.Join(home, "notes.txt"), []byte("notes"), 0o644)
	res := runSandbox(t, sandboxRun{
		Policy: `name = "alias"
[fs]
read = ["` + home + `"]
write = ["$WORK_DIR"]
deny = ["~/.ssh"]
`,
		WorkDir: home,
		Env:     []string{"PATH=/usr/bin:/bin", "HOME=" + home},
		Argv: []string{"sh", "-c", probeScript + `
p ws_notes cat /workspace/notes.txt
p home_notes cat ` + home + `/notes.txt
p ws_key cat /workspace/.ssh/id_rsa
p home_key cat ` + home + `/.ssh/id_rsa
p ws_write_key sh -c 'echo x > /workspace/.ssh/id_rsa'
`},
	})
	expectProbes(t, probes(res.Stdout), map[string]string{
		"ws_notes": "ok", "home_notes": "ok",
		"ws_key": "fail", "home_key": "fail", "ws_write_key": "fail",
	})
	if data, _ := os.ReadFile(filepath.Join(home, ".ssh", "id_rsa")); string(data) != "KEY" {
		t.Errorf("the denied key changed on the host: %q", data)
	}
}
