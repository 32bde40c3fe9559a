package runtime

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// AuditRecord is one line of the audit log: a command that ran (or did
// not start), a session event, or an egress decision (net.allow with bytes
// and duration, net.deny with the reason).
type AuditRecord struct {
	Time       time.Time `json:"time"`
	Event      string    `json:"event"` // exec, session.create, session.remove, session.expire, session.reap, net.allow, net.deny, net.suppressed
	Session    string    `json:"session"`
	Policy     string    `json:"policy,omitempty"`
	PolicyHash string    `json:"policyHash,omitempty"`
	Argv       []string  `json:"argv,omitempty"`
	Cwd        string    `json:"cwd,omitempty"`
	Exit       *int      `json:"exit,omitempty"`
	Signal     int       `json:"signal,omitempty"`
	OOM        bool      `json:"oom,omitempty"`
	TimedOut   bool      `json:"timedOut,omitempty"`
	DurationMs float64   `json:"durationMs,omitempty"`
	Error      string    `json:"error,omitempty"`
	// Egress: what the sandbox asked for, the address dialed, the rule
	// that allowed it, bytes out (sandbox to host) and in.
	Proto    string `json:"proto,omitempty"` // http, connect, socks5
	Host     string `json:"host,omitempty"`
	Port     int    `json:"port,omitempty"`
	Addr     string `json:"addr,omitempty"`
	Rule     string `json:"rule,omitempty"`
	BytesIn  int64  `json:"bytesIn,omitempty"`
	BytesOut int64  `json:"bytesOut,omitempty"`
	Reason   string `json:"reason,omitempty"`
	// A summary (net.suppressed, or net.allow over its rate): how many
	// decisions it stands for and, for allowed ones, their destinations.
	Count int      `json:"count,omitempty"`
	Hosts []string `json:"hosts,omitempty"`
}

// auditLog appends JSON lines to a file, one write per record so lines
// from concurrent commands never interleave.
type auditLog struct {
	mu sync.Mutex
	f  *os.File
}

func openAudit(path string) (*auditLog, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	return &auditLog{f: f}, nil
}

func (a *auditLog) write(r AuditRecord) {
	if a == nil {
		return
	}
	r.Time = r.Time.UTC()
	if r.Time.IsZero() {
		r.Time = time.Now().UTC()
	}
	data, err := json.Marshal(r)
	if err != nil {
		return
	}
	data = TerminalSafe(data)
	a.mu.Lock()
	a.f.Write(append(data, '\n'))
	a.mu.Unlock()
}

// TerminalSafe escapes, in a JSON line, what encoding/json leaves raw
// and a terminal would act on or a reader be fooled by: DEL, C1 controls
// (an 8-bit CSI or OSC), bidi overrides and the other format characters.
// A sandbox chooses much of what is logged (host names, arguments), and
// `tail audit.log` must show it as text. These characters only ever
// stand inside JSON strings, where \uXXXX means the same.
func TerminalSafe(line []byte) []byte {
	var out []byte
	for i := 0; i < len(line); {
		r, n := utf8.DecodeRune(line[i:])
		if r >= 0x7f && (unicode.Is(unicode.Cc, r) || unicode.Is(unicode.Cf, r)) {
			if out == nil {
				out = append(make([]byte, 0, len(line)+12), line[:i]...)
			}
			for _, u := range utf16.Encode([]rune{r}) {
				out = fmt.Appendf(out, `\u%04x`, u)
			}
		} else if out != nil {
			out = append(out, line[i:i+n]...)
		}
		i += n
	}
	if out == nil {
		return line
	}
	return out
}

func (a *auditLog) close() {
	if a != nil {
		a.f.Close()
	}
}

// AuditPath is the audit log for a state root: /var/log/warden/audit.log
// for the default root, else audit.log inside the root.
func AuditPath(root string) string {
	if filepath.Clean(root) == DefaultRoot {
		return "/var/log/warden/audit.log"
	}
	return filepath.Join(root, "audit.log")
}
