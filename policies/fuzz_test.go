package policies

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("*.toml")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, tc := range parseErrorCases {
		f.Add([]byte(tc.src))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse("f.toml", data)
		if err != nil {
			return
		}
		// Whatever parses must encode, and read back the same.
		out, err := p.TOML()
		if err != nil {
			t.Fatalf("valid policy does not encode: %v\n%q", err, data)
		}
		q, err := Parse("f.toml", out)
		if err != nil {
			t.Fatalf("canonical form does not parse: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(permissions(p), permissions(q)) {
			t.Fatalf("round trip changed the policy:\n%+v\n%+v", p, q)
		}
		p.Rules()
		if _, err := Merge(p, q); err != nil {
			t.Fatal(err)
		}
		if _, err := Intersect(p, q); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Expand(Vars{SkillDir: "/s", WorkDir: "/w", DataDir: "/d", Home: "/h"}); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzImportSkill(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.SKILL.md")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, tc := range skillErrorCases {
		f.Add([]byte(tc.src))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := parseSkill("SKILL.md", data)
		if err != nil {
			return
		}
		if _, err := p.TOML(); err != nil {
			t.Fatalf("imported policy does not encode: %v", err)
		}
	})
}

func FuzzHostPattern(f *testing.F) {
	for _, s := range uniNet {
		f.Add(s, "a.com", 443)
	}
	f.Add("[::ffff:10.0.0.0/104]:80", "10.1.1.1", 80)
	f.Fuzz(func(t *testing.T, s, host string, port int) {
		h, err := ParseHostPattern(s)
		if err != nil {
			return
		}
		h2, err := ParseHostPattern(h.String())
		if err != nil || h2 != h {
			t.Fatalf("%q -> %q does not read back: %v", s, h.String(), err)
		}
		if r, ok := intersectPatterns(h, h); !ok || r != h {
			t.Fatalf("%q ∩ itself = %v", s, r)
		}
		h.Match(host, port)
	})
}
