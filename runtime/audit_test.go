package runtime

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
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
	a, err := openAudit(path)
	if err != nil {
		t.Fatal(err)
	}
	host := "x\u009b2J\u009d0;PWN\u0007\u202e.evil"
	a.write(AuditRecord{Event: "net.deny", Host: host, Argv: []string{"echo", "\u009b31m"}})
	a.close()
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
