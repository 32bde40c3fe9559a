package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// chaosPolicy serves the cold sessions and the pool alike, so creates
// claim once the pool is filled; its egress grant gives each session a
// listener of the daemon's inside the sandbox's network namespace.
const chaosPolicy = `name = "chaos"
[fs]
write = ["$WORK_DIR"]
[exec]
allow = ["sh", "true", "echo", "cat", "sleep"]
[network]
allow = ["127.0.0.1:9"]
[limits]
timeout = "30s"
`

// chaosSpan is how long after a round's start its daemon kills are drawn:
// about the length of the workload, so they land anywhere in it.
const chaosSpan = 1200 * time.Millisecond

// chaosFaults is what each round does besides killing the daemon; rounds
// take them in turn so every kind runs whatever the number of rounds.
var chaosFaults = []string{"daemon", "client", "agent"}

// TestChaos: kill -9 of the daemon at random moments of session create,
// exec, rm, pool fill, claims and refills (and, in turn, of a `warden
// exec` client mid-command and of a sandbox's agent) leaves nothing
// behind once the restarted daemon has adopted or reaped what it found
// and the round's sessions and pool are removed through the CLI, without
// `warden gc`: no folder under the root's containers, sessions or pool
// (but the pool's state file and placeholder), no cgroup of the root in
// any hierarchy, no mount naming the root, no process of the root, no
// network namespace of its sandboxes; every audit line is whole JSON.
// It runs only when WARDEN_CHAOS_ROUNDS says how many rounds (`make
// chaos`); WARDEN_CHAOS_SEED replays a run's random moments.
func TestChaos(t *testing.T) {
	value, asked := os.LookupEnv("WARDEN_CHAOS_ROUNDS")
	if !asked {
		t.Skip("the chaos rounds run with `make chaos` (WARDEN_CHAOS_ROUNDS=N)")
	}
	rounds, err := strconv.Atoi(value)
	if err != nil || rounds < 1 || rounds > 1000 {
		t.Fatalf("WARDEN_CHAOS_ROUNDS=%q: want a number of rounds from 1 to 1000", value)
	}
	seed := uint64(time.Now().UnixNano())
	if s, ok := os.LookupEnv("WARDEN_CHAOS_SEED"); ok {
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("WARDEN_CHAOS_SEED=%q: want the unsigned number a run logged", s)
		}
	}
	t.Logf("seed %d (replay: WARDEN_CHAOS_SEED=%d WARDEN_CHAOS_ROUNDS=%d)", seed, seed, rounds)
	rng := rand.New(rand.NewPCG(seed, 0))
	start := time.Now()
	var total chaosKills
	for i := range rounds {
		fault := chaosFaults[i%len(chaosFaults)]
		roundSeed := rng.Uint64()
		t.Run(fmt.Sprintf("round%02d-%s", i, fault), func(t *testing.T) {
			c := newChaosRound(t, fault, roundSeed)
			c.run()
			total.add(c.kills)
		})
	}
	t.Logf("%d rounds in %s: %d daemon kills, %d client kills, %d agent kills, %d sessions and %d containers reaped",
		rounds, time.Since(start).Round(time.Millisecond), total.daemon, total.client, total.agent, total.sessionsReaped, total.containersReaped)
}

type chaosKills struct {
	daemon, client, agent            int
	sessionsReaped, containersReaped int
}

func (k *chaosKills) add(o chaosKills) {
	k.daemon += o.daemon
	k.client += o.client
	k.agent += o.agent
	k.sessionsReaped += o.sessionsReaped
	k.containersReaped += o.containersReaped
}

// chaosRound is one round on its own state root and audit log.
type chaosRound struct {
	t      *testing.T
	r      *wardenRoot
	fault  string
	rng    *rand.Rand // drawn from before the round's goroutines start
	policy string
	ws     string
	ids    []string // the sessions the workload creates
	kills  chaosKills

	mu     sync.Mutex
	start  time.Time
	step   string            // the workload's call under way
	steps  int               // calls made so far
	began  time.Time         // when the call under way began
	netns  map[string]uint64 // net:[N] of the root's sandboxes, as sampled: their cookies
	pooled map[string]bool   // the pool's container ids, as sampled
	killed map[string]bool   // containers whose agent was killed
}

func newChaosRound(t *testing.T, fault string, seed uint64) *chaosRound {
	r := newRoot(t)
	c := &chaosRound{t: t, r: r, fault: fault, rng: rand.New(rand.NewPCG(seed, 1)),
		policy: r.policy(chaosPolicy), ws: workspace(t, 1000),
		netns: map[string]uint64{}, pooled: map[string]bool{}, killed: map[string]bool{}}
	for _, name := range []string{"a", "b", "c", "d"} {
		c.ids = append(c.ids, r.id("chaos-"+name))
	}
	return c
}

// chaosSteps is the number of CLI calls of the workload (see workload).
const chaosSteps = 15

// chaosKill is when a daemon kill comes: a moment of the round, or a
// moment after the workload's call number step began (so short calls such
// as rm are hit as often as creates).
type chaosKill struct {
	step  int // -1: after counts from the round's start
	after time.Duration
}

func (k chaosKill) String() string {
	if k.step < 0 {
		return fmt.Sprintf("at %s", k.after)
	}
	return fmt.Sprintf("%s into call %d", k.after, k.step)
}

func (c *chaosRound) run() {
	t := c.t
	var plan []chaosKill
	for n := 1 + c.rng.IntN(3); n > 0; n-- {
		if c.rng.IntN(2) == 0 {
			plan = append(plan, chaosKill{-1, time.Duration(c.rng.Int64N(int64(chaosSpan)))})
		} else {
			plan = append(plan, chaosKill{c.rng.IntN(chaosSteps), time.Duration(c.rng.Int64N(int64(150 * time.Millisecond)))})
		}
	}
	agentAt := time.Duration(c.rng.Int64N(int64(chaosSpan)))
	agentPick := c.rng.Uint()
	clientAfter := time.Duration(20+c.rng.IntN(400)) * time.Millisecond
	t.Logf("daemon kills %v; fault %s", plan, c.fault)

	c.start = time.Now()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); c.sample(done) }()
	go func() { defer wg.Done(); c.killDaemons(plan, done) }()
	if c.fault == "agent" {
		wg.Add(1)
		go func() { defer wg.Done(); c.killAgent(agentAt, agentPick, done) }()
	}
	func() {
		defer close(done)
		c.workload(clientAfter)
		c.setStep("none (the workload ended)")
	}()
	took := time.Since(c.start)
	wg.Wait()
	t.Logf("workload took %s; %d daemon kills", took.Round(time.Millisecond), c.kills.daemon)
	if c.kills.daemon == 0 {
		t.Errorf("no daemon was killed during the round")
	}
	if c.steps < chaosSteps {
		t.Errorf("the workload made %d calls; chaosSteps says %d", c.steps, chaosSteps)
	}
	c.recover()
	c.stopDaemon()
	c.checkLeftovers()
}

// try runs one CLI call of the workload; a call cut off by a kill fails,
// and that is the point: only a call that hangs fails the round.
func (c *chaosRound) try(args ...string) {
	var words []string // the call without its paths, for the log
	for _, a := range args {
		if !strings.Contains(a, "/") && a != "--policy" && a != "--workspace" {
			words = append(words, a)
		}
	}
	c.setStep(strings.Join(words, " "))
	res := c.r.within(20*time.Second, args...)
	if res.Exit != 0 {
		c.t.Logf("%s: exit %d: %s", strings.Join(args, " "), res.Exit, strings.TrimSpace(res.Stderr))
	}
}

// workload is one user's traffic: a cold session with commands, a pool
// filled and claimed (each claim starts a refill), removals, the pool
// drained and filled again. Its calls are chaosSteps.
func (c *chaosRound) workload(clientAfter time.Duration) {
	a, b, cc, d := c.ids[0], c.ids[1], c.ids[2], c.ids[3]
	create := func(id string) {
		c.try("session", "create", "--policy", c.policy, "--workspace", c.ws, "--id", id)
	}
	create(a)
	c.try("exec", "--session", a, "--", "sh", "-c", "echo one >> /workspace/a")
	c.try("exec", "--session", a, "--", "cat", "/workspace/a")
	if c.fault == "client" {
		c.killClient(a, clientAfter)
	}
	c.try("pool", "fill", "--policy", c.policy, "--size", "2")
	create(b)
	create(cc)
	c.try("exec", "--session", b, "--", "sh", "-c", "echo b > /workspace/b")
	c.try("exec", "--session", cc, "--", "true")
	c.try("session", "rm", a)
	create(d)
	c.try("exec", "--session", d, "--", "echo", "d")
	c.try("session", "rm", b, cc)
	c.try("pool", "drain")
	c.try("pool", "fill", "--policy", c.policy, "--size", "2")
	c.try("session", "rm", d)
}

// setStep says which call of the workload is under way.
func (c *chaosRound) setStep(step string) {
	c.mu.Lock()
	c.step, c.began = step, time.Now()
	c.steps++
	c.mu.Unlock()
}

// killClient starts a command in a session and kills -9 its `warden
// exec` after the given time: while the command runs, or while the daemon
// takes it.
func (c *chaosRound) killClient(id string, after time.Duration) {
	c.setStep("exec (its client to be killed)")
	kills := c.daemonKills()
	cmd := c.r.command("exec", "--session", id, "--", "sh", "-c", "echo started > /workspace/client; sleep 5")
	if err := cmd.Start(); err != nil {
		c.t.Errorf("warden exec: %v", err)
		return
	}
	time.Sleep(after)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	c.kills.client++
	_, err := os.Stat(filepath.Join(c.ws, "client"))
	c.t.Logf("killed the client of session %s after %s (its command started: %v)", id, after, err == nil)
	// The daemon that ran the command sees its client gone and kills it.
	// (A command whose daemon was killed runs on in the re-adopted
	// session until it ends or the session is removed.)
	sleeping := func() []int { // by comm: the agent's command line names sleep too
		var pids []int
		for _, pid := range cgroupProcesses(id) {
			if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); string(comm) == "sleep\n" {
				pids = append(pids, pid)
			}
		}
		return pids
	}
	killed := time.Now()
	for deadline := killed.Add(3 * time.Second); len(sleeping()) > 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			if c.daemonKills() == kills {
				c.t.Errorf("the command of the killed client still runs 3s later: %v", sleeping())
			}
			return
		}
	}
	c.t.Logf("no command of the killed client runs %s after", time.Since(killed).Round(time.Millisecond))
}

func (c *chaosRound) daemonKills() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kills.daemon
}

// killDaemons kills -9 the root's daemon as its plan says; when none runs
// at that moment, the next that starts. Once the workload has ended, the
// round's first kill still comes (an idle daemon's), the others do not.
func (c *chaosRound) killDaemons(plan []chaosKill, done chan struct{}) {
	due := func(k chaosKill) bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if k.step < 0 {
			return time.Since(c.start) >= k.after
		}
		return c.steps > k.step && time.Since(c.began) >= k.after || c.steps > k.step+1
	}
	for _, k := range plan {
		for {
			ended := false
			select {
			case <-done:
				ended = true
			case <-time.After(time.Millisecond):
			}
			if ended && c.kills.daemon > 0 {
				return
			}
			if !ended && !due(k) {
				continue
			}
			if pids := c.r.daemonPids(); len(pids) > 0 {
				for _, pid := range pids {
					syscall.Kill(pid, syscall.SIGKILL)
				}
				c.mu.Lock()
				step := c.step
				c.mu.Unlock()
				c.waitDead(pids)
				c.mu.Lock()
				c.kills.daemon++
				c.mu.Unlock()
				c.t.Logf("killed the daemon %v (plan: %s) at %s, during %s", pids, k, time.Since(c.start).Round(time.Millisecond), step)
				break
			}
			if ended {
				return // no daemon to kill: "no daemon was killed" says so
			}
		}
	}
}

// waitDead waits until killed processes hold nothing (see running).
func (c *chaosRound) waitDead(pids []int) {
	for deadline := time.Now().Add(10 * time.Second); len(running(pids)) > 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			c.t.Errorf("processes %v still run 10s after kill -9", running(pids))
			return
		}
	}
}

// killAgent kills -9 the agent (PID 1) of one of the root's sandboxes,
// session's or pool's, at the given moment or as soon after as one runs
// (the pool's outlive the workload).
func (c *chaosRound) killAgent(at time.Duration, pick uint, done chan struct{}) {
	ended := false
	select {
	case <-done:
		ended = true
	case <-time.After(at):
	}
	for {
		if agents := c.agents(); len(agents) > 0 {
			ids := slices.Sorted(maps.Keys(agents))
			id := ids[pick%uint(len(ids))]
			if syscall.Kill(agents[id], syscall.SIGKILL) == nil {
				c.mu.Lock()
				c.killed[id] = true
				c.mu.Unlock()
				c.kills.agent++
				c.t.Logf("killed the agent %d of container %s", agents[id], id)
				return
			}
		}
		if ended {
			return
		}
		select {
		case <-done:
			ended = true
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// agents maps the root's containers to their running agents: their init
// pids, still in the root's cgroups.
func (c *chaosRound) agents() map[string]int {
	states, _ := filepath.Glob(filepath.Join(c.r.root, "containers", "*", "state.json"))
	pids := map[string]int{}
	for _, s := range states {
		data, err := os.ReadFile(s)
		var st struct {
			Pid int `json:"init_process_pid"`
		}
		if err != nil || json.Unmarshal(data, &st) != nil || st.Pid <= 0 {
			continue
		}
		if cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", st.Pid)); err == nil && strings.Contains(string(cg), "/warden/"+c.tag()+"/") {
			pids[filepath.Base(filepath.Dir(s))] = st.Pid
		}
	}
	return pids
}

// tag is the folder naming the root's cgroups under warden's parent.
func (c *chaosRound) tag() string {
	return filepath.Base(filepath.Dir(c.r.cgroup("pids", "x")))
}

// sample records, until done, the network namespaces of the processes in
// the root's cgroups and the pool's containers, for the checks at the end.
func (c *chaosRound) sample(done chan struct{}) {
	host := map[string]bool{}
	for _, p := range []string{"/proc/1/ns/net", "/proc/self/ns/net"} {
		if ns, err := os.Readlink(p); err == nil {
			host[ns] = true
		}
	}
	for {
		dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/pids/warden", c.tag(), "*"))
		for _, d := range dirs {
			procs, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			for _, pid := range strings.Fields(string(procs)) {
				path := "/proc/" + pid + "/ns/net"
				ns, err := os.Readlink(path)
				c.mu.Lock()
				_, seen := c.netns[ns]
				c.mu.Unlock()
				if err != nil || host[ns] || seen {
					continue
				}
				if cookie, err := netnsCookie(path); err == nil {
					c.mu.Lock()
					c.netns[ns] = cookie
					c.mu.Unlock()
				}
			}
		}
		entries, _ := os.ReadDir(filepath.Join(c.r.root, "pool"))
		c.mu.Lock()
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "pool-") {
				c.pooled[e.Name()] = true
			}
		}
		c.mu.Unlock()
		select {
		case <-done:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// recover lets a new daemon adopt or reap what the kills left, checks the
// sessions it serves work (but those whose agent was killed), and removes
// them and the pool through the CLI.
func (c *chaosRound) recover() {
	t := c.t
	res := c.r.within(20*time.Second, "session", "ls", "--format", "json")
	if res.Exit != 0 {
		t.Fatalf("session ls after the kills: exit %d, %s", res.Exit, res.Stderr)
	}
	var live []sessionInfo
	if err := json.Unmarshal([]byte(res.Stdout), &live); err != nil {
		t.Fatalf("session ls --format json: %v\n%s", err, res.Stdout)
	}
	for _, s := range live {
		if !slices.Contains(c.ids, s.ID) {
			t.Errorf("session ls lists %s, which the round never created", s.ID)
		}
		container := s.ID
		if data, err := os.ReadFile(filepath.Join(c.r.root, "sessions", s.ID, "session.json")); err == nil {
			var st struct {
				Container string `json:"container"`
			}
			if json.Unmarshal(data, &st) == nil && st.Container != "" {
				container = st.Container
			}
		}
		c.mu.Lock()
		agentKilled := c.killed[container]
		c.mu.Unlock()
		res := c.r.within(20*time.Second, "exec", "--session", s.ID, "--", "true")
		switch {
		case agentKilled:
			t.Logf("session %s, whose agent was killed: %s; exec: exit %d, %s", s.ID, s.State, res.Exit, strings.TrimSpace(res.Stderr))
		case s.State != "running":
			t.Errorf("session %s is %s after the restart, yet its agent was not killed", s.ID, s.State)
		case res.Exit != 0:
			t.Errorf("session %s, re-adopted as running, does not run commands: exit %d, %s", s.ID, res.Exit, res.Stderr)
		}
		if res := c.r.within(20*time.Second, "session", "rm", "--force", s.ID); res.Exit != 0 {
			t.Errorf("session rm --force %s: exit %d, %s", s.ID, res.Exit, res.Stderr)
		}
	}
	if res := c.r.within(20*time.Second, "pool", "drain"); res.Exit != 0 {
		t.Errorf("pool drain: exit %d, %s", res.Exit, res.Stderr)
	}
	t.Logf("after the kills: %d sessions live", len(live))
}

// stopDaemon stops the root's daemon as a user would (SIGTERM) and waits
// until nothing naming the root runs.
func (c *chaosRound) stopDaemon() {
	pids := c.r.daemonPids()
	if len(pids) != 1 {
		c.t.Errorf("want one daemon of the root after the round, found %v", pids)
	}
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGTERM)
	}
	c.waitDead(pids)
	c.r.waitGone(c.r.processes, "processes naming "+c.r.root)
}

// checkLeftovers checks, without a gc, that nothing of the round is left.
func (c *chaosRound) checkLeftovers() {
	t := c.t
	root := c.r.root

	// State: only what a stopped daemon keeps.
	kept := map[string]bool{"audit.log": true, "daemon.log": true, "programs.json": true,
		"containers": true, "sessions": true, "pool": true, "pool/pools.json": true, "pool/.empty": true}
	filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
		rel, _ := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return nil
		}
		if !kept[rel] {
			t.Errorf("left under the root: %s", rel)
		}
		if e.IsDir() && (!kept[rel] || rel == "pool/.empty") {
			return filepath.SkipDir // named once, with what it holds
		}
		return nil
	})
	if entries, _ := os.ReadDir(filepath.Join(root, "pool", ".empty")); len(entries) > 0 {
		t.Errorf("the pool's placeholder folder is not empty: %d entries", len(entries))
	}

	// Cgroups: the root's own folder (made and removed by the daemon) in
	// every hierarchy, and the older layout's folders of the round's ids.
	cgroups, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*/warden", c.tag()))
	more, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/warden", c.tag()))
	cgroups = append(cgroups, more...)
	c.mu.Lock()
	ids := slices.Clone(c.ids)
	for id := range c.pooled {
		ids = append(ids, id)
	}
	c.mu.Unlock()
	for _, id := range ids {
		old, _ := filepath.Glob("/sys/fs/cgroup/*/warden/" + id)
		cgroups = append(cgroups, old...)
	}
	if len(cgroups) > 0 {
		t.Errorf("cgroups left: %v (below them: %v)", cgroups, c.r.cgroupsOfRoot())
	}

	// Mounts naming the root, in the host's mount namespace.
	mountinfo, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mountinfo), "\n") {
		if strings.Contains(line, root) {
			t.Errorf("mount left: %s", line)
		}
	}

	// Processes: in the root's cgroups, or naming the root by their
	// command line, working folder, binary or root folder.
	for _, pid := range c.processes() {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		t.Errorf("process %d of the root left: %q", pid, bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
	}

	// Network namespaces of the round's sandboxes: held by no process or
	// thread, descriptor or mount.
	c.mu.Lock()
	netns := maps.Clone(c.netns)
	c.mu.Unlock()
	if len(netns) == 0 {
		t.Errorf("no network namespace of a sandbox was seen during the round: the check of them would prove nothing")
	}
	for _, holder := range netnsHolders(netns) {
		t.Errorf("network namespace left: %s", holder)
	}

	// A daemon that died by itself, not by the round's kills.
	if log, _ := os.ReadFile(filepath.Join(root, "daemon.log")); bytes.Contains(log, []byte("panic:")) || bytes.Contains(log, []byte("fatal error:")) {
		t.Errorf("the daemon's log shows a crash:\n%s", log)
	}

	// The audit log: whole JSON lines, and the reaps the kills caused.
	audit := filepath.Join(root, "audit.log")
	checkAuditLines(t, audit)
	data, _ := os.ReadFile(audit)
	if len(data) == 0 {
		t.Errorf("the audit log is empty")
	}
	for _, line := range strings.Split(string(data), "\n") {
		var rec struct {
			Event string `json:"event"`
		}
		json.Unmarshal([]byte(line), &rec)
		switch rec.Event {
		case "session.reap":
			c.kills.sessionsReaped++
		case "container.reap", "pool.reap":
			c.kills.containersReaped++
		}
	}
	t.Logf("checked %d sandbox network namespaces; %d sessions and %d containers reaped", len(netns), c.kills.sessionsReaped, c.kills.containersReaped)
}

// processes lists the host processes of the root: in its cgroups, or
// whose command line, working folder, binary or root folder names it.
func (c *chaosRound) processes() []int {
	root := c.r.root
	under := func(p string) bool { return p == root || strings.HasPrefix(p, root+"/") }
	var out []int
	for _, pid := range hostPIDs() {
		if pid == os.Getpid() {
			continue
		}
		proc := fmt.Sprintf("/proc/%d/", pid)
		mine := false
		if cg, err := os.ReadFile(proc + "cgroup"); err == nil && strings.Contains(string(cg), "/warden/"+c.tag()+"/") {
			mine = true
		}
		cmdline, _ := os.ReadFile(proc + "cmdline")
		for _, arg := range bytes.Split(cmdline, []byte{0}) {
			mine = mine || under(string(arg))
		}
		for _, link := range []string{"cwd", "exe", "root"} {
			if target, err := os.Readlink(proc + link); err == nil {
				mine = mine || under(strings.TrimSuffix(target, " (deleted)"))
			}
		}
		if mine && len(running([]int{pid})) > 0 {
			out = append(out, pid)
		}
	}
	return out
}

// netnsHolders says what on the host still holds any of the given
// network namespaces: a thread in it, a descriptor to it, or a mount of it
// (nsfs). Namespaces are told apart by their cookies, as their inode
// numbers are handed out again as soon as they are freed.
func netnsHolders(netns map[string]uint64) []string {
	var out []string
	hold := func(link, what string) {
		ns, err := os.Readlink(link)
		if err != nil {
			return
		}
		if want, ok := netns[ns]; ok {
			if cookie, err := netnsCookie(link); err == nil && cookie == want {
				out = append(out, ns+": "+what)
			}
		}
	}
	for _, pid := range hostPIDs() {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/ns/net", pid))
		for _, task := range tasks {
			hold(task, "thread "+filepath.Base(filepath.Dir(filepath.Dir(task))))
		}
		fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
		for _, fd := range fds {
			hold(fd, "descriptor "+fd)
		}
	}
	mountinfo, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mountinfo), "\n") {
		if f := strings.Fields(line); len(f) > 4 {
			if want, ok := netns[f[3]]; ok {
				if cookie, err := netnsCookie(f[4]); err == nil && cookie == want {
					out = append(out, f[3]+": mount "+f[4])
				}
			}
		}
	}
	return out
}

// soNetnsCookie is SO_NETNS_COOKIE (asm-generic/socket.h, Linux 5.14).
const soNetnsCookie = 71

// netnsCookie is the kernel's cookie of the network namespace at path
// (a /proc ns link, a descriptor or an nsfs mount), never reused: it is
// read from a socket made inside the namespace, on a thread that never
// leaves it and ends with its goroutine.
func netnsCookie(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	type answer struct {
		cookie uint64
		err    error
	}
	ch := make(chan answer, 1)
	go func() {
		goruntime.LockOSThread() // never unlocked: the thread dies in the namespace
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- answer{err: err}
			return
		}
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			ch <- answer{err: err}
			return
		}
		cookie, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, soNetnsCookie)
		unix.Close(fd)
		ch <- answer{cookie, err}
	}()
	a := <-ch
	return a.cookie, a.err
}
