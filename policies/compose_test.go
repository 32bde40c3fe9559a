package policies

import (
	"cmp"
	"math/rand"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// A small universe, so random policies overlap often.
var (
	uniPaths = []string{"/", "/a", "/a/b", "/a/b/c", "/a/bc", "/d", "$HOME", "$HOME/.ssh", "$WORK_DIR", "$WORK_DIR/x", "$SKILL_DIR"}
	uniProbe = append(slices.Clone(uniPaths), "/a/b/c/d", "/a/bcd", "/z", "$HOME/.ssh/id", "$HOME/y", "$WORK_DIR/x/y", "$DATA_DIR", "/a/b/x")
	uniExec  = []string{"curl", "jq", "sh", "/usr/bin/curl"}
	uniNet   = []string{"a.com:443", "a.com:*", "x.a.com:443", "*.a.com:443", "*.a.com:*", "*.x.a.com:*", "b.com:80", "10.0.0.0/8:*", "10.1.0.0/16:443", "10.1.2.3:443", "[fd00::/8]:*", "[fd00::1]:443",
		"0.0.0.0/0:*", "[::/0]:443", "127.0.0.1:*", "169.254.169.254:80", "192.0.2.0/24:*", "192.0.2.2:*", "[64:ff9b::/96]:443"}
	uniHost = []string{"a.com", "x.a.com", "y.x.a.com", "b.com", "c.com", "10.1.2.3", "10.9.9.9", "11.0.0.1", "fd00::1", "fd00::2",
		"127.0.0.1", "169.254.169.254", "192.0.2.2", "192.0.2.9", "8.8.8.8", "::1", "64:ff9b::7f00:1", "64:ff9b::808:808"}
	// uniOwn stand for the host's own addresses, which only an exact
	// naming opens.
	uniOwn  = map[string]bool{"10.1.2.3": true, "192.0.2.2": true}
	uniPort = []int{80, 443, 8443}
	uniEnv  = []string{"A", "B", "C", "D"}
)

func randomPolicy(r *rand.Rand, name string) *Policy {
	p := &Policy{Name: name, Limits: Limits{
		Memory:  int64(8+r.Intn(100)) << 20,
		Pids:    int64(1 + r.Intn(100)),
		CPU:     float64(1+r.Intn(8)) / 4,
		Timeout: time.Duration(1+r.Intn(60)) * time.Second,
		Idle:    time.Duration(1+r.Intn(60)) * time.Minute,
	}}
	for _, path := range uniPaths {
		switch r.Intn(6) {
		case 0:
			p.FS.Read = append(p.FS.Read, path)
		case 1:
			p.FS.Write = append(p.FS.Write, path)
		case 2:
			p.FS.Deny = append(p.FS.Deny, path)
		}
	}
	p.Exec.All = r.Intn(4) == 0
	if !p.Exec.All {
		for _, e := range uniExec {
			if r.Intn(2) == 0 {
				p.Exec.Allow = append(p.Exec.Allow, e)
			}
		}
	}
	for _, n := range uniNet {
		if r.Intn(4) == 0 {
			p.Network.Allow = append(p.Network.Allow, n)
		}
	}
	for _, e := range uniEnv {
		switch r.Intn(4) {
		case 0:
			p.Env.Allow = append(p.Env.Allow, e)
		case 1:
			// Keep set values agreeing so Merge succeeds.
			if p.Env.Set == nil {
				p.Env.Set = map[string]string{}
			}
			p.Env.Set[e] = "v" + e
		}
	}
	return p
}

func execAllows(p *Policy, e string) bool { return p.Exec.All || slices.Contains(p.Exec.Allow, e) }

func netAllows(p *Policy, host string, port int) bool {
	for _, s := range p.Network.Allow {
		h, err := ParseHostPattern(s)
		if err == nil && h.Match(host, port) {
			return true
		}
	}
	return false
}

// netOpens says whether a sandbox under p reaches the literal address (or
// name) host: special and own addresses need an address rule that opens
// them, as the egress proxy checks.
func netOpens(p *Policy, host string, port int) bool {
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netAllows(p, host, port)
	}
	if _, special := Classify(a); !special && !uniOwn[host] {
		return netAllows(p, host, port)
	}
	for _, s := range p.Network.Allow {
		h, err := ParseHostPattern(s)
		if err == nil && h.Match(host, port) && h.Opens(a, port, uniOwn[host]) {
			return true
		}
	}
	return false
}

// needsOpener says whether host is an address only an address rule opens.
func needsOpener(host string) bool {
	a, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	_, special := Classify(a)
	return special || uniOwn[host]
}

// checkComposed compares a composed policy with its inputs on every probe.
func checkComposed(t *testing.T, op string, out *Policy, ins []*Policy, union bool) {
	t.Helper()
	combine := func(vals []bool) bool {
		if union {
			return slices.Contains(vals, true)
		}
		return !slices.Contains(vals, false)
	}
	for _, path := range uniProbe {
		want := ins[0].AccessAt(path)
		for _, p := range ins[1:] {
			want = pick(union, want, p.AccessAt(path))
		}
		if got := out.AccessAt(path); got != want {
			t.Fatalf("%s: AccessAt(%q) = %v, want %v\nin: %+v\nout: %+v", op, path, got, want, ins, out.FS)
		}
	}
	for _, e := range uniExec {
		var vals []bool
		for _, p := range ins {
			vals = append(vals, execAllows(p, e))
		}
		if got := execAllows(out, e); got != combine(vals) {
			t.Fatalf("%s: exec %q = %v, inputs %v", op, e, got, vals)
		}
	}
	for _, h := range uniHost {
		for _, port := range uniPort {
			var vals []bool
			for _, p := range ins {
				vals = append(vals, netAllows(p, h, port))
			}
			if got := netAllows(out, h, port); got != combine(vals) && (union || !needsOpener(h) || got) {
				t.Fatalf("%s: network %s:%d = %v, inputs %v\nout %v", op, h, port, got, vals, out.Network.Allow)
			}
			// What the proxy opens: a merge opens what either opens; an
			// intersection never opens what one side alone does not.
			vals = vals[:0]
			for _, p := range ins {
				vals = append(vals, netOpens(p, h, port))
			}
			if got := netOpens(out, h, port); union && got != combine(vals) || !union && got && !combine(vals) {
				t.Fatalf("%s: network %s:%d opened = %v, inputs %v\nin %v\nout %v", op, h, port, got, vals, ins, out.Network.Allow)
			}
		}
	}
	for _, e := range uniEnv {
		var vals []bool
		for _, p := range ins {
			_, set := p.Env.Set[e]
			vals = append(vals, slices.Contains(p.Env.Allow, e) && !set)
		}
		_, set := out.Env.Set[e]
		if got := slices.Contains(out.Env.Allow, e); !set && got != combine(vals) {
			t.Fatalf("%s: env %q passed = %v, inputs %v", op, e, got, vals)
		}
	}
}

func TestComposeProperties(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for i := range 3000 {
		a, b := randomPolicy(r, "a"), randomPolicy(r, "b")
		for _, op := range []struct {
			name  string
			f     func(...*Policy) (*Policy, error)
			union bool
		}{{"merge", Merge, true}, {"intersect", Intersect, false}} {
			ab, err := op.f(a, b)
			if err != nil {
				t.Fatal(err)
			}
			checkComposed(t, op.name, ab, []*Policy{a, b}, op.union)
			ba, err := op.f(b, a)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(ab, ba) {
				t.Fatalf("%s is not commutative:\n%+v\n%+v", op.name, ab, ba)
			}
			aa, err := op.f(a, a)
			if err != nil {
				t.Fatal(err)
			}
			a1, err := op.f(a)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(aa, a1) {
				t.Fatalf("%s is not idempotent:\n%+v\n%+v", op.name, aa, a1)
			}
			checkComposed(t, op.name+" self", aa, []*Policy{a}, op.union)
			// Composing again with an input changes nothing further.
			again, err := op.f(ab, a)
			if err != nil {
				t.Fatal(err)
			}
			checkComposed(t, op.name+" again", again, []*Policy{ab}, op.union)
			if i%100 == 0 {
				// The composed policy is valid and survives a round trip.
				out, err := ab.TOML()
				if err != nil {
					t.Fatalf("%s: %v", op.name, err)
				}
				back := mustParse(t, string(out))
				checkComposed(t, op.name+" round trip", back, []*Policy{ab}, op.union)
			}
		}
		c := randomPolicy(r, "c")
		abc, err := Intersect(a, b, c)
		if err != nil {
			t.Fatal(err)
		}
		checkComposed(t, "intersect3", abc, []*Policy{a, b, c}, false)
		mabc, err := Merge(a, b, c)
		if err != nil {
			t.Fatal(err)
		}
		checkComposed(t, "merge3", mabc, []*Policy{a, b, c}, true)
	}
}

func TestComposeExamples(t *testing.T) {
	web := mustLoad(t, "web-fetch.toml")
	data := mustLoad(t, "data-processor.toml")
	m, err := Merge(web, data)
	if err != nil {
		t.Fatal(err)
	}
	if m.Name != "data-processor+web-fetch" {
		t.Errorf("name %q", m.Name)
	}
	if m.Limits.Memory != 1<<30 || m.Limits.Timeout != 5*time.Minute || m.Limits.Pids != 64 {
		t.Errorf("limits %+v", m.Limits)
	}
	if !slices.Contains(m.Exec.Allow, "curl") || !slices.Contains(m.Exec.Allow, "python3") {
		t.Errorf("exec %v", m.Exec.Allow)
	}
	i, err := Intersect(web, data)
	if err != nil {
		t.Fatal(err)
	}
	// data-processor has no [network]: as a ceiling it cuts nothing there.
	if !reflect.DeepEqual(i.Exec.Allow, []string{"sh"}) || !reflect.DeepEqual(i.Network.Allow, web.Network.Allow) {
		t.Errorf("intersection allows %v, %v", i.Exec.Allow, i.Network.Allow)
	}
	if i.AccessAt("$WORK_DIR/x") != AccessWrite || i.AccessAt("$DATA_DIR") != AccessNone || i.AccessAt("$SKILL_DIR") != AccessRead {
		t.Errorf("intersection fs %+v", i.FS)
	}
	if i.Limits.Memory != 256<<20 || i.Limits.Timeout != 30*time.Second {
		t.Errorf("limits %+v", i.Limits)
	}
}

func TestComposeErrors(t *testing.T) {
	a := mustParse(t, "name = \"a\"\n[env]\nset = { PAGER = \"cat\" }\n")
	b := mustParse(t, "name = \"b\"\n[env]\nset = { PAGER = \"less\" }\n")
	for _, f := range []func(...*Policy) (*Policy, error){Merge, Intersect} {
		if _, err := f(a, b); err == nil || !strings.Contains(err.Error(), "env.set.PAGER") {
			t.Errorf("conflicting env.set: got %v", err)
		}
		if _, err := f(); err == nil {
			t.Error("no policies: no error")
		}
		if _, err := f(a, nil); err == nil {
			t.Error("nil policy: no error")
		}
	}
}

func TestComposeEnvAllowAndSet(t *testing.T) {
	a := mustParse(t, "name = \"a\"\n[env]\nallow = [\"PAGER\", \"LANG\"]\n")
	b := mustParse(t, "name = \"b\"\n[env]\nset = { PAGER = \"cat\" }\n")
	m, err := Merge(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m.Env, Env{Allow: []string{"LANG"}, Set: map[string]string{"PAGER": "cat"}}) {
		t.Errorf("got %+v", m.Env)
	}
	if _, err := m.TOML(); err != nil {
		t.Error(err)
	}
}

func mustLoad(t *testing.T, path string) *Policy {
	t.Helper()
	p, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func pick[T cmp.Ordered](union bool, a, b T) T {
	if union {
		return max(a, b)
	}
	return min(a, b)
}

// A ceiling's omitted section or limit (or zero limit) cuts nothing: the
// result is the intersection with a ceiling that has the policy's own
// rules there (p ∩ p = p). So it still never grants what the policy
// denies, nor what a section the ceiling has denies. What the policy
// itself omits keeps its meaning.
func TestIntersectOmittedProperties(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	coin := func() bool { return r.Intn(2) == 0 }
	randomOmitted := func() Omitted {
		return Omitted{FS: coin(), Exec: coin(), Network: coin(), Env: coin(), Memory: coin(), Pids: coin(), CPU: coin(), Timeout: coin(), Idle: coin()}
	}
	for range 3000 {
		p, c := randomPolicy(r, "p"), randomPolicy(r, "c")
		p.Omitted, c.Omitted = randomOmitted(), randomOmitted()
		if coin() {
			c.Limits.Pids = 0
		}
		got, err := Intersect(p, c)
		if err != nil {
			t.Fatal(err)
		}
		filled := c.clone()
		filled.Omitted = Omitted{}
		o := c.Omitted
		if o.FS {
			filled.FS = p.FS
		}
		if o.Exec {
			filled.Exec = p.Exec
		}
		if o.Network {
			filled.Network.Allow = p.Network.Allow
		}
		if o.Env {
			filled.Env.Allow = p.Env.Allow
		}
		for _, l := range []struct {
			omitted  bool
			dst, src any
		}{{o.Memory, &filled.Limits.Memory, p.Limits.Memory}, {o.Pids || c.Limits.Pids == 0, &filled.Limits.Pids, p.Limits.Pids}, {o.CPU, &filled.Limits.CPU, p.Limits.CPU}, {o.Timeout, &filled.Limits.Timeout, p.Limits.Timeout}, {o.Idle, &filled.Limits.Idle, p.Limits.Idle}} {
			if l.omitted {
				reflect.ValueOf(l.dst).Elem().Set(reflect.ValueOf(l.src))
			}
		}
		pGiven := p.clone()
		pGiven.Omitted = Omitted{}
		want, err := Intersect(pGiven, filled)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(permissions(got), permissions(want)) {
			t.Fatalf("omitted %+v:\n got %+v\nwant %+v", o, got, want)
		}
		checkComposed(t, "intersect omitted", got, []*Policy{p, filled}, false)
		if got.Limits.Memory > p.Limits.Memory || !o.Memory && got.Limits.Memory > c.Limits.Memory {
			t.Fatalf("memory %d from %d and %d (omitted %v)", got.Limits.Memory, p.Limits.Memory, c.Limits.Memory, o.Memory)
		}
	}
}

// Cuts names what a ceiling takes away, and nothing when it leaves a
// section out.
func TestCuts(t *testing.T) {
	p := mustParse(t, `name = "skill"
[fs]
read = ["$HOME"]
write = ["$WORK_DIR"]
[exec]
allow = ["curl", "jq", "sh"]
workspace = true
[network]
allow = ["*.example.com:443"]
[env]
allow = ["LANG", "TZ"]
[limits]
memory = "2GiB"
timeout = "5m"
`)
	ceiling := mustParse(t, `name = "agent"
[fs]
read = ["$HOME", "$WORK_DIR"]
deny = ["$HOME/.ssh"]
[exec]
allow = ["jq", "sh"]
[network]
allow = ["api.example.com:443"]
[limits]
memory = "1GiB"
`)
	got, err := Cuts(p, ceiling)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"fs $HOME/.ssh: read -> none",
		"fs $WORK_DIR: write -> read",
		"exec.allow: removes curl",
		"exec.workspace: off",
		"network.allow: removes *.example.com:443; keeps the narrower api.example.com:443",
		"limits.memory: 2GiB -> 1GiB",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("cuts:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// A ceiling with nothing but a name cuts nothing.
	if got, err := Cuts(p, mustParse(t, `name = "empty"`)); err != nil || len(got) != 0 {
		t.Errorf("empty ceiling cuts %q %v", got, err)
	}
	// Today's empty meanings still hold for the policy itself.
	if got, err := Cuts(mustParse(t, `name = "bare"`), ceiling); err != nil || len(got) != 1 || got[0] != "exec: only jq, sh (was every program)" {
		t.Errorf("bare policy: %q %v", got, err)
	}
}
