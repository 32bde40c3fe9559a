package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/urfave/cli/v2"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/runtime/oci"
)

// ociExecFlags are the flags `exec` takes in its OCI form (without
// --session), the ones runc's exec has. --env, --cwd and --tty are shared
// with the session form.
var ociExecFlags = []cli.Flag{
	&cli.StringFlag{Name: "process", Usage: "OCI: the process to run, as runtime-spec process JSON in `FILE`"},
	&cli.BoolFlag{Name: "detach", Aliases: []string{"d"}, Usage: "OCI: do not wait for the process"},
	&cli.StringFlag{Name: "pid-file", Usage: "OCI: write the process's pid to `FILE`"},
	&cli.StringFlag{Name: "console-socket", Usage: "OCI: unix socket `PATH` that receives the terminal's master side"},
	&cli.StringFlag{Name: "user", Aliases: []string{"u"}, Usage: "OCI: run as `UID[:GID]`"},
	&cli.Int64SliceFlag{Name: "additional-gids", Aliases: []string{"g"}, Usage: "OCI: an additional group `GID`"},
	&cli.IntFlag{Name: "preserve-fds", Usage: "OCI: pass `N` more file descriptors (3 and on)"},
	&cli.BoolFlag{Name: "no-new-privs", Usage: "OCI: set no_new_privs (always on under a policy)"},
	&cli.BoolFlag{Name: "ignore-paused", Usage: "OCI: accepted for compatibility", Hidden: true},
}

var sessionOnlyFlags = []string{"timeout", "policy", "workspace", "skill-dir", "data-dir", "result"}

func onlySessionFlags(cliContext *cli.Context) error {
	for _, f := range ociExecFlags {
		if name := f.Names()[0]; cliContext.IsSet(name) {
			return fmt.Errorf("exec: --%s belongs to the OCI form (exec CONTAINER-ID), not to --session", name)
		}
	}
	return nil
}

// ociExec runs a process in an OCI container, as runc's exec does.
func ociExec(cliContext *cli.Context) error {
	for _, name := range sessionOnlyFlags {
		if cliContext.IsSet(name) {
			return fmt.Errorf("exec: --%s needs --session ID (the session form); the OCI form is exec CONTAINER-ID [COMMAND...]", name)
		}
	}
	if cliContext.NArg() == 0 {
		return errors.New("exec: expected --session ID -- COMMAND, or a container id (OCI); see 'warden exec --help'")
	}
	id := cliContext.Args().First()
	o, err := ociRuntime(cliContext)
	if err != nil {
		return err
	}
	fds, err := preserveFDs(cliContext)
	if err != nil {
		return err
	}
	p, err := execProcess(cliContext, o, id)
	if err != nil {
		return err
	}
	status, err := o.Exec(id, oci.ExecOptions{
		Process: p, Detach: cliContext.Bool("detach"), PidFile: cliContext.String("pid-file"),
		ConsoleSocket: cliContext.String("console-socket"), PreserveFDs: fds,
	})
	if err != nil {
		return err
	}
	return statusError(status)
}

// execProcess reads --process, or builds the process from the container's
// config.json and the inline flags.
func execProcess(cliContext *cli.Context, o *oci.Runtime, id string) (*specs.Process, error) {
	if path := cliContext.String("process"); path != "" {
		data, err := policies.ReadFile(path, "--process file", policies.MaxSpecFile)
		if err != nil {
			return nil, err
		}
		var p specs.Process
		if err := json.Unmarshal(data, &p); err != nil {
			return nil, fmt.Errorf("--process %s: not runtime-spec process JSON: %w", path, err)
		}
		return &p, nil
	}
	if cliContext.NArg() < 2 {
		return nil, fmt.Errorf("exec %s: give a command after the container id, or --process FILE", id)
	}
	p, err := o.BundleProcess(id)
	if err != nil {
		return nil, err
	}
	p.Args = cliContext.Args().Slice()[1:]
	if cwd := cliContext.String("cwd"); cwd != "" {
		p.Cwd = cwd
	}
	p.Env = append(p.Env, cliContext.StringSlice("env")...)
	p.Terminal = cliContext.Bool("tty")
	if cliContext.IsSet("no-new-privs") {
		p.NoNewPrivileges = cliContext.Bool("no-new-privs")
	}
	if u := cliContext.String("user"); u != "" {
		uid, gid, hasGID := strings.Cut(u, ":")
		n, err := strconv.ParseUint(uid, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("--user %q: use UID[:GID], numbers", u)
		}
		p.User.UID = uint32(n)
		if hasGID {
			g, err := strconv.ParseUint(gid, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("--user %q: use UID[:GID], numbers", u)
			}
			p.User.GID = uint32(g)
		}
	}
	for _, g := range cliContext.Int64Slice("additional-gids") {
		if g < 0 {
			return nil, fmt.Errorf("--additional-gids %d: must not be negative", g)
		}
		p.User.AdditionalGids = append(p.User.AdditionalGids, uint32(g))
	}
	return p, nil
}
