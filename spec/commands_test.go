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
// file that is no program is refused, and a bundle without the agent gets
// no stub.
func TestCommandStubs(t *testing.T) {
	host := fakeHost(t)
	os.MkdirAll(filepath.Join(host.Root, "usr/lib/git-core"), 0o755)
	for p, data := range map[string]string{
		"usr/bin/git":          "\x7fELF git",
		"usr/lib/git-core/git": "\x7fELF git", // a copy: same bytes
		"usr/lib/git-core/gix": "\x7fELF gix", // same size, other bytes
		"usr/bin/notes":        "just text",
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
	// Another allowed name of the same program (its copy) gets the stub too.
	b, err = gen("[exec]\nallow = [\"git\", \"/usr/lib/git-core/git\", \"/usr/lib/git-core/gix\"]\n[commands]\nask = [\"git push **\"]\n", agent)
	if err != nil {
		t.Fatal(err)
	}
	if got := stubsAt(b); !slices.Equal(got, []string{"/usr/bin/git", "/usr/lib/git-core/git"}) {
		t.Errorf("under exec.allow with git's copy allowed, stubs at %v", got)
	}

	if _, err := gen("[commands]\nask = [\"gix x\"]\n", agent); err != nil {
		t.Errorf("a compiled program: %v", err)
	}
	if _, err := gen("[commands]\nask = [\"notes x\"]\n", agent); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "neither an ELF executable nor a #! script") {
		t.Errorf("neither a program nor a script: %v", err)
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

// TestCommandStubsScript: a ruled script (npm: /usr/bin/npm a symlink to
// npm-cli.js, #!/usr/bin/env node) gets the stub where it really is, and
// its text beside it, readable and noexec, through an overlay of its
// folder; under exec.allow the stub takes the allowed place and the text
// is the script where it is.
func TestCommandStubsScript(t *testing.T) {
	host := fakeHost(t)
	bin := filepath.Join(host.Root, "usr/lib/node_modules/npm/bin")
	os.MkdirAll(bin, 0o755)
	os.WriteFile(filepath.Join(bin, "npm-cli.js"), []byte("#!/usr/bin/env node\nrequire('../lib/cli.js')(process)\n"), 0o755)
	os.WriteFile(filepath.Join(bin, "npx-cli.js"), []byte("#!/usr/bin/env  node  \nrequire('../lib/npx.js')\n"), 0o755)
	os.Symlink("../lib/node_modules/npm/bin/npm-cli.js", filepath.Join(host.Root, "usr/bin/npm"))
	os.Symlink("../lib/node_modules/npm/bin/npx-cli.js", filepath.Join(host.Root, "usr/bin/npx"))
	os.WriteFile(filepath.Join(host.Root, "usr/bin/wrap"), []byte("#!/bin/sh -e\n. \"$(dirname \"$0\")/lib.sh\"\n"), 0o755)
	const agent = "/usr/local/bin/warden"
	gen := func(text string) *Bundle {
		t.Helper()
		p, err := policies.Parse("p.toml", []byte("name = \"p\"\n"+text))
		if err != nil {
			t.Fatal(err)
		}
		b, err := Generate(Options{Policy: p, Host: host, BundleDir: "/bundle", Agent: agent})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	const dir = "/usr/lib/node_modules/npm/bin"
	b := gen("[commands]\ndeny = [\"npm publish **\", \"npx x\", \"wrap x\"]\n")
	progs, err := CommandPrograms(b.Spec)
	if err != nil || len(progs) != 3 {
		t.Fatalf("programs: %+v, %v", progs, err)
	}
	npm, npx, wrap := progs[0], progs[1], progs[2]
	if !slices.Equal(npm.Stubs, []string{dir + "/npm-cli.js"}) || !slices.Contains(npm.Names, "/usr/bin/npm") || !slices.Contains(npm.Names, "npm") {
		t.Errorf("npm: %+v", npm)
	}
	if want := []string{"/usr/bin/env", "node", dir + "/.warden.npm-cli.js"}; !slices.Equal(npm.Script, want) {
		t.Errorf("npm's script %q, want %q", npm.Script, want)
	}
	if want := []string{"/usr/bin/env", "node", dir + "/.warden.npx-cli.js"}; !slices.Equal(npx.Script, want) {
		t.Errorf("npx's script %q, want %q", npx.Script, want)
	}
	if want := []string{"/bin/sh", "-e", "/usr/bin/.warden.wrap"}; !slices.Equal(wrap.Script, want) {
		t.Errorf("wrap's script %q, want %q", wrap.Script, want)
	}
	// One overlay per folder, before the texts' binds and the stubs.
	var order []string
	for _, m := range b.Spec.Mounts {
		switch {
		case m.Type == "overlay":
			order = append(order, "overlay "+m.Destination)
			if !slices.Contains(m.Options, "ro") || !slices.Contains(m.Options, "lowerdir=/bundle/masks/script-0:"+host.Root+dir) && m.Destination == dir {
				t.Errorf("overlay %+v", m)
			}
		case strings.Contains(m.Destination, ".warden."):
			order = append(order, "text "+m.Destination)
			if !slices.Contains(m.Options, "noexec") || !slices.Contains(m.Options, "ro") {
				t.Errorf("the text is bound %v", m.Options)
			}
		case m.Source == agent && m.Destination != AgentPath:
			order = append(order, "stub "+m.Destination)
		}
	}
	want := []string{"overlay " + dir, "text " + dir + "/.warden.npm-cli.js", "text " + dir + "/.warden.npx-cli.js",
		"overlay /usr/bin", "text /usr/bin/.warden.wrap", "stub " + dir + "/npm-cli.js", "stub " + dir + "/npx-cli.js", "stub /usr/bin/wrap"}
	if !slices.Equal(order, want) {
		t.Errorf("mounts\n%q\nwant\n%q", order, want)
	}
	for _, e := range []string{"script-0", "script-0/.warden.npm-cli.js", "script-0/.warden.npx-cli.js", "script-2/.warden.wrap"} {
		if !slices.ContainsFunc(b.Masks, func(m Entry) bool { return m.Path == e }) {
			t.Errorf("no %s in the masks %v", e, b.Masks)
		}
	}

	// exec.allow: the stub at /usr/bin/npm; the script is read where it is
	// (exec.allow does not run it there).
	b = gen("[exec]\nallow = [\"npm\", \"wrap\"]\n[commands]\ndeny = [\"npm publish **\", \"wrap x\"]\n")
	progs, _ = CommandPrograms(b.Spec)
	if len(progs) != 2 || !slices.Equal(progs[0].Stubs, []string{"/usr/bin/npm"}) || !slices.Equal(progs[0].Script, []string{"/usr/bin/env", "node", dir + "/npm-cli.js"}) {
		t.Fatalf("under exec.allow: %+v", progs)
	}
	if want := []string{"/bin/sh", "-e", "/usr/bin/.warden.wrap"}; !slices.Equal(progs[1].Script, want) ||
		!slices.ContainsFunc(b.Rootfs, func(e Entry) bool { return e.Path == "/usr/bin/.warden.wrap" && e.Kind == File }) {
		t.Errorf("wrap under exec.allow: %q", progs[1].Script)
	}
	for _, m := range b.Spec.Mounts {
		if m.Type == "overlay" {
			t.Errorf("under exec.allow, an overlay at %s", m.Destination)
		}
	}
}

func TestHeldProgram(t *testing.T) {
	for _, c := range []struct {
		head string
		want []string
		err  string
	}{
		{"\x7fELF\x02\x01", nil, ""},
		{"#!/usr/bin/env node\nx", []string{"/usr/bin/env", "node"}, ""},
		{"#! /bin/sh\n", []string{"/bin/sh"}, ""},
		{"#!/bin/sh\t-e  \n", []string{"/bin/sh", "-e"}, ""},
		{"#!/usr/bin/env -S node --x\n", []string{"/usr/bin/env", "-S node --x"}, ""},
		{"#!node\n", nil, "not an absolute path"},
		{"#!/bin/sh" + strings.Repeat(" ", 300) + "\n", nil, "longer than 255 bytes"},
		{"echo hi\n", nil, "neither an ELF executable nor a #! script"},
	} {
		f := filepath.Join(t.TempDir(), "p")
		os.WriteFile(f, []byte(c.head), 0o755)
		got, err := heldProgram("p", f)
		if c.err != "" {
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: %v, want an error saying %q", c.head, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%q: %q %v, want %q", c.head, got, err, c.want)
		}
	}
}
