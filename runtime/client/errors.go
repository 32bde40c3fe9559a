package client

import (
	"errors"
	"fmt"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/runtime/internal/protocol"
)

// Result is how a command ended: its exit status (128+N for signal N; 126
// or 127 when it never started), the signal, whether warden's timeout or
// memory limit ended it, how long it ran, and warden's reason.
type Result = protocol.Result

// SessionInfo describes a session, as Client.Sessions lists it.
type SessionInfo = protocol.SessionInfo

// Error is a failure the daemon reported, or one met talking to it: a
// Code for programs and the message people read. errors.Is matches the
// sentinel errors below its code stands for, and &Error{Code: c} matches
// any error of code c.
type Error = protocol.Error

// Code says what kind of failure an Error is (docs/protocol.md#errors).
type Code = protocol.Code

// The codes; protocol.md says what each means.
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

// The sentinel errors: the same values as runtime/sandbox's of the same
// names, so errors.Is holds whichever API made the error.
var (
	ErrNoSession       = protocol.ErrNoSession
	ErrSessionExists   = protocol.ErrSessionExists
	ErrSessionMismatch = protocol.ErrSessionMismatch
	ErrFrozen          = protocol.ErrFrozen
	ErrSandboxStopped  = protocol.ErrSandboxStopped
	ErrAuditWrite      = protocol.ErrAuditWrite
)

// CodeOf is the code of err: its own for an *Error, ResultCode's for an
// *ExitError ("" for a command that ran), else that of a sentinel it
// wraps; anything else is CodeInternal.
func CodeOf(err error) Code {
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code()
	}
	return protocol.CodeOf(err)
}

// ResultCode is the code of a command that never started (exit 127:
// CodeCommandNotFound, also for a program exec.allow does not list; 126:
// CodeCommandCannotRun); "" for one that ran, however it ended.
func ResultCode(r Result) Code { return protocol.ResultCode(r) }

// ExitError is a command that did not succeed, from Output,
// CombinedOutput and Shell: it ran and exited non-zero or was killed, or
// it never started (Code says which).
type ExitError struct {
	Result
	// Stderr is the command's standard error, when Output collected it.
	Stderr []byte
}

func (e *ExitError) Error() string {
	msg := fmt.Sprintf("exit status %d", e.ExitCode)
	if e.Result.Error != "" {
		msg += ": " + e.Result.Error
	}
	return msg
}

// Code is CodeCommandNotFound or CodeCommandCannotRun for a command that
// never started, "" for one that ran.
func (e *ExitError) Code() Code { return ResultCode(e.Result) }

// Is lets errors.Is(err, &Error{Code: CodeCommandNotFound}) find a command
// that never started.
func (e *ExitError) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Message == "" && t.Code != "" && t.Code == e.Code()
}

// Checker answers a policy's questions in this process (policies.Checker).
type Checker = policies.Checker

// NewChecker is policies.NewChecker: p's checks with its path variables v.
func NewChecker(p *policies.Policy, v policies.Vars) (*Checker, error) {
	return policies.NewChecker(p, v)
}
