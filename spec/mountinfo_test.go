package spec

import "testing"

func TestUnescapeMountinfo(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"/tmp/x/ws", "/tmp/x/ws"},
		{`/tmp/a\040b`, "/tmp/a b"},
		{`/tmp/tab\011and\134slash`, "/tmp/tab\tand\\slash"},
		{`/tmp/odd\04`, `/tmp/odd\04`},
		{`/tmp/not\999octal`, `/tmp/not\999octal`},
	} {
		if got := UnescapeMountinfo(c.in); got != c.want {
			t.Errorf("UnescapeMountinfo(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
