package policies

import (
	"slices"
	"time"
)

// Policy is one skill's permissions, as written in its TOML file.
//
// Paths in FS are kept as written (with $SKILL_DIR, $WORK_DIR, $DATA_DIR,
// $HOME; "~" is stored as "$HOME") until Expand turns them into host paths.
type Policy struct {
	Name        string
	Description string
	FS          FS
	Exec        Exec
	Network     Network
	Env         Env
	Limits      Limits
	Sandbox     Sandbox
	Commands    Commands
	// Omitted is what the policy's file left out; Parse sets it. Only
	// Intersect reads it: a ceiling cuts nothing in a section or a limit
	// it leaves out. TOML does not keep it (the canonical form writes
	// every limit), so it is no part of Hash.
	Omitted Omitted
}

// Omitted records which sections and limits a policy file leaves out. A
// Policy built in Go omits nothing but the limits it leaves at zero.
type Omitted struct {
	FS, Exec, Network, Env, Commands bool // the [fs], [exec], [network], [env], [commands] tables
	Memory, Pids, CPU, Timeout, Idle bool // the keys of [limits]
}

// FS says which host paths the sandbox sees. The most specific rule (the
// longest path that is a prefix of the path asked about) decides; a path no
// rule covers is invisible (system directories aside, see SystemDirs).
type FS struct {
	Read  []string // visible read-only
	Write []string // visible read-write, mounted noexec,nosuid,nodev
	Deny  []string // masked: never visible, even under a grant
}

// Exec says which executables may run.
type Exec struct {
	// All is true when the policy has no exec.allow: every system binary may run.
	All bool
	// Allow lists executables by name ("curl", looked up in the system
	// binary directories) or by absolute path. Used only when All is false;
	// an empty Allow with All false lets nothing run.
	Allow []string
	// Workspace lets programs the sandbox writes into its workspace and
	// its /tmp run (a coding agent's builds and tests): those places lose
	// noexec, and the exec rules let them run. Off by default.
	Workspace bool
}

// CommandShell is the shell that runs command strings (sh -c "curl … |
// jq …", as agent frameworks run tools). A policy that lists any program
// may run it too; it can start only the listed programs. A ceiling takes it
// away only by listing nothing.
const CommandShell = "sh"

// Programs are the programs an exec.allow list lets run: the listed ones
// and, when there are any, CommandShell. Nil when All.
func (e Exec) Programs() []string {
	if e.All || len(e.Allow) == 0 || slices.Contains(e.Allow, CommandShell) {
		return e.Allow
	}
	return append(slices.Clone(e.Allow), CommandShell)
}

// Network lists host:port patterns the sandbox may reach through the
// egress proxy. Empty: loopback only.
type Network struct {
	Allow []string
}

// Env says which environment variables the sandbox sees: Allow names
// variables passed through from the caller, Set fixes values.
type Env struct {
	Allow []string
	Set   map[string]string
}

// Limits are the sandbox's resource ceilings. After Load every field is set
// (defaults fill what the file leaves out); in a Policy built in Go a zero
// field means the default (see WithDefaults).
type Limits struct {
	Memory  int64         // bytes
	Pids    int64         // processes and threads
	CPU     float64       // cores
	Timeout time.Duration // per command
	Idle    time.Duration // session expiry
}

// Access is what a policy allows at one path.
type Access int

const (
	AccessNone Access = iota
	AccessRead
	AccessWrite
)

// Vars are the values of the path variables a policy may use.
type Vars struct {
	SkillDir string // $SKILL_DIR: the folder holding the skill (by default the policy file's folder)
	WorkDir  string // $WORK_DIR: the session's workspace
	DataDir  string // $DATA_DIR: the skill's persistent data
	Home     string // $HOME: the caller's home directory
}
