package dashboard

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// TokenPath is where a state root keeps the dashboard's token.
func TokenPath(root string) string { return filepath.Join(root, "dashboard.token") }

// tokenBytes is the token's strength: 256 random bits, as hex.
const tokenBytes = 32

// LoadToken reads the root's dashboard token, making one (mode 0600) when
// there is none; created says it was made now, so the caller prints it
// this once. A token file that is not a regular file of this user's, or
// that others may read, is refused rather than used or replaced.
func LoadToken(root string) (token string, created bool, err error) {
	path := TokenPath(root)
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err == nil {
		f := os.NewFile(uintptr(fd), path)
		defer f.Close()
		b := make([]byte, tokenBytes)
		if _, err := rand.Read(b); err != nil {
			os.Remove(path)
			return "", false, err
		}
		token = hex.EncodeToString(b)
		if _, err := f.WriteString(token + "\n"); err != nil {
			os.Remove(path)
			return "", false, fmt.Errorf("dashboard token %s: %w", path, err)
		}
		if err := f.Sync(); err != nil {
			os.Remove(path)
			return "", false, fmt.Errorf("dashboard token %s: %w", path, err)
		}
		return token, true, nil
	}
	if !errors.Is(err, unix.EEXIST) {
		return "", false, fmt.Errorf("dashboard token %s: %w", path, err)
	}
	fd, err = unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", false, fmt.Errorf("dashboard token %s: %w; remove it and warden serve makes a new one", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", false, err
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return "", false, fmt.Errorf("dashboard token %s is not a regular file; remove it and warden serve makes a new one", path)
	case int(st.Uid) != os.Geteuid() || st.Mode&0o077 != 0:
		return "", false, fmt.Errorf("dashboard token %s may be read by others (owner uid %d, mode %04o); remove it and warden serve makes a new one, mode 0600", path, st.Uid, st.Mode&0o7777)
	}
	buf := make([]byte, 256)
	n, _ := f.Read(buf)
	token = strings.TrimSpace(string(buf[:n]))
	if len(token) != 2*tokenBytes {
		return "", false, fmt.Errorf("dashboard token %s does not hold a token; remove it and warden serve makes a new one", path)
	}
	if _, err := hex.DecodeString(token); err != nil {
		return "", false, fmt.Errorf("dashboard token %s does not hold a token; remove it and warden serve makes a new one", path)
	}
	return token, false, nil
}
