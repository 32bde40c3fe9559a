package sandbox

import (
	"debug/elf"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/warden-sandbox/warden/spec"
	"github.com/warden-sandbox/warden/spec/hostfs"
)

// With an exec allow-list, Landlock stops execve of every unlisted file,
// but the dynamic loader runs a program by mapping it, not by executing
// it: `ld.so /usr/lib/git-core/git` would run git from a read-only system
// mount that must keep exec rights for shared libraries. So the agent
// also takes away the right to READ such programs: the programs are found
// on the host, in every read-only mount of the sandbox without noexec, and
// their sandbox paths are handed to the agent, whose Landlock rules then
// grant read on everything except them.
//
// A program is an ELF executable (ET_EXEC), or a position-independent one:
// ET_DYN with an interpreter and no DT_SONAME. Shared libraries (libc.so.6
// has an interpreter too, but also a soname) stay readable.

// hiddenProgramsFile is where the agent finds the list, in the sandbox.
const hiddenProgramsFile = "/.warden/hidden-programs"

// A scan of /usr/lib takes a few hundred milliseconds, so its result is
// kept, in memory and in the state root, while the folder's fingerprint
// (the modification times of its first two levels of folders and of
// dpkg's status file) stays the same, and for at most programScanMaxAge.
// The fingerprint is checked at most every programCheckEvery. Residual: a
// program copied by hand into an existing folder two levels down stays
// readable (so runnable through the loader) until the next scan.
const (
	programCheckEvery = time.Minute
	programScanMaxAge = time.Hour
)

type programScan struct {
	Fingerprint string    `json:"fingerprint"`
	Scanned     time.Time `json:"scanned"`
	Programs    []string  `json:"programs"` // relative to the folder
	checked     time.Time
}

var programScans = struct {
	sync.Mutex
	byDir map[string]*programScan
}{byDir: map[string]*programScan{}}

// hiddenPrograms lists, in sandbox paths, the programs the sandbox can
// read from exec-capable mounts, except the allowed executables.
func (rt *Runtime) hiddenPrograms(sp *specs.Spec, allowed []string) []string {
	keep := map[string]bool{}
	for _, p := range allowed {
		keep[p] = true
	}
	var out []string
	for _, m := range sp.Mounts {
		if m.Type != "bind" || slices.Contains(m.Options, "noexec") {
			continue
		}
		fi, err := os.Stat(m.Source)
		if err != nil {
			continue
		}
		if !fi.IsDir() {
			// A file bound with exec rights that exec.allow does not
			// list: warden's own binary, the agent.
			if !keep[m.Destination] {
				out = append(out, m.Destination)
			}
			continue
		}
		for _, rel := range rt.scanPrograms(m.Source) {
			p := filepath.Join(m.Destination, rel)
			if !keep[p] {
				out = append(out, p)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func (rt *Runtime) scanPrograms(dir string) []string {
	s := &programScans
	s.Lock()
	defer s.Unlock()
	now := time.Now()
	scan := s.byDir[dir]
	if scan != nil && now.Sub(scan.checked) < programCheckEvery {
		return scan.Programs
	}
	fp := fingerprint(dir)
	fresh := func(sc *programScan) bool {
		return sc != nil && sc.Fingerprint == fp && now.Sub(sc.Scanned) < programScanMaxAge
	}
	if !fresh(scan) {
		scan = rt.loadProgramScan(dir)
	}
	if !fresh(scan) {
		scan = &programScan{Fingerprint: fp, Scanned: now, Programs: findPrograms(dir)}
		rt.saveProgramScan(dir, scan)
	}
	scan.checked = now
	s.byDir[dir] = scan
	return scan.Programs
}

func (rt *Runtime) programCacheFile() string { return filepath.Join(rt.Root, "programs.json") }

func (rt *Runtime) loadProgramScan(dir string) *programScan {
	var all map[string]*programScan
	data, err := os.ReadFile(rt.programCacheFile())
	if err != nil || json.Unmarshal(data, &all) != nil {
		return nil
	}
	return all[dir]
}

func (rt *Runtime) saveProgramScan(dir string, scan *programScan) {
	all := map[string]*programScan{}
	if data, err := os.ReadFile(rt.programCacheFile()); err == nil {
		json.Unmarshal(data, &all)
	}
	all[dir] = scan
	data, err := json.Marshal(all)
	if err != nil {
		return
	}
	tmp := rt.programCacheFile() + ".tmp"
	if os.WriteFile(tmp, data, 0o600) == nil {
		os.Rename(tmp, rt.programCacheFile())
	}
}

// fingerprint sums up what changes when packages come and go.
func fingerprint(dir string) string { return hostfs.PackagesFingerprint("/var/lib/dpkg/status", dir) }

// findPrograms walks dir (not following symlinks: a link is harmless, its
// target is what Landlock checks) for files with an execute bit that are
// ELF programs.
func findPrograms(dir string) []string {
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil || fi.Mode().Perm()&0o111 == 0 {
			return nil
		}
		if isProgram(p) {
			if rel, err := filepath.Rel(dir, p); err == nil {
				out = append(out, rel)
			}
		}
		return nil
	})
	return out
}

func isProgram(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	switch f.Type {
	case elf.ET_EXEC:
		return true
	case elf.ET_DYN:
		interp := false
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				interp = true
			}
		}
		if !interp {
			return false
		}
		soname, err := f.DynString(elf.DT_SONAME)
		return err == nil && len(soname) == 0
	}
	return false
}

// hidePrograms writes the list into a bundle's rootfs for the agent of a
// sandbox with an exec allow-list.
func (rt *Runtime) hidePrograms(sp *specs.Spec, rootfs string) error {
	allow := sp.Annotations[spec.AnnotationExecAllow]
	if allow == "*" {
		return nil
	}
	progs := rt.hiddenPrograms(sp, strings.Split(allow, ":"))
	return os.WriteFile(filepath.Join(rootfs, hiddenProgramsFile), []byte(strings.Join(progs, "\n")), 0o644)
}
