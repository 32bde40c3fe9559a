package policies

import (
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// node is one value of a policy document, TOML or SKILL.md front matter,
// with the key path and line used in error messages. Both formats are turned
// into nodes so that one decoder validates them the same way.
type node struct {
	key  string
	line int
	// val is string, int64, float64, bool, []*node, *table, or for any
	// other TOML/YAML type (dates, null) a kind name used in messages.
	val any
}

type kindName string

type table struct {
	keys []string // in document order
	vals map[string]*node
}

func (t *table) get(k string) *node {
	if t == nil {
		return nil
	}
	return t.vals[k]
}

func typeName(v any) string {
	switch v := v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case []*node:
		return "a list"
	case *table:
		return "a table"
	case kindName:
		return string(v)
	}
	return "an unknown type"
}

// tomlTree decodes TOML data into nodes. The toml library keeps key
// positions private, so lines come from a small scan of the source (see
// tomlLines); the library has already checked the syntax by then.
func tomlTree(data []byte) (*node, error) {
	var m map[string]any
	if _, err := toml.Decode(string(data), &m); err != nil {
		return nil, err
	}
	lines := tomlLines(string(data))
	return tomlNode("", m, lines, 0), nil
}

func tomlNode(key string, v any, lines map[string]int, parentLine int) *node {
	n := &node{key: key, line: lines[key]}
	if n.line == 0 {
		n.line = parentLine
	}
	switch v := v.(type) {
	case string, int64, float64, bool:
		n.val = v
	case []any:
		list := make([]*node, len(v))
		for i, e := range v {
			list[i] = tomlNode(key+"["+strconv.Itoa(i)+"]", e, lines, n.line)
		}
		n.val = list
	case []map[string]any:
		list := make([]*node, len(v))
		for i, e := range v {
			list[i] = tomlNode(key+"["+strconv.Itoa(i)+"]", e, lines, n.line)
		}
		n.val = list
	case map[string]any:
		t := &table{vals: map[string]*node{}}
		for k, e := range v {
			ck := k
			if key != "" {
				ck = key + "." + k
			}
			t.keys = append(t.keys, k)
			t.vals[k] = tomlNode(ck, e, lines, n.line)
		}
		// Report problems in document order, so the first error is the
		// first one a reader meets.
		sort.Slice(t.keys, func(i, j int) bool {
			a, b := t.vals[t.keys[i]], t.vals[t.keys[j]]
			if a.line != b.line {
				return a.line < b.line
			}
			return t.keys[i] < t.keys[j]
		})
		n.val = t
	case time.Time, toml.Primitive:
		n.val = kindName("a date")
	default:
		n.val = kindName("a date")
	}
	return n
}

// tomlLines maps key paths ("fs", "fs.read", "fs.read[1]", "env.set.PAGER")
// to the line where each key or list element starts. It assumes valid TOML.
func tomlLines(src string) map[string]int {
	s := &tomlScan{lines: map[string]int{}}
	s.lex(src)
	s.document()
	return s.lines
}

type tomlTok struct {
	kind byte // 'w' word, 's' string, '\n', or one of []{}=,.
	text string
	line int
}

type tomlScan struct {
	toks  []tomlTok
	pos   int
	lines map[string]int
}

func (s *tomlScan) lex(src string) {
	line := 1
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '\n':
			s.toks = append(s.toks, tomlTok{kind: '\n', line: line})
			line++
			i++
		case c == ' ' || c == '\t' || c == '\r':
			i++
		case c == '#':
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case strings.ContainsRune("[]{}=,.", rune(c)):
			s.toks = append(s.toks, tomlTok{kind: c, line: line})
			i++
		case c == '"' || c == '\'':
			start, startLine := i, line
			q := src[i : i+1]
			multi := strings.HasPrefix(src[i:], q+q+q)
			if multi {
				q = q + q + q
			}
			i += len(q)
			for i < len(src) && !strings.HasPrefix(src[i:], q) {
				if src[i] == '\n' {
					line++
				}
				if c == '"' && src[i] == '\\' {
					i++
					if i < len(src) && src[i] == '\n' {
						line++
					}
				}
				i++
			}
			i += len(q)
			if multi {
				// A multi-line string may end with up to two extra quotes.
				for k := 0; k < 2 && i < len(src) && src[i] == c; k++ {
					i++
				}
			}
			if i > len(src) {
				i = len(src)
			}
			s.toks = append(s.toks, tomlTok{kind: 's', text: unquoteKey(src[start:i]), line: startLine})
		default:
			start := i
			for i < len(src) && !strings.ContainsRune(" \t\r\n#[]{}=,.\"'", rune(src[i])) {
				i++
			}
			s.toks = append(s.toks, tomlTok{kind: 'w', text: src[start:i], line: line})
		}
	}
}

func unquoteKey(q string) string {
	if strings.HasPrefix(q, "'") {
		return strings.Trim(q, "'")
	}
	if u, err := strconv.Unquote(q); err == nil {
		return u
	}
	return strings.Trim(q, `"`)
}

func (s *tomlScan) peek() tomlTok {
	if s.pos < len(s.toks) {
		return s.toks[s.pos]
	}
	return tomlTok{kind: 0}
}

func (s *tomlScan) next() tomlTok {
	t := s.peek()
	if s.pos < len(s.toks) {
		s.pos++
	}
	return t
}

func (s *tomlScan) skipNewlines() {
	for s.peek().kind == '\n' {
		s.pos++
	}
}

func (s *tomlScan) record(key string, line int) {
	if _, ok := s.lines[key]; !ok {
		s.lines[key] = line
	}
}

func (s *tomlScan) document() {
	var prefix string
	for s.pos < len(s.toks) {
		s.skipNewlines()
		t := s.peek()
		switch t.kind {
		case 0:
			return
		case '[':
			s.next()
			if s.peek().kind == '[' {
				s.next()
			}
			prefix = s.keyUntil(']')
			for s.peek().kind == ']' {
				s.next()
			}
			s.record(prefix, t.line)
		case 'w', 's':
			k := s.keyUntil('=')
			if prefix != "" {
				k = prefix + "." + k
			}
			s.recordDotted(k, t.line)
			s.next() // '='
			s.value(k)
		default:
			s.next()
		}
	}
}

// recordDotted records a dotted key and its parents ("fs.read" also
// records "fs"), so a section written as dotted keys still has a line.
func (s *tomlScan) recordDotted(k string, line int) {
	for i := range len(k) {
		if k[i] == '.' {
			s.record(k[:i], line)
		}
	}
	s.record(k, line)
}

// keyUntil reads a dotted key up to (not including) the stop token.
func (s *tomlScan) keyUntil(stop byte) string {
	var parts []string
	for {
		t := s.peek()
		if t.kind == stop || t.kind == 0 || t.kind == '\n' {
			break
		}
		s.next()
		if t.kind == 'w' || t.kind == 's' {
			parts = append(parts, t.text)
		}
	}
	return strings.Join(parts, ".")
}

func (s *tomlScan) value(key string) {
	t := s.peek()
	switch t.kind {
	case '[':
		s.next()
		for i := 0; ; i++ {
			s.skipNewlines()
			e := s.peek()
			if e.kind == ']' || e.kind == 0 {
				s.next()
				return
			}
			if e.kind == ',' { // tolerate; valid TOML never gets here
				s.next()
				continue
			}
			ek := key + "[" + strconv.Itoa(i) + "]"
			s.record(ek, e.line)
			s.value(ek)
			s.skipNewlines()
			if s.peek().kind == ',' {
				s.next()
			}
		}
	case '{':
		s.next()
		for {
			e := s.peek()
			if e.kind == '}' || e.kind == 0 {
				s.next()
				return
			}
			if e.kind == ',' || e.kind == '\n' {
				s.next()
				continue
			}
			k := key + "." + s.keyUntil('=')
			s.recordDotted(k, e.line)
			s.next() // '='
			s.value(k)
		}
	default:
		// A scalar; numbers and dates lex as several words and dots.
		for {
			switch s.peek().kind {
			case ',', ']', '}', '\n', 0:
				return
			}
			s.next()
		}
	}
}
