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
		// After "--" everything is positional, also right after the
		// command, where the CLI library would swallow the "--".
		{[]string{"--", "--force"}, "[--force] w= f=false p=[]", ""},
		{[]string{"--", "-f=true", "-w", "x"}, "[-f=true -w x] w= f=false p=[]", ""},
		{[]string{"-w", "/w", "--", "-dash.toml"}, "[-dash.toml] w=/w f=false p=[]", ""},
		{[]string{"-f", "--"}, "", "t: expected one or more things; see 'warden t --help'"},
		{[]string{"-f"}, "", "t: expected one or more things; see 'warden t --help'"},
		{[]string{"---workspace=x", "a"}, "", "bad flag syntax: ---workspace=x (a flag starts with - or --; an argument that starts with - goes after --); see 'warden t --help'"},
		{[]string{"a", "--=x"}, "", "bad flag syntax: --=x"},
		{[]string{"a", "-=x"}, "", "bad flag syntax: -=x"},
		{[]string{"-dash.toml"}, "", "unknown flag -dash.toml; see 'warden t --help'"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			var got string
			app := &cli.App{
				Name:                      "warden",
				DisableSliceFlagSeparator: true,
				Commands: []*cli.Command{{
					Name:            "t",
					SkipFlagParsing: true,
					Flags: []cli.Flag{
						&cli.StringFlag{Name: "workspace", Aliases: []string{"w"}},
						&cli.BoolFlag{Name: "force", Aliases: []string{"f"}},
						&cli.StringSliceFlag{Name: "policy", Aliases: []string{"p"}},
					},
					Action: func(cliContext *cli.Context) error {
						args, err := positional(cliContext, 1, -1, "one or more things")
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
		{[]string{"session", "ls", "---format=json"}, "bad flag syntax: ---format=json (a flag starts with - or --; an argument that starts with - goes after --); see 'warden session ls --help'"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			if _, _, err := run(t, c.args...); err == nil || err.Error() != c.want {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}

// --help or -h after the arguments shows the command's help, as before
// them, and exits 0 without running it; after "--" it is an argument.
func TestPositionalHelp(t *testing.T) {
	explain := "../../policies/web-fetch.toml"
	for _, args := range [][]string{
		{"policy", "explain", explain, "--help"},
		{"policy", "explain", explain, "-h"},
		{"policy", "explain", "--help"},
		{"policy", "import", "x.md", "-h"},
		{"session", "rm", "some-id", "--help"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			stdout, _, err := run(t, args...)
			if exitCode(err) != 0 || !strings.Contains(stdout, "USAGE:\n   warden "+strings.Join(args[:2], " ")) || strings.Contains(stdout, "policy web-fetch") {
				t.Fatalf("error %v, stdout %q; want the command's help", err, stdout)
			}
		})
	}
	if _, _, err := run(t, "policy", "explain", "--", "--help"); err == nil || !strings.Contains(err.Error(), "--help") {
		t.Errorf("policy explain -- --help: %v; want --help read as a file", err)
	}
}

// A policy file whose name starts with a dash is read after "--".
func TestPositionalDashFile(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile("../../policies/web-fetch.toml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "-dash.toml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	stdout, _, err := run(t, "policy", "explain", "-w", dir, "--", "-dash.toml")
	if err != nil || !strings.Contains(stdout, "policy web-fetch") {
		t.Fatalf("policy explain -- -dash.toml: %v, stdout %q", err, stdout)
	}
	if _, _, err := run(t, "policy", "explain", "-dash.toml"); err == nil || !strings.HasPrefix(err.Error(), "unknown flag -dash.toml") {
		t.Errorf("policy explain -dash.toml: %v; want an unknown flag", err)
	}
}
