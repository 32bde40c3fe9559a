package agent

/*
#cgo CFLAGS: -Wall -Wextra -O2
#include <stdlib.h>
#include "fastexec.h"
*/
import "C"

import "unsafe"

// defaultRoot is the state root the constructor uses without --root or
// WARDEN_ROOT; it must equal runtime.DefaultRoot.
const defaultRoot = C.FASTEXEC_DEFAULT_ROOT

// maxPolicyFile is the largest policy file the fast path reads; it must
// equal policies.MaxPolicyFile.
const maxPolicyFile = C.MAX_POLICY_FILE

// FastProtocolVersion is the protocol version of the fast path's requests;
// it must equal daemon.ProtocolVersion (the daemon's tests check).
const FastProtocolVersion = C.FASTEXEC_PROTOCOL_VERSION

// The wrappers below let the tests drive the C code.

func parseDuration(s string) (int64, bool) {
	cs := C.CString(s)
	defer C.free(unsafe.Pointer(cs))
	var out C.int64_t
	if C.fastexec_parse_duration(cs, &out) != 0 {
		return 0, false
	}
	return int64(out), true
}

func validUTF8(s string) bool {
	cs := C.CString(s)
	defer C.free(unsafe.Pointer(cs))
	return C.fastexec_valid_utf8(cs) != 0
}

func jsonString(s string) string {
	cs := C.CString(s)
	defer C.free(unsafe.Pointer(cs))
	out := C.fastexec_json_string(cs)
	defer C.free(unsafe.Pointer(out))
	return C.GoString(out)
}

// FastReply is what the fast path reads of one of the daemon's replies
// to an exec.
type FastReply struct {
	HasError, HasResult  bool
	Err, Code, ResultErr string
	Exit                 int
}

// ParseFastReply reads a daemon reply as the fast path does; it lets the
// daemon's tests check that the C code reads what the daemon writes.
func ParseFastReply(msg []byte) (FastReply, bool) {
	cmsg := C.CBytes(msg)
	defer C.free(cmsg)
	var hasError, hasResult, code C.int
	var e, c, re *C.char
	rc := C.fastexec_parse_reply((*C.char)(cmsg), C.size_t(len(msg)), &hasError, &e, &c, &hasResult, &code, &re)
	defer C.free(unsafe.Pointer(e))
	defer C.free(unsafe.Pointer(c))
	defer C.free(unsafe.Pointer(re))
	return FastReply{HasError: hasError != 0, HasResult: hasResult != 0, Err: C.GoString(e), Code: C.GoString(c), ResultErr: C.GoString(re), Exit: int(code)}, rc == 0
}

// The paths of a do, as the fast path makes them: filepath.Clean, Abs
// and Dir (the tests hold them to Go's).

func cPath(f func(*C.char) *C.char, p string) string {
	cs := C.CString(p)
	defer C.free(unsafe.Pointer(cs))
	out := f(cs)
	defer C.free(unsafe.Pointer(out))
	return C.GoString(out)
}

func cleanPath(p string) string {
	return cPath(func(s *C.char) *C.char { return C.fastexec_clean(s) }, p)
}
func absPath(p string) string { return cPath(func(s *C.char) *C.char { return C.fastexec_abs(s) }, p) }
func dirPath(p string) string { return cPath(func(s *C.char) *C.char { return C.fastexec_dir(s) }, p) }
