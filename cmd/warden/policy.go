package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/spec"
)

var policyCommand = &cli.Command{
	Name:  "policy",
	Usage: "check, explain, combine and import skill policies",
	Subcommands: []*cli.Command{
		policyCheckCommand,
		policyExplainCommand,
		policyMergeCommand,
		policyIntersectCommand,
		policyImportCommand,
	},
}

var policyCheckCommand = &cli.Command{
	Name:      "check",
	Usage:     "check policy files and report the first error of each with file, line and key",
	ArgsUsage: "FILE...",
	Action: func(cliContext *cli.Context) error {
		if err := checkArgs(cliContext, 1, -1, "one or more policy files"); err != nil {
			return err
		}
		host, err := spec.DetectHost()
		if err != nil {
			return err
		}
		failed := 0
		for _, f := range cliContext.Args().Slice() {
			p, err := checkPolicy(f, host)
			if err != nil {
				fmt.Fprintf(cliContext.App.ErrWriter, "warden: %v\n", err)
				failed++
				continue
			}
			fmt.Fprintf(cliContext.App.Writer, "ok %s: policy %q %s\n", f, p.Name, p.Hash())
		}
		if failed > 0 {
			return &exitError{code: exitWarden}
		}
		return nil
	},
}

// checkPolicy loads a policy file and generates the spec a run would make
// of it on this host, so it refuses what every run refuses. As in a warm
// pool, an empty placeholder folder stands for the session's folders
// ($WORK_DIR, $DATA_DIR), which only a run knows.
func checkPolicy(file string, host spec.Host) (*policies.Policy, error) {
	p, err := policies.Load(file)
	if err != nil {
		return nil, err
	}
	skillDir, err := filepath.Abs(filepath.Dir(file))
	if err != nil {
		return nil, err
	}
	placeholder, err := os.MkdirTemp("", "warden-policy-check-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(placeholder)
	home, _ := os.UserHomeDir()
	b, err := spec.Generate(spec.Options{
		Policy:      p,
		Vars:        policies.Vars{SkillDir: skillDir, WorkDir: placeholder, DataDir: placeholder, Home: home},
		Host:        host,
		BundleDir:   "/bundle",
		Placeholder: placeholder,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if len(b.MissingPrograms) > 0 {
		return nil, fmt.Errorf("%s: exec.allow: %q is not installed on this host (a run would fail with 127); install it, or remove it from exec.allow", file, b.MissingPrograms[0])
	}
	return p, nil
}

var policyMergeCommand = &cli.Command{
	Name:      "merge",
	Usage:     "print the union of skill policies (several skills active at once) as TOML",
	ArgsUsage: "FILE FILE...",
	Action: func(cliContext *cli.Context) error {
		return combineAction(cliContext, policies.Merge)
	},
}

var policyIntersectCommand = &cli.Command{
	Name:      "intersect",
	Usage:     "print a policy under ceilings (an agent's, the operator's) as TOML, and on stderr what each ceiling cut",
	ArgsUsage: "POLICY CEILING...",
	Action: func(cliContext *cli.Context) error {
		if err := combineAction(cliContext, policies.Intersect); err != nil {
			return err
		}
		files := cliContext.Args().Slice()
		return printCuts(cliContext, files[0], files[1:])
	},
}

// printCuts says on stderr what each ceiling takes away from the policy
// in file, one line each; a section or limit a ceiling leaves out is no
// ceiling there.
func printCuts(cliContext *cli.Context, file string, ceilings []string) error {
	p, err := policies.Load(file)
	if err != nil {
		return err
	}
	for _, f := range ceilings {
		c, err := policies.Load(f)
		if err != nil {
			return err
		}
		cuts, err := policies.Cuts(p, c)
		if err != nil {
			return err
		}
		if len(cuts) == 0 {
			fmt.Fprintf(cliContext.App.ErrWriter, "ceiling %s: cuts nothing\n", f)
		}
		for _, line := range cuts {
			fmt.Fprintf(cliContext.App.ErrWriter, "ceiling %s: %s\n", f, line)
		}
	}
	return nil
}

func combineAction(cliContext *cli.Context, combine func(...*policies.Policy) (*policies.Policy, error)) error {
	if err := checkArgs(cliContext, 2, -1, "two or more policy files"); err != nil {
		return err
	}
	p, err := loadAll(cliContext.Args().Slice(), combine)
	if err != nil {
		return err
	}
	return printTOML(cliContext, p)
}

var policyImportCommand = &cli.Command{
	Name:            "import",
	Usage:           "convert a SKILL.md's permissions front matter into a warden policy",
	ArgsUsage:       "SKILL.md",
	SkipFlagParsing: true, // see positional
	Flags: []cli.Flag{
		&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "write the policy to `FILE` (never overwritten) instead of stdout"},
	},
	Action: func(cliContext *cli.Context) error {
		args, err := positional(cliContext, 1, 1, "one SKILL.md file")
		if err != nil {
			return err
		}
		p, err := policies.ImportSkill(args[0])
		if err != nil {
			return err
		}
		out := cliContext.String("out")
		if out == "" {
			return printTOML(cliContext, p)
		}
		data, err := p.TOML()
		if err != nil {
			return err
		}
		f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("--out %s already exists; remove it or choose another file", out)
		} else if err != nil {
			return err
		}
		if _, err := f.Write(data); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	},
}

func printTOML(cliContext *cli.Context, p *policies.Policy) error {
	data, err := p.TOML()
	if err != nil {
		return err
	}
	_, err = cliContext.App.Writer.Write(data)
	return err
}
