package policies

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, size int64) string {
		p := filepath.Join(dir, name)
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString("name = \"x\"\n"); err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(size); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	zeroLink := filepath.Join(dir, "zero-link")
	if err := os.Symlink("/dev/zero", zeroLink); err != nil {
		t.Fatal(err)
	}
	small := write("small.toml", 100)
	atCap := write("cap.toml", MaxPolicyFile)
	for _, c := range []struct {
		name, path string
		want       string // "" when the read succeeds
	}{
		{"small", small, ""},
		{"exactly the cap", atCap, ""},
		{"one byte over", write("over.toml", MaxPolicyFile+1), "is 1.1 MiB; a policy may be at most 1 MiB"},
		{"40 MiB", write("big.toml", 40<<20), "big.toml is 40 MiB; a policy may be at most 1 MiB"},
		{"1.5 MiB", write("mid.toml", 3<<19), "is 1.5 MiB"},
		{"/dev/zero", "/dev/zero", "policy /dev/zero: not a regular file (a character device)"},
		{"symlink to /dev/zero", zeroLink, "zero-link: not a regular file (a character device)"},
		{"fifo", fifo, "fifo: not a regular file (a FIFO)"},
		{"directory", dir, "not a regular file (a directory)"},
		{"missing", filepath.Join(dir, "absent.toml"), "absent.toml: no such file or directory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			data, err := ReadFile(c.path, "policy", MaxPolicyFile)
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if fi, _ := os.Stat(c.path); int64(len(data)) != fi.Size() {
					t.Errorf("read %d bytes of %d", len(data), fi.Size())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error has several lines: %q", err)
			}
		})
	}
	if _, err := ReadFile(filepath.Join(dir, "absent"), "policy", MaxPolicyFile); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v does not match fs.ErrNotExist", err)
	}
	// A file whose size says 0 but that has content (/proc) is read, up
	// to the cap.
	if data, err := ReadFile("/proc/self/status", "status", MaxPolicyFile); err != nil || len(data) == 0 {
		t.Errorf("/proc/self/status: %d bytes, %v", len(data), err)
	}
	if _, err := ReadFile("/proc/self/status", "status", 10); err == nil || !strings.Contains(err.Error(), "is larger than 10 bytes, the most a status may be") {
		t.Errorf("/proc/self/status with a 10-byte cap: %v", err)
	}
}

func TestLoadRefusesDevices(t *testing.T) {
	for _, load := range []func(string) (*Policy, error){Load, ImportSkill} {
		if _, err := load("/dev/zero"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("/dev/zero: %v", err)
		}
	}
}
