package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// What a chaos round does once its kills are over: recover through the
// CLI, stop the daemon, and look for anything of the root left on the host.

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
		"containers": true, "sessions": true, "pool": true, "pool/pools.json": true, "pool/.empty": true,
		"uids": true} // uid leases: the folder stays, a lease left in it is reported
	filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
		rel, _ := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return nil
		}
		if !kept[rel] {
			what := ""
			if owner, err := os.ReadFile(p); err == nil && filepath.Dir(rel) == "uids" {
				what = fmt.Sprintf(" (a uid lease of %q)", owner)
			}
			t.Errorf("left under the root: %s%s", rel, what)
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
	log, _ := os.ReadFile(filepath.Join(root, "daemon.log"))
	c.kills.leasesFreed = bytes.Count(log, []byte("freed uid "))
	t.Logf("checked %d sandbox network namespaces; %d sessions and %d containers reaped, %d uid leases freed",
		len(netns), c.kills.sessionsReaped, c.kills.containersReaped, c.kills.leasesFreed)
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
