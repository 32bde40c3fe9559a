package policies

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// TOML returns p as canonical TOML: fixed key order, sorted lists, limits
// in units ("256MiB", "30s"). Parse reads it back to an equal Policy. It
// fails when p (built or changed in Go) is something Parse would refuse, so
// nothing invalid is ever written or hashed.
func (p *Policy) TOML() ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "name = %s\n", tomlQuote(p.Name))
	if p.Description != "" {
		fmt.Fprintf(&b, "description = %s\n", tomlQuote(p.Description))
	}
	if len(p.FS.Read)+len(p.FS.Write)+len(p.FS.Deny) > 0 {
		b.WriteString("\n[fs]\n")
		writeList(&b, "read", sortedPaths(p.FS.Read))
		writeList(&b, "write", sortedPaths(p.FS.Write))
		writeList(&b, "deny", sortedPaths(p.FS.Deny))
	}
	if !p.Exec.All || p.Exec.Workspace {
		b.WriteString("\n[exec]\n")
		if !p.Exec.All {
			fmt.Fprintf(&b, "allow = %s\n", tomlList(sorted(p.Exec.Allow)))
		}
		if p.Exec.Workspace {
			b.WriteString("workspace = true\n")
		}
	}
	if len(p.Network.Allow) > 0 {
		b.WriteString("\n[network]\n")
		writeList(&b, "allow", sorted(p.Network.Allow))
	}
	if len(p.Env.Allow)+len(p.Env.Set) > 0 {
		b.WriteString("\n[env]\n")
		writeList(&b, "allow", sorted(p.Env.Allow))
		if len(p.Env.Set) > 0 {
			keys := make([]string, 0, len(p.Env.Set))
			for k := range p.Env.Set {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			var kv []string
			for _, k := range keys {
				kv = append(kv, tomlQuote(k)+" = "+tomlQuote(p.Env.Set[k]))
			}
			fmt.Fprintf(&b, "set = { %s }\n", strings.Join(kv, ", "))
		}
	}
	if c := p.Commands; !c.Empty() || c.Timeout != 0 {
		b.WriteString("\n[commands]\n")
		writeList(&b, "deny", sorted(c.Deny))
		writeList(&b, "ask", sorted(c.Ask))
		writeList(&b, "allow", sorted(c.Allow))
		if c.Timeout != 0 {
			fmt.Fprintf(&b, "timeout = %s\n", tomlQuote(formatDuration(c.Timeout)))
		}
	}
	b.WriteString("\n[limits]\n")
	fmt.Fprintf(&b, "memory = %s\n", tomlQuote(FormatSize(p.Limits.Memory)))
	fmt.Fprintf(&b, "pids = %d\n", p.Limits.Pids)
	fmt.Fprintf(&b, "cpu = %s\n", formatCPU(p.Limits.CPU))
	fmt.Fprintf(&b, "timeout = %s\n", tomlQuote(formatDuration(p.Limits.Timeout)))
	fmt.Fprintf(&b, "idle = %s\n", tomlQuote(formatDuration(p.Limits.Idle)))
	if e := p.Sandbox.Engine; e != "" && e != EngineContainer {
		fmt.Fprintf(&b, "\n[sandbox]\nengine = %s\n", tomlQuote(string(e)))
	}

	if err := parsesBack(p.Name, b.Bytes()); err != nil {
		return nil, fmt.Errorf("encode policy: %w", err)
	}
	return b.Bytes(), nil
}

// parsedBack are the canonical texts that parsed back, by their sum:
// Parse depends on the text alone, and the daemon encodes the same
// policies again and again (for a hash on every claim; ~0.1 ms each).
var parsedBack struct {
	sync.Mutex
	sums map[[sha256.Size]byte]bool
}

// parsesBack checks that a policy's canonical text parses.
func parsesBack(name string, text []byte) error {
	sum := sha256.Sum256(text)
	parsedBack.Lock()
	known := parsedBack.sums[sum]
	parsedBack.Unlock()
	if known {
		return nil
	}
	if _, err := Parse("policy "+name, text); err != nil {
		return err
	}
	parsedBack.Lock()
	defer parsedBack.Unlock()
	if len(parsedBack.sums) >= 256 {
		parsedBack.sums = nil
	}
	if parsedBack.sums == nil {
		parsedBack.sums = map[[sha256.Size]byte]bool{}
	}
	parsedBack.sums[sum] = true
	return nil
}

// Hash identifies p's permissions: "sha256:" and the hex digest of its
// canonical TOML. An invalid policy hashes to "".
func (p *Policy) Hash() string {
	data, err := p.TOML()
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func sorted(l []string) []string {
	l = slices.Clone(l)
	sort.Strings(l)
	return l
}

func sortedPaths(l []string) []string {
	l = slices.Clone(l)
	slices.SortFunc(l, comparePaths)
	return l
}

func writeList(b *bytes.Buffer, key string, l []string) {
	if len(l) > 0 {
		fmt.Fprintf(b, "%s = %s\n", key, tomlList(l))
	}
}

func tomlList(l []string) string {
	q := make([]string, len(l))
	for i, s := range l {
		q[i] = tomlQuote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// tomlQuote writes a TOML basic string. strconv.Quote is close but emits
// \x.., \a and \v, which TOML does not have.
func tomlQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == utf8.RuneError:
			b.WriteString(`\uFFFD`)
		case r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0:
			fmt.Fprintf(&b, `\u%04X`, r)
		case r > 0xffff && !strconv.IsPrint(r):
			fmt.Fprintf(&b, `\U%08X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
