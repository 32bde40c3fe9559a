package policies

import (
	"math/rand"
	"reflect"
	"strings"
	"testing"
)

func TestTOMLCanonical(t *testing.T) {
	p := mustParse(t, `name = "web-fetch"
description = "fetch \"pages\"\tand\u0001more"
[fs]
write = ["$WORK_DIR"]
read = ["$SKILL_DIR", "/usr/share/ca-certificates"]
deny = ["~/.ssh"]
[exec]
allow = []
[network]
allow = ["*.cdn.example.com:443", "api.example.com:443"]
[env]
allow = ["TZ", "LANG"]
set = { PAGER = "cat", EDITOR = "true" }
[limits]
memory = "256MiB"
pids = 64
timeout = "30s"
`)
	got, err := p.TOML()
	if err != nil {
		t.Fatal(err)
	}
	want := `name = "web-fetch"
description = "fetch \"pages\"\tand\u0001more"

[fs]
read = ["/usr/share/ca-certificates", "$SKILL_DIR"]
write = ["$WORK_DIR"]
deny = ["$HOME/.ssh"]

[exec]
allow = []

[network]
allow = ["*.cdn.example.com:443", "api.example.com:443"]

[env]
allow = ["LANG", "TZ"]
set = { "EDITOR" = "true", "PAGER" = "cat" }

[limits]
memory = "256MiB"
pids = 64
cpu = 1.0
timeout = "30s"
idle = "15m"
`
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if h := p.Hash(); !strings.HasPrefix(h, "sha256:") || len(h) != 7+64 {
		t.Errorf("hash %q", h)
	}
	// Order in the file does not change the hash.
	q := mustParse(t, strings.Replace(string(got), `["LANG", "TZ"]`, `["TZ", "LANG"]`, 1))
	if q.Hash() != p.Hash() {
		t.Error("reordering a list changed the hash")
	}
	q.Limits.Pids++
	if q.Hash() == p.Hash() {
		t.Error("changing a limit did not change the hash")
	}
}

func TestTOMLExecAll(t *testing.T) {
	p := mustParse(t, minimal)
	out, err := p.TOML()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "[exec]") {
		t.Errorf("exec.All printed an exec section:\n%s", out)
	}
}

func TestTOMLRefusesInvalid(t *testing.T) {
	for _, p := range []*Policy{
		{Name: "Bad Name", Limits: DefaultLimits},
		{Name: "t"}, // zero limits
		{Name: "t", Limits: DefaultLimits, FS: FS{Read: []string{"relative"}}},
		{Name: "t", Limits: DefaultLimits, Network: Network{Allow: []string{"*:*"}}},
	} {
		if _, err := p.TOML(); err == nil {
			t.Errorf("%+v: no error", p)
		}
		if p.Hash() != "" {
			t.Errorf("%+v: hashed", p)
		}
	}
}

func TestTOMLRoundTripRandom(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	for range 500 {
		p := randomPolicy(r, "r")
		// randomPolicy may list a path in two lists; normalise first.
		p.FS = fsFromRules(p.Rules())
		p.Description = string([]rune{rune(r.Intn(0x3000)), '"', '\\', rune(r.Intn(0x10ffff))})
		out, err := p.TOML()
		if err != nil {
			t.Fatalf("%v\n%+v", err, p)
		}
		q := mustParse(t, string(out))
		want := p.clone()
		for _, l := range []*[]string{&want.FS.Read, &want.FS.Write, &want.FS.Deny} {
			*l = sortedPaths(*l)
		}
		for _, l := range []*[]string{&want.Exec.Allow, &want.Network.Allow, &want.Env.Allow} {
			*l = sorted(*l)
		}
		if !reflect.DeepEqual(permissions(q), want) {
			t.Fatalf("round trip changed the policy:\n%+v\n%+v", want, q)
		}
		out2, err := q.TOML()
		if err != nil || string(out2) != string(out) {
			t.Fatalf("second encoding differs:\n%s\n%s", out, out2)
		}
		if q.Limits != p.Limits || q.Exec.All != p.Exec.All {
			t.Fatalf("limits or exec changed: %+v %+v", p, q)
		}
	}
}

// A Policy built in Go may leave limits at zero: Checked fills them with
// the defaults and refuses what Parse would, naming the key.
func TestChecked(t *testing.T) {
	p := &Policy{Name: "go", Exec: Exec{All: true}, Limits: Limits{CPU: 0.5}}
	q, err := p.Checked()
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultLimits
	want.CPU = 0.5
	if q.Limits != want || p.Limits.Memory != 0 {
		t.Errorf("limits %+v (caller's %+v), want %+v", q.Limits, p.Limits, want)
	}
	p.Limits.Memory = 1024
	if _, err := p.Checked(); err == nil || !strings.Contains(err.Error(), "memory") {
		t.Errorf("memory of 1KiB: %v", err)
	}
}
