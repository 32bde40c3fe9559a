package termfilter

import (
	"encoding/binary"
	"io"
	"unicode/utf8"
)

const (
	enq = 0x05 // makes the terminal send its answerback message
	bel = 0x07
	can = 0x18
	sub = 0x1a
	esc = 0x1b

	// A CSI or ESC sequence longer than this is dropped; real ones are
	// far shorter (a true-colour SGR pair is ~40 bytes).
	maxSeq = 256
	// An OSC payload longer than this is dropped: it has to be held
	// whole until its end to be judged.
	maxOSC = 8192
)

type state uint8

const (
	ground    state = iota
	escape          // after ESC: seq holds ESC and any intermediates
	csi             // seq holds ESC [ and the bytes after it
	csiIgnore       // an overlong CSI, dropped up to its final byte
	osc             // seq holds ESC ] and the payload so far
	oscEsc          // an ESC inside an OSC: ST, or the OSC is cut off
	str             // DCS, SOS, PM or APC, dropped up to ST
	strEsc          // an ESC inside such a string
)

// Writer filters a terminal's output on its way to w. What it writes to w
// is at every point plain text or a complete sequence it allows, so the
// caller's terminal is never left inside a sequence it did not judge.
type Writer struct {
	w       io.Writer
	st      state
	seq     []byte // the sequence being judged
	oscLong bool   // the OSC outgrew maxOSC: drop it
	carry   []byte // an incomplete UTF-8 character at the end of a write
	out     []byte
}

// NewWriter returns a Writer that writes the filtered stream to w.
func NewWriter(w io.Writer) *Writer {
	return &Writer{w: w}
}

// Copy copies a sandbox terminal's output from src to the caller's
// terminal dst through a Writer until src ends.
func Copy(dst io.Writer, src io.Reader) error {
	f := NewWriter(dst)
	_, err := io.Copy(f, src)
	if ferr := f.Flush(); err == nil {
		err = ferr
	}
	return err
}

// Write filters p. A sequence or UTF-8 character that p leaves unfinished
// is held until a later Write completes it.
func (f *Writer) Write(p []byte) (int, error) {
	n := len(p)
	if len(f.carry) > 0 {
		p = append(append(make([]byte, 0, len(f.carry)+len(p)), f.carry...), p...)
		f.carry = f.carry[:0]
	}
	if f.st == ground && plain(p) == len(p) {
		if _, err := f.w.Write(p); err != nil {
			return 0, err
		}
		return n, nil
	}
	f.out = f.out[:0]
	f.filter(p, false)
	if len(f.out) > 0 {
		if _, err := f.w.Write(f.out); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// Flush ends the stream: an unfinished UTF-8 character is written as the
// bytes it has (bar any C1 byte); an unfinished sequence is dropped.
func (f *Writer) Flush() error {
	p := f.carry
	f.carry = nil
	f.out = f.out[:0]
	f.filter(p, true)
	f.st, f.seq, f.oscLong = ground, f.seq[:0], false
	if len(f.out) == 0 {
		return nil
	}
	_, err := f.w.Write(f.out)
	return err
}

// plain returns the length of p's prefix that passes as it is: no ESC,
// ENQ or byte of 0x80 and up. It looks at eight bytes at a time.
func plain(p []byte) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(p); i += 8 {
		w := binary.LittleEndian.Uint64(p[i:])
		e, q := w^(esc*ones), w^(enq*ones)
		// A zero byte in e or q is an ESC or ENQ in w (the classic
		// has-zero-byte test); a high bit in w is a non-ASCII byte.
		if (w|(e-ones)&^e|(q-ones)&^q)&highs != 0 {
			break
		}
	}
	for ; i < len(p); i++ {
		if b := p[i]; b == esc || b == enq || b >= 0x80 {
			break
		}
	}
	return i
}

func (f *Writer) filter(p []byte, final bool) {
	for i := 0; i < len(p); {
		if f.st != ground {
			if f.step(p[i]) {
				i++
			}
			continue
		}
		j := i + plain(p[i:])
		f.out = append(f.out, p[i:j]...)
		if i = j; i == len(p) {
			return
		}
		switch b := p[i]; {
		case b == esc && i+2 < len(p) && p[i+1] == '[':
			// The common case, a CSI whole in p, judged in place.
			j := i + 2
			for j < len(p) && j-i < maxSeq && p[j] >= 0x20 && p[j] <= 0x3f {
				j++
			}
			if j < len(p) && p[j] >= 0x40 && p[j] <= 0x7e {
				if csiAllowed(p[i+2 : j+1]) {
					f.out = append(f.out, p[i:j+1]...)
				}
				i = j + 1
				break
			}
			f.seq = append(f.seq[:0], esc)
			f.st = escape
			i++
		case b == esc:
			f.seq = append(f.seq[:0], esc)
			f.st = escape
			i++
		case b == enq:
			i++
		default:
			if !final && !utf8.FullRune(p[i:]) {
				f.carry = append(f.carry[:0], p[i:]...)
				return
			}
			// C1 controls (0x80-0x9f) are dropped whether they come as
			// UTF-8 or as bare bytes: some terminals act on either form.
			r, size := utf8.DecodeRune(p[i:])
			if r == utf8.RuneError && size == 1 {
				if b >= 0xa0 {
					f.out = append(f.out, b)
				}
			} else if r >= 0xa0 {
				f.out = append(f.out, p[i:i+size]...)
			}
			i += size
		}
	}
}

// step moves a sequence on by one byte, and says whether it took the
// byte; a byte it does not take is read again in the ground state.
func (f *Writer) step(b byte) bool {
	switch f.st {
	case escape:
		switch {
		case b >= 0x20 && b <= 0x2f:
			if len(f.seq) >= maxSeq {
				f.st = ground
				return true
			}
			f.seq = append(f.seq, b)
		case len(f.seq) == 1 && b == '[':
			f.seq = append(f.seq, b)
			f.st = csi
		case len(f.seq) == 1 && b == ']':
			f.seq = append(f.seq, b)
			f.st, f.oscLong = osc, false
		case len(f.seq) == 1 && (b == 'P' || b == 'X' || b == '^' || b == '_'):
			f.st = str
		case b >= 0x30 && b <= 0x7e:
			f.seq = append(f.seq, b)
			if escAllowed(f.seq) {
				f.out = append(f.out, f.seq...)
			}
			f.st = ground
		default:
			f.st = ground
			return false
		}
	case csi:
		switch {
		case b >= 0x20 && b <= 0x3f:
			if f.seq = append(f.seq, b); len(f.seq) > maxSeq {
				f.st = csiIgnore
			}
		case b >= 0x40 && b <= 0x7e:
			f.seq = append(f.seq, b)
			if csiAllowed(f.seq[2:]) {
				f.out = append(f.out, f.seq...)
			}
			f.st = ground
		default:
			f.st = ground
			return false
		}
	case csiIgnore:
		switch {
		case b >= 0x20 && b <= 0x3f:
		case b >= 0x40 && b <= 0x7e:
			f.st = ground
		default:
			f.st = ground
			return false
		}
	case osc:
		switch b {
		case bel:
			f.endOSC(bel)
		case esc:
			f.st = oscEsc
		case can, sub:
			f.st = ground
			return false
		default:
			if len(f.seq) >= maxOSC {
				f.oscLong = true
			} else {
				f.seq = append(f.seq, b)
			}
		}
	case oscEsc:
		if b == '\\' {
			f.endOSC(esc, '\\')
			break
		}
		// ESC cuts the OSC off and starts a sequence of its own.
		f.seq = append(f.seq[:0], esc)
		f.st = escape
		return false
	case str:
		switch b {
		case esc:
			f.st = strEsc
		case can, sub:
			f.st = ground
			return false
		}
	case strEsc:
		if b == '\\' {
			f.st = ground
			break
		}
		f.seq = append(f.seq[:0], esc)
		f.st = escape
		return false
	}
	return true
}

func (f *Writer) endOSC(st ...byte) {
	if !f.oscLong && oscAllowed(f.seq[2:]) {
		f.out = append(append(f.out, f.seq...), st...)
	}
	f.st = ground
}

// escAllowed judges ESC, its intermediates and its final byte.
func escAllowed(seq []byte) bool {
	if len(seq) == 2 {
		return seq[1] != 'Z' // DECID: answered like DA
	}
	switch seq[1] {
	case ' ', '#', '(', ')', '*', '+', '-', '.', '/':
		// 7/8-bit responses, line sizes, character sets
		return true
	}
	// '%' switches the terminal's encoding away from UTF-8, which the
	// filter's reading of C1 bytes depends on; the rest is unknown.
	return false
}

// csiAllowed judges a CSI by what follows ESC [: parameter bytes,
// intermediates and the final byte. It removes the queries xterm's
// control sequences and kitty's keyboard protocol define (each answered
// on the terminal's input), printing and window operations.
func csiAllowed(body []byte) bool {
	final := body[len(body)-1]
	body = body[:len(body)-1]
	i := 0
	for i < len(body) && body[i] >= 0x30 {
		i++
	}
	params, inter := body[:i], body[i:]
	for _, b := range inter {
		if b >= 0x30 { // a parameter after an intermediate: malformed
			return false
		}
	}
	var prefix byte
	if len(params) > 0 && params[0] >= '<' {
		prefix, params = params[0], params[1:]
	}
	first := -1
	for _, b := range params {
		if b < '0' || b > '9' {
			break
		}
		if first < 0 {
			first = 0
		}
		if first < 1000 {
			first = first*10 + int(b-'0')
		}
	}
	var im byte
	if len(inter) > 0 {
		im = inter[0]
	}
	switch final {
	case 'c': // DA1, DA2, DA3
		return false
	case 'n': // DSR, cursor position; CSI > n resets key modifiers
		return prefix == '>'
	case 'x': // DECREQTPARM
		return im != 0
	case 'i': // media copy: printing
		return false
	case 't': // XTWINOPS: reports and window moves; keep the title stack
		return prefix == 0 && im == 0 && (first == 22 || first == 23)
	case 'p': // DECRQM
		return im != '$'
	case 'q': // XTVERSION
		return prefix != '>'
	case 'u': // kitty keyboard flags query, DECRQTSR, DECRQUPSS
		return prefix != '?' && im != '$' && im != '&'
	case 'w': // DECRQPSR
		return im != '$'
	case 'y': // DECRQCRA: a checksum of screen contents
		return im != '*'
	case 'v': // DECRQDE
		return im != '"'
	case '|': // XTREPORTSGR, DECRQLP
		return im != '#' && im != '\''
	case 'R': // XTREPORTCOLORS
		return im != '#'
	case 'm': // XTQMODKEYS
		return prefix != '?'
	case 'S': // XTSMGRAPHICS
		return prefix != '?'
	}
	return true
}

// oscAllowed judges an OSC payload. Only the title (0, 1, 2), palette and
// dynamic colours (4, 10-19 and their resets 104, 110-119) and hyperlinks
// (8) pass, and none whose fields ask (a field beginning with ?, as in
// OSC 11;?). The payload must be UTF-8 without control characters, so the
// terminal ends it where the filter did.
func oscAllowed(payload []byte) bool {
	n, i := 0, 0
	for ; i < len(payload) && payload[i] >= '0' && payload[i] <= '9'; i++ {
		if i == 4 {
			return false
		}
		n = n*10 + int(payload[i]-'0')
	}
	if i == 0 || (i < len(payload) && payload[i] != ';') {
		return false
	}
	switch {
	case n <= 2, n == 4, n == 8, n >= 10 && n <= 19, n == 104, n >= 110 && n <= 119:
	default:
		return false
	}
	for j := i; j < len(payload); j++ {
		if payload[j] == ';' && j+1 < len(payload) && payload[j+1] == '?' {
			return false
		}
	}
	for rest := payload; len(rest) > 0; {
		r, size := utf8.DecodeRune(rest)
		if r == utf8.RuneError && size == 1 || r < 0x20 || r >= 0x7f && r < 0xa0 {
			return false
		}
		rest = rest[size:]
	}
	return true
}
