package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(text string) string {
		p := filepath.Join(dir, "config.toml")
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg, err := LoadConfig(filepath.Join(dir, "absent.toml"))
	if err != nil || len(cfg.Pools) != 0 || !cfg.FavorDynmods {
		t.Fatalf("absent file: %+v, %v", cfg, err)
	}
	cfg, err = LoadConfig(write("cgroup_favordynmods = false\n"))
	if err != nil || cfg.FavorDynmods {
		t.Fatalf("cgroup_favordynmods = false: %+v, %v", cfg, err)
	}
	cfg, err = LoadConfig(write(`
[[pool]]
policy = "skills/web.toml"
size = 4

[[pool]]
policy = ["/a.toml", "/b.toml"]
size = 0
skill_dir = "/opt/skill"
home = "/home/u"
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Pools) != 2 || !cfg.FavorDynmods {
		t.Fatalf("pools: %+v", cfg.Pools)
	}
	p := cfg.Pools[0]
	if p.Files[0] != filepath.Join(dir, "skills/web.toml") || p.Size != 4 || p.Vars.SkillDir != filepath.Join(dir, "skills") {
		t.Errorf("first pool: %+v", p)
	}
	p = cfg.Pools[1]
	if strings.Join(p.Files, ",") != "/a.toml,/b.toml" || p.Size != 0 || p.Vars.SkillDir != "/opt/skill" || p.Vars.Home != "/home/u" {
		t.Errorf("second pool: %+v", p)
	}
	for _, bad := range []struct{ text, want string }{
		{"[[pool]]\npolicy = \"/p.toml\"\nsize = 1\nsise = 2\n", `unknown key "sise"`},
		{"[[pool]]\npolicy = \"/p.toml\"\nSize = 1\n", `unknown key "Size"`},
		{"[[pool]]\nsize = 1\n", "policy is missing"},
		{"[[pool]]\npolicy = 3\nsize = 1\n", "policy: use a file name"},
		{"[[pool]]\npolicy = []\nsize = 1\n", "list is empty"},
		{"[[pool]]\npolicy = \"/p.toml\"\nsize = 1001\n", "size"},
		{"[[pool]]\npolicy = \"/p.toml\"\nsize = \"4\"\n", "size"},
		{"[[pool]]\npolicy = \"/p.toml\"\nsize = 1\nhome = \"rel\"\n", "home: use an absolute path"},
		{"pools = 1\n", `unknown key "pools"`},
		{"cgroup_favordynmods = \"no\"\n", "cgroup_favordynmods must be true or false"},
		{"[[pool]]\npolicy = \"/p.toml\"\nsize = 1\ncgroup_favordynmods = false\n", "belongs at the top of the file"},
		{"[pool]\npolicy = \"/p.toml\"\n", "array of tables"},
		{"[[pool]\n", "config"},
	} {
		_, err := LoadConfig(write(bad.text))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "config.toml") {
			t.Errorf("%q: error %v, want one naming the file and %q", bad.text, err, bad.want)
		}
	}
}

func FuzzLoadConfig(f *testing.F) {
	f.Add("[[pool]]\npolicy = \"/p.toml\"\nsize = 2\n")
	f.Add("[[pool]]\npolicy = [\"a\", \"b\"]\nsize = 0\nhome = \"/h\"\n")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, text string) {
		p := filepath.Join(dir, "c.toml")
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := LoadConfig(p)
		if err != nil {
			return
		}
		for _, pool := range cfg.Pools {
			if len(pool.Files) == 0 || pool.Size < 0 || pool.Size > MaxPoolSize {
				t.Fatalf("accepted a bad pool: %+v", pool)
			}
			for _, f := range pool.Files {
				if !filepath.IsAbs(f) {
					t.Fatalf("relative policy file accepted: %q", f)
				}
			}
		}
	})
}
