package policies

import (
	"strings"
	"testing"
)

func TestSandboxEngine(t *testing.T) {
	const base = "name = \"p\"\n"
	gv, err := Parse("gv.toml", []byte(base+"[sandbox]\nengine = \"gvisor\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if gv.Sandbox.Engine != EngineGVisor {
		t.Fatalf("engine = %q, want gvisor", gv.Sandbox.Engine)
	}
	plain, err := Parse("plain.toml", []byte(base))
	if err != nil {
		t.Fatal(err)
	}
	explicit, err := Parse("c.toml", []byte(base+"[sandbox]\nengine = \"container\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if plain.Hash() != explicit.Hash() {
		t.Errorf("engine = \"container\" (the default) changes the hash: %s vs %s", explicit.Hash(), plain.Hash())
	}
	if gv.Hash() == plain.Hash() {
		t.Errorf("the engine is not part of the hash")
	}
	text, err := gv.TOML()
	if err != nil || !strings.Contains(string(text), "[sandbox]\nengine = \"gvisor\"") {
		t.Errorf("canonical TOML of a gvisor policy: %v\n%s", err, text)
	}

	for _, bad := range []struct{ doc, want string }{
		{"[sandbox]\nengine = \"kvm\"\n", `unknown engine "kvm"; use one of "container", "gvisor"`},
		{"[sandbox]\nengine = 1\n", "want a string"},
		{"[sandbox]\nisolation = \"gvisor\"\n", "unknown key; valid keys in [sandbox] are engine"},
		{"sandbox = \"gvisor\"\n", "want a table ([sandbox])"},
	} {
		_, err := Parse("bad.toml", []byte(base+bad.doc))
		if err == nil || !strings.Contains(err.Error(), bad.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: error %v, want one line with %q", bad.doc, err, bad.want)
		}
	}

	// Composition and flags only strengthen.
	for _, c := range []struct {
		name string
		got  *Policy
	}{
		{"merge", must(Merge(plain, gv))},
		{"merge reversed", must(Merge(gv, plain))},
		{"intersect under a container ceiling", must(Intersect(gv, plain))},
		{"intersect under a gvisor ceiling", must(Intersect(plain, gv))},
		{"flag on a container policy", plain.WithEngine(EngineGVisor)},
		{"container flag on a gvisor policy", gv.WithEngine(EngineContainer)},
	} {
		if c.got.Sandbox.Engine != EngineGVisor {
			t.Errorf("%s: engine %q, want gvisor", c.name, c.got.Sandbox.Engine)
		}
	}
	if e := must(Merge(plain, explicit)).Sandbox.Engine; e.Or() != EngineContainer {
		t.Errorf("merge of two container policies: %q", e)
	}
	if plain.WithEngine(EngineContainer) != plain || plain.Sandbox.Engine != "" {
		t.Errorf("WithEngine changed a policy it does not strengthen")
	}
}

func must(p *Policy, err error) *Policy {
	if err != nil {
		panic(err)
	}
	return p
}
