package spec

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/warden-sandbox/warden/policies"
)

// TestCommandStubs: the stub stands wherever the ruled program is in the
// sandbox (its copies too), exec.allow's bind of it becomes the stub's, a
// script is refused, and a bundle without the agent gets no stub.
func TestCommandStubs(t *testing.T) {
	host := fakeHost(t)
	os.MkdirAll(filepath.Join(host.Root, "usr/lib/git-core"), 0o755)
	for p, data := range map[string]string{
		"usr/bin/git":          "\x7fELF git",
		"usr/lib/git-core/git": "\x7fELF git",     // a copy: same bytes
		"usr/lib/git-core/gix": "\x7fELF gix",     // same size, other bytes
		"usr/bin/npm":          "#!/usr/bin/node", // a script
	} {
		if err := os.WriteFile(filepath.Join(host.Root, p), []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	const agent = "/usr/local/bin/warden"
	gen := func(text, agentPath string) (*Bundle, error) {
		t.Helper()
		p, err := policies.Parse("p.toml", []byte("name = \"p\"\n"+text))
		if err != nil {
			t.Fatal(err)
		}
		return Generate(Options{Policy: p, Host: host, BundleDir: "/bundle", Agent: agentPath})
	}
	stubsAt := func(b *Bundle) []string {
		var out []string
		for _, m := range b.Spec.Mounts {
			if m.Source == agent && m.Destination != AgentPath {
				out = append(out, m.Destination)
			}
		}
		slices.Sort(out)
		return out
	}

	b, err := gen("[commands]\ndeny = [\"git config --global **\"]\n", agent)
	if err != nil {
		t.Fatal(err)
	}
	progs, err := CommandPrograms(b.Spec)
	if err != nil || len(progs) != 1 {
		t.Fatalf("programs: %+v, %v", progs, err)
	}
	want := []string{"/usr/bin/git", "/usr/lib/git-core/git"}
	if !slices.Equal(progs[0].Stubs, want) || !slices.Equal(stubsAt(b), want) || progs[0].File != filepath.Join(host.Root, "usr/bin/git") {
		t.Errorf("stubs: %+v, mounted at %v; want %v", progs[0], stubsAt(b), want)
	}
	if !slices.Contains(progs[0].Names, "git") || !slices.Contains(progs[0].Names, "/usr/lib/git-core/git") {
		t.Errorf("names: %v", progs[0].Names)
	}
	if !slices.ContainsFunc(b.Rootfs, func(e Entry) bool { return "/"+strings.TrimPrefix(e.Path, "/") == StubMarker }) {
		t.Errorf("no %s in the rootfs", StubMarker)
	}

	// Under exec.allow: git's one place, whose bind now shows the stub.
	b, err = gen("[exec]\nallow = [\"git\"]\n[commands]\nask = [\"git push **\"]\n", agent)
	if err != nil {
		t.Fatal(err)
	}
	if got := stubsAt(b); !slices.Equal(got, []string{"/usr/bin/git"}) {
		t.Errorf("under exec.allow, stubs at %v", got)
	}
	if n := countDest(b.Spec.Mounts, "/usr/bin/git"); n != 1 {
		t.Errorf("%d mounts at /usr/bin/git", n)
	}

	if _, err := gen("[commands]\nask = [\"npm publish **\"]\n", agent); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "is a script") {
		t.Errorf("a script: %v", err)
	}
	if _, err := gen("[commands]\nask = [\"npm publish **\"]\n", ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("a script, no agent: %v", err)
	}
	b, err = gen("[commands]\ndeny = [\"git config --global **\"]\n", "")
	if err != nil || len(stubsAt(b)) != 0 || b.Spec.Annotations[AnnotationCommands] != "" || len(b.Warnings) == 0 {
		t.Errorf("a bundle without the agent: stubs %v, warnings %v, %v", stubsAt(b), b.Warnings, err)
	}
}

func countDest(ms []specs.Mount, dest string) int {
	n := 0
	for _, m := range ms {
		if m.Destination == dest {
			n++
		}
	}
	return n
}
