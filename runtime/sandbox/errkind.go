package sandbox

import (
	"github.com/warden-sandbox/warden/runtime/internal/protocol"
)

// ErrSessionMismatch is wrapped by CheckSame's refusal: the session exists
// with another policy or other folders than a call asks for.
var ErrSessionMismatch = protocol.ErrSessionMismatch

// kindf is fmt.Errorf marked as of kind (protocol.Kindf).
func kindf(kind error, format string, a ...any) error { return protocol.Kindf(kind, format, a...) }
