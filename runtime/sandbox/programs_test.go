package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// The host's own binaries tell programs from libraries: /usr/bin/cat is a
// program, libc.so.6 a library (though it has an interpreter), a script or
// a file without an execute bit is neither.
func TestFindPrograms(t *testing.T) {
	libc, err := filepath.EvalSymlinks("/lib/x86_64-linux-gnu/libc.so.6")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	copyFile := func(from, to string, mode os.FileMode) {
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, to)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, to), data, mode); err != nil {
			t.Fatal(err)
		}
	}
	copyFile("/usr/bin/cat", "a/b/cat", 0o755)
	copyFile("/usr/bin/cat", "noexec-bit", 0o644)
	copyFile(libc, "lib/libc.so.6", 0o755)
	os.WriteFile(filepath.Join(dir, "script"), []byte("#!/bin/sh\necho hi\n"), 0o755)
	os.Symlink("a/b/cat", filepath.Join(dir, "link"))
	start := time.Now()
	got := findPrograms(dir)
	if !slices.Equal(got, []string{"a/b/cat"}) {
		t.Fatalf("programs %q, want only a/b/cat", got)
	}
	t.Logf("scan took %s", time.Since(start))

	sp := &specs.Spec{Mounts: []specs.Mount{
		{Destination: "/usr/lib", Type: "bind", Source: dir, Options: []string{"rbind", "ro"}},
		{Destination: "/data", Type: "bind", Source: dir, Options: []string{"rbind", "ro", "noexec"}},
		{Destination: "/proc", Type: "proc", Source: "proc"},
	}}
	rt := &Runtime{Root: t.TempDir()}
	if got := rt.hiddenPrograms(sp, nil); !slices.Equal(got, []string{"/usr/lib/a/b/cat"}) {
		t.Fatalf("hidden %q", got)
	}
	if got := rt.hiddenPrograms(sp, []string{"/usr/lib/a/b/cat"}); len(got) != 0 {
		t.Fatalf("an allowed program is hidden: %q", got)
	}
}

// The scan is kept in the state root and reused while the folder's
// fingerprint holds; a change of the fingerprint scans again.
func TestProgramScanCache(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "sub"), 0o755)
	data, _ := os.ReadFile("/usr/bin/cat")
	os.WriteFile(filepath.Join(dir, "sub", "one"), data, 0o755)
	fixed := time.Unix(1000, 0)
	os.Chtimes(filepath.Join(dir, "sub"), fixed, fixed)
	rt := &Runtime{Root: t.TempDir()}
	if got := rt.scanPrograms(dir); !slices.Equal(got, []string{"sub/one"}) {
		t.Fatalf("first scan %q", got)
	}
	if _, err := os.Stat(rt.programCacheFile()); err != nil {
		t.Fatalf("no cache file: %v", err)
	}
	forget := func() {
		programScans.Lock()
		delete(programScans.byDir, dir)
		programScans.Unlock()
	}
	// A file added without changing the fingerprint: a new process reads
	// the cache file and does not see it (the documented residual).
	forget()
	os.WriteFile(filepath.Join(dir, "sub", "two"), data, 0o755)
	os.Chtimes(filepath.Join(dir, "sub"), fixed, fixed)
	if got := (&Runtime{Root: rt.Root}).scanPrograms(dir); !slices.Equal(got, []string{"sub/one"}) {
		t.Fatalf("from the cache file: %q", got)
	}
	// The folder changed: scanned again.
	forget()
	os.Chtimes(filepath.Join(dir, "sub"), time.Now(), time.Now())
	if got := (&Runtime{Root: rt.Root}).scanPrograms(dir); !slices.Equal(got, []string{"sub/one", "sub/two"}) {
		t.Fatalf("after a change: %q", got)
	}
}
