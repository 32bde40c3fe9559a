package policies

import (
	"fmt"
	"strings"
)

// Engine is the isolation a policy's sandboxes run under.
type Engine string

const (
	// EngineContainer runs sandboxes as containers on the host's kernel
	// (namespaces, seccomp, Landlock, cgroups): the default.
	EngineContainer Engine = "container"
	// EngineGVisor runs them under gVisor's application kernel (runsc),
	// which stands between the sandbox and the host's kernel.
	EngineGVisor Engine = "gvisor"
)

// Engines lists the engines, weakest first.
var Engines = []Engine{EngineContainer, EngineGVisor}

// Sandbox is the policy's [sandbox] table.
type Sandbox struct {
	// Engine is "" (the default: container) or one of Engines.
	Engine Engine
}

// ParseEngine checks an engine's name.
func ParseEngine(s string) (Engine, error) {
	for _, e := range Engines {
		if s == string(e) {
			return e, nil
		}
	}
	names := make([]string, len(Engines))
	for i, e := range Engines {
		names[i] = fmt.Sprintf("%q", e)
	}
	return "", fmt.Errorf("unknown engine %q; use one of %s", s, strings.Join(names, ", "))
}

// Or is the default engine when e is unset.
func (e Engine) Or() Engine {
	if e == "" {
		return EngineContainer
	}
	return e
}

func (e Engine) rank() int {
	for i, x := range Engines {
		if e.Or() == x {
			return i
		}
	}
	return 0
}

// Strongest is the strongest of the engines: composing policies, or a
// flag on top of a policy, can only strengthen the isolation.
func Strongest(es ...Engine) Engine {
	out := Engine("")
	for _, e := range es {
		if e.rank() > out.rank() {
			out = e
		}
	}
	return out
}

// WithEngine returns p under the stronger of its engine and e (a copy
// when that changes it): a flag may turn container into gvisor, never the
// reverse.
func (p *Policy) WithEngine(e Engine) *Policy {
	s := Strongest(p.Sandbox.Engine, e)
	if s.Or() == p.Sandbox.Engine.Or() {
		return p
	}
	q := *p
	q.Sandbox.Engine = s
	return &q
}

var sandboxKeys = []string{"engine"}

func decodeSandbox(d *decoder, t *table, p *Policy) error {
	n := t.get("sandbox")
	if n == nil {
		return nil
	}
	st, err := d.table(n, "[sandbox]", sandboxKeys)
	if err != nil {
		return err
	}
	if en := st.get("engine"); en != nil {
		s, err := d.str(en)
		if err != nil {
			return err
		}
		e, err := ParseEngine(s)
		if err != nil {
			return d.errf(en, "%v", err)
		}
		if e != EngineContainer {
			p.Sandbox.Engine = e // the default is kept as "", so it hashes as before
		}
	}
	return nil
}
