package sandbox

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/moby/sys/mountinfo"
	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/spec"
	"github.com/warden-sandbox/warden/spec/hostfs"
)

// A get-or-create request names a session's folders by path, as its
// caller sees them now; the session has the folders its paths named when
// it was created. Paths are a poor key both ways: a symlink on the path
// may point elsewhere since (the same text, another folder), and one
// folder has many spellings (a symlink, /tmp/x/../x). So folders are
// compared by identity (device and inode): the caller's path is resolved
// now, and the session's folder is the one its sandbox has mounted.

// sessionFolder is one of a session's folders: its path when the session
// was created, and inside where the sandbox shows it.
type sessionFolder struct {
	name, path, inside string
}

// folderMismatch compares a session's folder with the one a request names
// (want, an absolute path). It returns "" when they are the same folder,
// else the two descriptions for the refusal.
func (s *Session) folderMismatch(f sessionFolder, want string) (have, asks string) {
	if f.path == "" || want == "" {
		if f.path == want {
			return "", ""
		}
		return folderText(f.name, f.path), folderText(f.name, want)
	}
	mounted, inSandbox := s.mountedFolder(f.inside)
	haveID, ok := mounted, inSandbox
	if !ok {
		// The sandbox binds the folder only in parts or not at all (or
		// has stopped, and nothing will run): the folder its path names
		// now is the best there is.
		haveID, ok = hostfs.StatID(f.path)
	}
	wantID, wantOK := hostfs.StatID(want)
	switch {
	case ok && wantOK && haveID == wantID:
		return "", ""
	case !ok && !wantOK && f.path == want:
		return "", "" // neither can be found: the same text is all there is
	}
	have = folderText(f.name, f.path)
	if inSandbox {
		have = s.describeMounted(f, mounted)
	}
	asks = folderText(f.name, want)
	if !wantOK {
		asks += " (not found)"
	} else if real, err := filepath.EvalSymlinks(want); err == nil && real != want {
		asks += " (now " + real + ")"
	}
	return have, asks
}

// describeMounted names the folder a session has mounted: by its path at
// creation while that path still leads to it, else by where the host
// shows it now.
func (s *Session) describeMounted(f sessionFolder, id hostfs.FileID) string {
	if now, ok := hostfs.StatID(f.path); ok && now == id {
		return folderText(f.name, f.path)
	}
	if p := s.hostPathOf(f.inside, id); p != "" {
		return fmt.Sprintf("%s %s (created as %s)", f.name, p, f.path)
	}
	return fmt.Sprintf("%s %s (as it was at creation: the path leads elsewhere now)", f.name, f.path)
}

// agentRoot opens the root folder of the session's running sandbox. The
// init's pid could die and be reused between reading the state and the
// open, so the pid must still be that process (its start time) afterwards.
func (s *Session) agentRoot() (root, pid int, ok bool) {
	pid, start, ok := s.initProcess()
	if !ok {
		return -1, 0, false
	}
	root, err := unix.Open(fmt.Sprintf("/proc/%d/root", pid), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, 0, false
	}
	if now, err := ProcessStart(pid); err != nil || now != start {
		unix.Close(root)
		return -1, 0, false
	}
	return root, pid, true
}

// initProcess is the pid and start time of the sandbox's init, which
// never change while it runs: read from the engine's state once (a
// libcontainer State() costs ~0.1 ms, and CheckSame runs on every exec
// of a client that sends its policy along), then remembered.
func (s *Session) initProcess() (pid int, start uint64, ok bool) {
	if id := s.initID.Load(); id != nil {
		return id.pid, id.start, true
	}
	if s.container == nil {
		return 0, 0, false
	}
	pid, start, err := s.container.init()
	if err != nil || pid <= 0 {
		return 0, 0, false
	}
	s.initID.Store(&processID{pid, start})
	return pid, start, true
}

// processID names one process for good: a pid is reused, a pid with its
// start time is not.
type processID struct {
	pid   int
	start uint64
}

// mountedFolder is the identity of the folder a bind mount shows at
// inside in the session's sandbox; false when the sandbox has none there
// (the policy grants only parts of the folder, or none) or has stopped.
func (s *Session) mountedFolder(inside string) (hostfs.FileID, bool) {
	root, _, ok := s.agentRoot()
	if !ok {
		return hostfs.FileID{}, false
	}
	defer unix.Close(root)
	// Resolved inside the sandbox's root, following no symlink at all: a
	// path through a folder the sandbox can write (its /tmp) could
	// otherwise be made to end at another of its mounts.
	fd, err := unix.Openat2(root, inside, &unix.OpenHow{
		Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS,
	})
	if err != nil {
		return hostfs.FileID{}, false
	}
	defer unix.Close(fd)
	var sx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW, unix.STATX_INO, &sx); err != nil {
		return hostfs.FileID{}, false
	}
	// Only a mount's root is a folder of the host's bound there; anything
	// else at inside is part of the sandbox's own skeleton.
	if sx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 || sx.Attributes&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		return hostfs.FileID{}, false
	}
	return hostfs.FileID{Dev: unix.Mkdev(sx.Dev_major, sx.Dev_minor), Ino: sx.Ino}, true
}

// hostPathOf finds where the host shows the folder mounted at inside in
// the session's sandbox: the sandbox's mount table names the folder's path
// within its file system, and a mount of that file system on the host
// shows it under its mount point. "" when no host mount shows id.
func (s *Session) hostPathOf(inside string, id hostfs.FileID) string {
	root, pid, ok := s.agentRoot()
	if !ok {
		return ""
	}
	unix.Close(root)
	inner, _ := hostfs.Mounts(pid)
	var top *mountinfo.Info
	for _, m := range inner {
		if m.Mountpoint == inside { // the last one is on top
			top = m
		}
	}
	if top == nil {
		return ""
	}
	host, _ := hostfs.Mounts(0)
	for _, m := range host {
		rel, ok := hostfs.Under(top.Root, m.Root)
		if m.Major != top.Major || m.Minor != top.Minor || !ok {
			continue
		}
		if p := filepath.Join(m.Mountpoint, rel); statIs(p, id) {
			return p
		}
	}
	return ""
}

func statIs(p string, id hostfs.FileID) bool {
	got, ok := hostfs.StatID(p)
	return ok && got == id
}

// CheckSame refuses a get-or-create request (a policy's TOML, or "" when
// the request names none, and the folders) that describes another sandbox
// than the session's: running the command in the session
// as it is would run it under a policy or in folders the caller did not
// ask for. Without a policy the request names only the folders given on
// the command line, and only those are compared; folders are compared as
// folders, not as paths (see folderMismatch).
func (s *Session) CheckSame(policyTOML string, vars policies.Vars) error {
	var have, want, flags []string
	if policyTOML != "" {
		flags = append(flags, "--policy")
		// Parsing is a pure function of the text: the text found to be
		// the session's policy before still is.
		if last := s.samePolicy.Load(); last == nil || *last != policyTOML {
			p, err := policies.Parse(s.ID+" policy", []byte(policyTOML))
			if err != nil {
				return err
			}
			if h := p.Hash(); h != s.PolicyHash {
				have = append(have, fmt.Sprintf("policy %s (%s)", s.PolicyName, shortHash(s.PolicyHash)))
				want = append(want, fmt.Sprintf("policy %s (%s)", p.Name, shortHash(h)))
			} else {
				s.samePolicy.Store(&policyTOML)
			}
		}
	}
	for _, v := range []struct {
		folder         sessionFolder
		variable, flag string
		want           string
	}{
		{sessionFolder{"workspace", s.Vars.WorkDir, spec.WorkspacePath}, "$WORK_DIR", "--workspace", vars.WorkDir},
		{sessionFolder{"skill folder", s.Vars.SkillDir, spec.SkillPath}, "$SKILL_DIR", "--skill-dir", vars.SkillDir},
		{sessionFolder{"data folder", s.Vars.DataDir, spec.DataPath}, "$DATA_DIR", "--data-dir", vars.DataDir},
		{sessionFolder{"home", s.Vars.Home, s.Vars.Home}, "$HOME", "", vars.Home},
	} {
		given := policyTOML != "" || v.want != ""
		// The workspace is the commands' working folder whatever the
		// policy says; the other folders shape the sandbox only where
		// the policy uses them.
		used := v.variable == "$WORK_DIR" || strings.Contains(s.PolicyTOML, v.variable)
		if !given || !used {
			continue
		}
		h, w := s.folderMismatch(v.folder, v.want)
		if h == "" {
			continue
		}
		have, want = append(have, h), append(want, w)
		if v.flag != "" && !slices.Contains(flags, v.flag) {
			flags = append(flags, v.flag)
		}
	}
	if len(have) == 0 {
		return nil
	}
	return kindf(ErrSessionMismatch, "session %s exists with %s; this call asks for %s: use another --session id, or leave out %s to use the session as it is",
		s.ID, strings.Join(have, " and "), strings.Join(want, " and "), joinAnd(flags))
}

func folderText(name, path string) string {
	if path == "" {
		return "no " + name
	}
	return name + " " + path
}

func shortHash(h string) string {
	if len(h) > len("sha256:")+12 {
		return h[:len("sha256:")+12]
	}
	return h
}

// joinAnd joins a list the way a sentence does: "a", "a and b", "a, b and c".
func joinAnd(l []string) string {
	if len(l) < 2 {
		return strings.Join(l, "")
	}
	return strings.Join(l[:len(l)-1], ", ") + " and " + l[len(l)-1]
}
