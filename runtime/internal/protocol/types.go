package protocol

import (
	"path/filepath"
	"time"

	"github.com/warden-sandbox/warden/policies"
)

// Version is the major version of the socket protocol (docs/protocol.md).
// Fields are added within a version, never renamed or given another
// meaning; a change that would break an old client or daemon takes a new
// version.
const Version = 1

// DefaultRoot is the state root when none is named.
const DefaultRoot = "/run/warden"

// SocketPath is the daemon's socket under a state root.
func SocketPath(root string) string { return filepath.Join(root, "warden.sock") }

// StreamSocketPath is the daemon's SOCK_STREAM socket under a state root:
// the same protocol in frames, the command's stdio relayed (for clients
// that cannot pass descriptors).
func StreamSocketPath(root string) string { return filepath.Join(root, "warden.stream.sock") }

// Request is one call to the daemon. The types below are the protocol's
// schema: runtime/daemon/testdata/protocol holds their JSON, which a
// rename fails.
type Request struct {
	// V is the protocol version the client speaks; 0 (absent, as the
	// clients before versions sent) means 1.
	V      int            `json:"v,omitempty"`
	Op     string         `json:"op"` // ping, create, exec, do, list, remove, gc, freeze, thaw, kill, freeze.all, thaw.all, stats, approvals.ls, approvals.wait, approvals.approve, approvals.deny
	ID     string         `json:"id,omitempty"`
	Create *CreateRequest `json:"create,omitempty"`
	Exec   *ExecRequest   `json:"exec,omitempty"`
	Force  bool           `json:"force,omitempty"`
	Pool   *PoolRequest   `json:"pool,omitempty"` // pool.fill, pool.drain
	// Reason is the answerer's words for approvals.approve and
	// approvals.deny (ID is the approval's).
	Reason string `json:"reason,omitempty"`
	// By names who answered, for a front end that answers for its own
	// users (warden serve: a dashboard login); the audit line has it
	// beside the caller's uid.
	By string `json:"by,omitempty"`
}

// CreateRequest carries what a new session needs. With exec, it makes the
// session when absent; with do, it is the one-shot sandbox's policy and
// folders, which a pool must match.
type CreateRequest struct {
	PolicyTOML string        `json:"policyToml"`
	Vars       policies.Vars `json:"vars"`
}

// ExecRequest is a command to run; stdin, stdout and stderr come with the
// request unless Tty is set.
type ExecRequest struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env,omitempty"`
	// CallerEnv is the caller's environment; only env.allow names pass.
	CallerEnv []string      `json:"callerEnv,omitempty"`
	Cwd       string        `json:"cwd,omitempty"`
	Timeout   time.Duration `json:"timeout,omitempty"`
	Tty       bool          `json:"tty,omitempty"`
	Rows      uint16        `json:"rows,omitempty"`
	Cols      uint16        `json:"cols,omitempty"`
}

// Reply answers a request. Exec gets a Started reply (with the terminal's
// master side when Tty) and then one with Result.
type Reply struct {
	V        int           `json:"v,omitempty"` // ping's: the daemon's Version
	Error    string        `json:"error,omitempty"`
	Code     Code          `json:"code,omitempty"` // with Error: what kind of failure (errors.go)
	Started  bool          `json:"started,omitempty"`
	Result   *Result       `json:"result,omitempty"`
	Sessions []SessionInfo `json:"sessions,omitempty"`
	Removed  []string      `json:"removed,omitempty"`
	Pools    []PoolInfo    `json:"pools,omitempty"`
	Killed   int           `json:"killed,omitempty"` // kill: processes killed
	Stats    *Stats        `json:"stats,omitempty"`  // stats
	// Approvals are the commands waiting for a human (approvals.ls).
	Approvals []Approval `json:"approvals,omitempty"`
}

// Approval is a command waiting for a human: a call of a program the
// session's policy has in commands.ask.
type Approval struct {
	ID      string        `json:"id"`
	Session string        `json:"session"`
	Policy  string        `json:"policy"`
	Argv    []string      `json:"argv"`
	Cwd     string        `json:"cwd"`
	Parent  string        `json:"parent,omitempty"` // the command line that started it in the sandbox; empty for a top-level command
	Rule    string        `json:"rule"`             // the rule that asks: commands.ask "git push **"
	Since   time.Time     `json:"since"`
	Timeout time.Duration `json:"timeout"` // unanswered after this long, it is denied
}

// Result is how a command ended.
type Result struct {
	ExitCode int           `json:"exit"`
	Signal   int           `json:"signal,omitempty"`
	OOM      bool          `json:"oom,omitempty"`
	TimedOut bool          `json:"timedOut,omitempty"`
	Duration time.Duration `json:"duration"`
	// Error is set when the command did not start (ExitCode 126 or 127),
	// or was killed by warden (timeout, memory limit).
	Error string `json:"error,omitempty"`
}

// SessionInfo describes a session for `session ls`.
type SessionInfo struct {
	ID        string    `json:"id"`
	Policy    string    `json:"policy"`
	Workspace string    `json:"workspace"`
	State     string    `json:"state"`
	Created   time.Time `json:"created"`
	LastUsed  time.Time `json:"lastUsed"`
	Execs     int       `json:"execs"`
	Running   int       `json:"running"`
	Pool      string    `json:"pool,omitempty"` // key of the warm pool it was claimed from
}

// Control is what a client sends while its command runs: a signal for
// the command, or (with -t) the caller's new window size.
type Control struct {
	Signal int    `json:"signal"`
	Rows   uint16 `json:"rows,omitempty"`
	Cols   uint16 `json:"cols,omitempty"`
}

// PoolRequest configures a warm pool: the policy files it keeps
// containers for (merged when several), their $SKILL_DIR and $HOME, and how
// many containers it keeps ready.
type PoolRequest struct {
	Files []string      `json:"files"`
	Vars  policies.Vars `json:"vars"`
	Size  int           `json:"size"`
}

// PoolInfo is one pool's line in `pool status`.
type PoolInfo struct {
	Policy     string   `json:"policy"`
	Files      []string `json:"files"`
	PolicyHash string   `json:"policyHash"`
	Key        string   `json:"key"`
	Size       int      `json:"size"`
	Ready      int      `json:"ready"`
	Claimed    int      `json:"claimed"`
	Refilling  int      `json:"refilling"`
	Hits       int      `json:"hits"`
	Misses     int      `json:"misses"`
	Error      string   `json:"error,omitempty"`
}

// Stats is what a daemon has counted since it started, and what its
// sessions use now (the stats op; warden serve's pages and /metrics).
type Stats struct {
	// Since is when this daemon started: the counts below count from then.
	Since    time.Time      `json:"since"`
	Sessions []SessionStats `json:"sessions,omitempty"`
	// Commands counts the commands that ended, by outcome: ok (exit 0),
	// failed (another exit code), signal, timeout, oom, not_started (126
	// or 127: not found, not allowed, cannot run) and error (warden did
	// not run it or lost it: a frozen session, a refused request, a
	// sandbox that stopped).
	Commands map[string]int64 `json:"commands"`
	// ExecSeconds is the time commands took from the daemon's request to
	// the sandbox to their end (those that ran, whatever their exit).
	ExecSeconds Histogram   `json:"execSeconds"`
	Egress      EgressStats `json:"egress"`
	// Approvals is the pending-approvals queue; absent from daemons
	// older than it.
	Approvals *ApprovalStats `json:"approvals,omitempty"`
}

// ApprovalStats counts the commands a policy's commands.ask held: those
// waiting now, and those that stopped waiting, by how (approved, denied,
// timeout, withdrawn: their caller went away), each present.
type ApprovalStats struct {
	Pending  int              `json:"pending"`
	Answered map[string]int64 `json:"answered"`
}

// SessionStats is one session's use of its cgroup and its running
// commands.
type SessionStats struct {
	ID string `json:"id"`
	// MemoryBytes is the memory charged to the session's cgroup now;
	// CPUNanos the CPU time its processes used so far. Absent when the
	// cgroup could not be read (UsageError says why).
	MemoryBytes *uint64          `json:"memoryBytes,omitempty"`
	CPUNanos    *uint64          `json:"cpuNanos,omitempty"`
	UsageError  string           `json:"usageError,omitempty"`
	Commands    []RunningCommand `json:"commands,omitempty"`
}

// RunningCommand is a command running in a session.
type RunningCommand struct {
	Argv    []string  `json:"argv"`
	Cwd     string    `json:"cwd,omitempty"`
	Started time.Time `json:"started"`
}

// Histogram is a cumulative histogram: Counts[i] observations at most
// Bounds[i]; Count and Sum of them all.
type Histogram struct {
	Bounds []float64 `json:"bounds"`
	Counts []uint64  `json:"counts"`
	Count  uint64    `json:"count"`
	Sum    float64   `json:"sum"`
}

// EgressStats counts the egress proxy's decisions for the daemon's
// sessions: connections (CONNECT, SOCKS5) and plain HTTP requests allowed
// and denied, and the bytes of the allowed ones, out from the sandbox and
// in to it.
type EgressStats struct {
	Allowed  int64 `json:"allowed"`
	Denied   int64 `json:"denied"`
	BytesOut int64 `json:"bytesOut"`
	BytesIn  int64 `json:"bytesIn"`
}
