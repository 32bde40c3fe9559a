package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/runtime/sandbox"
	"github.com/warden-sandbox/warden/spec"
)

// pairedMedians runs base and other alternately n times (after a tenth
// to warm up), so both see the same machine noise, and returns their
// medians.
func pairedMedians(n int, base, other func() error) (time.Duration, time.Duration, error) {
	var a, b []time.Duration
	for i := 0; i < n+n/10; i++ {
		for j, f := range []func() error{base, other} {
			start := time.Now()
			if err := f(); err != nil {
				return 0, 0, err
			}
			if i >= n/10 {
				if j == 0 {
					a = append(a, time.Since(start))
				} else {
					b = append(b, time.Since(start))
				}
			}
		}
	}
	med := func(d []time.Duration) time.Duration {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return d[len(d)/2]
	}
	return med(a), med(b), nil
}

func printPairs(title string, rows [][3]any) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%s (paired runs, medians)\n%-58s %10s %10s %8s\n", title, "path", "base ms", "ms", "ratio")
	for _, r := range rows {
		base, d := r[1].(time.Duration), r[2].(time.Duration)
		fmt.Fprintf(&sb, "%-58s %10.2f %10.2f %8.2f\n", r[0], ms(base), ms(d), float64(d)/float64(base))
	}
	fmt.Print(sb.String())
}

// BenchmarkOCIRun: `warden run` of /bin/true from a bundle beside `runc
// run` (v1.5.2) of the same bundle; then the same under warden with a
// policy (the tightening's cost), and beside runc running the config that
// policy made (spec.Tighten), which shows warden's own share apart from
// what the tightened container costs any runtime (mostly libcontainer
// compiling the seccomp filter in the container's init). Then the gVisor
// engine beside `runsc run` of the same bundle, with the global flags
// warden gives runsc.
func BenchmarkOCIRun(b *testing.B) {
	dir := tempDir(b)
	bundle := busyboxBundle(b, "bench", func(s *specs.Spec) {
		s.Process.Args = []string{"true"}
		s.Linux.CgroupsPath = "/warden-oci-bench/c"
	})
	b.Cleanup(func() {
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*/warden-oci-bench")
		for _, d := range dirs {
			os.Remove(d)
		}
	})
	policy := filepath.Join(dir, "p.toml")
	os.WriteFile(policy, []byte("name = \"p\"\n"), 0o644)
	tightened := tightenedBundle(b, bundle, policy)
	wardenRoot, runcState := filepath.Join(dir, "warden"), filepath.Join(dir, "runc")
	n := 0
	runOne := func(bin string, args ...string) func() error {
		return func() error {
			n++
			id := fmt.Sprintf("bench-%d", n)
			return runQuiet(bin, append(args, "run", "--bundle", bundle, id)...)()
		}
	}
	runc := runOne(runcBinary, "--root", runcState)
	runcTightened := func() error {
		n++
		return runQuiet(runcBinary, "--root", runcState, "run", "--bundle", tightened, fmt.Sprintf("bench-%d", n))()
	}
	runsc, err := (&sandbox.Runtime{Binary: wardenBinary}).Runsc()
	if err == nil {
		_, err = os.Stat(runsc)
	}
	if err != nil {
		b.Fatalf("the gVisor rows need runsc (`make deps` installs it into bin/tools): %v", err)
	}
	runscState := filepath.Join(dir, "runsc")
	b.Cleanup(func() {
		// runsc keeps an empty network namespace bound in its root for
		// --network=none; nothing of warden's, so the bench removes it.
		unix.Unmount(filepath.Join(runscState, "null-netns"), unix.MNT_DETACH)
		if m := mountsBelow(dir); len(m) > 0 {
			b.Errorf("left mounted after the OCI bench: %v", m)
		}
	})
	var rows [][3]any
	for _, row := range []struct {
		name       string
		base, f    func() error
		iterations int
	}{
		{"warden run /bin/true vs runc run", runc, runOne(wardenBinary, "--root", wardenRoot), 100},
		{"warden --policy run /bin/true vs runc run", runc, runOne(wardenBinary, "--root", wardenRoot, "--policy", policy), 100},
		{"warden --policy run vs runc run of the tightened config", runcTightened, runOne(wardenBinary, "--root", wardenRoot, "--policy", policy), 100},
		{"warden --engine gvisor run /bin/true vs runsc run", runOne(runsc, "--root", runscState, sandbox.RunscSidecarFlag), runOne(wardenBinary, "--root", wardenRoot, "--engine", "gvisor"), 20},
		{"warden --engine gvisor --policy run vs runsc run", runOne(runsc, "--root", runscState, sandbox.RunscSidecarFlag), runOne(wardenBinary, "--root", wardenRoot, "--engine", "gvisor", "--policy", policy), 20},
	} {
		base, d, err := pairedMedians(row.iterations, row.base, row.f)
		if err != nil {
			b.Fatal(err)
		}
		rows = append(rows, [3]any{row.name, base, d})
	}
	printPairs("OCI run", rows)
}

// tightenedBundle writes a bundle beside bundle whose config.json is the
// one warden runs under policy: the same tightening, done by spec.Tighten.
func tightenedBundle(b testing.TB, bundle, policy string) string {
	var s specs.Spec
	readJSON(b, filepath.Join(bundle, "config.json"), &s)
	p, err := policies.Load(policy)
	if err != nil {
		b.Fatal(err)
	}
	s.Root.Path = filepath.Join(bundle, s.Root.Path)
	home, _ := os.UserHomeDir()
	if _, err := spec.Tighten(&s, p, spec.TightenOptions{
		Vars: policies.Vars{SkillDir: filepath.Dir(policy), Home: home}, ID: "bench", Bundle: bundle,
	}); err != nil {
		b.Fatal(err)
	}
	dir := tempDir(b)
	writeJSON(b, filepath.Join(dir, "config.json"), &s)
	return dir
}

// BenchmarkDockerRun: `docker run --rm busybox true` with warden as the
// runtime beside the same with runc v1.5.2, through one dockerd.
func BenchmarkDockerRun(b *testing.B) {
	policyDir := tempDir(b)
	os.WriteFile(filepath.Join(policyDir, "locked.toml"), []byte("name = \"locked\"\n"), 0o644)
	e := startEngines(b, policyDir)
	docker := func(rt string) func() error {
		return func() error {
			r := e.docker(b, "run", "--rm", "--runtime="+rt, "busybox", "true")
			if r.Exit != 0 {
				return fmt.Errorf("docker run --runtime=%s: %s", rt, r.Stderr)
			}
			return nil
		}
	}
	var rows [][3]any
	for _, rt := range []string{"warden", "warden-locked"} {
		base, d, err := pairedMedians(30, docker("runc-ref"), docker(rt))
		if err != nil {
			b.Fatal(err)
		}
		rows = append(rows, [3]any{"docker run --rm --runtime=" + rt + " vs runc", base, d})
	}
	printPairs("docker run", rows)
}
