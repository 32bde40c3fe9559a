package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/runtime/internal/protocol"
)

// AuditRecord is one line of the audit log: a command that ran (or did
// not start), a session event, or an egress decision (net.allow with bytes
// and duration, net.deny with the reason).
type AuditRecord struct {
	Time       time.Time `json:"time"`
	Event      string    `json:"event"` // exec.start (daemon), exec, session.create, session.remove, session.expire, session.reap, session.freeze, session.thaw, session.kill, command, pool.*, container.reap, net.allow, net.deny, net.suppressed
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
	// A freeze, thaw or kill: who asked (the caller's uid and pid, from
	// the daemon socket's peer credentials) and, for a kill, how many
	// processes died.
	UID    *int `json:"uid,omitempty"`
	Pid    int  `json:"pid,omitempty"`
	Killed int  `json:"killed,omitempty"`
	// A command rule's decision (event command): allow or deny by a
	// rule, or for an ask approved, denied (UID: who answered), timeout
	// or withdrawn (its caller went away); Rule names the rule, Approval the ask's id, Parent the
	// command line that started the program inside the sandbox.
	Decision string `json:"decision,omitempty"`
	Approval string `json:"approval,omitempty"`
	Parent   string `json:"parent,omitempty"`
	// AnsweredBy names who answered an ask when not a uid, or for whom
	// the uid answered (warden serve: a dashboard login).
	AnsweredBy string `json:"answeredBy,omitempty"`
}

// AuditLog appends JSON lines to a file, one write() per record on a
// descriptor opened O_APPEND, so lines from concurrent commands never
// interleave. One whose file could not be opened has only err, why not,
// and drops its lines.
type AuditLog struct {
	mu     sync.Mutex
	f      *os.File
	err    error
	warned sync.Once
	// reserved is the room kept, past the file's end, for the records of
	// the commands still running (reserve).
	reserved int64
	// kept is where the room this log had allocated ends (keep), and
	// keptSize the file's size then: a file that shrank since (rotated
	// by truncation) lost it.
	kept, keptSize int64
	// failing: the last write failed, and the daemon's log said so once.
	failing bool
	// observe, when set, sees every record written (or that failed to
	// be): the daemon counts commands and egress decisions from them.
	observe func(AuditRecord)
}

// Observe makes f see every record the log is given, before it is
// written; f must be quick and must not write to the log.
func (a *AuditLog) Observe(f func(AuditRecord)) {
	a.mu.Lock()
	a.observe = f
	a.mu.Unlock()
}

// ErrAuditWrite says a record could not be written to the audit log; a
// command whose record cannot be written does not run.
var ErrAuditWrite = protocol.ErrAuditWrite

// recordRoom is what a command's record may grow by when it ends: exit
// code, signal, duration and an error message.
const recordRoom = 1024

// OpenAuditLog opens an audit log for appending, refusing anything but a
// regular file without following a link: a FIFO would block the open
// (and the command waiting for its line) until a reader came, a symbolic
// link would put the lines wherever it points. O_NONBLOCK keeps the open
// of a FIFO from waiting; it is cleared once the file is known to be
// regular.
func OpenAuditLog(path string) (*AuditLog, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	// Looked at before it is opened for writing: opening a device node
	// (or a terminal, or a FIFO) has effects of its own.
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		var made int
		made, err = unix.Open(path, unix.O_RDWR|unix.O_APPEND|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err == nil {
			return &AuditLog{f: os.NewFile(uintptr(made), path)}, nil
		}
		if !errors.Is(err, unix.EEXIST) {
			return nil, notRegular(path, err)
		}
		fd, err = unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0) // made meanwhile
	}
	if err != nil {
		return nil, notRegular(path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, notRegular(path, nil)
	}
	// The very file looked at, whatever replaced the name meanwhile.
	// Read and write: a write looks at the last byte (appendLine).
	wfd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", fd), unix.O_RDWR|unix.O_APPEND|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &AuditLog{f: os.NewFile(uintptr(wfd), path)}, nil
}

// notRegular says what stands at path instead of a regular file (or why
// it could not be opened) and what to do.
func notRegular(path string, err error) error {
	fix := "remove it, and warden creates a regular file there"
	var what string
	if fi, lerr := os.Lstat(path); lerr == nil {
		switch m := fi.Mode(); {
		case m&fs.ModeSymlink != 0:
			what, fix = "a symbolic link", "warden does not follow it: remove the link (warden then creates a regular file there) or put the file it points to in its place"
		case m&fs.ModeNamedPipe != 0:
			what = "a named pipe (FIFO)"
		case m.IsDir():
			what = "a directory"
		case m&fs.ModeSocket != 0:
			what = "a socket"
		case m&fs.ModeDevice != 0:
			what, fix = "a device", "name a regular file"
		}
	}
	if what == "" {
		if err == nil {
			err = errors.New("not a regular file")
		}
		return fmt.Errorf("%s: %w", path, err)
	}
	return fmt.Errorf("%s is %s, not a regular file; %s", path, what, fix)
}

// write appends a record. It says when the record could not be written
// (and the daemon's log says so too, once until a write succeeds again).
func (a *AuditLog) Write(r AuditRecord) error {
	if a == nil || a.f == nil {
		return nil // no log at all: auditSink said so once
	}
	r.Time = r.Time.UTC()
	if r.Time.IsZero() {
		r.Time = time.Now().UTC()
	}
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	line := append(TerminalSafe(data), '\n')
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.observe != nil {
		a.observe(r)
	}
	err = a.appendLine(line)
	switch {
	case err != nil && !a.failing:
		a.failing = true
		logrus.Warnf("%v; its records are lost until it can be written again", err)
	case err == nil && a.failing:
		a.failing = false
		logrus.Infof("audit log %s is written again", a.f.Name())
	}
	return err
}

// appendLine writes one line with a single write(): a full disk can cut
// it short, never split it among others. A part written is cut off again,
// and a line that does not follow a newline (one cut short by a crash)
// starts with one, so every record stays a line of its own.
func (a *AuditLog) appendLine(line []byte) error {
	fd := int(a.f.Fd())
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return a.writeError(err)
	}
	if st.Size > 0 {
		var last [1]byte
		if n, _ := unix.Pread(fd, last[:], st.Size-1); n == 1 && last[0] != '\n' {
			line = append([]byte{'\n'}, line...)
		}
	}
	n, err := unix.Write(fd, line)
	for err == unix.EINTR {
		n, err = unix.Write(fd, line)
	}
	if err == nil && n == len(line) {
		if a.reserved > 0 { // what this line took of the room is kept again
			a.keep(fd, &st, st.Size+int64(n), a.reserved)
		}
		return nil
	}
	if err == nil {
		err = unix.ENOSPC // a short write: the file system's room ran out
	}
	if n > 0 {
		var now unix.Stat_t
		if unix.Fstat(fd, &now) == nil && now.Size == st.Size+int64(n) { // nobody appended since
			unix.Ftruncate(fd, st.Size)
		}
	}
	return a.writeError(err)
}

func (a *AuditLog) writeError(err error) error {
	return fmt.Errorf("%w: %s: %v", ErrAuditWrite, a.f.Name(), err)
}

// reserve keeps room past the log's end for the record of a command about
// to run, so the record can be written when the command ends, whatever
// fills the file system meanwhile (the command itself, say). No room, no
// command: the error says why. release gives the room back. A file
// system that cannot keep room (no fallocate) is not refused; the
// record's write is then the only check.
func (a *AuditLog) reserve(r AuditRecord) (int64, error) {
	if a == nil || a.f == nil {
		return 0, nil
	}
	data, err := json.Marshal(r)
	if err != nil {
		return 0, err
	}
	n := int64(len(data)) + recordRoom
	a.mu.Lock()
	defer a.mu.Unlock()
	fd := int(a.f.Fd())
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, a.writeError(err)
	}
	err = a.keep(fd, &st, st.Size, a.reserved+n)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		err = nil
	}
	if err != nil {
		return 0, a.writeError(err)
	}
	a.reserved += n
	return n, nil
}

// keep allocates size bytes of the file from off on without growing it,
// unless this log allocated them already: a file system allocates whole
// blocks, so the room of the block a line ends in is there, and most
// lines need no fallocate (~20 us each here, two per command before).
// st is the file as it was just seen.
func (a *AuditLog) keep(fd int, st *unix.Stat_t, off, size int64) error {
	if st.Size < a.keptSize {
		a.kept = 0
	}
	end := off + size
	if end <= a.kept {
		return nil
	}
	if err := unix.Fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, off, size); err != nil {
		return err
	}
	block := int64(st.Blksize)
	if block <= 0 {
		block = 1
	}
	a.kept, a.keptSize = (end+block-1)/block*block, st.Size
	return nil
}

func (a *AuditLog) release(n int64) {
	if a == nil || n == 0 {
		return
	}
	a.mu.Lock()
	a.reserved -= n
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

func (a *AuditLog) Close() {
	if a != nil && a.f != nil {
		a.f.Close()
	}
}

// OpenAudit opens the root's audit log for a runtime without a daemon
// (warden do, the Go API), which writes its exec lines and egress
// decisions itself: a caller that checks it first refuses to run rather
// than run commands no line records. A root that does not exist yet has
// no audit log to be wrong; its first sandbox makes both.
func (rt *Runtime) OpenAudit() error {
	if _, err := os.Stat(filepath.Dir(AuditPath(rt.Root))); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return rt.rootAudit().err
}

// rootAudit is the daemon's audit log, or for a runtime without one the
// root's, opened once.
func (rt *Runtime) rootAudit() *AuditLog {
	rt.auditOnce.Do(func() {
		if rt.audit != nil {
			return
		}
		a, err := OpenAuditLog(AuditPath(rt.Root))
		if err != nil {
			a = &AuditLog{err: fmt.Errorf("audit log: %w", err)}
		}
		rt.audit = a
	})
	return rt.audit
}

// auditSink is where exec lines and egress decisions go; a caller that
// did not check OpenAudit hears once that they are lost.
func (rt *Runtime) auditSink() *AuditLog {
	a := rt.rootAudit()
	if a.err != nil {
		a.warned.Do(func() {
			logrus.Warnf("%v; audit lines (commands and egress decisions) cannot be written", a.err)
		})
	}
	return a
}

// AuditPath is the audit log for a state root: /var/log/warden/audit.log
// for the default root, else audit.log inside the root.
func AuditPath(root string) string {
	if filepath.Clean(root) == DefaultRoot {
		return "/var/log/warden/audit.log"
	}
	return filepath.Join(root, "audit.log")
}
