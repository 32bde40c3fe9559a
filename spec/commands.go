package spec

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/warden-sandbox/warden/spec/hostfs"
)

// Command rules ([commands]) hold however a program is started because the
// sandbox never sees the ruled program's bytes: warden's own binary (the
// stub, StubMarker) is bound over every place the program has in the
// sandbox, and the agent runs the real program from a copy the host hands
// it only for a call the rules (or a human) allow. A copy of the stub is
// only the stub again; the dynamic loader cannot run a static binary.

// AnnotationCommands holds the ruled programs as JSON ([]CommandProgram).
const AnnotationCommands = "dev.warden.commands"

// StubMarker exists in the root of a sandbox with command rules: warden's
// binary started there (not as PID 1) is a stub.
const StubMarker = "/.warden/commands"

// CommandProgram is one program the rules name, as this host has it.
type CommandProgram struct {
	// Names are what the rules may call it: the names and paths they
	// used, its base name, and every sandbox path of a stub.
	Names []string `json:"names"`
	File  string   `json:"file"`  // host path of the real program
	Stubs []string `json:"stubs"` // sandbox paths the stub covers
}

// CommandPrograms reads the annotation.
func CommandPrograms(sp *specs.Spec) ([]CommandProgram, error) {
	v := sp.Annotations[AnnotationCommands]
	if v == "" {
		return nil, nil
	}
	var out []CommandProgram
	if err := json.Unmarshal([]byte(v), &out); err != nil {
		return nil, fmt.Errorf("%s: %w", AnnotationCommands, err)
	}
	return out, nil
}

// commandStubs places the stubs. Command rules need the agent (sessions,
// warden do); a bundle for another runtime cannot hold them.
func (g *generator) commandStubs() error {
	c := g.o.Policy.Commands
	if c.Empty() {
		return nil
	}
	if g.o.Agent == "" {
		// Checked all the same: a rule no session could hold is an
		// error wherever the policy is looked at (policy check).
		for _, name := range c.Programs() {
			if _, file, err := g.o.Host.lookExec(name); err == nil {
				if err := compiledProgram(name, g.o.Host.path(file)); err != nil {
					return err
				}
			}
		}
		g.warnf("commands: the rules hold only in warden's own sessions (warden exec, warden do); this bundle runs without them")
		return nil
	}
	var progs []CommandProgram
	byFile := map[string]int{}
	for _, name := range c.Programs() {
		at, file, err := g.o.Host.lookExec(name)
		if err != nil {
			g.warnf("commands: %q is not installed on this host; its rules have nothing to hold", name)
			continue
		}
		if !g.o.Policy.Exec.All && !slices.Contains(g.execPaths, at) {
			continue // not in exec.allow: it cannot run at all
		}
		if err := compiledProgram(name, g.o.Host.path(file)); err != nil {
			return err
		}
		i, ok := byFile[file]
		if !ok {
			i = len(progs)
			byFile[file] = i
			stubs := []string{at}
			if g.o.Policy.Exec.All {
				stubs = append(stubs, g.o.Host.copiesOf(file)...)
			}
			slices.Sort(stubs)
			progs = append(progs, CommandProgram{File: g.o.Host.path(file), Stubs: slices.Compact(stubs)})
		}
		p := &progs[i]
		p.Names = append(p.Names, name, filepath.Base(at))
		p.Names = append(p.Names, p.Stubs...)
	}
	for i := range progs {
		p := &progs[i]
		slices.Sort(p.Names)
		p.Names = slices.Compact(p.Names)
		for _, s := range p.Stubs {
			if strings.ContainsAny(s, ":=") {
				return fmt.Errorf("%w: commands: %s has ':' or '=' in its path; rules cannot hold it", ErrInvalid, s)
			}
			// exec.allow's bind of the program becomes the stub's.
			if i := slices.IndexFunc(g.b.Spec.Mounts, func(m specs.Mount) bool { return m.Destination == s }); i >= 0 {
				g.b.Spec.Mounts[i].Source = g.o.Agent
				continue
			}
			if !g.underBind(s) {
				g.addRootfs(Entry{Path: s, Kind: File})
			}
			g.mount(specs.Mount{Destination: s, Type: "bind", Source: g.o.Agent, Options: []string{"bind", "ro", "nosuid", "nodev"}})
		}
	}
	g.addRootfs(Entry{Path: StubMarker, Kind: File})
	data, err := json.Marshal(progs)
	if err != nil {
		return err
	}
	g.commands = string(data)
	return nil
}

// compiledProgram refuses a ruled program warden cannot hold: the agent
// runs an allowed call from an in-memory copy of the program, which an
// interpreter could not read a script from, nor find the script's own
// files beside it (npm's require('../lib/cli.js')).
func compiledProgram(name, file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	head := make([]byte, 4)
	n, _ := io.ReadFull(f, head)
	switch {
	case n == 4 && string(head) == "\x7fELF":
		return nil
	case n >= 2 && string(head[:2]) == "#!":
		return fmt.Errorf("%w: commands: %q is a script (%s starts with #!); command rules hold only for compiled programs: remove its rules, or rule the program that runs it", ErrInvalid, name, file)
	}
	return fmt.Errorf("%w: commands: %q (%s) is not a program warden can hold (not an ELF executable)", ErrInvalid, name, file)
}

// copiesOf lists the other places under the system folders that hold the
// same program (git ships one at /usr/bin/git and another at
// /usr/lib/git-core/git): files of the same size and content.
func (h Host) copiesOf(file string) []string {
	fi, err := os.Stat(h.path(file))
	if err != nil {
		return nil
	}
	sum := fileSum(h.path(file))
	var out []string
	for _, p := range executablesBySize(h)[fi.Size()] {
		if p != file && fileSum(h.path(p)) == sum {
			out = append(out, p)
		}
	}
	return out
}

func fileSum(p string) string {
	f, err := os.Open(p)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Walking the system folders takes a few hundred milliseconds, so the
// index is kept while their fingerprint (the modification times of their
// first two levels of folders and of dpkg's status file) holds, checked at
// most every minute. Residual: a program copied by hand two levels down
// is seen at the next change or within the hour.
var execIndex struct {
	sync.Mutex
	root, fingerprint string
	built, checked    time.Time
	bySize            map[int64][]string
}

var copyDirs = []string{"/usr", "/opt", "/bin", "/sbin", "/lib", "/lib64"}

func executablesBySize(h Host) map[int64][]string {
	x := &execIndex
	x.Lock()
	defer x.Unlock()
	now := time.Now()
	if x.root == h.Root && x.bySize != nil && now.Sub(x.checked) < time.Minute {
		return x.bySize
	}
	fp := dirsFingerprint(h)
	if x.root == h.Root && x.bySize != nil && fp == x.fingerprint && now.Sub(x.built) < time.Hour {
		x.checked = now
		return x.bySize
	}
	m := map[int64][]string{}
	for _, top := range copyDirs {
		if fi, err := h.lstat(top); err != nil || !fi.IsDir() {
			continue // a link to another top folder is walked there
		}
		filepath.WalkDir(h.path(top), func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return nil
			}
			fi, err := d.Info()
			if err != nil || fi.Mode().Perm()&0o111 == 0 {
				return nil
			}
			rel, _ := filepath.Rel(h.path("/"), p)
			m[fi.Size()] = append(m[fi.Size()], "/"+rel)
			return nil
		})
	}
	x.root, x.fingerprint, x.built, x.checked, x.bySize = h.Root, fp, now, now, m
	return m
}

func dirsFingerprint(h Host) string {
	dirs := make([]string, len(copyDirs))
	for i, d := range copyDirs {
		dirs[i] = h.path(d)
	}
	return hostfs.PackagesFingerprint(h.path("/var/lib/dpkg/status"), dirs...)
}
