package termfilter

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// run filters in one write, then again one byte per write, and fails
// when the two differ: where the writes split must not matter.
func run(t *testing.T, in string) string {
	t.Helper()
	var whole, bytewise bytes.Buffer
	f := NewWriter(&whole)
	if n, err := f.Write([]byte(in)); n != len(in) || err != nil {
		t.Fatalf("Write(%q) = %d, %v", in, n, err)
	}
	f.Flush()
	g := NewWriter(&bytewise)
	for i := 0; i < len(in); i++ {
		g.Write([]byte{in[i]})
	}
	g.Flush()
	if whole.String() != bytewise.String() {
		t.Errorf("%q: one write gives %q, byte by byte %q", in, whole.String(), bytewise.String())
	}
	return whole.String()
}

func TestFilter(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		// passed as they are
		{"text", "hello, world\r\n\ttab\bback\a", "hello, world\r\n\ttab\bback\a"},
		{"utf-8", "grüße € 日本 🙂 \u00a0", "grüße € 日本 🙂 \u00a0"},
		{"sgr", "\x1b[1;31mred\x1b[0m \x1b[38;2;1;2;3mtrue\x1b[38:5:208m\x1b[m", "\x1b[1;31mred\x1b[0m \x1b[38;2;1;2;3mtrue\x1b[38:5:208m\x1b[m"},
		{"cursor", "\x1b[H\x1b[2J\x1b[10;20H\x1b[A\x1b[5C\x1b[K\x1b[1;24r\x1b7\x1b8\x1bM", "\x1b[H\x1b[2J\x1b[10;20H\x1b[A\x1b[5C\x1b[K\x1b[1;24r\x1b7\x1b8\x1bM"},
		{"modes", "\x1b[?1049h\x1b[?25l\x1b[?2004h\x1b[?1000h\x1b[?1006h\x1b=\x1b>\x1b[?1049l", "\x1b[?1049h\x1b[?25l\x1b[?2004h\x1b[?1000h\x1b[?1006h\x1b=\x1b>\x1b[?1049l"},
		{"cursor style, scroll, charset", "\x1b[2 q\x1b[3S\x1b(B\x1b)0\x1b#8\x1b[!p\x1b[>4;2m\x1b[>1u\x1b[<u", "\x1b[2 q\x1b[3S\x1b(B\x1b)0\x1b#8\x1b[!p\x1b[>4;2m\x1b[>1u\x1b[<u"},
		{"title set", "\x1b]0;vim: a.go\x07\x1b]2;naïve\x1b\\", "\x1b]0;vim: a.go\x07\x1b]2;naïve\x1b\\"},
		{"title stack", "\x1b[22;0t\x1b[23;0t", "\x1b[22;0t\x1b[23;0t"},
		{"colour set and reset", "\x1b]11;#000000\x07\x1b]4;1;rgb:ff/00/00\x1b\\\x1b]104\x07\x1b]112\x07", "\x1b]11;#000000\x07\x1b]4;1;rgb:ff/00/00\x1b\\\x1b]104\x07\x1b]112\x07"},
		{"hyperlink", "\x1b]8;;https://example.com/?q=1\x1b\\link\x1b]8;;\x1b\\", "\x1b]8;;https://example.com/?q=1\x1b\\link\x1b]8;;\x1b\\"},

		// removed
		{"osc 52 bel", "a\x1b]52;c;aGVsbG8=\x07b", "ab"},
		{"osc 52 st", "a\x1b]52;c;aGVsbG8=\x1b\\b", "ab"},
		{"osc 52 query", "a\x1b]52;c;?\x07b", "ab"},
		{"osc 052", "a\x1b]052;c;eA==\x07b", "ab"},
		{"colour queries", "a\x1b]11;?\x07\x1b]10;?\x1b\\\x1b]4;1;?\x07\x1b]12;?\x07\x1b]4;1;red;2;?\x07b", "ab"},
		{"osc unknown", "a\x1b]1337;File=x\x07\x1b]50;?\x07\x1b]777;notify;x\x07\x1b]7;file:///x\x07\x1b];x\x07b", "ab"},
		{"osc with control", "a\x1b]2;x\ny\x07\x1b]2;\xc2\x9b6n\x07\x1b]2;\xff\x07b", "ab"},
		{"osc cut by esc", "a\x1b]2;x\x1b[31mb", "a\x1b[31mb"},
		{"osc cut by can", "a\x1b]52;c;eA==\x18b", "a\x18b"},
		{"osc too long", "a\x1b]2;" + strings.Repeat("x", maxOSC) + "\x07b", "ab"},
		{"decrqss", "a\x1bP$qm\x1b\\b", "ab"},
		{"xtgettcap", "a\x1bP+q544e\x1b\\b", "ab"},
		{"dcs cut by esc", "a\x1bP$qm\x1b[1mb", "a\x1b[1mb"},
		{"apc pm sos", "a\x1b_Gi=1,a=q;\x1b\\\x1b^x\x1b\\\x1bXy\x1b\\b", "ab"},
		{"dsr", "a\x1b[5n\x1b[6n\x1b[?6n\x1b[n\x1b[?15n\x1b[?996nb", "ab"},
		{"da", "a\x1b[c\x1b[0c\x1b[>c\x1b[>0c\x1b[=cb", "ab"},
		{"decid", "a\x1bZb", "ab"},
		{"window reports and moves", "a\x1b[11t\x1b[13t\x1b[14t\x1b[14;2t\x1b[15t\x1b[16t\x1b[18t\x1b[19t\x1b[20t\x1b[21t\x1b[3;0;0t\x1b[8;10;10t\x1b[2t\x1b[48tb", "ab"},
		{"decrqm", "a\x1b[?2004$p\x1b[4$pb", "ab"},
		{"xtversion", "a\x1b[>q\x1b[>0qb", "ab"},
		{"other reports", "a\x1b[?u\x1b[1$u\x1b[&u\x1b[1$w\x1b[1;1;1;1;1;1*y\x1b[\"v\x1b[1;1;1;1#|\x1b['|\x1b[#R\x1b[?4m\x1b[?1;1S\x1b[xb", "ab"},
		{"printing", "a\x1b[5i\x1b[ib", "ab"},
		{"encoding switch", "a\x1b%@\x1b%Gb", "ab"},
		{"enq", "a\x05b", "ab"},
		{"c1 bytes", "a\x9b6n\x9d52;c;eA==\x9c\x90$qm\x9cb", "a6n52;c;eA==$qmb"},
		{"c1 as utf-8", "a\xc2\x9b6n\xc2\x85b", "a6nb"},
		{"continuation bytes stay", "\xe2\x82\xac \xd1\x80 \xe2\x9b\x84", "\xe2\x82\xac \xd1\x80 \xe2\x9b\x84"},
		{"broken utf-8", "a\xe2\x9b6n\xff\xc0\xaf", "a\xe26n\xff\xc0\xaf"},
		{"csi cut by esc", "a\x1b[6\x1b[31mb", "a\x1b[31mb"},
		{"csi cut by control", "a\x1b[6\nn", "a\nn"},
		{"csi cut by c1", "a\x1b[6\xc2\x9bn", "an"},
		{"csi malformed", "a\x1b[1$1pb", "ab"},
		{"csi too long", "a\x1b[" + strings.Repeat("1;", maxSeq) + "6nb", "ab"},
		{"csi longest", "\x1b[" + strings.Repeat("1", maxSeq-2) + "m", "\x1b[" + strings.Repeat("1", maxSeq-2) + "m"},
		{"csi one longer", "a\x1b[" + strings.Repeat("1", maxSeq-1) + "mb", "ab"},
		{"unfinished", "a\x1b[6", "a"},
		{"unfinished osc", "a\x1b]52;c;", "a"},
		{"unfinished utf-8", "a\xe2\x82", "a\xe2"},
		{"lone esc", "a\x1b", "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := run(t, tc.in); got != tc.want {
				t.Errorf("filter(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// TestSplit: a forbidden sequence split at any point across two writes is
// still removed, and an allowed one still passes whole.
func TestSplit(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"x\x1b]52;c;aGVsbG8=\x1b\\y\x1b[6n\x1b[31mz\x1bP$qm\x1b\\€\xc2\x9b6n", "xy\x1b[31mz€6n"},
		{"\x1b]2;日本\x07\x1b[?1049h", "\x1b]2;日本\x07\x1b[?1049h"},
	} {
		for k := 0; k <= len(tc.in); k++ {
			var out bytes.Buffer
			f := NewWriter(&out)
			f.Write([]byte(tc.in[:k]))
			f.Write([]byte(tc.in[k:]))
			f.Flush()
			if out.String() != tc.want {
				t.Errorf("split at %d of %q: %q, want %q", k, tc.in, out.String(), tc.want)
			}
		}
	}
}

type failWriter struct{}

func (failWriter) Write(p []byte) (int, error) { return 0, errors.New("gone") }

func TestWriteError(t *testing.T) {
	f := NewWriter(failWriter{})
	for _, in := range []string{"plain", "\x1b[31mred"} {
		if n, err := f.Write([]byte(in)); err == nil || n != 0 {
			t.Errorf("Write(%q) to a failing writer = %d, %v", in, n, err)
		}
	}
	var out bytes.Buffer
	if err := Copy(&out, strings.NewReader("a\x1b[6nb\xe2\x82")); err != nil || out.String() != "ab\xe2" {
		t.Errorf("Copy: %q, %v", out.String(), err)
	}
}

// plainInput says whether in holds nothing the filter acts on: no ESC,
// no ENQ, no C1 control as UTF-8 or as a bare byte.
func plainInput(in []byte) bool {
	for len(in) > 0 {
		r, size := utf8.DecodeRune(in)
		if in[0] == esc || in[0] == enq || r >= 0x80 && r < 0xa0 || r == utf8.RuneError && size == 1 && in[0] < 0xa0 {
			return false
		}
		in = in[size:]
	}
	return true
}

var (
	csiRe = regexp.MustCompile(`^\x1b\[([<=>?]?)([0-9:;<=>?]*)([ -/]*)([@-~])`)
	oscRe = regexp.MustCompile(`^\x1b\]([0-9]*)((?:;[^\x00-\x1f\x7f]*)?)(\x07|\x1b\\)`)
)

// forbidden checks filtered output the way a terminal would read it and
// says what in it the terminal would answer or act on outside the screen.
func forbidden(out []byte) error {
	for rest := out; len(rest) > 0; {
		r, size := utf8.DecodeRune(rest)
		if r >= 0x80 && r < 0xa0 || r == utf8.RuneError && size == 1 && rest[0] < 0xa0 {
			return fmt.Errorf("C1 control %q", rest[:size])
		}
		rest = rest[size:]
	}
	for i := 0; i < len(out); i++ {
		switch out[i] {
		case enq:
			return errors.New("ENQ")
		case esc:
		default:
			continue
		}
		rest := out[i:]
		if len(rest) < 2 {
			return errors.New("a dangling ESC")
		}
		switch rest[1] {
		case '[':
			m := csiRe.FindSubmatch(rest)
			if m == nil {
				return fmt.Errorf("an unfinished CSI %q", rest)
			}
			prefix, params, inter, final := string(m[1]), string(m[2]), string(m[3]), m[4][0]
			first, _ := strconv.Atoi(params[:len(params)-len(strings.TrimLeft(params, "0123456789"))])
			switch {
			case final == 'c', final == 'n' && prefix != ">", final == 'i', final == 'x' && inter == "",
				final == 't' && (prefix != "" || inter != "" || first != 22 && first != 23),
				final == 'p' && strings.HasPrefix(inter, "$"), final == 'q' && prefix == ">",
				final == 'u' && (prefix == "?" || inter == "$" || inter == "&"):
				return fmt.Errorf("CSI query %q", m[0])
			}
			i += len(m[0]) - 1
		case ']':
			m := oscRe.FindSubmatch(rest)
			if m == nil || !utf8.Valid(m[2]) {
				return fmt.Errorf("an OSC that does not end cleanly %q", rest)
			}
			n, err := strconv.Atoi(string(m[1]))
			if err != nil || n == 52 || n > 2 && n != 4 && n != 8 && (n < 10 || n > 19) && n != 104 && (n < 110 || n > 119) {
				return fmt.Errorf("OSC %q", m[0])
			}
			if bytes.Contains(m[2], []byte(";?")) {
				return fmt.Errorf("OSC query %q", m[0])
			}
			i += len(m[0]) - 1
		case 'P', 'X', '^', '_':
			return fmt.Errorf("a string sequence %q", rest)
		case 'Z', '%':
			return fmt.Errorf("ESC %c", rest[1])
		}
	}
	return nil
}

func FuzzFilter(f *testing.F) {
	for _, s := range []string{
		"plain text\r\n", "\x1b[31mred\x1b[0m", "\x1b]52;c;eA==\x07", "\x1b]11;?\x1b\\", "\x1b[6n\x1b[>c\x1b[21t",
		"\x1bP$qm\x1b\\", "\x9b6n\xc2\x9d52;c;x\x07", "\x1b]2;t\x1b]52;c;x\x07", "€\xe2\x9b\x1b[?2004$p",
		"\x1b]0;a\x1b\\\x1b[22t\x1b[?1049h", "\x1b[1\x1b]8;;u\x07",
	} {
		f.Add([]byte(s), uint16(len(s)/2))
	}
	f.Fuzz(func(t *testing.T, in []byte, cut uint16) {
		var whole, split bytes.Buffer
		w := NewWriter(&whole)
		w.Write(in)
		w.Flush()
		k := 0
		if len(in) > 0 {
			k = int(cut) % (len(in) + 1)
		}
		s := NewWriter(&split)
		s.Write(in[:k])
		s.Write(in[k:])
		s.Flush()
		out := whole.Bytes()
		if !bytes.Equal(out, split.Bytes()) {
			t.Fatalf("%q: one write gives %q, split at %d %q", in, out, k, split.Bytes())
		}
		if err := forbidden(out); err != nil {
			t.Fatalf("%q passed %v: %q", in, err, out)
		}
		if plainInput(in) && !bytes.Equal(out, in) {
			t.Fatalf("plain %q came out as %q", in, out)
		}
	})
}

var (
	benchText   = bytes.Repeat([]byte("total 48 drwxr-xr-x  5 user user 4096 Jan  1 12:00 some-directory-name\r\n"), 512)
	benchScreen = bytes.Repeat([]byte("\x1b[12;1H\x1b[1;34mdrwxr-xr-x\x1b[0m \x1b[38;2;200;100;0mgrüße\x1b[K  12.5%  \x1b[7m top \x1b[27m\r\n"), 512)
)

// BenchmarkFilter: plain text costs the scan for ESC; a full-screen
// program's output costs parsing each sequence. Direct is the same
// copy without the filter.
func BenchmarkFilter(b *testing.B) {
	for _, bc := range []struct {
		name   string
		data   []byte
		filter bool
	}{
		{"text/direct", benchText, false},
		{"text/filtered", benchText, true},
		{"screen/direct", benchScreen, false},
		{"screen/filtered", benchScreen, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var sink discard
			var w interface{ Write([]byte) (int, error) } = &sink
			if bc.filter {
				w = NewWriter(&sink)
			}
			b.SetBytes(int64(len(bc.data)))
			for b.Loop() {
				// 4 KiB, what one read of a terminal master gives
				for p := bc.data; len(p) > 0; {
					n := min(4096, len(p))
					w.Write(p[:n])
					p = p[n:]
				}
			}
		})
	}
}

type discard struct{ n int }

func (d *discard) Write(p []byte) (int, error) { d.n += len(p); return len(p), nil }
