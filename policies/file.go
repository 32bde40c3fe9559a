package policies

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Caps for ReadFile. Policies, SKILL.md front matter and configuration
// files are a few KiB; an OCI config.json or process.json may carry large
// annotations, hooks or environments.
const (
	MaxPolicyFile = 1 * mib
	MaxSpecFile   = 16 * mib
)

// ReadFile reads a file a user named, whole, refusing anything but a
// regular file (/dev/zero never ends, a FIFO blocks) and anything larger
// than limit bytes, so a bad path cannot exhaust the host's memory. what
// names the file in errors ("policy", "config.json"); a missing file's
// error matches fs.ErrNotExist.
func ReadFile(path, what string, limit int64) ([]byte, error) {
	// Stat first so a device is refused without being opened at all;
	// O_NONBLOCK keeps a FIFO swapped in meanwhile from blocking the open.
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, path, unwrapPath(err))
	}
	if err := checkRegular(path, what, limit, fi); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, path, unwrapPath(err))
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, path, unwrapPath(err))
	}
	if err := checkRegular(path, what, limit, fi); err != nil {
		return nil, err
	}
	// The size may be 0 (/proc) or grow while read: read at most limit+1.
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, path, unwrapPath(err))
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s %s is larger than %s, the most a %s may be", what, path, formatFileSize(limit), what)
	}
	return data, nil
}

func checkRegular(path, what string, limit int64, fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s %s: not a regular file (%s); give the path of a file", what, path, fileKind(fi.Mode()))
	}
	if fi.Size() > limit {
		return fmt.Errorf("%s %s is %s; a %s may be at most %s", what, path, formatFileSize(fi.Size()), what, formatFileSize(limit))
	}
	return nil
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "a special file"
}

// formatFileSize prints a size for people: "40 MiB", "1.5 MiB", "812 KiB",
// "300 bytes".
func formatFileSize(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"GiB", gib}, {"MiB", mib}, {"KiB", kib}} {
		if n >= u.size {
			// Rounded up, so a file over a cap never reads as the cap.
			s := strconv.FormatFloat(math.Ceil(float64(n)*10/float64(u.size))/10, 'f', 1, 64)
			return strings.TrimSuffix(s, ".0") + " " + u.name
		}
	}
	return strconv.FormatInt(n, 10) + " bytes"
}
