package seccomp

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/warden-sandbox/warden/policies"
)

// verdict is what the profile decides for one call.
type verdict struct {
	action specs.LinuxSeccompAction
	errno  uint
}

var (
	allow        = verdict{action: specs.ActAllow}
	eperm        = verdict{action: specs.ActErrno, errno: errnoEPERM}
	enosys       = verdict{action: specs.ActErrno, errno: errnoENOSYS}
	eafnosupport = verdict{action: specs.ActErrno, errno: errnoEAFNOSUPPORT}
)

// decide evaluates the profile for one call the way libseccomp does for this
// profile's shapes: a rule matches when it names the syscall and all its
// argument comparisons hold. Matching rules that disagree are reported, since
// libseccomp would then pick one silently.
func decide(t *testing.T, p *specs.LinuxSeccomp, name string, args ...uint64) verdict {
	t.Helper()
	var matched []verdict
	for _, rule := range p.Syscalls {
		if !slices.Contains(rule.Names, name) || !argsHold(t, rule.Args, args) {
			continue
		}
		v := verdict{action: rule.Action}
		if rule.Action == specs.ActErrno && rule.ErrnoRet != nil {
			v.errno = *rule.ErrnoRet
		}
		matched = append(matched, v)
	}
	if len(matched) == 0 {
		return verdict{action: p.DefaultAction, errno: *p.DefaultErrnoRet}
	}
	for _, v := range matched[1:] {
		if v != matched[0] {
			t.Fatalf("%s%v matches rules that disagree: %v", name, args, matched)
		}
	}
	return matched[0]
}

func argsHold(t *testing.T, conds []specs.LinuxSeccompArg, args []uint64) bool {
	t.Helper()
	for _, c := range conds {
		var arg uint64
		if int(c.Index) < len(args) {
			arg = args[c.Index]
		}
		switch c.Op {
		case specs.OpEqualTo:
			if arg != c.Value {
				return false
			}
		case specs.OpMaskedEqual:
			if arg&c.Value != c.ValueTwo {
				return false
			}
		default:
			t.Fatalf("decide does not know operator %s", c.Op)
		}
	}
	return true
}

func TestDefaultActionIsENOSYS(t *testing.T) {
	p := Default()
	if p.DefaultAction != specs.ActErrno || p.DefaultErrnoRet == nil || *p.DefaultErrnoRet != errnoENOSYS {
		t.Fatalf("default action = %s errno %v, want SCMP_ACT_ERRNO with ENOSYS", p.DefaultAction, p.DefaultErrnoRet)
	}
}

func TestOnlyX86_64(t *testing.T) {
	if got := Default().Architectures; !reflect.DeepEqual(got, []specs.Arch{specs.ArchX86_64}) {
		t.Fatalf("architectures = %v, want only %s (i386 and x32 entry must fail)", got, specs.ArchX86_64)
	}
}

func TestDeniedNeverAllowed(t *testing.T) {
	denied := map[string]string{"clone3": "namespaces"}
	for _, f := range DeniedFamilies {
		for _, s := range f.Syscalls {
			denied[s] = f.Name
		}
	}
	for i, rule := range Default().Syscalls {
		if rule.Action == specs.ActErrno {
			continue
		}
		for _, name := range rule.Names {
			if family, ok := denied[name]; ok {
				t.Errorf("syscalls[%d] (%s) allows %s of denied family %s", i, rule.Action, name, family)
			}
		}
	}
}

func TestFamiliesDeniedWithEPERM(t *testing.T) {
	p := Default()
	for _, f := range DeniedFamilies {
		t.Run(f.Name, func(t *testing.T) {
			if len(f.Syscalls) == 0 || f.Why == "" {
				t.Fatalf("family %s needs syscalls and a reason", f.Name)
			}
			for _, s := range f.Syscalls {
				if got := decide(t, p, s); got != eperm {
					t.Errorf("%s: got %v, want EPERM", s, got)
				}
			}
		})
	}
}

// libseccomp lets an unconditional rule absorb every argument-filtered rule
// of the same syscall, whatever their actions: a name must have either one
// unconditional rule or only filtered ones.
func TestNoRuleShadowed(t *testing.T) {
	unconditional := map[string]int{}
	filtered := map[string]int{}
	for _, rule := range Default().Syscalls {
		for _, name := range rule.Names {
			if len(rule.Args) == 0 {
				unconditional[name]++
			} else {
				filtered[name]++
			}
		}
	}
	for name, n := range unconditional {
		if n > 1 || filtered[name] > 0 {
			t.Errorf("%s: %d unconditional and %d filtered rules, want one unconditional and none filtered", name, n, filtered[name])
		}
	}
	for _, f := range Filtered {
		for _, s := range f.Syscalls {
			if filtered[s] == 0 || unconditional[s] > 0 {
				t.Errorf("%s is listed in Filtered but has %d filtered and %d unconditional rules", s, filtered[s], unconditional[s])
			}
		}
	}
}

func TestDecisions(t *testing.T) {
	const (
		sigchld       = 17
		cloneVMThread = 0x00000100 | 0x00010000 | 0x00000800 | 0x00100000 // CLONE_VM|THREAD|SIGHAND|SETTLS, as pthread_create
		tcgets        = 0x5401
	)
	tests := []struct {
		name    string
		syscall string
		args    []uint64
		want    verdict
	}{
		{"read", "read", nil, allow},
		{"execve", "execve", nil, allow},
		{"getrandom", "getrandom", nil, allow},
		{"rseq", "rseq", nil, allow},
		{"landlock", "landlock_restrict_self", nil, allow},
		{"seccomp", "seccomp", nil, allow},
		{"prctl", "prctl", nil, allow},
		{"fork via clone", "clone", []uint64{sigchld}, allow},
		{"thread via clone", "clone", []uint64{cloneVMThread}, allow},
		{"clone new user ns", "clone", []uint64{cloneNewUser | sigchld}, eperm},
		{"clone new net ns", "clone", []uint64{cloneNewNet}, eperm},
		{"clone new mount ns", "clone", []uint64{cloneNewNS | sigchld}, eperm},
		{"clone new pid and uts", "clone", []uint64{cloneNewPID | cloneNewUTS | sigchld}, eperm},
		{"clone3", "clone3", nil, enosys},
		{"unshare", "unshare", []uint64{cloneNewUser}, eperm},
		{"socket unix", "socket", []uint64{afUnix}, allow},
		{"socket inet", "socket", []uint64{afInet}, allow},
		{"socket inet6", "socket", []uint64{afInet6}, allow},
		{"socket netlink", "socket", []uint64{afNetlink}, allow},
		{"socket packet", "socket", []uint64{17}, eafnosupport},
		{"socket vsock", "socket", []uint64{40}, eafnosupport},
		{"socketpair alg", "socketpair", []uint64{38}, eafnosupport},
		{"socket unspec", "socket", []uint64{0}, eafnosupport},
		{"socket past AF_MAX", "socket", []uint64{afMax}, enosys},
		{"socket inet with high bits", "socket", []uint64{1<<32 | afInet}, enosys},
		{"socketpair unix", "socketpair", []uint64{afUnix}, allow},
		{"personality query", "personality", []uint64{0xffffffff}, allow},
		{"personality linux32", "personality", []uint64{0x8}, allow},
		{"personality read implies exec", "personality", []uint64{0x0400000}, eperm},
		{"personality addr no randomize", "personality", []uint64{0x0040000}, eperm},
		{"personality linux32 no randomize", "personality", []uint64{0x0040008}, eperm},
		{"personality uname26 linux32", "personality", []uint64{0x20008}, allow},
		{"personality high bits", "personality", []uint64{1<<32 | 0x8}, enosys},
		{"ioctl tcgets", "ioctl", []uint64{0, tcgets}, allow},
		{"ioctl fionread", "ioctl", []uint64{0, 0x541b}, allow},
		{"ioctl tiocsti", "ioctl", []uint64{0, tiocsti}, eperm},
		{"ioctl tiocsti with high bits", "ioctl", []uint64{0, 1<<32 | tiocsti}, eperm},
		{"chmod 0755", "chmod", []uint64{0, 0o755}, allow},
		{"chmod 4755", "chmod", []uint64{0, 0o4755}, eperm},
		{"chmod 2755", "chmod", []uint64{0, 0o2755}, eperm},
		{"chmod 6755", "chmod", []uint64{0, 0o6755}, eperm},
		{"chmod 1777", "chmod", []uint64{0, 0o1777}, allow},
		{"chmod 4755 with high bits", "chmod", []uint64{0, 1<<32 | 0o4755}, eperm},
		{"fchmod 0644", "fchmod", []uint64{3, 0o644}, allow},
		{"fchmod 4755", "fchmod", []uint64{3, 0o4755}, eperm},
		{"fchmodat 0700", "fchmodat", []uint64{3, 0, 0o700}, allow},
		{"fchmodat 2755", "fchmodat", []uint64{3, 0, 0o2755}, eperm},
		{"fchmodat2 6755", "fchmodat2", []uint64{3, 0, 0o6755, 0}, eperm},
		{"mkdir 0755", "mkdir", []uint64{0, 0o755}, allow},
		{"mkdir 2755", "mkdir", []uint64{0, 0o2755}, eperm},
		{"mkdirat 4755", "mkdirat", []uint64{3, 0, 0o4755}, eperm},
		{"mknod regular 0644", "mknod", []uint64{0, 0o100644, 0}, allow},
		{"mknod regular 4755", "mknod", []uint64{0, 0o104755, 0}, eperm},
		{"mknodat regular 2755", "mknodat", []uint64{3, 0, 0o102755, 0}, eperm},
		{"creat 0644", "creat", []uint64{0, 0o644}, allow},
		{"creat 4755", "creat", []uint64{0, 0o4755}, eperm},
		{"open read", "open", []uint64{0, 0, 0}, allow},
		{"open read, junk mode", "open", []uint64{0, 0, 0o6777}, allow},
		{"open create 0666", "open", []uint64{0, oCreat | 1, 0o666}, allow},
		{"open create 4755", "open", []uint64{0, oCreat | 1, 0o4755}, eperm},
		{"open tmpfile 2755", "open", []uint64{0, oTmpfile | 0o200000 | 2, 0o2755}, eperm},
		{"openat read", "openat", []uint64{3, 0, 0, 0}, allow},
		{"openat create 0644", "openat", []uint64{3, 0, oCreat | 1, 0o644}, allow},
		{"openat create 4755", "openat", []uint64{3, 0, oCreat | 1, 0o4755}, eperm},
		{"openat create 6755", "openat", []uint64{3, 0, oCreat | 1, 0o6755}, eperm},
		{"openat tmpfile 0600", "openat", []uint64{3, 0, oTmpfile | 0o200000 | 2, 0o600}, allow},
		{"openat tmpfile 4700", "openat", []uint64{3, 0, oTmpfile | 0o200000 | 2, 0o4700}, eperm},
		{"openat2", "openat2", nil, enosys},
		{"memfd_create", "memfd_create", nil, eperm},
		{"io_uring_setup", "io_uring_setup", nil, eperm},
		{"unknown future syscall", "warden_future_syscall", nil, enosys},
	}
	p := Default()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := decide(t, p, tt.syscall, tt.args...); got != tt.want {
				t.Errorf("%s%v: got %v, want %v", tt.syscall, tt.args, got, tt.want)
			}
		})
	}
}

// Every mode a file-creating or mode-setting call can pass is either allowed
// or refused with EPERM: none falls through to the default (ENOSYS), which
// would read as "not implemented" and send libc to a fallback.
func TestSetuidBitsRefusedWithEPERM(t *testing.T) {
	p := Default()
	modes := []uint64{0, 0o644, 0o755, 0o1777, sISUID, sISGID, sISUID | sISGID, 0o4755, 0o2755, 0o6755, 0o7777}
	flags := []uint64{0, 1, 2, oCreat, oCreat | 1, oTmpfile | 0o200000 | 2, oCreat | oTmpfile, 0o1000}
	for _, m := range modeArgs {
		for _, name := range m.names {
			for _, mode := range modes {
				args := make([]uint64, m.mode+1)
				args[m.mode] = mode
				want := allow
				if mode&(sISUID|sISGID) != 0 {
					want = eperm
				}
				if got := decide(t, p, name, args...); got != want {
					t.Errorf("%s mode %#o: got %v, want %v", name, mode, got, want)
				}
			}
		}
	}
	for _, o := range openArgs {
		for _, f := range flags {
			for _, mode := range modes {
				args := make([]uint64, o.mode+1)
				args[o.flags], args[o.mode] = f, mode
				want := allow
				if f&(oCreat|oTmpfile) != 0 && mode&(sISUID|sISGID) != 0 {
					want = eperm
				}
				if got := decide(t, p, o.name, args...); got != want {
					t.Errorf("%s flags %#o mode %#o: got %v, want %v", o.name, f, mode, got, want)
				}
			}
		}
	}
}

// libcontainer adds a rule's comparisons on one argument as separate rules
// (an OR): a rule may compare each argument once.
func TestOneComparisonPerArgument(t *testing.T) {
	for i, rule := range Default().Syscalls {
		seen := map[uint]bool{}
		for _, a := range rule.Args {
			if seen[a.Index] {
				t.Errorf("syscalls[%d] %v compares argument %d twice", i, rule.Names, a.Index)
			}
			seen[a.Index] = true
		}
	}
}

func TestDefaultIsFresh(t *testing.T) {
	p := Default()
	p.Syscalls[0].Names[0] = "mount"
	p.Syscalls[0].ErrnoRet = errno(0)
	if !reflect.DeepEqual(Default(), Default()) || Default().Syscalls[0].Names[0] == "mount" {
		t.Fatal("changing one Default() result changed the next")
	}
}

func TestForPolicyNotWider(t *testing.T) {
	if got := ForPolicy(&policies.Policy{Name: "t"}); !reflect.DeepEqual(got, Default()) {
		t.Fatal("ForPolicy differs from Default; if that is intended, test that it is never wider")
	}
}

func TestJSONRoundTrip(t *testing.T) {
	data, err := json.Marshal(Default())
	if err != nil {
		t.Fatal(err)
	}
	var back specs.LinuxSeccomp
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back, Default()) {
		t.Fatalf("profile changed through JSON:\n%s", data)
	}
}

// The runtime-spec module ships its JSON schema; a config.json holding the
// profile must satisfy it.
func TestMatchesRuntimeSpecSchema(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/opencontainers/runtime-spec").Output()
	if err != nil {
		t.Fatalf("locating the runtime-spec module (needs the go command): %v", err)
	}
	schemaPath := filepath.Join(strings.TrimSpace(string(out)), "schema", "config-schema.json")
	compiler := jsonschema.NewCompiler()
	compiler.DefaultDraft(jsonschema.Draft4) // the runtime-spec schema is draft-04; not every file says so
	compiler.UseLoader(draft4Fragments{})
	schema, err := compiler.Compile(schemaPath)
	if err != nil {
		t.Fatalf("compiling %s: %v", schemaPath, err)
	}
	validate := func(p *specs.LinuxSeccomp) error {
		config, err := json.Marshal(specs.Spec{Version: specs.Version, Linux: &specs.Linux{Seccomp: p}})
		if err != nil {
			t.Fatal(err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(config))
		if err != nil {
			t.Fatal(err)
		}
		return schema.Validate(doc)
	}
	if err := validate(Default()); err != nil {
		t.Fatalf("config.json with the profile fails the runtime-spec schema: %v", err)
	}
	bogus := Default()
	bogus.Syscalls[0].Action = "SCMP_ACT_BOGUS"
	if validate(bogus) == nil {
		t.Fatal("the schema accepted an unknown action: it is not checking the profile")
	}
}

// draft4Fragments loads the runtime-spec schema files, turning the fragments
// they write as "#definitions/x" (which draft-04 validators tolerate) into
// the JSON pointers "#/definitions/x" jsonschema resolves.
type draft4Fragments struct{}

func (draft4Fragments) Load(url string) (any, error) {
	path, err := jsonschema.FileLoader{}.ToFile(url)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	data = bytes.ReplaceAll(data, []byte(`#definitions/`), []byte(`#/definitions/`))
	return jsonschema.UnmarshalJSON(bytes.NewReader(data))
}
