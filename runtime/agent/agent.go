package agent

/*
#cgo CFLAGS: -Wall -Wextra -O2
#include <stdlib.h>
#include "agent.h"
#include "landlock.h"
#include "leftover.h"

static char *string_at(char **v, int i) { return v[i]; }
static struct rule *rule_at(struct rule *v, int i) { return &v[i]; }
*/
import "C"

import "unsafe"

// The wrappers below let the tests drive the agent's C code.

// cStrings makes a C array of C strings; free releases it.
func cStrings(s []string) (v **C.char, free func()) {
	size := C.size_t(len(s)+1) * C.size_t(unsafe.Sizeof((*C.char)(nil)))
	arr := (*[1 << 20]*C.char)(C.malloc(size))
	for i, x := range s {
		arr[i] = C.CString(x)
	}
	arr[len(s)] = nil
	return &arr[0], func() {
		for i := range s {
			C.free(unsafe.Pointer(arr[i]))
		}
		C.free(unsafe.Pointer(arr))
	}
}

func goStrings(s *C.struct_strings) []string {
	var out []string
	for i := 0; i < int(s.n); i++ {
		out = append(out, C.GoString(C.string_at(s.v, C.int(i))))
	}
	return out
}

// request holds what sandbox.execRequest holds; without tags, Go's
// decoder matches its fields to the keys as it does the tagged ones.
type request struct {
	Argv, Env  []string
	Cwd        string
	Tty, Seal  bool
	Rows, Cols uint16
	Binds      []string
	Ready      bool
}

// parseRequest reads msg with the agent's parser; nul reports a string
// that held a NUL byte.
func parseRequest(msg []byte) (r request, nul, ok bool) {
	cmsg := C.CBytes(msg)
	defer C.free(cmsg)
	var cr C.struct_request
	rc := C.agent_parse_request((*C.char)(cmsg), C.size_t(len(msg)), &cr)
	defer C.agent_free_request(&cr)
	if rc != 0 {
		return request{}, false, false
	}
	r = request{Argv: goStrings(&cr.argv), Env: goStrings(&cr.env), Tty: cr.tty != 0, Seal: cr.seal != 0,
		Rows: uint16(cr.rows), Cols: uint16(cr.cols), Ready: cr.ready != 0}
	if cr.argv.v != nil && r.Argv == nil {
		r.Argv = []string{}
	}
	if cr.env.v != nil && r.Env == nil {
		r.Env = []string{}
	}
	if r.Binds = goStrings(&cr.binds); cr.binds.v != nil && r.Binds == nil {
		r.Binds = []string{}
	}
	if cr.cwd != nil {
		r.Cwd = C.GoString(cr.cwd)
	}
	return r, cr.nul != 0, true
}

func parseControl(msg []byte) (signal int64, kill, ok bool) {
	cmsg := C.CBytes(msg)
	defer C.free(cmsg)
	var c C.struct_control
	if C.agent_parse_control((*C.char)(cmsg), C.size_t(len(msg)), &c) != 0 {
		return 0, false, false
	}
	return int64(c.signal), c.kill != 0, true
}

// eventJSON writes an event as the agent sends it.
func eventJSON(started, exited bool, pid, code, signal int, errText string) string {
	cev := C.struct_event{started: cbool(started), exited: cbool(exited), pid: C.long(pid),
		code: C.int(code), signal: C.int(signal)}
	cerr := C.CString(errText)
	defer C.free(unsafe.Pointer(cerr))
	C.buf_puts(&cev.error, cerr)
	defer C.free(unsafe.Pointer(cev.error.p))
	var out C.struct_buf
	defer C.free(unsafe.Pointer(out.p))
	C.agent_event_json(&cev, &out)
	return C.GoStringN(out.p, C.int(out.len))
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// agentConfig makes the agent's configuration; allow nil means no
// exec.allow.
func agentConfig(allow, writable, hidden []string) (cfg *C.struct_agent_config, free func()) {
	cfg = (*C.struct_agent_config)(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_agent_config{}))))
	cfg.allow_all = cbool(allow == nil)
	for _, l := range []struct {
		s *C.struct_strings
		v []string
	}{{&cfg.allow, allow}, {&cfg.writable, writable}, {&cfg.hidden, hidden}} {
		for _, x := range l.v {
			cx := C.CString(x)
			C.strings_add(l.s, cx)
			C.free(unsafe.Pointer(cx))
		}
	}
	return cfg, func() {
		C.strings_free(&cfg.allow)
		C.strings_free(&cfg.writable)
		C.strings_free(&cfg.hidden)
		C.free(unsafe.Pointer(cfg))
	}
}

// lookup resolves name with exec.allow set to allow (nil: everything), for
// a command in the working folder cwd.
func lookup(allow []string, name, cwd string, env []string) (path, errText string, code int) {
	cfg, freeConfig := agentConfig(allow, nil, nil)
	defer freeConfig()
	cname, ccwd := C.CString(name), C.CString(cwd)
	defer C.free(unsafe.Pointer(cname))
	defer C.free(unsafe.Pointer(ccwd))
	cenv, free := cStrings(env)
	defer free()
	var ev C.struct_event
	defer C.free(unsafe.Pointer(ev.error.p))
	p := C.agent_lookup(cfg, cname, ccwd, cenv, C.int(len(env)), &ev)
	if p == nil {
		return "", C.GoStringN(ev.error.p, C.int(ev.error.len)), int(ev.code)
	}
	defer C.free(unsafe.Pointer(p))
	return C.GoString(p), "", 0
}

func execError(name, path string, errno int) (string, int) {
	cname, cpath := C.CString(name), C.CString(path)
	defer C.free(unsafe.Pointer(cname))
	defer C.free(unsafe.Pointer(cpath))
	var ev C.struct_event
	defer C.free(unsafe.Pointer(ev.error.p))
	C.agent_exec_error(cname, cpath, C.int(errno), &ev)
	return C.GoStringN(ev.error.p, C.int(ev.error.len)), int(ev.code)
}

func elfInterp(path string) (string, bool) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var out C.struct_buf
	defer C.free(unsafe.Pointer(out.p))
	if C.elf_interp(cpath, &out) != 0 {
		return "", false
	}
	return C.GoStringN(out.p, C.int(out.len)), true
}

func executables(exes []string) []string {
	cexes, free := cStrings(exes)
	defer free()
	var out C.struct_strings
	defer C.strings_free(&out)
	C.landlock_executables(cexes, C.int(len(exes)), &out)
	return goStrings(&out)
}

type rule struct {
	path   string
	access uint64
}

func goRules(r *C.struct_rules) []rule {
	var out []rule
	for i := 0; i < int(r.n); i++ {
		x := C.rule_at(r.v, C.int(i))
		out = append(out, rule{C.GoString(x.path), uint64(x.access)})
	}
	return out
}

func readableExcept(hidden []string) []rule {
	chidden, free := cStrings(hidden)
	defer free()
	var out C.struct_rules
	defer C.rules_free(&out)
	C.landlock_readable_except(chidden, C.int(len(hidden)), &out)
	return goRules(&out)
}

// landlockRules is what the agent asks of Landlock; allow nil means no
// exec.allow.
func landlockRules(allow, writable, hidden []string) []rule {
	cfg, free := agentConfig(allow, writable, hidden)
	defer free()
	var out C.struct_rules
	defer C.rules_free(&out)
	C.landlock_rules(cfg, &out)
	return goRules(&out)
}

func landlockHandled(abi int) uint64 { return uint64(C.landlock_handled(C.int(abi))) }

// stdioFiles is what the agent watches of a command's stdio: the device
// and inode of each file, the terminal of master when not negative.
func stdioFiles(fds []int, master int) [][2]uint64 {
	cfds := make([]C.int, len(fds)+1)
	for i, fd := range fds {
		cfds[i] = C.int(fd)
	}
	var out C.struct_stdio_files
	C.stdio_files_of(&cfds[0], C.int(len(fds)), C.int(master), &out)
	var files [][2]uint64
	for i := 0; i < int(out.n); i++ {
		files = append(files, [2]uint64{uint64(out.v[i].dev), uint64(out.v[i].ino)})
	}
	return files
}
