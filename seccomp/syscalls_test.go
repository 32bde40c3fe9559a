package seccomp

import (
	"slices"
	"strings"
	"testing"
)

// x86_64Names adds the syscalls libseccomp does not know, and refuses to
// leave a number without a name (outside x86-64's gap).
func TestX86_64Names(t *testing.T) {
	upTo := func(last int, except ...int) func(int) string {
		return func(n int) string {
			if n > last || slices.Contains(except, n) || n >= x86_64GapFirst-1 && n <= x86_64GapLast {
				return ""
			}
			return "sys" + strings.Repeat("x", n%7) + string(rune('a'+n%26)) + string(rune('a'+n/26%26))
		}
	}
	names, err := x86_64Names(upTo(448))
	if err != nil {
		t.Fatalf("a libseccomp that names every number up to 448: %v", err)
	}
	for _, want := range []string{"uretprobe", "fchmodat2", "mseal", "file_setattr", "rseq_slice_yield"} {
		if !slices.Contains(names, want) {
			t.Errorf("%s missing from the names", want)
		}
	}
	if i, j := slices.Index(names, "uretprobe"), slices.Index(names, "fchmodat2"); i < 0 || j < i {
		t.Errorf("not in number order: uretprobe at %d, fchmodat2 at %d", i, j)
	}
	for _, missing := range []int{0, 59, 334, 424, 441, 448} {
		if _, err := x86_64Names(upTo(448, missing)); err == nil {
			t.Errorf("number %d without a name: no error", missing)
		}
	}
	if _, err := x86_64Names(upTo(440)); err == nil {
		t.Error("a libseccomp that names nothing past 440: no error")
	}
}
