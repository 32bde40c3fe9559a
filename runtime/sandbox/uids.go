package sandbox

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/spec"
)

// Every sandbox runs as a host uid and gid of its own, from a range, in a
// user namespace that uid owns. The kernel keeps some counters per host
// user (pipe buffer pages, epoll watches) and others per user namespace
// charged to the owner at every level up to the host's (pending signals,
// message queue bytes, inotify instances and watches, user namespaces):
// with one shared uid and root-owned namespaces, one sandbox could use up
// host root's allowance and every other session's. A lease is a file
// ROOT/uids/UID naming its container, made with O_EXCL so concurrent
// creates (the daemon, warden do, Go programs) never share a uid, and
// kept across daemon restarts; it is freed with its container, by gc, or
// by a restarted daemon when no sandbox owns it (reapOrphans).
const (
	uidFirst = 3_000_001
	uidCount = 65_536
)

// SandboxUIDs is the range sessions' uids come from, for messages.
var SandboxUIDs = fmt.Sprintf("%d-%d", uidFirst, uidFirst+uidCount-1)

func (rt *Runtime) uidsDir() string { return filepath.Join(rt.Root, "uids") }

// leaseIdentity takes a free uid (the same number as gid) for the
// container owner. The lease file comes back locked: gc leaves a locked
// lease alone, so the caller keeps it open until the container's folder
// exists (it then owns the lease) and closes it.
func (rt *Runtime) leaseIdentity(owner string) (spec.Identity, *os.File, error) {
	if err := MakeStateDir(rt.uidsDir()); err != nil {
		return spec.Identity{}, nil, fmt.Errorf("state root: %w", err)
	}
	// A random start: another state root on the same host (its leases are
	// its own) rarely picks the same uid.
	start := rand.IntN(uidCount)
	for i := range uidCount {
		uid := uint32(uidFirst + (start+i)%uidCount)
		f, err := os.OpenFile(rt.leasePath(uid), os.O_CREATE|os.O_EXCL|os.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return spec.Identity{}, nil, fmt.Errorf("uid lease: %w", err)
		}
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if err == nil && !namesFile(f) {
			// Freed before it was locked (GCLeases frees a lease not yet
			// naming its owner when it is not locked): take another uid.
			f.Close()
			continue
		}
		if err == nil {
			_, err = f.WriteString(owner)
		}
		if err != nil {
			f.Close()
			os.Remove(f.Name())
			return spec.Identity{}, nil, fmt.Errorf("uid lease: %w", err)
		}
		return spec.Identity{UID: uid, GID: uid}, f, nil
	}
	return spec.Identity{}, nil, fmt.Errorf("all %d sandbox uids (%d-%d) are leased in %s; remove sessions or run warden gc", uidCount, uidFirst, uidFirst+uidCount-1, rt.uidsDir())
}

func (rt *Runtime) leasePath(uid uint32) string {
	return filepath.Join(rt.uidsDir(), strconv.FormatUint(uint64(uid), 10))
}

// releaseIdentity frees uid if owner holds it.
func (rt *Runtime) releaseIdentity(owner string, uid uint32) {
	idmapUsernses.forget(uid)
	if data, err := os.ReadFile(rt.leasePath(uid)); err == nil && string(data) == owner {
		os.Remove(rt.leasePath(uid))
	}
}

// leases lists the uid leases and their owners.
func (rt *Runtime) leases() map[uint32]string {
	out := map[uint32]string{}
	entries, _ := os.ReadDir(rt.uidsDir())
	for _, e := range entries {
		uid, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil || !e.Type().IsRegular() {
			continue
		}
		if data, err := os.ReadFile(filepath.Join(rt.uidsDir(), e.Name())); err == nil {
			out[uint32(uid)] = string(data)
		}
	}
	return out
}

// releaseOwned frees every uid the container id holds; called once its
// processes are gone, so no process of a new owner shares counters with
// one of the old.
func (rt *Runtime) releaseOwned(id string) {
	for uid, owner := range rt.leases() {
		if owner == id {
			os.Remove(rt.leasePath(uid))
		}
	}
}

// GCLeases frees the leases whose container is gone: no session or pool
// folder, no libcontainer state, not live, and not locked by a create
// under way. A lease that names no owner is one whose creator died
// (kill -9) between making it and naming its owner: once it is not
// locked, nothing owns it. The owner is read under the lock, as a create
// writes it under the lock and keeps it until its folder exists.
func (rt *Runtime) GCLeases(live map[string]bool) []string {
	var removed []string
	entries, _ := os.ReadDir(rt.uidsDir())
	for _, e := range entries {
		uid, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil || !e.Type().IsRegular() {
			continue
		}
		path := rt.leasePath(uint32(uid))
		f, err := os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
		if err != nil {
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil && namesFile(f) {
			data, err := io.ReadAll(io.LimitReader(f, 4096))
			owner := string(data)
			if err == nil && !live[owner] && (owner == "" || CheckID(owner) == nil && !rt.ownerPresent(owner)) {
				if os.Remove(path) == nil {
					removed = append(removed, fmt.Sprintf("uid %d (%s)", uid, cmp.Or(owner, "no owner named")))
				}
			}
		}
		f.Close()
	}
	return removed
}

// ownerPresent reports whether a lease's owner has a session or pool
// folder or libcontainer state.
func (rt *Runtime) ownerPresent(owner string) bool {
	for _, dir := range []string{rt.SessionDir(owner), filepath.Join(rt.PoolDir(), owner), filepath.Join(rt.containersDir(), owner)} {
		if _, err := os.Lstat(dir); err == nil {
			return true
		}
	}
	return false
}

// namesFile reports whether f's path still names f: a lease removed (and
// perhaps made again) since f was opened is another lease.
func namesFile(f *os.File) bool {
	var fst, st unix.Stat_t
	return unix.Fstat(int(f.Fd()), &fst) == nil && unix.Lstat(f.Name(), &st) == nil && fst.Dev == st.Dev && fst.Ino == st.Ino
}

// usernsOwner is a process (runtime/agent/usernsowner.c) holding a user
// namespace owned by the sandbox's uid, mapped as the spec says, for the
// sandbox's init to join.
type usernsOwner struct {
	proc  *os.Process
	stdin *os.File
}

// startUsernsOwner makes the user namespace of a spec's single uid and
// gid mapping, owned by that host uid.
func startUsernsOwner(binary string, sp *specs.Spec) (*usernsOwner, error) {
	uids, gids := sp.Linux.UIDMappings, sp.Linux.GIDMappings
	if len(uids) != 1 || len(gids) != 1 {
		return nil, fmt.Errorf("user namespace: want one uid and one gid mapping, have %v %v", uids, gids)
	}
	uid, gid := uids[0].HostID, gids[0].HostID
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	// The warden binary, not /proc/self/exe: a Go program using the
	// runtime package is another program.
	p, err := os.StartProcess(binary, []string{"warden-userns-owner", strconv.FormatUint(uint64(uid), 10), strconv.FormatUint(uint64(gid), 10)},
		&os.ProcAttr{Files: []*os.File{inR, outW, nil}, Sys: &unix.SysProcAttr{Pdeathsig: unix.SIGKILL}})
	inR.Close()
	outW.Close()
	defer outR.Close()
	if err != nil {
		inW.Close()
		return nil, fmt.Errorf("user namespace: %w", err)
	}
	o := &usernsOwner{proc: p, stdin: inW}
	var b [1]byte
	outR.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(outR, b[:]); err != nil {
		o.proc.Kill()
		st, _ := o.stop()
		return nil, fmt.Errorf("user namespace owned by uid %d: the helper failed (%v)", uid, st)
	}
	maps := map[string]string{"uid_map": fmt.Sprintf("%d %d %d\n", uids[0].ContainerID, uid, uids[0].Size),
		"gid_map": fmt.Sprintf("%d %d %d\n", gids[0].ContainerID, gid, gids[0].Size)}
	for _, name := range []string{"uid_map", "gid_map"} {
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/%s", p.Pid, name), []byte(maps[name]), 0); err != nil {
			o.stop()
			return nil, fmt.Errorf("user namespace: %s: %w", name, err)
		}
	}
	return o, nil
}

// path names the namespace while the owner runs.
func (o *usernsOwner) path() string { return fmt.Sprintf("/proc/%d/ns/user", o.proc.Pid) }

// stop ends the owner process; the namespace lives on in the sandbox.
func (o *usernsOwner) stop() (*os.ProcessState, error) {
	o.stdin.Close()
	return o.proc.Wait()
}

// inOwnedUserns is sp with its user namespace joined from the owner
// instead of made by the engine (as root, which would own it).
func inOwnedUserns(sp *specs.Spec, o *usernsOwner) *specs.Spec {
	out, lin := *sp, *sp.Linux
	lin.UIDMappings, lin.GIDMappings = nil, nil
	lin.Namespaces = nil
	for _, ns := range sp.Linux.Namespaces {
		if ns.Type == specs.UserNamespace {
			ns.Path = o.path()
		}
		lin.Namespaces = append(lin.Namespaces, ns)
	}
	out.Linux = &lin
	return &out
}
