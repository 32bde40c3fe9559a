package protocol

import (
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/warden-sandbox/warden/policies"
)

// CheckExec refuses a command the sandbox would not get exactly as given:
// an argument, variable or working folder that is not UTF-8 (the JSON of
// the requests would carry U+FFFD in its place, which can name another
// file), or a timeout that is negative or below policies.MinTimeout (zero
// is the policy's limits.timeout).
func CheckExec(argv, env []string, cwd string, timeout time.Duration) error {
	for i, a := range argv {
		if !utf8.ValidString(a) {
			return invalidf("argument %d is not valid UTF-8; warden passes arguments as UTF-8 text; rename the file or convert the text (iconv -t UTF-8)", i+1)
		}
	}
	for _, kv := range env {
		if !utf8.ValidString(kv) {
			return invalidf("--env is not valid UTF-8; warden passes flag values as UTF-8 text; convert it (iconv -t UTF-8)")
		}
	}
	if !utf8.ValidString(cwd) {
		return invalidf("--cwd is not valid UTF-8; warden passes flag values as UTF-8 text; convert it (iconv -t UTF-8)")
	}
	if timeout < 0 || timeout > 0 && timeout < policies.MinTimeout {
		return invalidf("--timeout %s: use at least %s", timeout, policies.MinTimeout)
	}
	return nil
}

// UTF8Env leaves out the caller's variables that are not UTF-8: JSON
// cannot carry them unchanged, and only the few env.allow names pass.
func UTF8Env(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if utf8.ValidString(kv) {
			out = append(out, kv)
		}
	}
	return out
}

// invalidError is invalid input whose text is its message alone:
// errors.Is finds policies.ErrInvalid, so CodeOf says invalid_input.
type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return e.msg }
func (e *invalidError) Is(target error) bool { return target == policies.ErrInvalid }

func invalidf(format string, a ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, a...)}
}
