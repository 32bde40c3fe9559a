package sandbox

import "testing"

// TestShellLine: the command line a waiting or refused caller reads is
// quoted as a shell would take it, and no control character of an argv
// reaches the reader's terminal.
func TestShellLine(t *testing.T) {
	for _, c := range []struct {
		argv []string
		want string
	}{
		{[]string{"git", "push", "origin", "main"}, "git push origin main"},
		{[]string{"git", "commit", "-m", "it's done"}, `git commit -m 'it'\''s done'`},
		{[]string{"echo", ""}, "echo ''"},
		{[]string{"echo", "\x1b]0;owned\x07"}, `echo "\x1b]0;owned\a"`},
		{[]string{"echo", "a\nb"}, `echo "a\nb"`},
	} {
		if got := shellLine(c.argv); got != c.want {
			t.Errorf("%q: got %s, want %s", c.argv, got, c.want)
		}
	}
}
