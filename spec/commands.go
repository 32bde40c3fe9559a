package spec

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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
	// Script is set for a program that is a script: what the agent runs
	// for an allowed call, as the kernel would (the #! line's interpreter
	// and argument, then the script), followed by the call's arguments.
	// The script is its real text at a sandbox path beside the stub,
	// which the interpreter can read and nothing can execute.
	Script []string `json:"script,omitempty"`
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
				if _, err := heldProgram(name, g.o.Host.path(file)); err != nil {
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
		interp, err := heldProgram(name, g.o.Host.path(file))
		if err != nil {
			return err
		}
		i, ok := byFile[file]
		if !ok {
			i = len(progs)
			byFile[file] = i
			// Under exec.allow the program's one place is its bind at
			// at; otherwise the stub covers the file where it really is
			// (a symlink to it, as npm's, leads there) and its copies.
			stubs := []string{at}
			if g.o.Policy.Exec.All {
				stubs = append([]string{file}, g.o.Host.copiesOf(file)...)
			} else {
				stubs = append(stubs, g.execCopies(at, file)...)
			}
			slices.Sort(stubs)
			stubs = slices.Compact(stubs)
			prog := CommandProgram{File: g.o.Host.path(file), Stubs: stubs}
			if interp != nil {
				text, err := g.scriptText(i, file, stubs)
				if err != nil {
					return err
				}
				prog.Script = append(interp, text)
			}
			progs = append(progs, prog)
		}
		p := &progs[i]
		p.Names = append(p.Names, name, filepath.Base(at), at)
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

// heldProgram says how warden can hold a ruled program: a compiled one
// (ELF, nil) runs for an allowed call from an in-memory copy the sandbox
// cannot read; a script (#!) through its interpreter, which is returned
// as the kernel splits its #! line (the interpreter, then at most one
// argument: "/usr/bin/env", "node").
func heldProgram(name, file string) ([]string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	head := make([]byte, scriptLineMax)
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	switch {
	case bytes.HasPrefix(head, []byte("\x7fELF")):
		return nil, nil
	case !bytes.HasPrefix(head, []byte("#!")):
		return nil, fmt.Errorf("%w: commands: %q (%s) is not a program warden can hold (neither an ELF executable nor a #! script)", ErrInvalid, name, file)
	}
	line, _, ok := bytes.Cut(head[2:], []byte("\n"))
	if !ok {
		return nil, fmt.Errorf("%w: commands: %q is a script (%s) whose #! line is longer than %d bytes, which the kernel cuts; rules cannot hold it", ErrInvalid, name, file, scriptLineMax-1)
	}
	// As the kernel splits it: the interpreter ends at the first blank,
	// the rest is one argument.
	text := strings.Trim(string(line), " \t")
	interp, arg := text, ""
	if end := strings.IndexAny(text, " \t"); end >= 0 {
		interp, arg = text[:end], text[end:]
	}
	if !filepath.IsAbs(interp) {
		return nil, fmt.Errorf("%w: commands: %q is a script (%s) whose interpreter %q is not an absolute path; rules cannot hold it: give it one (#!/usr/bin/env %s)", ErrInvalid, name, file, interp, interp)
	}
	if arg = strings.Trim(arg, " \t"); arg != "" {
		return []string{interp, arg}, nil
	}
	return []string{interp}, nil
}

// scriptLineMax is the kernel's limit on a #! line (BINPRM_BUF_SIZE).
const scriptLineMax = 256

// scriptText places the real text of ruled script number i where its
// interpreter reads it for an allowed call: in the script's own folder,
// so that what it loads by a relative path (npm's
// require('../lib/cli.js'), a shell script's . "$(dirname "$0")/lib.sh")
// is found as it would be. It is readable, as an interpreter needs, and
// never executable: the stub covers the script itself, and the text's
// bind is noexec. Under exec.allow, a script shown where it is and not
// allowed there is already that (exec.allow runs only its programs).
func (g *generator) scriptText(i int, file string, stubs []string) (string, error) {
	if !g.o.Policy.Exec.All && !slices.Contains(stubs, file) && g.underBind(file) {
		return file, nil
	}
	dir := filepath.Dir(file)
	at := filepath.Join(dir, ".warden."+filepath.Base(file))
	switch name, ok := g.scriptDirs[dir]; {
	case ok:
		g.b.Masks = append(g.b.Masks, Entry{Path: filepath.Join(name, filepath.Base(at)), Kind: File})
	case g.underBind(dir):
		// The host's folder has no mountpoint for it: a read-only
		// overlay of the folder over itself adds one empty file. It
		// would hide what the sandbox has mounted inside the folder.
		for _, m := range g.b.Spec.Mounts {
			if _, inside := hostfs.Under(m.Destination, dir); inside {
				return "", fmt.Errorf("%w: commands: the script %s cannot be held: the sandbox mounts %s inside its folder; rule the program that runs it, or leave it out", ErrInvalid, file, m.Destination)
			}
		}
		name := "script-" + strconv.Itoa(i)
		lower := filepath.Join(g.o.BundleDir, "masks", name) + ":" + g.o.Host.path(dir)
		if strings.Count(lower, ":") != 1 || strings.ContainsAny(lower, ",\\") {
			return "", fmt.Errorf("%w: commands: the script %s cannot be held: its folder or the bundle's (%s) has ':', ',' or '\\' in its path", ErrInvalid, file, g.o.BundleDir)
		}
		if g.scriptDirs == nil {
			g.scriptDirs = map[string]string{}
		}
		g.scriptDirs[dir] = name
		g.b.Masks = append(g.b.Masks, Entry{Path: name, Kind: Dir}, Entry{Path: filepath.Join(name, filepath.Base(at)), Kind: File})
		opts := []string{"ro", "nosuid", "nodev"}
		if g.noexecAt(dir) {
			opts = append(opts, "noexec")
		}
		g.mount(specs.Mount{Destination: dir, Type: "overlay", Source: "overlay",
			Options: append(opts, "lowerdir="+lower)})
	default:
		g.addRootfs(Entry{Path: at, Kind: File})
	}
	g.mount(specs.Mount{Destination: at, Type: "bind", Source: g.o.Host.path(file), Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}})
	return at, nil
}

// noexecAt: the bind that shows p is noexec.
func (g *generator) noexecAt(p string) bool {
	best, noexec := "", false
	for _, m := range g.b.Spec.Mounts {
		if _, ok := hostfs.Under(p, m.Destination); ok && len(m.Destination) >= len(best) {
			best, noexec = m.Destination, slices.Contains(m.Options, "noexec")
		}
	}
	return noexec
}

// execCopies lists, under exec.allow, the other allowed programs that are
// the ruled one (the same file, or the same bytes): each needs the stub.
func (g *generator) execCopies(at, file string) []string {
	copies := g.o.Host.copiesOf(file)
	var out []string
	for _, m := range g.b.Spec.Mounts {
		if m.Destination == at || !slices.Contains(g.execPaths, m.Destination) {
			continue
		}
		src, err := filepath.EvalSymlinks(m.Source)
		if err == nil && (src == g.o.Host.path(file) || slices.ContainsFunc(copies, func(c string) bool { return g.o.Host.path(c) == src })) {
			out = append(out, m.Destination)
		}
	}
	return out
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
