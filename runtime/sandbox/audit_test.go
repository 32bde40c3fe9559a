package sandbox

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A sandbox names hosts and arguments that reach the audit log: what a
// terminal acts on is escaped, the rest stays as it was, and the line
// still decodes to the same text.
func TestAuditTerminalSafe(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain ascii", "plain ascii"},
		{"héllo, 世界 🙂", "héllo, 世界 🙂"},
		{"x\u009b2J", `x\u009b2J`},
		{"\u009d0;PWN\u0007", `\u009d0;PWN` + "\u0007"}, // C0 stays: encoding/json escapes it
		{"evil\u202egpj.exe", `evil\u202egpj.exe`},
		{"del\u007f", `del\u007f`},
		{"tag\U000E0001", `tag\udb40\udc01`},
	} {
		if got := string(TerminalSafe([]byte(tc.in))); got != tc.want {
			t.Errorf("%q: got %q, want %q", tc.in, got, tc.want)
		}
	}

	path := filepath.Join(t.TempDir(), "audit.log")
	a, err := OpenAuditLog(path)
	if err != nil {
		t.Fatal(err)
	}
	host := "x\u009b2J\u009d0;PWN\u0007\u202e.evil"
	a.Write(AuditRecord{Event: "net.deny", Host: host, Argv: []string{"echo", "\u009b31m"}})
	a.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, raw := range []string{"\u009b", "\u009d", "\u202e", "\u0007"} {
		if bytes.Contains(data, []byte(raw)) {
			t.Errorf("the audit line holds %q raw: %s", raw, data)
		}
	}
	var rec AuditRecord
	if err := json.Unmarshal(data, &rec); err != nil || rec.Host != host || rec.Argv[1] != "\u009b31m" {
		t.Errorf("the line does not decode to what was logged: %v, %+v", err, rec)
	}
}

// The audit log is a regular file or nothing is written: a FIFO, a
// symbolic link or a folder in its place is refused at once, named, and
// left as it was.
func TestOpenAuditNotRegular(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("kept\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		make func(string) error
		want string
	}{
		{"fifo", func(p string) error { return unix.Mkfifo(p, 0o600) }, "is a named pipe (FIFO), not a regular file; remove it"},
		{"symlink", func(p string) error { return os.Symlink(target, p) }, "is a symbolic link, not a regular file; warden does not follow it"},
		{"dir", func(p string) error { return os.Mkdir(p, 0o700) }, "is a directory, not a regular file; remove it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name)
			if err := tc.make(path); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				a, err := OpenAuditLog(path)
				if err == nil {
					a.Close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), path+" "+tc.want) {
					t.Fatalf("error %v, want %q", err, tc.want)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("OpenAuditLog blocks")
			}
		})
	}
	if data, _ := os.ReadFile(target); string(data) != "kept\n" {
		t.Errorf("the link's target now holds %q", data)
	}

	// A runtime without a daemon: OpenAudit says why, and the lines of a
	// caller that did not ask are dropped.
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(AuditPath(root), 0o600); err != nil {
		t.Fatal(err)
	}
	rt := &Runtime{Root: root}
	if err := rt.OpenAudit(); err == nil || !strings.HasPrefix(err.Error(), "audit log: "+AuditPath(root)+" is a named pipe") {
		t.Fatalf("OpenAudit: %v", err)
	}
	rt.auditSink().Write(AuditRecord{Event: "exec"})
	if err := (&Runtime{Root: filepath.Join(dir, "new")}).OpenAudit(); err != nil {
		t.Errorf("OpenAudit of a root not made yet: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "new")); !os.IsNotExist(err) {
		t.Errorf("OpenAudit made the root: %v", err)
	}
}

// A line cut short (a crash in the middle of a write) does not swallow
// the next record: it starts on a line of its own.
func TestAuditAfterTornLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	torn := `{"time":"2026-01-01T00:00:00Z","event":"exec","sess`
	if err := os.WriteFile(path, []byte(torn), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := OpenAuditLog(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for _, id := range []string{"s1", "s2"} {
		if err := a.Write(AuditRecord{Event: "session.create", Session: id}); err != nil {
			t.Fatal(err)
		}
	}
	data, _ := os.ReadFile(path)
	lines := strings.Split(string(data), "\n")
	if len(lines) != 4 || lines[0] != torn || lines[3] != "" {
		t.Fatalf("audit log after a torn line:\n%s", data)
	}
	for i, id := range []string{"s1", "s2"} {
		var rec AuditRecord
		if err := json.Unmarshal([]byte(lines[i+1]), &rec); err != nil || rec.Session != id {
			t.Errorf("line %d: %q: %v", i+2, lines[i+1], err)
		}
	}
}

// The room reserved for running commands' records stays allocated past
// the log's end after every line, whether the line needed a fallocate or
// fell in a block the log had allocated already; also after the file was
// truncated (rotated) behind the log's back.
func TestAuditRoomKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	a, err := OpenAuditLog(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	check := func(when string) {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		if st.Blocks*512 < st.Size+a.reserved {
			t.Fatalf("%s: %d bytes allocated for a %d-byte log with %d reserved", when, st.Blocks*512, st.Size, a.reserved)
		}
	}
	rec := AuditRecord{Event: "exec", Session: "s", Policy: "p", Argv: []string{"/bin/true"}, Cwd: "/workspace"}
	var held []int64
	for i := 0; i < 200; i++ {
		if i == 100 {
			if err := os.Truncate(path, 0); err != nil {
				t.Fatal(err)
			}
		}
		n, err := a.reserve(rec)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, n)
		check("after a reserve")
		if err := a.Write(AuditRecord{Event: "exec.start", Session: "s", Argv: rec.Argv}); err != nil {
			t.Fatal(err)
		}
		check("after a start line")
		if i%3 != 0 { // some commands run on while later ones start
			a.Write(rec)
			check("after an exec line")
			a.release(held[0])
			held = held[1:]
		}
	}
}
