package protocol

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/policies"
)

// Code says what kind of failure an error is, for programs: the daemon's
// error replies carry one beside the message, and `warden exec --result`
// writes one. The set is part of the protocol (docs/protocol.md): codes
// are added, never renamed; a client treats one it does not know as
// CodeInternal.
type Code string

const (
	// CodeInvalidInput: the request itself is wrong (a flag, an argument, a
	// policy file, a folder, a session id, a malformed message); it fails
	// the same way every time until changed.
	CodeInvalidInput Code = "invalid_input"
	// CodePolicyRefused: the request is well-formed but the session's
	// policy does not allow it (an --env name outside env.allow, a
	// timeout above limits.timeout).
	CodePolicyRefused Code = "policy_refused"
	// CodeNoSuchSession: the session does not exist (and the call named
	// no policy to create it with).
	CodeNoSuchSession Code = "no_such_session"
	// CodeSessionExists: create of an id that is taken.
	CodeSessionExists Code = "session_exists"
	// CodeSessionMismatch: the session exists with another policy or
	// other folders than the call asks for; nothing ran.
	CodeSessionMismatch Code = "session_mismatch"
	// CodeSessionBusy: remove without force of a session running commands.
	CodeSessionBusy Code = "session_busy"
	// CodeSessionFrozen: the session is frozen (warden session freeze):
	// a new command is refused and never runs; thaw it first.
	CodeSessionFrozen Code = "session_frozen"
	// CodeCommandNotFound: the command was not found in the sandbox, or
	// the policy's exec.allow does not list it (exit status 127; the
	// message says which). It never started.
	CodeCommandNotFound Code = "command_not_found"
	// CodeCommandCannotRun: the command was found but could not start
	// (exit status 126: not executable, no such working folder, ...).
	CodeCommandCannotRun Code = "command_cannot_run"
	// CodeDaemonUnavailable: no daemon could be reached or started, it
	// has no connection free, or it went away before it answered. Nothing
	// is known to have run; trying again may work.
	CodeDaemonUnavailable Code = "daemon_unavailable"
	// CodeSandboxStopped: the session's sandbox is gone (its agent died,
	// or the session was removed while the command ran): the command did
	// not run, or how it ended is not known.
	CodeSandboxStopped Code = "sandbox_stopped"
	// CodeAuditUnwritable: the audit log could not be written, so the
	// command was not run (or ran and has no record; the message says).
	CodeAuditUnwritable Code = "audit_unwritable"
	// CodeInterrupted: the caller got SIGINT, SIGTERM or SIGHUP before the
	// daemon took the request; nothing ran.
	CodeInterrupted Code = "interrupted"
	// CodeUnsupportedVersion: the request's protocol version is one this
	// daemon does not speak.
	CodeUnsupportedVersion Code = "unsupported_version"
	// CodeNotPooled: (do only) no warm sandbox of the daemon's pools
	// serves the one-shot call: no pool of its policy and folders, none
	// ready, or a claim that failed. Nothing ran and nothing was written:
	// run the command cold (warden do does).
	CodeNotPooled Code = "not_pooled"
	// CodeInternal: anything else warden failed at (the host refused an
	// operation, a bug); the message says what.
	CodeInternal Code = "internal"
)

// Codes is every code, in the order docs/protocol.md lists them.
var Codes = []Code{CodeInvalidInput, CodePolicyRefused, CodeNoSuchSession, CodeSessionExists, CodeSessionMismatch,
	CodeSessionBusy, CodeSessionFrozen, CodeCommandNotFound, CodeCommandCannotRun, CodeDaemonUnavailable, CodeSandboxStopped,
	CodeAuditUnwritable, CodeInterrupted, CodeUnsupportedVersion, CodeNotPooled, CodeInternal}

// The sentinel errors a code stands for. runtime/sandbox's errors of the
// same names are these values, so errors.Is holds on either side of the
// socket.
var (
	// ErrNoSession: an unknown session id.
	ErrNoSession = errors.New("no such session")
	// ErrSessionExists: a duplicate session id.
	ErrSessionExists = errors.New("session already exists")
	// ErrSessionMismatch: the session exists with another policy or folders.
	ErrSessionMismatch = errors.New("the session differs from the one asked for")
	// ErrSessionBusy marks a remove refused for the commands a session runs.
	ErrSessionBusy = errors.New("session busy")
	// ErrFrozen: the session is frozen; it runs no new command.
	ErrFrozen = errors.New("session is frozen")
	// ErrSandboxStopped: the session's sandbox is gone.
	ErrSandboxStopped = errors.New("its sandbox has stopped (its agent died)")
	// ErrAuditWrite: the audit log could not be written.
	ErrAuditWrite = errors.New("the audit log could not be written")
	// ErrTimeoutTooLong: a timeout above the policy's.
	ErrTimeoutTooLong = errors.New("timeout exceeds the policy's limits.timeout")
	// ErrUnsupportedVersion is the refusal of a request in a protocol
	// version the daemon does not speak.
	ErrUnsupportedVersion = errors.New("unsupported protocol version")
	// ErrNotPooled: no warm sandbox serves a one-shot call; nothing ran.
	ErrNotPooled = errors.New("no warm sandbox serves this one-shot run")
	// ErrDaemonRunning: another daemon holds the root.
	ErrDaemonRunning = errors.New("a warden daemon already serves this root")
)

// Error is a failure the daemon reported, or one the client met talking
// to it: its message is the daemon's text, unchanged. errors.Is matches
// the sentinel errors its code stands for (ErrNoSession, ErrSessionExists,
// ErrSandboxStopped, ...).
type Error struct {
	Code    Code
	Message string
}

func (e *Error) Error() string { return e.Message }

// Is makes errors.Is(err, ErrNoSession) and the like hold for an error
// that crossed the socket, and errors.Is(err, &Error{Code: c}) match any
// error of code c.
func (e *Error) Is(target error) bool {
	if t, ok := target.(*Error); ok {
		return t.Code == e.Code && (t.Message == "" || t.Message == e.Message)
	}
	// Only a code that stands for one sentinel alone says which it was:
	// policy_refused may be a timeout or an --env name.
	match := false
	for _, s := range sentinels {
		if s.code == e.Code {
			if s.err != target || match {
				return false
			}
			match = true
		}
	}
	return match
}

// sentinels ties the Go errors callers test for to codes, most specific
// first: CodeOf takes the first that matches.
var sentinels = []struct {
	err  error
	code Code
}{
	{ErrUnsupportedVersion, CodeUnsupportedVersion},
	{ErrNotPooled, CodeNotPooled},
	{ErrNoSession, CodeNoSuchSession},
	{ErrSessionExists, CodeSessionExists},
	{ErrSessionMismatch, CodeSessionMismatch},
	{ErrSessionBusy, CodeSessionBusy},
	{ErrFrozen, CodeSessionFrozen},
	{ErrSandboxStopped, CodeSandboxStopped},
	{ErrAuditWrite, CodeAuditUnwritable},
	{ErrTimeoutTooLong, CodePolicyRefused},
	{policies.ErrDenied, CodePolicyRefused},
	{policies.ErrInvalid, CodeInvalidInput},
}

// SignalError: the caller was told to stop (SIGINT, SIGTERM, SIGHUP)
// before the daemon had taken its request, so nothing was run.
type SignalError struct{ Signal unix.Signal }

func (e *SignalError) Error() string {
	return fmt.Sprintf("stopped by %s before the warden daemon took the request", unix.SignalName(e.Signal))
}

// CodeOf is the code of err: its own when it is an *Error, else that of
// the sentinel it wraps; a policy file's error is invalid input, a
// SignalError an interruption, anything else internal.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	var se *SignalError
	if errors.As(err, &se) {
		return CodeInterrupted
	}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			return s.code
		}
	}
	var pe *policies.Error
	if errors.As(err, &pe) {
		return CodeInvalidInput
	}
	return CodeInternal
}

// ResultCode is the code of a command that ended without starting (the
// agent's 127 or 126); "" for one that ran, however it ended.
func ResultCode(res Result) Code {
	if res.Error == "" || res.Signal != 0 || res.TimedOut || res.OOM {
		return ""
	}
	switch res.ExitCode {
	case 127:
		return CodeCommandNotFound
	case 126:
		return CodeCommandCannotRun
	}
	return ""
}

// KindError is an error of a known kind whose text is its message alone:
// errors.Is finds the kind (policies.ErrInvalid, policies.ErrDenied, a
// sentinel above), so callers and the daemon's codes can tell it, while
// the text stays what people and tests read.
type KindError struct {
	kind error
	err  error
}

func (e *KindError) Error() string   { return e.err.Error() }
func (e *KindError) Unwrap() []error { return []error{e.kind, e.err} }

// Kindf is fmt.Errorf marked as of kind.
func Kindf(kind error, format string, a ...any) error {
	return &KindError{kind: kind, err: fmt.Errorf(format, a...)}
}
