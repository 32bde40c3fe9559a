package integration

import (
	"slices"
	"strings"
	"testing"
)

// TestOCIInitEarly: the binary libcontainer re-executes as every
// container's init (`warden init`) hands itself over before Go initializes
// the packages an init never uses: containerinit's init runs before the
// metrics encoder's, the dashboard's, the sandbox package's and main's. Go's initialization order is fixed
// by the import graph and the import paths, so the order `warden
// --version` prints under GODEBUG=inittrace=1 is the order a container's
// init goes through until its hand-off.
func TestOCIInitEarly(t *testing.T) {
	r := run(t, []string{"GODEBUG=inittrace=1"}, wardenBinary, "--version")
	if r.Exit != 0 {
		t.Fatalf("warden --version: exit %d: %s", r.Exit, r.Stderr)
	}
	var order []string
	for _, line := range strings.Split(r.Stderr, "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == "init" {
			order = append(order, f[1])
		}
	}
	const handOff = "github.com/warden-sandbox/warden/runtime/sandbox/containerinit"
	at := slices.Index(order, handOff)
	if at < 0 {
		t.Fatalf("no %s in the initialization order (%d packages): the container's init is handed over in main, after every package", handOff, len(order))
	}
	for _, later := range []string{
		"github.com/prometheus/common/expfmt",
		"github.com/warden-sandbox/warden/runtime/dashboard",
		"github.com/warden-sandbox/warden/runtime/sandbox",
		"github.com/warden-sandbox/warden/runtime/oci",
		"main",
	} {
		i := slices.Index(order, later)
		if i < 0 {
			t.Errorf("%s is not in the initialization order; update the test", later)
		} else if i < at {
			t.Errorf("%s is initialized (at %d) before the container's init is handed over (at %d): every container's init pays for it", later, i, at)
		}
	}
	t.Logf("the hand-off is package %d of %d initialized", at+1, len(order))
}
