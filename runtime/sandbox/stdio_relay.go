package sandbox

import (
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// gVisor imports a host descriptor as a file of its own kernel, with an
// offset of its own that starts at 0 and that the host's open file never
// sees: a command whose output is a regular file (`warden exec ... >
// out.txt`) would write over the start of the file, and the caller's next
// write over the command's output. Its stdout and stderr, even when they
// are one open file on the host (`2>&1`), would each have an offset. So
// regular files do not go in: a pipe does, and warden copies through it,
// with the caller's open file and its offset (or O_APPEND) as they are.

// relayDrain bounds the wait for a command's relayed output once it has
// ended.
const relayDrain = 5 * time.Second

// stdioRelay is the pipes that stand for regular files among a command's
// stdio.
type stdioRelay struct {
	far    []*os.File // the pipe ends passed to the command
	copies sync.WaitGroup
	stdin  []*os.File // the write ends feeding stdin, to stop at the end
}

// relayFiles returns fds with each regular file replaced by a pipe whose
// other end warden copies from or to. The first descriptor is stdin.
func relayFiles(fds []int) ([]int, *stdioRelay, error) {
	r := &stdioRelay{}
	out := append([]int(nil), fds...)
	type fileID struct{ dev, ino uint64 }
	outputs := map[fileID]int{} // stdout and stderr in one file (2>&1) share a pipe: their order stays
	for i, fd := range fds {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			continue
		}
		id := fileID{st.Dev, st.Ino}
		if w, ok := outputs[id]; ok && i > 0 {
			out[i] = w
			continue
		}
		pr, pw, err := os.Pipe()
		if err != nil {
			r.finish(0)
			return nil, nil, err
		}
		// Our own descriptor of the caller's open file: fd is the
		// caller's, closed by it when the call returns.
		dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			pr.Close()
			pw.Close()
			r.finish(0)
			return nil, nil, err
		}
		file := os.NewFile(uintptr(dup), "stdio")
		r.copies.Add(1)
		if i == 0 {
			r.far = append(r.far, pr)
			r.stdin = append(r.stdin, pw)
			out[i] = int(pr.Fd())
			go func() {
				defer r.copies.Done()
				defer file.Close()
				io.Copy(pw, file)
				pw.Close()
			}()
		} else {
			r.far = append(r.far, pw)
			out[i] = int(pw.Fd())
			outputs[id] = out[i]
			go func() {
				defer r.copies.Done()
				defer file.Close()
				io.Copy(file, pr)
				pr.Close()
			}()
		}
	}
	return out, r, nil
}

// sent closes warden's copies of the ends the sandbox now holds.
func (r *stdioRelay) sent() {
	for _, f := range r.far {
		f.Close()
	}
	r.far = nil
}

// finish waits, at most wait, for the output to be copied once the
// command has ended (what it left running was killed, which ends the
// pipes), and stops feeding stdin.
func (r *stdioRelay) finish(wait time.Duration) {
	r.sent()
	for _, w := range r.stdin {
		w.Close() // a copy blocked writing gets EPIPE; one reading the file stops at its next write
	}
	done := make(chan struct{})
	go func() { r.copies.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(wait):
	}
}
