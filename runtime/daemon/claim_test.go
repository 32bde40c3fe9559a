package daemon

import (
	"fmt"
	"testing"

	"github.com/warden-sandbox/warden/runtime/sandbox"
)

// TestGuessesBounded: the claim specs kept stay within maxGuesses, the
// one just put is kept, and one put again replaces its older spec.
func TestGuessesBounded(t *testing.T) {
	var g guesses
	specs := make([]*sandbox.ClaimSpec, maxGuesses+10)
	for i := range specs {
		specs[i] = &sandbox.ClaimSpec{}
		key := fmt.Sprint(i)
		g.put(key, specs[i])
		if g.get(key) != specs[i] {
			t.Fatalf("the spec just put for %s is not kept", key)
		}
		if len(g.last) > maxGuesses {
			t.Fatalf("%d specs kept, at most %d", len(g.last), maxGuesses)
		}
	}
	newer := &sandbox.ClaimSpec{}
	last := fmt.Sprint(len(specs) - 1)
	before := len(g.last)
	g.put(last, newer)
	if g.get(last) != newer || len(g.last) != before {
		t.Errorf("putting a kept key again: %d specs (was %d), kept the newer: %v", len(g.last), before, g.get(last) == newer)
	}
	g.drop(last)
	if g.get(last) != nil {
		t.Error("a dropped spec is still kept")
	}
}
