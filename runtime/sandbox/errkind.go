package sandbox

import (
	"fmt"

	"github.com/warden-sandbox/warden/runtime/internal/protocol"
)

// ErrSessionMismatch is wrapped by CheckSame's refusal: the session exists
// with another policy or other folders than a call asks for.
var ErrSessionMismatch = protocol.ErrSessionMismatch

// kindError is an error of a known kind whose text is its message alone:
// errors.Is finds the kind (spec.ErrInvalid, policies.ErrDenied, ...) so
// callers and the daemon's error codes can tell it, while the text stays
// what people and tests read.
type kindError struct {
	kind error
	err  error
}

func (e *kindError) Error() string   { return e.err.Error() }
func (e *kindError) Unwrap() []error { return []error{e.kind, e.err} }

// kindf is fmt.Errorf marked as of kind.
func kindf(kind error, format string, a ...any) error {
	return &kindError{kind: kind, err: fmt.Errorf(format, a...)}
}
