package policies

import (
	"errors"
	"fmt"
)

// Error is a problem with a policy file: which file, which line, which key,
// and what would be valid. Callers get one with errors.As.
type Error struct {
	File string // as given to Parse, or the SKILL.md path
	Line int    // 1-based; 0 when the key has no line (a missing key, a policy built in Go)
	Key  string // dotted key with list indexes, e.g. "fs.read[1]"; empty for syntax errors
	Msg  string
}

func (e *Error) Error() string {
	s := e.File
	if e.Line > 0 {
		s += fmt.Sprintf(":%d", e.Line)
	}
	if s != "" {
		s += ": "
	}
	if e.Key != "" {
		s += e.Key + ": "
	}
	return s + e.Msg
}

// ErrInvalid marks errors caused by the policy or options rather than by
// the host: spec.ErrInvalid is this value.
var ErrInvalid = errors.New("invalid")

// ErrDenied is wrapped by every refusal of a Checker, so callers can tell a
// policy decision from an I/O failure with errors.Is.
var ErrDenied = errors.New("not allowed by policy")
