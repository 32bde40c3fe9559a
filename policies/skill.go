package policies

import (
	"bytes"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// ImportSkill reads the permissions in a clawhive-style SKILL.md: YAML front
// matter between a first line "---" and the next "---" line, with name,
// description and permissions {fs, network, exec, env, limits}. network,
// exec and env may be a plain list (the allow list) or a table as in TOML.
// The name is normalised to policy syntax (lower case, "_" -> "-"). Values
// are checked exactly as in a TOML policy; unknown keys under permissions
// are errors, other front-matter keys (version, metadata, ...) are ignored.
func ImportSkill(path string) (*Policy, error) {
	data, err := ReadFile(path, "SKILL.md", MaxPolicyFile)
	if err != nil {
		return nil, err
	}
	return parseSkill(path, data)
}

var yamlLineRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`line ([0-9]+)`) })

var permissionKeys = []string{"fs", "network", "exec", "env", "limits"}

func parseSkill(file string, data []byte) (*Policy, error) {
	front, offset, err := frontMatter(data)
	if err != nil {
		return nil, &Error{File: file, Line: 1, Msg: err.Error()}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(front, &doc); err != nil {
		msg := shiftYAMLLines(err.Error(), offset)
		line := 0
		if m := yamlLineRE().FindStringSubmatch(msg); m != nil {
			line, _ = strconv.Atoi(m[1])
		}
		return nil, &Error{File: file, Line: line, Msg: "yaml front matter: " + strings.ReplaceAll(msg, "\n", "; ")}
	}
	y := &yamlConv{file: file, offset: offset, budget: 100000}
	if len(doc.Content) == 0 {
		return nil, &Error{File: file, Line: 1, Msg: "empty front matter; it needs at least name: and permissions:"}
	}
	fm, err := y.node(doc.Content[0], "", 0)
	if err != nil {
		return nil, err
	}
	ft, ok := fm.val.(*table)
	if !ok {
		return nil, &Error{File: file, Line: fm.line, Msg: fmt.Sprintf("front matter is %s; want a mapping", typeName(fm.val))}
	}
	root := &table{vals: map[string]*node{}}
	add := func(k string, n *node) {
		root.keys = append(root.keys, k)
		root.vals[k] = n
	}
	if n := ft.get("name"); n != nil {
		if s, ok := n.val.(string); ok {
			n.val = strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "_", "-")
		}
		add("name", n)
	}
	if n := ft.get("description"); n != nil {
		add("description", n)
	}
	pn := ft.get("permissions")
	if pn != nil {
		d := &decoder{file: file}
		pt, err := d.table(pn, "permissions", permissionKeys)
		if err != nil {
			return nil, err
		}
		for _, k := range pt.keys {
			n := pt.vals[k]
			// The shorthand list form means the allow list.
			if _, isList := n.val.([]*node); isList && k != "fs" && k != "limits" {
				n = &node{key: n.key, line: n.line, val: &table{keys: []string{"allow"}, vals: map[string]*node{"allow": n}}}
			}
			add(k, n)
		}
	}
	p, err := decode(file, &node{line: fm.line, val: root})
	if err == nil && pn == nil {
		return nil, &Error{File: file, Line: fm.line, Key: "permissions", Msg: "the skill declares no permissions (its front matter has no permissions:); warden does not guess what a skill needs: add permissions: with fs, network, exec, env or limits, or permissions: {} for a skill that needs nothing but the defaults"}
	}
	return p, err
}

// frontMatter returns the YAML between the first two "---" lines and the
// number of lines before it, so YAML line numbers map back to the file.
func frontMatter(data []byte) ([]byte, int, error) {
	data = bytes.TrimPrefix(data, []byte("\ufeff"))
	lines := strings.SplitAfter(string(data), "\n")
	if len(lines) == 0 || strings.TrimRight(lines[0], " \t\r\n") != "---" {
		return nil, 0, fmt.Errorf("no front matter; a SKILL.md starts with a line \"---\", the YAML, and another \"---\"")
	}
	for i := 1; i < len(lines); i++ {
		if l := strings.TrimRight(lines[i], " \t\r\n"); l == "---" || l == "..." {
			return []byte(strings.Join(lines[1:i], "")), 1, nil
		}
	}
	return nil, 0, fmt.Errorf("front matter has no closing \"---\" line")
}

// isSkillFile tells a SKILL.md given where a policy was expected: by its
// name, or by its first line, the "---" that opens front matter.
func isSkillFile(filename string, data []byte) bool {
	first, _, _ := strings.Cut(string(bytes.TrimPrefix(data, []byte("\ufeff"))), "\n")
	return strings.EqualFold(filepath.Ext(filename), ".md") || strings.TrimRight(first, " \t\r") == "---"
}

// shiftYAMLLines rewrites "line N" in a yaml error to the file's line.
func shiftYAMLLines(msg string, offset int) string {
	const p = "line "
	var b strings.Builder
	for {
		i := strings.Index(msg, p)
		if i < 0 {
			break
		}
		j := i + len(p)
		k := j
		for k < len(msg) && msg[k] >= '0' && msg[k] <= '9' {
			k++
		}
		b.WriteString(msg[:j])
		if n, err := strconv.Atoi(msg[j:k]); err == nil {
			b.WriteString(strconv.Itoa(n + offset))
		}
		msg = msg[k:]
	}
	b.WriteString(msg)
	return strings.TrimPrefix(b.String(), "yaml: ")
}

type yamlConv struct {
	file   string
	offset int
	budget int // nodes left; aliases could otherwise expand exponentially
}

func (y *yamlConv) node(n *yaml.Node, key string, depth int) (*node, error) {
	line := n.Line + y.offset
	if y.budget--; y.budget < 0 || depth > 64 {
		return nil, &Error{File: y.file, Line: line, Key: key, Msg: "front matter is too large or too deeply nested"}
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		return y.node(n.Alias, key, depth+1)
	}
	out := &node{key: key, line: line}
	switch n.Kind {
	case yaml.ScalarNode:
		out.val = yamlScalar(n)
	case yaml.SequenceNode:
		list := make([]*node, len(n.Content))
		for i, c := range n.Content {
			e, err := y.node(c, key+"["+strconv.Itoa(i)+"]", depth+1)
			if err != nil {
				return nil, err
			}
			list[i] = e
		}
		out.val = list
	case yaml.MappingNode:
		t := &table{vals: map[string]*node{}}
		for i := 0; i+1 < len(n.Content); i += 2 {
			kn, vn := n.Content[i], n.Content[i+1]
			k := kn.Value
			ck := k
			if key != "" {
				ck = key + "." + k
			}
			if kn.Kind != yaml.ScalarNode {
				return nil, &Error{File: y.file, Line: kn.Line + y.offset, Key: key, Msg: "a key must be a plain string"}
			}
			if _, dup := t.vals[k]; dup {
				return nil, &Error{File: y.file, Line: kn.Line + y.offset, Key: ck, Msg: "key appears twice"}
			}
			v, err := y.node(vn, ck, depth+1)
			if err != nil {
				return nil, err
			}
			t.keys = append(t.keys, k)
			t.vals[k] = v
		}
		out.val = t
	default:
		out.val = kindName("an empty document")
	}
	return out, nil
}

func yamlScalar(n *yaml.Node) any {
	switch n.ShortTag() {
	case "!!str":
		return n.Value
	case "!!int":
		var i int64
		if n.Decode(&i) != nil {
			return kindName("an out-of-range integer")
		}
		return i
	case "!!float":
		var f float64
		if n.Decode(&f) != nil {
			return kindName("a bad float")
		}
		return f
	case "!!bool":
		var b bool
		if n.Decode(&b) != nil {
			return kindName("a bad boolean")
		}
		return b
	case "!!null":
		return kindName("null (empty)")
	}
	return kindName("a " + strings.TrimPrefix(n.ShortTag(), "!!"))
}
