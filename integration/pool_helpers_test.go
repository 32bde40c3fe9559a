package integration

import (
	"bytes"
	"encoding/json"
	"github.com/warden-sandbox/warden/runtime/daemon"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// poolInfo is a pool's line of `pool status --format json`.
type poolInfo = daemon.PoolInfo

func (r *wardenRoot) poolStatus() []poolInfo {
	r.t.Helper()
	res := r.warden("pool", "status", "--format", "json")
	if res.Exit != 0 {
		r.t.Fatalf("pool status: exit %d: %s", res.Exit, res.Stderr)
	}
	var out []poolInfo
	if err := json.Unmarshal([]byte(res.Stdout), &out); err != nil {
		r.t.Fatalf("pool status --format json: %v\n%s", err, res.Stdout)
	}
	return out
}

func (r *wardenRoot) fill(policyFile string, size int) {
	r.t.Helper()
	if res := r.warden("pool", "fill", "--policy", policyFile, "--size", strconv.Itoa(size)); res.Exit != 0 {
		r.t.Fatalf("pool fill: exit %d: %s", res.Exit, res.Stderr)
	}
}

// waitPool waits until the only pool holds n ready containers and starts
// no more, and returns its status.
func (r *wardenRoot) waitPool(n int) poolInfo {
	r.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		st := r.poolStatus()
		if len(st) == 1 && st[0].Ready == n && st[0].Refilling == 0 {
			return st[0]
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("pool never reached %d ready containers: %+v", n, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pooledIDs lists the containers in the root's pool folder.
func (r *wardenRoot) pooledIDs() []string {
	entries, _ := os.ReadDir(filepath.Join(r.root, "pool"))
	var ids []string
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), "pool-") {
			ids = append(ids, e.Name())
		}
	}
	sort.Strings(ids)
	return ids
}

// container is the libcontainer id behind a session: its own, or the pooled
// container's it claimed.
func (r *wardenRoot) container(id string) string {
	r.t.Helper()
	data, err := os.ReadFile(filepath.Join(r.root, "sessions", id, "session.json"))
	if err != nil {
		r.t.Fatalf("session %s: %v", id, err)
	}
	var s struct {
		Container string `json:"container"`
	}
	json.Unmarshal(data, &s)
	if s.Container == "" {
		return id
	}
	return s.Container
}

// cgroupsOfRoot lists the cgroup folders of the root's containers in every
// hierarchy.
func (r *wardenRoot) cgroupsOfRoot() []string {
	tag := filepath.Base(filepath.Dir(r.cgroup("memory", "x")))
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*/warden/" + tag + "/*")
	var out []string
	for _, d := range dirs {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			out = append(out, d)
		}
	}
	return out
}

// assertNoPool checks no pooled container, cgroup, container state (runsc's
// too), mount under the root or runsc process of the root is left.
func (r *wardenRoot) assertNoPool() {
	r.t.Helper()
	if ids := r.pooledIDs(); len(ids) > 0 {
		r.t.Errorf("pooled containers left: %v", ids)
	}
	if cg := r.cgroupsOfRoot(); len(cg) > 0 {
		r.t.Errorf("cgroups left: %v", cg)
	}
	entries, _ := os.ReadDir(filepath.Join(r.root, "containers"))
	if len(entries) > 0 {
		r.t.Errorf("container state left: %d entries", len(entries))
	}
	if state, _ := filepath.Glob(filepath.Join(r.root, "runsc", "*.*")); len(state) > 0 {
		r.t.Errorf("runsc state left: %v", state)
	}
	mountinfo, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mountinfo), "\n") {
		if strings.Contains(line, " "+r.root+"/") {
			r.t.Errorf("mount left: %s", line)
		}
	}
	for _, pid := range hostPIDs() {
		if cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline")); err == nil && bytes.Contains(cmdline, []byte(r.root+"/runsc")) {
			r.t.Errorf("runsc process %d left: %s", pid, bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
		}
	}
}

var (
	mountIDs   = regexp.MustCompile(`^\d+ \d+ `)
	anonDev    = regexp.MustCompile(`^0:\d+ `) // each container's own proc, tmpfs, devpts
	statePaths = regexp.MustCompile(`/(sessions|pool)/[^/ ]+/(bundle|late)/`)
	peerGroups = regexp.MustCompile(`(shared|master|propagate_from):\d+`)
	// gVisor's: the descriptor of each gofer mount, and the root of a
	// folder a pooled agent bound from its staging folder (its own path).
	goferFDs  = regexp.MustCompile(`rfdno=\d+,wfdno=\d+`)
	boundRoot = regexp.MustCompile(`^(0:N )(/\S*) (\S+) (.* - 9p .*)$`)
)

// normalMountinfo is a sandbox's /proc/self/mountinfo without what names
// one container: mount ids, the session's state folder, peer group numbers,
// the numbers of its own anonymous file systems, the order in which the
// mounts were made.
func normalMountinfo(text, sessionDir string) []string {
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		line = mountIDs.ReplaceAllString(line, "")
		line = anonDev.ReplaceAllString(line, "0:N ")
		line = statePaths.ReplaceAllString(line, "/STATE/")
		line = regexp.MustCompile(`/STATE/masks/\d+`).ReplaceAllString(line, "/STATE/masks/N")
		line = peerGroups.ReplaceAllString(line, "$1:N")
		line = goferFDs.ReplaceAllString(line, "rfdno=N,wfdno=N")
		if m := boundRoot.FindStringSubmatch(line); m != nil && m[2] == m[3] {
			line = m[1] + "/ " + m[3] + " " + m[4]
		}
		out = append(out, line)
	}
	sort.Strings(out)
	return out
}

// leaks counts what a root's sessions hold on the host.
type leaks struct {
	Mounts, Cgroups, Netns, Processes, Zombies, DaemonFDs, StateFiles int
}

func leakCounts(r *wardenRoot) leaks {
	var l leaks
	data, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, r.root) {
			l.Mounts++
		}
	}
	cgroups := r.cgroupsOfRoot()
	l.Cgroups = len(cgroups)
	netns := map[string]bool{}
	for _, d := range cgroups {
		if !strings.Contains(d, "/memory/") {
			continue
		}
		procs, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		for _, pid := range strings.Fields(string(procs)) {
			l.Processes++
			if ns, err := os.Readlink("/proc/" + pid + "/ns/net"); err == nil {
				netns[ns] = true
			}
		}
	}
	l.Netns = len(netns)
	l.Zombies = len(r.zombies())
	// The fewest descriptors over a moment: a connection of the caller's
	// last request may still be closing.
	l.DaemonFDs = -1
	for i := 0; i < 10; i++ {
		n := 0
		for _, pid := range r.processes() {
			fds, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
			n += len(fds)
		}
		if l.DaemonFDs < 0 || n < l.DaemonFDs {
			l.DaemonFDs = n
		}
		time.Sleep(20 * time.Millisecond)
	}
	filepath.WalkDir(r.root, func(p string, d os.DirEntry, err error) error {
		if err == nil {
			l.StateFiles++
		}
		return nil
	})
	return l
}

// zombies lists the processes that died as children of the root's own
// (the daemon's sandbox inits) and that nobody has reaped.
func (r *wardenRoot) zombies() []int {
	parents := map[int]bool{}
	for _, pid := range r.processes() {
		parents[pid] = true
	}
	var out []int
	for _, pid := range hostPIDs() {
		stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) < 2 || f[0] != "Z" {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil && parents[ppid] {
			out = append(out, pid)
		}
	}
	return out
}

// fdSlack allows for the descriptors of the last cold starts that
// libcontainer leaves for the garbage collector to close (its init
// process's pidfd and pipe): bounded, never one per cycle, so a real leak
// over the churn's hundreds of cycles still shows.
const fdSlack = 4

// leaked says what grew between two counts.
func (before leaks) leaked(after leaks) bool {
	fds := after.DaemonFDs > before.DaemonFDs+fdSlack
	before.DaemonFDs, after.DaemonFDs = 0, 0
	return fds || before != after
}
