package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/runtime/sandbox"
)

// gvisorBenchPolicy allows what the rows run, under gVisor.
const gvisorBenchPolicy = `name = "gvbench"
[fs]
write = ["$WORK_DIR"]
[exec]
allow = ["true", "sh", "sleep", "cat", "date"]
[limits]
timeout = "60s"
[sandbox]
engine = "gvisor"
`

// gvisorBenchFlags are the global flags warden gives runsc
// (gvisorEngine.globalArgs, without --root): the baselines run with the
// same, and the bench checks the session's sandbox runs with them.
var gvisorBenchFlags = []string{
	"--network=none",
	"--host-uds=create",
	"--overlay2=none",
	"--sidecar-usage-policy=LEGACY_DEPRECATED_SLOW_EMBEDDED_FALLBACK",
}

// gvisorLoop is how many /bin/true runs one in-sandbox sample times.
const gvisorLoop = 10

// gvBench holds one run's warden root, its gVisor session, and the bare
// runsc sandboxes started beside it as baselines.
type gvBench struct {
	b       testing.TB
	dir     string
	root    string // warden's state root
	policy  string // file
	ws      string
	runsc   string
	rsRoot  string // runsc's state root for the bare sandboxes
	cgroup  string // cgroup parent of the bare sandboxes
	session string
}

func newGVBench(b testing.TB) *gvBench {
	runsc, err := (&sandbox.Runtime{Binary: wardenBinary}).Runsc()
	if err == nil {
		_, err = os.Stat(runsc)
	}
	if err != nil {
		b.Fatalf("the gVisor bench needs runsc (`make deps` installs it into bin/tools): %v", err)
	}
	dir := tempDir(b)
	g := &gvBench{b: b, dir: dir, root: filepath.Join(dir, "root"), policy: filepath.Join(dir, "gvbench.toml"),
		ws: filepath.Join(dir, "ws"), runsc: runsc, rsRoot: filepath.Join(dir, "runsc"),
		cgroup: "/warden-gvbench-" + randomHex(4)}
	if err := os.MkdirAll(g.ws, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(g.policy, []byte(gvisorBenchPolicy), 0o644); err != nil {
		b.Fatal(err)
	}
	return g
}

func (g *gvBench) warden(args ...string) func() error {
	return runQuiet(wardenBinary, append([]string{"--root", g.root}, args...)...)
}

// runscArgs are a runsc command's arguments with warden's global flags.
func (g *gvBench) runscArgs(root string, args ...string) []string {
	return append(append([]string{"--root", root}, gvisorBenchFlags...), args...)
}

// bundle writes warden's bundle of the policy for argv, in a cgroup under
// the bench's own parent (runsc would make /<id> in every controller).
func (g *gvBench) bundle(name string, argv ...string) string {
	dir := filepath.Join(g.dir, name)
	args := []string{"bundle", "--policy", g.policy, "--workspace", g.ws, "--out", dir,
		"--cgroups-path", g.cgroup + "/" + name, "--"}
	if err := runQuiet(wardenBinary, append(args, argv...)...)(); err != nil {
		g.b.Fatal(err)
	}
	return dir
}

// startBare starts a bare runsc sandbox of the bundle, detached, with
// files for its stdio (a pipe would be held open by the sandbox).
func (g *gvBench) startBare(id, bundle string) {
	log, err := os.Create(filepath.Join(g.dir, id+".log"))
	if err != nil {
		g.b.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(g.runsc, g.runscArgs(g.rsRoot, "run", "--detach", "--bundle", bundle, id)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		out, _ := os.ReadFile(log.Name())
		g.b.Fatalf("runsc run --detach %s: %v: %s", id, err, out)
	}
}

// cleanup removes the sessions, ends the daemon, deletes the bare
// sandboxes and what runsc leaves of them (cgroups, its netns mount), and
// fails the benchmark if anything of either is left on the host.
func (g *gvBench) cleanup() {
	b := g.b
	if out, err := exec.Command(wardenBinary, "--root", g.root, "session", "ls", "--format", "json").Output(); err == nil {
		var live []sessionInfo
		json.Unmarshal(out, &live)
		for _, s := range live {
			g.warden("session", "rm", "--force", s.ID)()
		}
	}
	// A daemon keeps its pools' ready sandboxes across a restart: drained
	// first, also a pool a failed run left filled.
	g.warden("pool", "drain")()
	w := &wardenRoot{root: g.root}
	for _, pid := range w.daemonPids() {
		syscall.Kill(pid, syscall.SIGTERM)
	}
	// Every bare sandbox, also one a failed run left behind.
	ids, _ := exec.Command(g.runsc, g.runscArgs(g.rsRoot, "list", "-quiet")...).Output()
	for _, id := range strings.Fields(string(ids)) {
		exec.Command(g.runsc, g.runscArgs(g.rsRoot, "delete", "--force", id)...).Run()
	}
	// runsc keeps an empty network namespace bound in its root for
	// --network=none; nothing of warden's, so the bench removes it.
	unix.Unmount(filepath.Join(g.rsRoot, "null-netns"), unix.MNT_DETACH)
	rmCgroups := func() []string {
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*" + g.cgroup)
		var left []string
		for _, d := range dirs {
			subs, _ := filepath.Glob(d + "/*/cgroup.procs")
			for _, s := range subs {
				os.Remove(filepath.Dir(s))
			}
			if err := os.Remove(d); err != nil && !os.IsNotExist(err) {
				left = append(left, d)
			}
		}
		return left
	}
	var left []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		left = nil
		if pids := processesNaming(g.dir); len(pids) > 0 {
			left = append(left, fmt.Sprintf("processes naming %s: %v", g.dir, pids))
		}
		if m := mountsBelow(g.dir); len(m) > 0 {
			left = append(left, fmt.Sprintf("mounts: %v", m))
		}
		if dirs := rmCgroups(); len(dirs) > 0 {
			left = append(left, fmt.Sprintf("cgroups of the bare sandboxes: %v", dirs))
		}
		sum := sha256.Sum256([]byte(g.root))
		if dirs, _ := filepath.Glob("/sys/fs/cgroup/*/warden/" + hex.EncodeToString(sum[:6])); len(dirs) > 0 {
			left = append(left, fmt.Sprintf("the root's cgroups: %v", dirs))
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(left) > 0 {
		b.Errorf("left on the host after the gVisor bench: %s", strings.Join(left, "; "))
	}
}

// checkFlags fails unless the session's sandbox runs with the flags the
// baselines are given, so both sides are configured alike.
func (g *gvBench) checkFlags() {
	for _, pid := range g.cgroupProcs(g.sessionCgroup(g.session)) {
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		args := strings.Split(string(cmdline), "\x00")
		if len(args) == 0 || args[0] != "runsc-sandbox" {
			continue
		}
		for _, f := range gvisorBenchFlags {
			if !containsString(args, f) {
				g.b.Fatalf("the session's sandbox runs without %s (%q): the bench's baselines would not be configured alike", f, args)
			}
		}
		return
	}
	g.b.Fatalf("no runsc-sandbox process in session %s's cgroup", g.session)
}

// processesNaming lists the host processes whose command line holds
// text anywhere (runsc writes --root=DIR as one argument).
func processesNaming(text string) []int {
	var pids []int
	for _, pid := range hostPIDs() {
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if pid != os.Getpid() && strings.Contains(string(cmdline), text) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func (g *gvBench) sessionCgroup(id string) string {
	sum := sha256.Sum256([]byte(g.root))
	return filepath.Join("/sys/fs/cgroup/memory/warden", hex.EncodeToString(sum[:6]), id)
}

func (g *gvBench) cgroupProcs(dir string) []int {
	data, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// sandboxMemory is what a sandbox costs the host: the PSS of its host
// processes (runsc's sentry, its gofer and the sentry's stubs, all in its
// cgroup), and its cgroup's memory usage.
func (g *gvBench) sandboxMemory(cgroup string) (pss, usage int64) {
	pids := g.cgroupProcs(cgroup)
	if len(pids) == 0 {
		g.b.Fatalf("no processes in %s", cgroup)
	}
	for _, pid := range pids {
		data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
		if err != nil {
			g.b.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "Pss:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				pss += kb << 10
			}
		}
	}
	data, err := os.ReadFile(filepath.Join(cgroup, "memory.usage_in_bytes"))
	if err != nil {
		g.b.Fatal(err)
	}
	usage, _ = strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	return pss, usage
}

// sample times one run of f.
func sample(f func() error) func() (time.Duration, error) {
	return func() (time.Duration, error) {
		start := time.Now()
		err := f()
		return time.Since(start), err
	}
}

// interleaved takes n samples of each f (after a tenth to warm up), one
// of each in turn, starting each round at the next f, so all see the same
// machine noise.
func interleaved(n int, fs ...func() (time.Duration, error)) ([][]time.Duration, error) {
	out := make([][]time.Duration, len(fs))
	for i := 0; i < n+n/10; i++ {
		for k := range fs {
			j := (i + k) % len(fs)
			d, err := fs[j]()
			if err != nil {
				return nil, err
			}
			if i >= n/10 {
				out[j] = append(out[j], d)
			}
		}
	}
	return out, nil
}

// p50p90 sorts d and returns its median and 90th percentile.
func p50p90(d []time.Duration) (time.Duration, time.Duration) {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2], d[len(d)*9/10]
}

type gvRow struct {
	name     string
	p50, p90 time.Duration
}

func printGVTable(title string, rows []gvRow) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%s\n%-62s %10s %10s\n", title, "path", "p50 ms", "p90 ms")
	for _, r := range rows {
		fmt.Fprintf(&sb, "%-62s %10.2f %10.2f\n", r.name, ms(r.p50), ms(r.p90))
	}
	fmt.Print(sb.String())
}

func printRatio(what string, ratio, target float64) {
	verdict := "met"
	if ratio > target {
		verdict = "not met"
	}
	fmt.Printf("%-62s %6.2f (target <= %.2f: %s)\n", what, ratio, target, verdict)
}

// BenchmarkGVisor: issue 15's targets for the gVisor engine, each beside
// its baseline in the same run, interleaved: exec through warden against
// `runsc exec` into the session's own sandbox and into a bare one started
// from warden's bundle of the same policy, and against fork+exec timed
// inside the sandbox; cold session create, and create from a warm pool,
// against `runsc run` of /bin/true; the idle memory of a session and of a
// pooled sandbox against a bare sandbox's.
func BenchmarkGVisor(b *testing.B) {
	g := newGVBench(b)
	defer g.cleanup()

	// The first create starts the daemon and lists the host's programs:
	// untimed.
	g.session = "gv-exec"
	if err := g.warden("session", "create", "--id", g.session, "--policy", g.policy, "--workspace", g.ws)(); err != nil {
		b.Fatal(err)
	}
	g.checkFlags()
	g.startBare("bare-exec", g.bundle("bundle-sleep-exec", "sleep", "100000"))

	sessionRunsc := filepath.Join(g.root, "runsc")
	// dash runs a simple command with vfork: a subshell, `(/bin/true)`,
	// is one fork and the exec of true in the child, as the agent does.
	inside := func(command string) func() (time.Duration, error) {
		loop := fmt.Sprintf(`t0=$(date +%%s%%N); i=0; while [ $i -lt %d ]; do %s; i=$((i+1)); done; t1=$(date +%%s%%N); echo $((t1-t0))`, gvisorLoop, command)
		return func() (time.Duration, error) {
			out, err := exec.Command(wardenBinary, "--root", g.root, "exec", "--session", g.session, "--", "sh", "-c", loop).CombinedOutput()
			if err != nil {
				return 0, fmt.Errorf("in-sandbox loop: %v: %s", err, out)
			}
			ns, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
			if err != nil || ns <= 0 {
				return 0, fmt.Errorf("in-sandbox loop printed %q", out)
			}
			return time.Duration(ns / gvisorLoop), nil
		}
	}
	const execRuns = 100
	d, err := interleaved(execRuns,
		sample(g.warden("exec", "--session", g.session, "--", "true")),
		sample(g.warden("exec", "--session", g.session, "--", "cat", "/dev/null")),
		sample(runQuiet(g.runsc, g.runscArgs(sessionRunsc, "exec", g.session, "true")...)),
		sample(runQuiet(g.runsc, g.runscArgs(sessionRunsc, "exec", g.session, "cat", "/dev/null")...)),
		sample(runQuiet(g.runsc, g.runscArgs(g.rsRoot, "exec", "bare-exec", "true")...)),
		inside("(/bin/true)"),
		inside("/bin/true"),
	)
	if err != nil {
		b.Fatal(err)
	}
	var rows []gvRow
	for i, name := range []string{
		"warden exec --session S -- true",
		"warden exec --session S -- cat /dev/null",
		"runsc exec S true (the session's sandbox)",
		"runsc exec S cat /dev/null (the session's sandbox)",
		"runsc exec B true (bare sandbox of warden's bundle)",
		fmt.Sprintf("fork+exec /bin/true inside the sandbox (sh loop of %d)", gvisorLoop),
		fmt.Sprintf("vfork+exec /bin/true inside the sandbox (sh loop of %d)", gvisorLoop),
	} {
		p50, p90 := p50p90(d[i])
		rows = append(rows, gvRow{name, p50, p90})
	}
	printGVTable(fmt.Sprintf("gVisor exec (%d interleaved runs each)", execRuns), rows)
	ratio := func(a, b gvRow) float64 { return float64(a.p50) / float64(b.p50) }
	printRatio("warden exec true / runsc exec true (session's sandbox)", ratio(rows[0], rows[2]), 0.35)
	printRatio("warden exec cat / runsc exec cat (session's sandbox)", ratio(rows[1], rows[3]), 0.35)
	printRatio("warden exec true / runsc exec true (bare sandbox)", ratio(rows[0], rows[4]), 0.35)
	printRatio("warden exec true / fork+exec inside", ratio(rows[0], rows[5]), 1.5)
	fmt.Printf("%-62s %6.2f (no target: dash's own vfork)\n", "warden exec true / vfork+exec inside", ratio(rows[0], rows[6]))

	// Cold create against runsc run of /bin/true; the session's removal
	// is untimed.
	trueBundle := g.bundle("bundle-true", "/bin/true")
	const createRuns = 30
	n := 0
	d, err = interleaved(createRuns,
		func() (time.Duration, error) {
			n++
			id := "gv-cold-" + strconv.Itoa(n)
			t, err := sample(g.warden("session", "create", "--id", id, "--policy", g.policy, "--workspace", g.ws))()
			if err == nil {
				err = g.warden("session", "rm", "--force", id)()
			}
			return t, err
		},
		func() (time.Duration, error) {
			n++
			return sample(runQuiet(g.runsc, g.runscArgs(g.rsRoot, "run", "--bundle", trueBundle, "bare-true-"+strconv.Itoa(n))...))()
		},
	)
	if err != nil {
		b.Fatal(err)
	}
	rows = nil
	for i, name := range []string{"warden session create (cold)", "runsc run /bin/true (warden's bundle)"} {
		p50, p90 := p50p90(d[i])
		rows = append(rows, gvRow{name, p50, p90})
	}
	printGVTable(fmt.Sprintf("gVisor cold create (%d interleaved runs each)", createRuns), rows)
	printRatio("session create / runsc run", ratio(rows[0], rows[1]), 1.1)

	g.benchWarmCreate(trueBundle, createRuns)
	g.benchIdleMemory(4)
}

// poolFull waits until the root's one pool holds size ready sandboxes and
// starts none.
func (g *gvBench) poolFull(size int) error {
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		out, err := exec.Command(wardenBinary, "--root", g.root, "pool", "status", "--format", "json").Output()
		if err != nil {
			return fmt.Errorf("pool status: %v", err)
		}
		var st []poolInfo
		if err := json.Unmarshal(out, &st); err != nil {
			return err
		}
		if len(st) == 1 && st[0].Ready == size && st[0].Refilling == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the pool never refilled: %+v", st)
		}
	}
}

// benchWarmCreate times session create from a warm gVisor pool against
// `runsc run` of /bin/true, interleaved; before each sample (untimed) the
// pool is full and starts nothing, so no refill runs beside either.
func (g *gvBench) benchWarmCreate(trueBundle string, runs int) {
	b := g.b
	const size = 2
	if err := g.warden("pool", "fill", "--policy", g.policy, "--size", strconv.Itoa(size))(); err != nil {
		b.Fatal(err)
	}
	full := func() error { return g.poolFull(size) }
	n := 0
	var ids []string
	d, err := interleaved(runs,
		func() (time.Duration, error) {
			if err := full(); err != nil {
				return 0, err
			}
			n++
			id := "gv-warm-" + strconv.Itoa(n)
			t, err := sample(g.warden("session", "create", "--id", id, "--policy", g.policy, "--workspace", g.ws))()
			if err == nil {
				ids = append(ids, id)
				err = g.warden("session", "rm", "--force", id)()
			}
			return t, err
		},
		func() (time.Duration, error) {
			if err := full(); err != nil {
				return 0, err
			}
			n++
			return sample(runQuiet(g.runsc, g.runscArgs(g.rsRoot, "run", "--bundle", trueBundle, "bare-warm-true-"+strconv.Itoa(n))...))()
		},
		// Until its first command has run a session is of no use: the
		// agent's loading of the claim's filter falls on that command.
		func() (time.Duration, error) {
			if err := full(); err != nil {
				return 0, err
			}
			n++
			id := "gv-warm-first-" + strconv.Itoa(n)
			create := g.warden("session", "create", "--id", id, "--policy", g.policy, "--workspace", g.ws)
			first := g.warden("exec", "--session", id, "--", "true")
			t, err := sample(func() error {
				if err := create(); err != nil {
					return err
				}
				return first()
			})()
			if err == nil {
				ids = append(ids, id)
				err = g.warden("session", "rm", "--force", id)()
			}
			return t, err
		},
	)
	if err != nil {
		b.Fatal(err)
	}
	out, err := exec.Command(wardenBinary, "--root", g.root, "pool", "status", "--format", "json").Output()
	var st []poolInfo
	if err != nil || json.Unmarshal(out, &st) != nil || len(st) != 1 {
		b.Fatalf("pool status: %v %s", err, out)
	}
	if st[0].Misses != 0 || st[0].Hits != len(ids) {
		b.Fatalf("not every create was a claim: %+v over %d creates", st[0], len(ids))
	}
	var rows []gvRow
	for i, name := range []string{"warden session create (warm gVisor pool)", "runsc run /bin/true (warden's bundle)",
		"warden session create + first exec true (warm gVisor pool)"} {
		p50, p90 := p50p90(d[i])
		rows = append(rows, gvRow{name, p50, p90})
	}
	printGVTable(fmt.Sprintf("gVisor warm create (%d interleaved runs each; the pool full before each, untimed)", runs), rows)
	printRatio("session create from a warm pool / runsc run", float64(rows[0].p50)/float64(rows[1].p50), 0.2)
	fmt.Printf("%-62s %6.2f (no target)\n", "create + first exec, warm / runsc run", float64(rows[2].p50)/float64(rows[1].p50))
	if err := g.warden("pool", "drain")(); err != nil {
		b.Fatal(err)
	}
}

// benchIdleMemory starts n idle sessions and n bare sandboxes of a
// sleeping process, alternately, beside a warm pool of n, and compares
// what each costs the host (all alive at once, so they split runsc's
// shared pages alike).
func (g *gvBench) benchIdleMemory(n int) {
	b := g.b
	type sandboxes struct{ cgroups []string }
	var sessions, bare, pooled sandboxes
	for i := 0; i < n; i++ {
		id := "gv-idle-" + strconv.Itoa(i)
		if err := g.warden("session", "create", "--id", id, "--policy", g.policy, "--workspace", g.ws)(); err != nil {
			b.Fatal(err)
		}
		sessions.cgroups = append(sessions.cgroups, g.sessionCgroup(id))
		name := "bare-idle-" + strconv.Itoa(i)
		g.startBare(name, g.bundle("bundle-"+name, "sleep", "100000"))
		bare.cgroups = append(bare.cgroups, filepath.Join("/sys/fs/cgroup/memory", g.cgroup, "bundle-"+name))
	}
	// The pool is filled once the sessions exist (started cold, not
	// claimed from it).
	if err := g.warden("pool", "fill", "--policy", g.policy, "--size", strconv.Itoa(n))(); err != nil {
		b.Fatal(err)
	}
	if err := g.poolFull(n); err != nil {
		b.Fatal(err)
	}
	ids, _ := filepath.Glob(filepath.Join(g.root, "pool", "pool-*"))
	for _, dir := range ids {
		pooled.cgroups = append(pooled.cgroups, g.sessionCgroup(filepath.Base(dir)))
	}
	if len(pooled.cgroups) != n {
		b.Fatalf("%d pooled sandboxes, want %d", len(pooled.cgroups), n)
	}
	time.Sleep(2 * time.Second) // let the sandboxes settle
	measure := func(s sandboxes) (pss, usage []int64) {
		for _, c := range s.cgroups {
			p, u := g.sandboxMemory(c)
			pss, usage = append(pss, p), append(usage, u)
		}
		sort.Slice(pss, func(i, j int) bool { return pss[i] < pss[j] })
		sort.Slice(usage, func(i, j int) bool { return usage[i] < usage[j] })
		return pss, usage
	}
	sPSS, sUsage := measure(sessions)
	bPSS, bUsage := measure(bare)
	pPSS, pUsage := measure(pooled)
	mib := func(v int64) float64 { return float64(v) / (1 << 20) }
	fmt.Printf("\ngVisor idle memory (%d of each alive at once, medians; PSS of the sandbox's host processes, and its cgroup's usage)\n", n)
	fmt.Printf("%-62s %10s %10s\n", "sandbox", "PSS MiB", "cgroup MiB")
	fmt.Printf("%-62s %10.1f %10.1f\n", "idle warden gVisor session", mib(sPSS[n/2]), mib(sUsage[n/2]))
	fmt.Printf("%-62s %10.1f %10.1f\n", "ready sandbox of a warm gVisor pool", mib(pPSS[n/2]), mib(pUsage[n/2]))
	fmt.Printf("%-62s %10.1f %10.1f\n", "idle bare runsc run --detach (sleep)", mib(bPSS[n/2]), mib(bUsage[n/2]))
	printRatio("session PSS / bare sandbox PSS", float64(sPSS[n/2])/float64(bPSS[n/2]), 1.2)
	printRatio("pooled sandbox PSS / bare sandbox PSS", float64(pPSS[n/2])/float64(bPSS[n/2]), 1.2)
	if err := g.warden("pool", "drain")(); err != nil {
		b.Fatal(err)
	}
}
