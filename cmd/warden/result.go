package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/runtime/daemon"
	"github.com/warden-sandbox/warden/runtime/sandbox"
)

// The result channel (`exec --result`, `do --result`): one JSON object
// saying how the call ended, so a program need not tell a command's own
// 125, 126 or 127 from warden's by the exit status. docs/cli.md
// describes it.

var resultFlag = &cli.StringFlag{Name: "result", Usage: "write how the call ended, as one JSON object, to `FILE` (new or empty) or fd:N (an open descriptor, N >= 3)"}

// callResult is the object written. Exit is warden's own exit status,
// whatever ended the call; Error is set exactly when warden failed: no
// command ran, or how it ended is not known.
type callResult struct {
	Exit       int            `json:"exit"`
	Signal     int            `json:"signal,omitempty"`
	KilledBy   string         `json:"killedBy,omitempty"` // timeout, memory
	DurationMs *float64       `json:"durationMs,omitempty"`
	Error      *resultFailure `json:"error,omitempty"`
}

type resultFailure struct {
	Code    daemon.Code `json:"code"`
	Message string      `json:"message"`
}

// inputError marks an error of the command line: invalid input.
func inputError(err error) error {
	if err == nil {
		return nil
	}
	return &daemon.Error{Code: daemon.CodeInvalidInput, Message: err.Error()}
}

// openResult opens where --result points, before anything else is done:
// a value that cannot be used is refused in one line and nothing is
// written anywhere. nil when the flag is not given.
func openResult(cliContext *cli.Context) (*os.File, error) {
	if !cliContext.IsSet("result") {
		return nil, nil
	}
	v := cliContext.String("result")
	switch {
	case v == "":
		return nil, errors.New("--result needs a FILE or fd:N")
	case v == "-":
		return nil, errors.New("--result -: stdout is the command's own; name a FILE, or a descriptor of yours: --result fd:3 3>&1 >OUTPUT")
	case strings.HasPrefix(v, "fd:"):
		n, err := strconv.Atoi(v[3:])
		if err != nil || n < 0 || v[3:] != strconv.Itoa(n) {
			return nil, fmt.Errorf("--result %s: N in fd:N is a descriptor number, such as fd:3", v)
		}
		if n <= 2 {
			return nil, fmt.Errorf("--result %s: descriptors 0, 1 and 2 are the command's stdin, stdout and stderr; open another (3>FILE) and pass fd:3", v)
		}
		fl, err := unix.FcntlInt(uintptr(n), unix.F_GETFL, 0)
		if err != nil {
			return nil, fmt.Errorf("--result %s: descriptor %d is not open; open it for writing (%d>FILE)", v, n, n)
		}
		if fl&unix.O_ACCMODE == unix.O_RDONLY {
			return nil, fmt.Errorf("--result %s: descriptor %d is open for reading only; open it for writing (%d>FILE)", v, n, n)
		}
		// Only a file, pipe, socket or terminal the caller opened: warden's
		// own descriptors (the Go runtime's epoll, eventfd, pidfds) are
		// open too when it starts and must never be taken for the caller's.
		var st unix.Stat_t
		link, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", n))
		if unix.Fstat(n, &st) != nil || strings.HasPrefix(link, "anon_inode:") || !resultFileType(st.Mode) {
			return nil, fmt.Errorf("--result %s: descriptor %d is not a file, pipe or socket of yours; open one for writing (%d>FILE)", v, n, n)
		}
		// Not to a daemon this call starts, or a sandbox's processes: a
		// pipe's reader would wait for them to close it.
		unix.CloseOnExec(n)
		return os.NewFile(uintptr(n), v), nil
	}
	// A file: made new, or one that is empty (mktemp's); never one with
	// something in it, and never through a symlink.
	if fi, err := os.Lstat(v); err == nil && (!fi.Mode().IsRegular() || fi.Size() > 0) {
		what := "is not empty; remove it or name a new file"
		if !fi.Mode().IsRegular() {
			what = "is not a regular file; name a new file, or pass a descriptor (fd:N)"
		}
		return nil, fmt.Errorf("--result %s %s", v, what)
	}
	f, err := os.OpenFile(v, os.O_WRONLY|os.O_CREATE|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0o644)
	if err != nil {
		return nil, fmt.Errorf("--result: %v", err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || fi.Size() > 0 {
		f.Close()
		return nil, fmt.Errorf("--result %s changed while warden opened it; name a new file", v)
	}
	return f, nil
}

// withResult runs a call that may write a result: run returns how the
// command ended (nil when none ran) or why warden failed. The result is
// written last, after the command's own output.
func withResult(run func(*cli.Context) (*sandbox.ExecResult, error)) cli.ActionFunc {
	return func(cliContext *cli.Context) error {
		out, err := openResult(cliContext)
		if err != nil {
			return err
		}
		res, err := run(cliContext)
		if err == nil && res != nil {
			err = resultError(*res)
		}
		if out == nil {
			return err
		}
		defer out.Close()
		doc := makeResult(res, err)
		data, _ := json.Marshal(doc)
		if _, werr := out.Write(append(data, '\n')); werr != nil {
			return fmt.Errorf("--result %s: %v; the call ended with exit status %d", cliContext.String("result"), werr, doc.Exit)
		}
		return err
	}
}

// makeResult describes how a call ended: res is the command's end (nil
// when it did not end as a command: it never started, or warden failed
// after), err what warden returns.
func makeResult(res *sandbox.ExecResult, err error) callResult {
	r := callResult{Exit: exitStatus(err)}
	if res != nil {
		ms := float64(res.Duration.Microseconds()) / 1000
		r.DurationMs = &ms
		r.Signal = res.Signal
		switch {
		case res.TimedOut:
			r.KilledBy = "timeout"
		case res.OOM:
			r.KilledBy = "memory"
		}
		if code := daemon.ResultCode(*res); code != "" {
			r.Error = &resultFailure{Code: code, Message: res.Error}
		}
		return r
	}
	if err != nil {
		r.Error = &resultFailure{Code: daemon.CodeOf(err), Message: err.Error()}
	}
	return r
}

// resultFileType reports whether a descriptor of this type can be the
// caller's result channel.
func resultFileType(mode uint32) bool {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG, unix.S_IFIFO, unix.S_IFSOCK, unix.S_IFCHR:
		return true
	}
	return false
}
