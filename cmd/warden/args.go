package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/urfave/cli/v2"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/runtime/sandbox"
)

func specVersion() string { return specs.Version }

// checkArgs makes sure a command got the positional arguments it needs.
func checkArgs(cliContext *cli.Context, min, max int, usage string) error {
	return checkCount(cliContext, cliContext.NArg(), min, max, usage)
}

func checkCount(cliContext *cli.Context, n, min, max int, usage string) error {
	if n < min || (max >= 0 && n > max) {
		return fmt.Errorf("%s: expected %s; see 'warden %s --help'", commandName(cliContext), usage, commandName(cliContext))
	}
	return nil
}

// commandName is a command's full name without the program's ("policy
// check"); the CLI library's FullName drops the parent commands.
func commandName(cliContext *cli.Context) string {
	return strings.TrimPrefix(cliContext.Command.HelpName, cliContext.App.Name+" ")
}

// tableFormatFlag chooses between a table for people and JSON for programs.
var tableFormatFlag = &cli.StringFlag{Name: "format", Usage: "output `FORMAT`: table or json", Value: "table"}

// tableFormat is the --format a command got: table or json.
func tableFormat(cliContext *cli.Context) (string, error) {
	switch f := cliContext.String("format"); f {
	case "table", "json":
		return f, nil
	default:
		return "", fmt.Errorf("--format %q: use table or json", f)
	}
}

// checkExecInput refuses, before anything is created, a command exec or do
// could not run as given: a timeout below the minimum (an explicit zero
// too: leaving --timeout out is how to get the policy's), text that is not
// UTF-8.
func checkExecInput(cliContext *cli.Context) error {
	timeout := cliContext.Duration("timeout")
	if cliContext.IsSet("timeout") && timeout < policies.MinTimeout {
		return fmt.Errorf("--timeout %s: use at least %s, or leave it out for the policy's limits.timeout", timeout, policies.MinTimeout)
	}
	if err := sandbox.CheckExec(cliContext.Args().Slice(), cliContext.StringSlice("env"), cliContext.String("cwd"), timeout); err != nil {
		return err
	}
	// The CLI library passes a repeatable flag with an alias (--env, -e)
	// through JSON, which already put U+FFFD in place of what is not UTF-8:
	// the command line as the caller wrote it tells.
	for i, a := range os.Args[1:] {
		if utf8.ValidString(a) {
			continue
		}
		name, _, _ := strings.Cut(a, "=")
		if !strings.HasPrefix(a, "-") {
			name = os.Args[i]
		}
		name = strings.TrimLeft(name, "-")
		if f := flagNamed(cliContext.Command.Flags, name); f != nil {
			name = f.Names()[0]
		}
		return fmt.Errorf("--%s is not valid UTF-8; warden passes flag values as UTF-8 text; convert it (iconv -t UTF-8)", name)
	}
	return nil
}

// envFlag sets a variable of the command; the value is passed as written,
// commas and spaces included.
var envFlag = &cli.StringSliceFlag{Name: "env", Aliases: []string{"e"}, Usage: "set `NAME=VALUE` (the name must be in the policy's env.allow)", KeepSpace: true}

// cwdFlag is the command's working folder.
var cwdFlag = &cli.StringFlag{Name: "cwd", Usage: "working `DIR`: a relative one is taken from the workspace; a host path in the workspace, skill or data folder is that place inside; another absolute one as given"}

// sandboxFlags name the policy and the folders its variables stand for.
var sandboxFlags = append([]cli.Flag{
	&cli.StringSliceFlag{Name: "policy", Aliases: []string{"p"}, Usage: "policy `FILE` (repeat to merge several skills)", Required: true},
}, varFlags...)

// engineFlag strengthens the policy's isolation engine.
var engineFlag = &cli.StringFlag{Name: "engine", Usage: "run the sandbox under `ENGINE`: container or gvisor; it can only strengthen the policy's [sandbox] engine"}

// varFlags give the path variables of a policy their values.
var varFlags = []cli.Flag{
	&cli.StringFlag{Name: "workspace", Aliases: []string{"w"}, Usage: "the session's workspace `DIR` ($WORK_DIR)"},
	&cli.StringFlag{Name: "skill-dir", Usage: "the skill's folder `DIR` ($SKILL_DIR; default: the policy file's folder)"},
	&cli.StringFlag{Name: "data-dir", Usage: "the skill's persistent data `DIR` ($DATA_DIR)"},
}

// loadSandboxPolicy loads (and merges) the --policy files and works out the
// values of the path variables from the flags.
func loadSandboxPolicy(cliContext *cli.Context, files []string) (*policies.Policy, policies.Vars, error) {
	combine := policies.Merge
	if len(files) > 1 && !cliContext.IsSet("skill-dir") {
		combine = mergeSkills(files)
	}
	p, err := loadAll(files, combine)
	if err != nil {
		return nil, policies.Vars{}, err
	}
	if cliContext.IsSet("engine") {
		e, err := policies.ParseEngine(cliContext.String("engine"))
		if err != nil {
			return nil, policies.Vars{}, fmt.Errorf("--engine: %w", err)
		}
		p = p.WithEngine(e)
	}
	// warden's global --engine (or WARDEN_ENGINE) strengthens it too.
	p = p.WithEngine(ociGlobals.engine)
	vars := policies.Vars{SkillDir: filepath.Dir(files[0])}
	if err := folderFlags(cliContext, &vars); err != nil {
		return nil, policies.Vars{}, err
	}
	// A mistyped folder would leave its mount point empty, not fail.
	for _, f := range []struct{ flag, dir string }{{"workspace", vars.WorkDir}, {"skill-dir", vars.SkillDir}, {"data-dir", vars.DataDir}} {
		if f.dir == "" {
			continue
		}
		if fi, err := os.Stat(f.dir); err != nil || !fi.IsDir() {
			return nil, policies.Vars{}, fmt.Errorf("--%s %s: not a directory; create it first", f.flag, f.dir)
		}
	}
	vars.Home, _ = os.UserHomeDir()
	return p, vars, nil
}

// folderFlags sets the folders given by --workspace, --skill-dir and
// --data-dir, and makes every folder in vars absolute.
func folderFlags(cliContext *cli.Context, vars *policies.Vars) error {
	for _, f := range []struct {
		flag string
		dst  *string
	}{{"workspace", &vars.WorkDir}, {"skill-dir", &vars.SkillDir}, {"data-dir", &vars.DataDir}} {
		if v := cliContext.String(f.flag); v != "" {
			*f.dst = v
		}
		if *f.dst == "" {
			continue
		}
		abs, err := filepath.Abs(*f.dst)
		if err != nil {
			return fmt.Errorf("--%s: %w", f.flag, err)
		}
		if !utf8.ValidString(abs) {
			return fmt.Errorf("--%s is not valid UTF-8; warden passes flag values as UTF-8 text; convert it (iconv -t UTF-8)", f.flag)
		}
		*f.dst = abs
	}
	return nil
}

// mergeSkills merges the policies of several skills, each with its own
// folder: the first one's is $SKILL_DIR (at /skill inside), every other
// one's $SKILL_DIR rules name its policy file's folder, which appears at
// its host path.
func mergeSkills(files []string) func(...*policies.Policy) (*policies.Policy, error) {
	return func(ps ...*policies.Policy) (*policies.Policy, error) {
		own := []*policies.Policy{ps[0]}
		for i, p := range ps[1:] {
			dir, err := filepath.Abs(filepath.Dir(files[i+1]))
			if err != nil {
				return nil, err
			}
			q, err := p.WithSkillDir(dir)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", files[i+1], err)
			}
			own = append(own, q)
		}
		return policies.Merge(own...)
	}
}

// loadAll loads policy files and combines them with merge or intersect.
func loadAll(files []string, combine func(...*policies.Policy) (*policies.Policy, error)) (*policies.Policy, error) {
	if len(files) == 0 {
		return nil, fmt.Errorf("no policy file given")
	}
	var ps []*policies.Policy
	for _, f := range files {
		p, err := policies.Load(f)
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	if len(ps) == 1 {
		return ps[0], nil
	}
	return combine(ps...)
}

// positional reads the whole command line of a command that sets
// SkipFlagParsing and returns its positional arguments, min to max of them
// (max -1: any): flags may come before, between and after them (`policy
// explain FILE --workspace DIR`), --help anywhere shows the command's help,
// and after "--" everything is positional, a leading dash included. The CLI
// library would stop reading flags at the first positional argument and
// swallow a first "--", leaving what follows to be read as flags. A flag is
// set under its first name, the one commands read, whichever name was
// written.
func positional(cliContext *cli.Context, min, max int, usage string) ([]string, error) {
	if !cliContext.Command.SkipFlagParsing {
		return nil, fmt.Errorf("warden %s reads its arguments with positional but lets the CLI library parse them", commandName(cliContext))
	}
	var args []string
	rest := cliContext.Args().Slice()
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if a == "--" {
			args = append(args, rest[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			args = append(args, a)
			continue
		}
		written, value, hasValue := strings.Cut(a, "=")
		// As the flag package: one or two dashes, then a name.
		name := strings.TrimPrefix(written[1:], "-")
		if name == "" || name[0] == '-' {
			return nil, fmt.Errorf("bad flag syntax: %s %s; see 'warden %s --help'", a, flagSyntax, commandName(cliContext))
		}
		f := flagNamed(cliContext.Command.Flags, name)
		if f == nil {
			return nil, fmt.Errorf("unknown flag %s; see 'warden %s --help'", written, commandName(cliContext))
		}
		if v, ok := f.(cli.DocGenerationFlag); ok && !v.TakesValue() && !hasValue {
			value, hasValue = "true", true
		}
		if !hasValue {
			if i+1 >= len(rest) {
				return nil, fmt.Errorf("flag %s needs a value; see 'warden %s --help'", written, commandName(cliContext))
			}
			i++
			value = rest[i]
		}
		if err := cliContext.Set(f.Names()[0], value); err != nil {
			return nil, fmt.Errorf("%s; see 'warden %s --help'", badValue(f, written, value, err.Error()), commandName(cliContext))
		}
	}
	if cliContext.Bool("help") {
		// What the CLI library prints for --help before the arguments.
		cli.HelpPrinter(cliContext.App.Writer, cli.CommandHelpTemplate, cliContext.Command)
		return nil, errHelpShown
	}
	if err := checkCount(cliContext, len(args), min, max, usage); err != nil {
		return nil, err
	}
	return args, nil
}

// errHelpShown ends a command whose help positional printed: exit 0,
// nothing more to say.
var errHelpShown = &exitError{code: 0}

// flagNamed is the flag among flags with the given name or alias, or nil.
func flagNamed(flags []cli.Flag, name string) cli.Flag {
	for _, f := range flags {
		if slices.Contains(f.Names(), name) {
			return f
		}
	}
	return nil
}

// The flag package's words for a bad command line, which write every flag
// with one dash and say only "parse error" of a bad value.
var (
	badValueRE = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^invalid (?:boolean )?value (".*") for (?:flag )?-(\S+): (.*)$`)
	})
	unknownFlagRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^flag provided but not defined: -(\S+)$`) })
	noValueRE     = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^flag needs an argument: -(\S+)$`) })
)

// flagSyntax is what "bad flag syntax" (---workspace) means to do.
const flagSyntax = "(a flag starts with - or --; an argument that starts with - goes after --)"

// usageError puts a bad command line in warden's words: the flag as it is
// written (--timeout, -e), the value, and what would do. help is the
// command whose --help to point to.
func usageError(err error, flags []cli.Flag, help string) error {
	msg := err.Error()
	if m := badValueRE().FindStringSubmatch(msg); m != nil {
		value, _ := strconv.Unquote(m[1])
		msg = badValue(flagNamed(flags, m[2]), dashed(m[2]), value, m[3])
	} else if m := unknownFlagRE().FindStringSubmatch(msg); m != nil {
		msg = "unknown flag " + dashed(m[1])
	} else if m := noValueRE().FindStringSubmatch(msg); m != nil {
		msg = "flag " + dashed(m[1]) + " needs a value"
	} else if strings.HasPrefix(msg, "bad flag syntax: ") {
		msg += " " + flagSyntax
	}
	return fmt.Errorf("%s; see '%s --help'", msg, help)
}

// badValue says what is wrong with a value of flag f (written as the caller
// typed it), with the format wanted where the flag package only says
// "parse error".
func badValue(f cli.Flag, written, value, reason string) string {
	if reason == "parse error" {
		switch f.(type) {
		case *cli.DurationFlag:
			reason = "not a duration; use e.g. 30s, 5m"
		case *cli.BoolFlag:
			reason = "use true or false"
		case *cli.IntFlag:
			reason = "not a whole number"
		case *cli.UintFlag:
			reason = "not a whole number from 0 up"
		}
	}
	return fmt.Sprintf("%s %q: %s", written, value, reason)
}

// dashed writes a flag's name as it is typed: -e, --env.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}
