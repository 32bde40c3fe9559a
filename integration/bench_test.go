package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/runtime/daemon"
	"github.com/warden-sandbox/warden/runtime/sandbox"
)

// The benchmarks print tables of medians and ratios against baselines
// measured in the same run; run them with `make bench` (they ignore b.N).

const benchRuns = 300

type benchRow struct {
	name     string
	p50, p99 time.Duration
	note     string
}

func measure(n int, f func() error) (p50, p99 time.Duration, err error) {
	d := make([]time.Duration, 0, n)
	for i := 0; i < n+n/10; i++ { // the first tenth warms up
		start := time.Now()
		if err := f(); err != nil {
			return 0, 0, err
		}
		if i >= n/10 {
			d = append(d, time.Since(start))
		}
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2], d[len(d)*99/100], nil
}

func printTable(b *testing.B, title string, base time.Duration, rows []benchRow) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%s (%d runs each, medians)\n", title, benchRuns)
	fmt.Fprintf(&sb, "%-52s %10s %10s %9s  %s\n", "path", "p50 ms", "p99 ms", "x floor", "")
	for _, r := range rows {
		fmt.Fprintf(&sb, "%-52s %10.2f %10.2f %9.2f  %s\n", r.name, ms(r.p50), ms(r.p99), float64(r.p50)/float64(base), r.note)
	}
	fmt.Print(sb.String())
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func runQuiet(name string, args ...string) func() error {
	return func() error {
		cmd := exec.Command(name, args...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s %v: %v: %s", name, args, err, out)
		}
		return nil
	}
}

// benchPolicy allows what the rows run.
const benchPolicy = `name = "bench"
[fs]
write = ["$WORK_DIR"]
[exec]
allow = ["true", "sh", "sleep"]
[limits]
timeout = "60s"
`

func BenchmarkExec(b *testing.B) {
	dir := tempDir(b)
	root := filepath.Join(dir, "root")
	ws := filepath.Join(dir, "ws")
	os.MkdirAll(ws, 0o755)
	policyFile := filepath.Join(dir, "bench.toml")
	os.WriteFile(policyFile, []byte(benchPolicy), 0o644)
	warden := func(args ...string) func() error {
		return runQuiet(wardenBinary, append([]string{"--root", root}, args...)...)
	}
	defer stopDaemon(root)
	if err := warden("session", "create", "--id", "bench", "--policy", policyFile, "--workspace", ws)(); err != nil {
		b.Fatal(err)
	}
	var rows []benchRow
	add := func(name, note string, f func() error) {
		p50, p99, err := measure(benchRuns, f)
		if err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		rows = append(rows, benchRow{name, p50, p99, note})
	}
	add("host fork+exec /bin/true (floor)", "", runQuiet("/bin/true"))
	add("warden exec --session S -- /bin/true (CLI)", "", warden("exec", "--session", "bench", "--", "/bin/true"))

	// The Go API: a session created and driven in this process.
	rt := apiRuntime(b, filepath.Join(dir, "api-root"))
	p, err := policies.Parse("bench.toml", []byte(benchPolicy))
	if err != nil {
		b.Fatal(err)
	}
	s, err := rt.Create(sandbox.SessionConfig{ID: "api", Policy: p, Vars: policies.Vars{WorkDir: ws}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	apiExec := func() error {
		res, err := s.Exec(context.Background(), sandbox.ExecOptions{Argv: []string{"/bin/true"}})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit %d: %s", res.ExitCode, res.Error)
		}
		return err
	}
	add("Go API Session.Exec /bin/true", "", apiExec)

	if runc := runcBinary; runc != "" {
		bundle := filepath.Join(dir, "runc-bundle")
		if err := warden("bundle", "--policy", policyFile, "--workspace", ws, "--out", bundle, "--", "sleep", "1000")(); err != nil {
			b.Fatal(err)
		}
		state := filepath.Join(dir, "runc-state")
		// The detached container keeps the stdio it was given: give it
		// files, not the pipes CombinedOutput would wait on.
		logFile := filepath.Join(dir, "runc-run.log")
		out, err := os.Create(logFile)
		if err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command(runc, "--root", state, "run", "-d", "--bundle", bundle, "bench-runc")
		cmd.Stdout, cmd.Stderr = out, out
		err = cmd.Run()
		out.Close()
		if err != nil {
			log, _ := os.ReadFile(logFile)
			b.Fatalf("runc run -d: %v: %s", err, log)
		}
		defer exec.Command(runc, "--root", state, "delete", "--force", "bench-runc").Run()
		p50, p99, err := measure(benchRuns, runQuiet(runc, "--root", state, "exec", "bench-runc", "/bin/true"))
		if err != nil {
			fmt.Printf("runc exec row skipped: %v\n", err)
		} else {
			rows = append(rows, benchRow{"runc exec into a running container", p50, p99, filepath.Base(runc)})
		}
	}
	if bwrap, err := exec.LookPath("bwrap"); err == nil {
		add("bwrap fresh sandbox /bin/true", "", runQuiet(bwrap, "--unshare-all", "--ro-bind", "/usr", "/usr",
			"--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/bin", "/bin",
			"--proc", "/proc", "--dev", "/dev", "/bin/true"))
	}
	var bwrapRow *benchRow
	if len(rows) > 0 && strings.HasPrefix(rows[len(rows)-1].name, "bwrap") {
		bwrapRow = &rows[len(rows)-1]
	}
	doRows := benchDo(b, root, policyFile, ws)
	rows = append(rows, doRows...)
	printTable(b, "exec latency", rows[0].p50, rows)
	if bwrapRow != nil {
		fmt.Printf("warden do /bin/true, warm pool / bwrap fresh sandbox: %.3f (target <= 1.0); cold / bwrap %.3f\n",
			float64(doRows[0].p50)/float64(bwrapRow.p50), float64(doRows[1].p50)/float64(bwrapRow.p50))
	}
	cli, api := rows[1], rows[2]
	for _, r := range rows {
		if strings.HasPrefix(r.name, "runc exec") {
			fmt.Printf("CLI exec / runc exec: %.3f (target <= 0.15)\n", float64(cli.p50)/float64(r.p50))
		}
	}
	fmt.Printf("CLI exec p50 %.2f ms (target <= 3); p99/p50 %.2f (target <= 3)\n", ms(cli.p50), float64(cli.p99)/float64(cli.p50))
	fmt.Printf("Go API p50 / floor %.2f (target <= 1.5); p99/p50 %.2f (target <= 3)\n", float64(api.p50)/float64(rows[0].p50), float64(api.p99)/float64(api.p50))

	// Throughput: 8 concurrent clients on one session.
	for _, c := range []struct {
		name string
		f    func() error
	}{{"Go API", apiExec}, {"CLI", warden("exec", "--session", "bench", "--", "/bin/true")}} {
		var n atomic.Int64
		var wg sync.WaitGroup
		deadline := time.Now().Add(3 * time.Second)
		start := time.Now()
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) {
					if c.f() == nil {
						n.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		fmt.Printf("8 concurrent clients (%s) on one session: %.0f execs/s (target >= 800)\n", c.name, float64(n.Load())/time.Since(start).Seconds())
	}
}

// benchDo times `warden do /bin/true` with a warm pool of its policy
// (refilled between runs, untimed) and cold (no pool), each run a CLI
// process as a tool would start it.
func benchDo(b *testing.B, root, policyFile, ws string) []benchRow {
	const runs = 100
	c := &daemon.Client{Root: root, Binary: wardenBinary}
	pool := daemon.PoolRequest{Files: []string{policyFile}, Vars: policies.Vars{SkillDir: filepath.Dir(policyFile)}, Size: 2}
	if home, err := os.UserHomeDir(); err == nil {
		pool.Vars.Home = home
	}
	if _, err := c.FillPool(pool); err != nil {
		b.Fatal(err)
	}
	full := func(int) error {
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(2 * time.Millisecond) {
			pools, err := c.Pools()
			if err != nil {
				return err
			}
			if len(pools) == 1 && pools[0].Ready == pools[0].Size && pools[0].Refilling == 0 {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the pool never refilled: %+v", pools)
			}
		}
	}
	do := runQuiet(wardenBinary, "--root", root, "do", "--policy", policyFile, "--workspace", ws, "--", "/bin/true")
	before, err := c.Pools()
	if err != nil {
		b.Fatal(err)
	}
	warm50, warm99, err := timed(runs, full, func(int) error { return do() }, nil)
	if err != nil {
		b.Fatal(err)
	}
	after, err := c.Pools()
	if err != nil {
		b.Fatal(err)
	}
	if hits := after[0].Hits - before[0].Hits; hits != runs {
		b.Fatalf("warden do took %d of %d runs from the pool", hits, runs)
	}
	pool.Size = 0
	if _, err := c.DrainPool(&pool); err != nil {
		b.Fatal(err)
	}
	cold50, cold99, err := timed(runs/2, nil, func(int) error { return do() }, nil)
	if err != nil {
		b.Fatal(err)
	}
	return []benchRow{
		{"warden do /bin/true, warm pool", warm50, warm99, "target p50 <= bwrap's"},
		{"warden do /bin/true, cold (no pool)", cold50, cold99, ""},
	}
}

// stopDaemon ends the daemon serving root and its sessions.
func stopDaemon(root string) {
	out, _ := exec.Command(wardenBinary, "--root", root, "session", "ls", "--format", "json").Output()
	for _, line := range strings.Split(string(out), "\n") {
		if id, ok := strings.CutPrefix(strings.TrimSpace(line), `"id": "`); ok {
			exec.Command(wardenBinary, "--root", root, "session", "rm", "--force", strings.TrimSuffix(id, `",`)).Run()
		}
	}
	exec.Command("pkill", "-f", "--", "--root "+root+" daemon").Run()
	// The daemon removes its sockets as it ends: the test's temporary
	// folder is removed only after that.
	r := &wardenRoot{root: root}
	for deadline := time.Now().Add(10 * time.Second); len(running(r.processes())) > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
}
