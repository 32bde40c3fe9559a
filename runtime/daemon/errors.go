package daemon

import (
	"github.com/warden-sandbox/warden/runtime/internal/protocol"
	"github.com/warden-sandbox/warden/runtime/sandbox"
)

// Code says what kind of failure an error is, for programs
// (protocol.Code): the daemon's error replies carry one beside the
// message, and `warden exec --result` writes one.
type Code = protocol.Code

// The codes (docs/protocol.md); protocol.Code's doc says what each means.
const (
	CodeInvalidInput       = protocol.CodeInvalidInput
	CodePolicyRefused      = protocol.CodePolicyRefused
	CodeNoSuchSession      = protocol.CodeNoSuchSession
	CodeSessionExists      = protocol.CodeSessionExists
	CodeSessionMismatch    = protocol.CodeSessionMismatch
	CodeSessionBusy        = protocol.CodeSessionBusy
	CodeSessionFrozen      = protocol.CodeSessionFrozen
	CodeCommandNotFound    = protocol.CodeCommandNotFound
	CodeCommandCannotRun   = protocol.CodeCommandCannotRun
	CodeDaemonUnavailable  = protocol.CodeDaemonUnavailable
	CodeSandboxStopped     = protocol.CodeSandboxStopped
	CodeAuditUnwritable    = protocol.CodeAuditUnwritable
	CodeInterrupted        = protocol.CodeInterrupted
	CodeUnsupportedVersion = protocol.CodeUnsupportedVersion
	CodeNotPooled          = protocol.CodeNotPooled
	CodeInternal           = protocol.CodeInternal
)

// Codes is every code, in the order docs/protocol.md lists them.
var Codes = protocol.Codes

// Error is a failure the daemon reported, or one the client met talking
// to it: its message is the daemon's text, unchanged. errors.Is matches
// the sandbox's sentinel errors its code stands for (sandbox.ErrNoSession,
// sandbox.ErrSessionExists, sandbox.ErrSandboxStopped, ...: the same
// values as protocol's).
type Error = protocol.Error

// SignalError: the caller was told to stop (SIGINT, SIGTERM, SIGHUP)
// before the daemon had taken its request, so nothing was run.
type SignalError = protocol.SignalError

// ErrUnsupportedVersion is the refusal of a request in a protocol version
// the daemon does not speak.
var ErrUnsupportedVersion = protocol.ErrUnsupportedVersion

// ErrNotPooled: no warm sandbox serves a one-shot call (do); nothing ran.
var ErrNotPooled = protocol.ErrNotPooled

// errSessionBusy marks a remove refused for the commands a session runs.
var errSessionBusy = protocol.ErrSessionBusy

// CodeOf is the code of err: its own when it is an *Error, else that of
// the sentinel it wraps; a policy file's error is invalid input, a
// SignalError an interruption, anything else internal.
func CodeOf(err error) Code { return protocol.CodeOf(err) }

// ResultCode is the code of a command that ended without starting (the
// agent's 127 or 126); "" for one that ran, however it ended.
func ResultCode(res sandbox.ExecResult) Code { return protocol.ResultCode(res) }

// kindf is fmt.Errorf marked as of kind (protocol.Kindf).
func kindf(kind error, format string, a ...any) error { return protocol.Kindf(kind, format, a...) }
