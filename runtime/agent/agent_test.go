package agent

import (
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The agent must read a request exactly as the Go agent's json.Unmarshal
// did, and refuse what it refused.
func TestParseRequest(t *testing.T) {
	for _, want := range []request{
		{},
		{Argv: []string{"ls", "-l"}, Env: []string{"PATH=/bin", "A=b=c"}, Cwd: "/workspace"},
		{Argv: []string{"sh", "-c", "echo \"hi\" \\ \u2028 \U0001F600 \x01"}, Env: []string{}, Tty: true, Rows: 24, Cols: 65535},
		{Seal: true},
		{Seal: true, Binds: []string{"nosuid,nodev,noexec:/workspace", "ro:/data"}},
		{Ready: true},
	} {
		msg, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		got, nul, ok := parseRequest(msg)
		if !ok || nul || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %+v ok=%v nul=%v", msg, got, ok, nul)
		}
	}
	same := map[string]request{
		`null`:                                             {},
		` {"ARGV":["a"],"Argv":["b"]} `:                    {Argv: []string{"b"}},
		`{"argv":["a"],"argv":null}`:                       {},
		`{"argv":[null,"x"],"cwd":null}`:                   {Argv: []string{"", "x"}},
		`{"rows":0,"tty":false,"other":[1,{"a":-1.5e+3}]}`: {},
		"{\"aRGſ\":1,\"\u017feal\":true}":                  {Seal: true},
		`{"argv":["\ud83d\ude00\ud800x"]}`:                 {Argv: []string{"\U0001F600\uFFFDx"}},
	}
	for msg, want := range same {
		got, _, ok := parseRequest([]byte(msg))
		if !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %+v ok=%v, want %+v", msg, got, ok, want)
		}
	}
	for _, bad := range []string{``, `{`, `[]`, `"x"`, `{"argv":"ls"}`, `{"argv":[1]}`, `{"tty":1}`, `{"rows":-1}`,
		`{"rows":-0}`, `{"rows":65536}`, `{"rows":1.0}`, `{"rows":1e2}`, `{"cwd":1}`, `{} x`, `{"a":01}`, `{"a":tru}`,
		`{"a":-}`, `{"a":1.}`, `{"a":"\q"}`, `{"a":1,}`, `{,}`, "{\"a\":\"\x01\"}"} {
		if got, _, ok := parseRequest([]byte(bad)); ok {
			t.Errorf("%s: accepted as %+v", bad, got)
		}
	}
	if _, nul, ok := parseRequest([]byte(`{"argv":["a\u0000b"]}`)); !ok || !nul {
		t.Errorf("a NUL inside a string: ok=%v nul=%v", ok, nul)
	}
}

func FuzzParseRequest(f *testing.F) {
	f.Add([]byte(`{"argv":["ls","-l"],"env":["PATH=/bin"],"cwd":"/","tty":true,"rows":24,"cols":80}`))
	f.Add([]byte(`{"seal":true}`))
	f.Add([]byte(`{"seal":true,"binds":["ro:/data"]}`))
	f.Add([]byte(`{"argv":["\ud83d\ude00"],"x":[{"y":null},-1.5e3,false]}`))
	f.Fuzz(func(t *testing.T, msg []byte) {
		got, nul, ok := parseRequest(msg)
		var want request
		err := json.Unmarshal(msg, &want)
		if (err == nil) != ok {
			t.Fatalf("%q: C ok=%v, Go %v", msg, ok, err)
		}
		if ok && !nul && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: C %+v, Go %+v", msg, got, want)
		}
		if ok && nul != (strings.ContainsRune(want.Cwd, 0) || slices.ContainsFunc(append(append(want.Argv, want.Env...), want.Binds...),
			func(s string) bool { return strings.ContainsRune(s, 0) })) {
			t.Fatalf("%q: C nul=%v, Go %+v", msg, nul, want)
		}
	})
}

func TestParseControl(t *testing.T) {
	for msg, want := range map[string]struct {
		signal int64
		kill   bool
	}{
		`{"signal":15}`: {15, false}, `{"kill":true}`: {0, true}, `{"rows":5,"cols":9}`: {}, `{"signal":-3}`: {-3, false},
		`{"signal":9223372036854775807}`: {1<<63 - 1, false},
	} {
		signal, kill, ok := parseControl([]byte(msg))
		if !ok || signal != want.signal || kill != want.kill {
			t.Errorf("%s: signal %d kill %v ok %v", msg, signal, kill, ok)
		}
	}
	for _, bad := range []string{`{"signal":9223372036854775808}`, `{"signal":"9"}`, `{"rows":-1}`, `{"kill":1}`, `x`} {
		if _, _, ok := parseControl([]byte(bad)); ok {
			t.Errorf("%s: accepted", bad)
		}
	}
}

// Events read as sandbox.execEvent's encoding writes them.
func TestEventJSON(t *testing.T) {
	for want, got := range map[string]string{
		`{"code":0}`:                                  eventJSON(false, false, 0, 0, 0, ""),
		`{"started":true,"pid":42,"code":0}`:          eventJSON(true, false, 42, 0, 0, ""),
		`{"exited":true,"code":137,"signal":9}`:       eventJSON(false, true, 0, 137, 9, ""),
		`{"code":127,"error":"ls: not \"x\" \u0001"}`: eventJSON(false, false, 0, 127, 0, "ls: not \"x\" \x01"),
	} {
		if got != want {
			t.Errorf("%s, want %s", got, want)
		}
	}
}

func TestLookup(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	os.Mkdir(bin, 0o755)
	os.WriteFile(filepath.Join(bin, "tool"), []byte("#!/bin/sh\n"), 0o755)
	os.Symlink("tool", filepath.Join(bin, "alias"))
	os.Mkdir(filepath.Join(bin, "adir"), 0o755)
	tool := filepath.Join(bin, "tool")
	path := "PATH=/nonexistent::" + bin + "/../bin/"
	for _, c := range []struct {
		allow     []string
		name      string
		env       []string
		path, err string
		code      int
	}{
		{nil, "tool", []string{"PATH=/x", path}, tool, "", 0},
		{nil, "alias", []string{path}, filepath.Join(bin, "alias"), "", 0},
		{nil, "adir", []string{path}, "", "adir: command not found", 127},
		{nil, "tool", []string{path, "PATH=/x"}, "", "tool: command not found", 127},
		{nil, "tool", nil, "", "tool: command not found", 127},
		{nil, "./relative/x", nil, "/relative/x", "", 0},
		{[]string{tool}, "alias", []string{path}, filepath.Join(bin, "alias"), "", 0},
		{[]string{}, "tool", []string{path}, "", "tool: not allowed by the policy's exec.allow", 127},
		{[]string{tool}, "/missing/tool", nil, "", "/missing/tool: command not found (in this sandbox only the policy's exec.allow programs exist)", 127},
		{[]string{tool}, "missing", []string{path}, "", "missing: command not found (in this sandbox only the policy's exec.allow programs exist)", 127},
		// A relative path is the command's own, from its working folder.
		{[]string{tool}, "./relative/x", nil, "", "./relative/x: command not found (in this sandbox only the policy's exec.allow programs exist)", 127},
	} {
		p, err, code := lookup(c.allow, c.name, "/", c.env)
		if p != c.path || err != c.err || code != c.code {
			t.Errorf("%v %s %q: %q %q %d, want %q %q %d", c.allow, c.name, c.env, p, err, code, c.path, c.err, c.code)
		}
	}
	for _, c := range []struct {
		allow     []string
		name, cwd string
		path, err string
		code      int
	}{
		{[]string{tool}, "./tool", bin, tool, "", 0},
		{[]string{tool}, "../alias", bin + "/adir", filepath.Join(bin, "alias"), "", 0},
		{nil, "x/y", "/w", "/w/x/y", "", 0},
	} {
		p, err, code := lookup(c.allow, c.name, c.cwd, nil)
		if p != c.path || err != c.err || code != c.code {
			t.Errorf("%v %s in %s: %q %q %d, want %q %q %d", c.allow, c.name, c.cwd, p, err, code, c.path, c.err, c.code)
		}
	}
}

func TestExecError(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	os.WriteFile(plain, nil, 0o644)
	exe := filepath.Join(dir, "exe")
	os.WriteFile(exe, nil, 0o755)
	for _, c := range []struct {
		path  string
		errno syscall.Errno
		want  string
		code  int
	}{
		{plain, syscall.ENOENT, "x: command not found", 127},
		{plain, syscall.EACCES, "x: permission denied (the file has no execute permission)", 126},
		{exe, syscall.EPERM, "x: permission denied (the sandbox's exec rules refuse it)", 126},
		{exe, syscall.ENOEXEC, "x: cannot run: " + syscall.ENOEXEC.Error(), 126},
		{exe, syscall.EISDIR, "x: cannot run: " + syscall.EISDIR.Error(), 126},
		{exe, syscall.E2BIG, "x: " + syscall.E2BIG.Error(), 126},
		{exe, syscall.EAGAIN, "x: " + syscall.EAGAIN.Error(), 126},
	} {
		if got, code := execError("x", c.path, int(c.errno)); got != c.want || code != c.code {
			t.Errorf("%v: %q %d, want %q %d", c.errno, got, code, c.want, c.code)
		}
	}
}

// The C reading of PT_INTERP must be debug/elf's.
func TestElfInterp(t *testing.T) {
	for _, p := range []string{"/bin/sh", "/usr/bin/cat", "/lib/x86_64-linux-gnu/libc.so.6", "/bin/busybox", os.Args[0]} {
		want, wantOK := "", false
		if f, err := elf.Open(p); err == nil {
			for _, prog := range f.Progs {
				if prog.Type == elf.PT_INTERP {
					data := make([]byte, prog.Filesz)
					prog.ReadAt(data, 0)
					want, wantOK = strings.TrimRight(string(data), "\x00"), true
				}
			}
			f.Close()
		} else if !os.IsNotExist(err) {
			t.Fatalf("%s: %v", p, err)
		}
		if got, ok := elfInterp(p); got != want || ok != wantOK {
			t.Errorf("%s: %q %v, want %q %v", p, got, ok, want, wantOK)
		}
	}
	script := filepath.Join(t.TempDir(), "script")
	os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755)
	if got, ok := elfInterp(script); ok {
		t.Errorf("a script has interpreter %q", got)
	}
}

func TestExecutables(t *testing.T) {
	loader := "/lib64/ld-linux-x86-64.so.2"
	real, err := filepath.EvalSymlinks(loader)
	if err != nil {
		// warden runs on x86-64 only (its seccomp profile is x86-64's)
		t.Fatalf("no x86-64 dynamic loader: %v", err)
	}
	got := executables([]string{"/usr/bin/cat", "/usr/bin/cat", "/missing", "/bin/sh"})
	want := []string{"/usr/bin/cat", loader, real, "/bin/sh"}
	if real == loader {
		want = []string{"/usr/bin/cat", loader, "/bin/sh"}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%q, want %q", got, want)
	}
}

const (
	readFile = 1 << 2
	readDir  = 1 << 3
	read     = readFile | readDir
)

func sorted(rules []rule) []rule {
	slices.SortFunc(rules, func(a, b rule) int { return strings.Compare(a.path, b.path) })
	return rules
}

// Everything stays readable but the hidden files: their folders are split
// into entries, symbolic links get no rule.
func TestReadableExcept(t *testing.T) {
	if got := readableExcept(nil); !reflect.DeepEqual(got, []rule{{"/", read}}) {
		t.Fatalf("nothing hidden: %v", got)
	}
	dir := t.TempDir()
	for _, d := range []string{"lib/git-core", "lib/other", "share"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	for _, f := range []string{"lib/git-core/git", "lib/git-core/git-sh-setup", "lib/libc.so.6", "top"} {
		os.WriteFile(filepath.Join(dir, f), nil, 0o755)
	}
	os.Symlink("git-core/git", filepath.Join(dir, "lib/git"))
	got := sorted(readableExcept([]string{filepath.Join(dir, "lib/git-core/git"), filepath.Join(dir, "lib/missing/x")}))
	want := []rule{{"/", readDir}}
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			p := filepath.Join(d, e.Name())
			if strings.HasPrefix(dir, p) && (len(dir) == len(p) || dir[len(p)] == '/') {
				continue
			}
			switch {
			case e.Type()&os.ModeSymlink != 0:
			case e.IsDir():
				want = append(want, rule{p, read})
			default:
				want = append(want, rule{p, readFile})
			}
		}
		if d == "/" {
			break
		}
	}
	want = append(want, rule{filepath.Join(dir, "lib/git-core/git-sh-setup"), readFile}, rule{filepath.Join(dir, "lib/libc.so.6"), readFile},
		rule{filepath.Join(dir, "lib/other"), read}, rule{filepath.Join(dir, "share"), read}, rule{filepath.Join(dir, "top"), readFile})
	if want := sorted(want); !reflect.DeepEqual(got, want) {
		t.Fatalf("got\n%v\nwant\n%v", got, want)
	}
}

func TestLandlockRules(t *testing.T) {
	const (
		exec     = 1 << 0
		write    = 1<<1 | 1<<4 | 1<<5 | 1<<7 | 1<<8 | 1<<9 | 1<<10 | 1<<12 | 1<<13 | 1<<14
		dev      = read | 1<<1 | 1<<14
		ioctlDev = 1 << 15
	)
	work := t.TempDir()
	got := landlockRules(nil, []string{work, "/missing"}, []string{"/usr/bin/cat"})
	// The session rules come last: a pooled agent adds them once a claim
	// has bound the session's folders (/workspace and /data, absent here).
	// /proc is read-only: writing opens /proc/PID/mem.
	want := []rule{{"/", read | exec}, {"/dev", dev | ioctlDev}, {"/proc", read}, {work, read | write}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("no exec.allow: %v, want %v", got, want)
	}
	got = landlockRules([]string{"/bin/sh"}, nil, nil)
	if got[0] != (rule{"/", read}) || got[1] != (rule{"/bin/sh", readFile | exec}) || !slices.ContainsFunc(got, func(r rule) bool { return r.path == "/proc" }) {
		t.Fatalf("exec.allow: %v", got)
	}
}

// go-landlock's V7 rights, downgraded to what each ABI knows.
func TestLandlockHandled(t *testing.T) {
	for abi, want := range map[int]uint64{-1: 0, 0: 0, 1: 1<<13 - 1, 2: 1<<14 - 1, 3: 1<<15 - 1, 4: 1<<15 - 1, 5: 1<<16 - 1, 7: 1<<16 - 1, 9: 1<<16 - 1} {
		if got := landlockHandled(abi); got != want {
			t.Errorf("ABI %d: %#x, want %#x", abi, got, want)
		}
	}
}

// A command's stdio is watched when it can give something away: a pipe,
// a file or a terminal, once each; /dev/null, which a background server's
// </dev/null is too, is not.
func TestStdioFiles(t *testing.T) {
	id := func(f *os.File) [2]uint64 {
		var st syscall.Stat_t
		if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		return [2]uint64{st.Dev, st.Ino}
	}
	rd, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	defer wr.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	file, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	for _, c := range []struct {
		name string
		fds  []*os.File
		want [][2]uint64
	}{
		{"pipes and a file", []*os.File{rd, wr, file}, [][2]uint64{id(rd), id(file)}},
		{"/dev/null", []*os.File{null, null, wr}, [][2]uint64{id(wr)}},
		{"nothing to watch", []*os.File{null, null, null}, nil},
	} {
		var fds []int
		for _, f := range c.fds {
			fds = append(fds, int(f.Fd()))
		}
		if got := stdioFiles(fds, -1); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: watched %v, want %v", c.name, got, c.want)
		}
	}

	// a terminal: passed as it is, or as the slave side of the master
	// the agent made for -t
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err == nil {
		err = unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0)
	}
	if err != nil {
		t.Fatal(err)
	}
	slave, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer slave.Close()
	want := [][2]uint64{id(slave)}
	if got := stdioFiles([]int{int(slave.Fd()), int(null.Fd()), int(null.Fd())}, -1); !reflect.DeepEqual(got, want) {
		t.Errorf("a terminal: watched %v, want %v", got, want)
	}
	if got := stdioFiles(nil, int(master.Fd())); !reflect.DeepEqual(got, want) {
		t.Errorf("the slave of a master: watched %v, want %v", got, want)
	}
}
