package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/runtime/sandbox"
)

func TestDefaultRoot(t *testing.T) {
	if defaultRoot != sandbox.DefaultRoot {
		t.Fatalf("C default root %q, sandbox.DefaultRoot %q", defaultRoot, sandbox.DefaultRoot)
	}
}

// The C reading of a duration must be Go's, or refuse (the Go CLI then
// takes the command line).
func TestParseDuration(t *testing.T) {
	for _, s := range []string{
		"0", "1s", "1.5s", "500ms", "2m30s", "1h", "1h2m3.5s", "10us", "10µs", "10μs", "7ns",
		".5s", "5.s", "0.000000001s", "1.0000000019s", "2562047h", "9223372036s",
		"", "s", "1", "-1s", "+1s", "1x", "1.s.", "..5s", "1e3s", "2562048h", "99999999999999999999s",
		"1s ", " 1s", "1ss", "1sm", "0.5", "3m-1s",
	} {
		want, err := time.ParseDuration(s)
		got, ok := parseDuration(s)
		switch {
		case ok && err != nil:
			t.Errorf("%q: C read %d, Go refuses it (%v)", s, got, err)
		case ok && int64(want) != got:
			t.Errorf("%q: C read %d, Go %d", s, got, int64(want))
		case !ok && err == nil && s[0] != '+' && s[0] != '-':
			t.Errorf("%q: C refuses, Go reads %v", s, want)
		}
	}
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"1s", "1.5h", "3m2s", "0", ".1us", "1µs"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for i := 0; i < len(s); i++ {
			if s[i] == 0 {
				return
			}
		}
		want, err := time.ParseDuration(s)
		got, ok := parseDuration(s)
		if ok && (err != nil || int64(want) != got) {
			t.Fatalf("%q: C %d, Go %d (%v)", s, got, int64(want), err)
		}
	})
}

func TestJSONString(t *testing.T) {
	for _, s := range []string{"", "plain", `quote " back \ slash`, "tab\tnew\nline\x01\x1f", "ünïcödé 日本", "<&>", "\x7f"} {
		var back string
		enc := jsonString(s)
		if err := json.Unmarshal([]byte(enc), &back); err != nil || back != s {
			t.Errorf("%q: encoded %s, decoded %q (%v)", s, enc, back, err)
		}
	}
}

// The C check of UTF-8 must be Go's utf8.ValidString: what one refuses the
// other refuses, so the fast path and the Go CLI agree.
func TestValidUTF8(t *testing.T) {
	for _, s := range []string{
		"", "plain", "é", "日本", "𝄞", "\u07ff", "\u0800", "\uffff", "\U00010000", "\U0010ffff", "x\xef\xbf\xbd",
		"x\xff", "\x80", "\xc0\xaf", "\xc1\xbf", "\xe0\x80\xaf", "\xe0\x9f\xbf", "\xed\xa0\x80", "\xed\xbf\xbf",
		"\xf0\x80\x80\xaf", "\xf0\x8f\xbf\xbf", "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xc3", "\xe2\x82", "\xf0\x9f\x98",
		"a\xc3(", "\xe2\x28\xa1", "\xfe", "\xff\xfe",
	} {
		if got, want := validUTF8(s), utf8.ValidString(s); got != want {
			t.Errorf("%q: C %v, Go %v", s, got, want)
		}
	}
}

func FuzzValidUTF8(f *testing.F) {
	for _, s := range []string{"é", "x\xff", "\xed\xa0\x80", "\xf4\x90\x80\x80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.IndexByte(s, 0) >= 0 {
			return // a C string ends there
		}
		if got, want := validUTF8(s), utf8.ValidString(s); got != want {
			t.Errorf("%q: C %v, Go %v", s, got, want)
		}
	})
}

// The C fast path's do must name the folders the Go CLI names:
// filepath.Clean, Abs and Dir, byte for byte.
func TestPaths(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("PWD", wd)
	for _, p := range []string{
		"", ".", "..", "/", "//", "/..", "/../a", "a", "a/", "a//b", "./a", "a/./b", "a/../b", "a/b/../../..",
		"../../x", "/a/b/../c/./d/", "/a/../../b", "a/..", "x/../../y/./z//", "policy.toml", "/srv/skills/web/policy.toml",
		"skills/../web/p.toml", "...", "a/.../b", ".a/..b/",
	} {
		if got, want := cleanPath(p), filepath.Clean(p); got != want {
			t.Errorf("Clean(%q): C %q, Go %q", p, got, want)
		}
		if got, want := dirPath(p), filepath.Dir(p); got != want {
			t.Errorf("Dir(%q): C %q, Go %q", p, got, want)
		}
		if p == "" {
			continue
		}
		want, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := absPath(p); got != want {
			t.Errorf("Abs(%q): C %q, Go %q", p, got, want)
		}
	}
	if maxPolicyFile != policies.MaxPolicyFile {
		t.Errorf("the C fast path reads policies of up to %d bytes, policies.MaxPolicyFile is %d", maxPolicyFile, policies.MaxPolicyFile)
	}
}
