package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// run runs warden's CLI in the test's process with a state root of its own
// and returns what it printed.
func run(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	app := newApp()
	// The CLI library writes each command's full name into the command
	// when it runs; the commands are package variables shared by runs.
	var reset func([]*cli.Command)
	reset = func(cmds []*cli.Command) {
		for _, c := range cmds {
			c.HelpName = ""
			reset(c.Subcommands)
		}
	}
	reset(app.Commands)
	var out, errOut bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errOut
	err = app.Run(append([]string{"warden", "--root", t.TempDir()}, args...))
	return out.String(), errOut.String(), err
}

// Flags after the positional arguments count under any of their names,
// as they would before them.
func TestPositional(t *testing.T) {
	for _, c := range []struct {
		args      []string
		want      string // the positional arguments, the values read by the first names
		wantError string
	}{
		{[]string{"a", "--workspace", "/w"}, "[a] w=/w f=false p=[]", ""},
		{[]string{"a", "-w", "/w", "b"}, "[a b] w=/w f=false p=[]", ""},
		{[]string{"a", "-w=/w"}, "[a] w=/w f=false p=[]", ""},
		{[]string{"a", "-f", "b"}, "[a b] w= f=true p=[]", ""},
		{[]string{"a", "--force=false"}, "[a] w= f=false p=[]", ""},
		{[]string{"a", "-p", "x,y", "--policy", "z"}, "[a] w= f=false p=[x,y z]", ""},
		{[]string{"-w", "/w", "a", "-f"}, "[a] w=/w f=true p=[]", ""},
		{[]string{"a", "--", "-w", "b"}, "[a -w b] w= f=false p=[]", ""},
		{[]string{"a", "-", "b"}, "[a - b] w= f=false p=[]", ""},
		{[]string{"a", "-w"}, "", "flag -w needs a value; see 'warden t --help'"},
		{[]string{"a", "--nope", "x"}, "", "unknown flag --nope; see 'warden t --help'"},
		{[]string{"a", "-f=maybe"}, "", `-f "maybe": use true or false; see 'warden t --help'`},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			var got string
			app := &cli.App{
				Name:                      "warden",
				DisableSliceFlagSeparator: true,
				Commands: []*cli.Command{{
					Name: "t",
					Flags: []cli.Flag{
						&cli.StringFlag{Name: "workspace", Aliases: []string{"w"}},
						&cli.BoolFlag{Name: "force", Aliases: []string{"f"}},
						&cli.StringSliceFlag{Name: "policy", Aliases: []string{"p"}},
					},
					Action: func(cliContext *cli.Context) error {
						args, err := positional(cliContext)
						if err != nil {
							return err
						}
						got = fmt.Sprintf("%v w=%s f=%v p=[%s]", args, cliContext.String("workspace"), cliContext.Bool("force"),
							strings.Join(cliContext.StringSlice("policy"), " "))
						return nil
					},
				}},
			}
			err := app.Run(append([]string{"warden", "t"}, c.args...))
			switch {
			case c.wantError != "" && (err == nil || !strings.HasPrefix(err.Error(), c.wantError)):
				t.Fatalf("error %v, want %q", err, c.wantError)
			case c.wantError == "" && err != nil:
				t.Fatal(err)
			case got != c.want:
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
}

// The short names of --out and --workspace after the file: the commands
// that read their flags with positional.
func TestShortFlagsAfterFile(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out.toml")
	stdout, _, err := run(t, "policy", "import", "../../policies/testdata/web_fetch.SKILL.md", "-o", out)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil || !strings.Contains(string(data), `name = "web-fetch"`) || stdout != "" {
		t.Fatalf("policy import -o: file %q (%v), stdout %q", data, err, stdout)
	}

	ws := t.TempDir()
	stdout, _, err = run(t, "policy", "explain", "../../policies/web-fetch.toml", "-w", ws)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout, ws) {
		t.Fatalf("policy explain -w %s: the workspace is not in\n%s", ws, stdout)
	}
}

// A bad command line is named in warden's words: the flag as it is typed,
// the value and what would do, and the help to read.
func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"exec", "--session", "s", "--timeout", "abc", "--", "true"}, `--timeout "abc": not a duration; use e.g. 30s, 5m; see 'warden exec --help'`},
		{[]string{"do", "--timeout=5", "-p", "x", "--", "true"}, `--timeout "5": not a duration; use e.g. 30s, 5m; see 'warden do --help'`},
		{[]string{"pool", "fill", "-p", "x", "-n", "many"}, `-n "many": not a whole number; see 'warden pool fill --help'`},
		{[]string{"--debug=maybe", "session", "ls"}, `--debug "maybe": use true or false; see 'warden --help'`},
		{[]string{"session", "rm", "a", "--force=maybe"}, `--force "maybe": use true or false; see 'warden session rm --help'`},
		{[]string{"session", "ls", "--bogus"}, "unknown flag --bogus; see 'warden session ls --help'"},
		{[]string{"--frob"}, "unknown flag --frob; see 'warden --help'"},
		{[]string{"exec", "--session", "s", "--timeout"}, "flag --timeout needs a value; see 'warden exec --help'"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			if _, _, err := run(t, c.args...); err == nil || err.Error() != c.want {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}
