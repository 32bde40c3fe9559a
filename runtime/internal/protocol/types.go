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

// Request is one call to the daemon. The types below are the protocol's
// schema: runtime/daemon/testdata/protocol holds their JSON, which a
// rename fails.
type Request struct {
	// V is the protocol version the client speaks; 0 (absent, as the
	// clients before versions sent) means 1.
	V      int            `json:"v,omitempty"`
	Op     string         `json:"op"` // ping, create, exec, list, remove, gc, freeze, thaw, kill, freeze.all, thaw.all, approvals.ls, approvals.wait, approvals.approve, approvals.deny
	ID     string         `json:"id,omitempty"`
	Create *CreateRequest `json:"create,omitempty"`
	Exec   *ExecRequest   `json:"exec,omitempty"`
	Force  bool           `json:"force,omitempty"`
	Pool   *PoolRequest   `json:"pool,omitempty"` // pool.fill, pool.drain
	// Reason is the answerer's words for approvals.approve and
	// approvals.deny (ID is the approval's).
	Reason string `json:"reason,omitempty"`
}

// CreateRequest carries what a new session needs. With exec, it makes the
// session when absent.
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

// Control is what a client sends while its command runs.
type Control struct {
	Signal int `json:"signal"`
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
