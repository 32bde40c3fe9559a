package policies

import (
	"errors"
	"io/fs"
	"path/filepath"
	"reflect"
	"testing"
)

func TestExamplePolicies(t *testing.T) {
	files, err := filepath.Glob("*.toml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 4 {
		t.Fatalf("found %d example policies, want at least 4", len(files))
	}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			p, err := Load(f)
			if err != nil {
				t.Fatal(err)
			}
			if p.Name+".toml" != f {
				t.Errorf("name %q does not match file %s", p.Name, f)
			}
			out, err := p.TOML()
			if err != nil {
				t.Fatal(err)
			}
			q, err := Parse(f, out)
			if err != nil {
				t.Fatalf("canonical form does not parse: %v\n%s", err, out)
			}
			if !reflect.DeepEqual(permissions(p), permissions(q)) {
				t.Errorf("round trip changed the policy:\n%+v\n%+v", p, q)
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	if _, err := Load(filepath.Join(t.TempDir(), "none.toml")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("got %v, want a not-exist error", err)
	}
}
