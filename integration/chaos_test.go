package integration

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
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
	t.Logf("%d rounds in %s: %d daemon kills, %d client kills, %d agent kills, %d sessions and %d containers reaped, %d uid leases freed",
		rounds, time.Since(start).Round(time.Millisecond), total.daemon, total.client, total.agent, total.sessionsReaped, total.containersReaped, total.leasesFreed)
}

type chaosKills struct {
	daemon, client, agent            int
	sessionsReaped, containersReaped int
	leasesFreed                      int // by a restarted daemon: of creates a kill cut short
}

func (k *chaosKills) add(o chaosKills) {
	k.daemon += o.daemon
	k.client += o.client
	k.agent += o.agent
	k.sessionsReaped += o.sessionsReaped
	k.containersReaped += o.containersReaped
	k.leasesFreed += o.leasesFreed
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
	defer func() {
		if t.Failed() { // a Fatalf too
			// What the round's daemons said: their reaps and what failed.
			log, _ := os.ReadFile(filepath.Join(c.r.root, "daemon.log"))
			t.Logf("daemon.log of the round:\n%s", log)
		}
	}()

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
