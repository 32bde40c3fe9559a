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

type reply struct {
	hasError, hasResult bool
	err, resultErr      string
	exit                int
}

func parseReply(msg []byte) (reply, bool) {
	cmsg := C.CBytes(msg)
	defer C.free(cmsg)
	var hasError, hasResult, code C.int
	var e, re *C.char
	rc := C.fastexec_parse_reply((*C.char)(cmsg), C.size_t(len(msg)), &hasError, &e, &hasResult, &code, &re)
	defer C.free(unsafe.Pointer(e))
	defer C.free(unsafe.Pointer(re))
	return reply{hasError: hasError != 0, hasResult: hasResult != 0, err: C.GoString(e), resultErr: C.GoString(re), exit: int(code)}, rc == 0
}
