package daemon

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/runtime/sandbox"
	"github.com/warden-sandbox/warden/spec"
)

// Every kind of failure the daemon and the CLI meet has its code, and a
// marked error keeps the text people and tests read.
func TestCodeOf(t *testing.T) {
	for _, c := range []struct {
		err  error
		want Code
	}{
		{nil, ""},
		{fmt.Errorf("%w: x; create it", sandbox.ErrNoSession), CodeNoSuchSession},
		{fmt.Errorf("%w: x", sandbox.ErrSessionExists), CodeSessionExists},
		{fmt.Errorf("session x: %w; remove it", sandbox.ErrSandboxStopped), CodeSandboxStopped},
		{fmt.Errorf("%w (1h > 30s)", sandbox.ErrTimeoutTooLong), CodePolicyRefused},
		{fmt.Errorf("exec %q: %w: not in exec.allow", "x", policies.ErrDenied), CodePolicyRefused},
		{fmt.Errorf("%w: f: no space", sandbox.ErrAuditWrite), CodeAuditUnwritable},
		{fmt.Errorf("%w: fs rule", spec.ErrInvalid), CodeInvalidInput},
		{&policies.Error{File: "p.toml", Line: 3, Key: "fs.read", Msg: "bad"}, CodeInvalidInput},
		{kindf(errSessionBusy, "session x has 1 command(s) running"), CodeSessionBusy},
		{kindf(ErrUnsupportedVersion, "protocol version 9"), CodeUnsupportedVersion},
		{notPooled("this daemon keeps no pool"), CodeNotPooled},
		{&SignalError{Signal: 15}, CodeInterrupted},
		{fmt.Errorf("wrapped: %w", &Error{Code: CodeDaemonUnavailable, Message: "m"}), CodeDaemonUnavailable},
		{errors.New("mkdir /x: read-only file system"), CodeInternal},
	} {
		if got := CodeOf(c.err); got != c.want {
			t.Errorf("CodeOf(%v) = %q, want %q", c.err, got, c.want)
		}
	}
	if e := kindf(errSessionBusy, "session %s has %d command(s) running", "x", 2); e.Error() != "session x has 2 command(s) running" {
		t.Errorf("marked error's text %q", e)
	}
	seen := map[Code]bool{}
	for _, c := range Codes {
		if seen[c] || c == "" {
			t.Errorf("code %q listed twice or empty", c)
		}
		seen[c] = true
	}
}

// An error that crossed the socket still answers errors.Is for the
// sentinel its code stands for, and only for that one.
func TestErrorIs(t *testing.T) {
	noSession := &Error{Code: CodeNoSuchSession, Message: "no such session: x"}
	if !errors.Is(noSession, sandbox.ErrNoSession) || errors.Is(noSession, sandbox.ErrSessionExists) {
		t.Error("no_such_session: errors.Is wrong")
	}
	if !errors.Is(fmt.Errorf("ctx: %w", &Error{Code: CodeSandboxStopped}), sandbox.ErrSandboxStopped) {
		t.Error("sandbox_stopped through a wrap: not ErrSandboxStopped")
	}
	if !errors.Is(&Error{Code: CodeInvalidInput}, spec.ErrInvalid) {
		t.Error("invalid_input: not spec.ErrInvalid")
	}
	// policy_refused stands for two sentinels: it claims neither.
	refused := &Error{Code: CodePolicyRefused, Message: "--env X: not in the policy's env.allow"}
	if errors.Is(refused, sandbox.ErrTimeoutTooLong) || errors.Is(refused, policies.ErrDenied) {
		t.Error("policy_refused claims a sentinel")
	}
	if !errors.Is(refused, &Error{Code: CodePolicyRefused}) || errors.Is(refused, &Error{Code: CodeInternal}) {
		t.Error("errors.Is by code wrong")
	}
}

func TestResultCode(t *testing.T) {
	for _, c := range []struct {
		res  sandbox.ExecResult
		want Code
	}{
		{sandbox.ExecResult{ExitCode: 127, Error: "x: command not found"}, CodeCommandNotFound},
		{sandbox.ExecResult{ExitCode: 126, Error: "x: permission denied"}, CodeCommandCannotRun},
		{sandbox.ExecResult{ExitCode: 127}, ""}, // the command's own 127
		{sandbox.ExecResult{ExitCode: 126, Duration: time.Millisecond}, ""},
		{sandbox.ExecResult{ExitCode: 137, Signal: 9, TimedOut: true, Error: "killed: timeout 1s exceeded"}, ""},
		{sandbox.ExecResult{ExitCode: 137, Signal: 9, OOM: true, Error: "killed: memory limit 64MiB exceeded"}, ""},
		{sandbox.ExecResult{ExitCode: 137, Signal: 9, Error: "session x was removed"}, ""},
	} {
		if got := ResultCode(c.res); got != c.want {
			t.Errorf("ResultCode(%+v) = %q, want %q", c.res, got, c.want)
		}
	}
}
