package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/runtime/oci"
	"github.com/warden-sandbox/warden/runtime/sandbox"
)

var installFlags = []cli.Flag{
	&cli.StringFlag{Name: "config", Usage: "the engine's configuration `FILE` (default: its standard place)"},
	&cli.BoolFlag{Name: "dry-run", Usage: "print the new configuration instead of writing it"},
	&cli.StringFlag{Name: "name", Usage: "the runtime's `NAME` in the engine", Value: "warden"},
	&cli.StringFlag{Name: "binary", Usage: "the warden binary the engine runs (default: this one)"},
}

var installCommand = &cli.Command{
	Name:  "install",
	Usage: "register warden as an OCI runtime with docker or containerd",
	Subcommands: []*cli.Command{
		{
			Name:  "docker",
			Usage: "add warden to dockerd's runtimes in daemon.json (the global --policy, --policy-dir, --allow-unconfined, --bind-allow, --hook-allow and --cap-allow become its runtimeArgs; with no policy flag, containers run under " + defaultPolicyDir + "/default.toml, the shipped baseline policy written there if missing; --allow-unconfined runs them as configured)",
			Flags: installFlags,
			Action: func(cliContext *cli.Context) error {
				return install(cliContext, dockerConfig, oci.InstallDocker, "reload dockerd (kill -HUP its pid) and use docker run --runtime=%s")
			},
		},
		{
			Name:  "containerd",
			Usage: "add warden as a CRI runtime (runc shim, warden as its binary) to containerd's config.toml; containers run under " + defaultPolicyDir + "/default.toml, the shipped baseline policy written there if missing (--allow-unconfined: as configured)",
			Flags: installFlags,
			Action: func(cliContext *cli.Context) error {
				// --allow-unconfined only says "no baseline": containerd
				// passes a runtime no arguments.
				if ociGlobals.engine.Or() != policies.EngineContainer {
					return errors.New("install containerd: containerd passes a runtime no arguments, so --engine cannot reach warden; choose gVisor with [sandbox] engine = \"gvisor\" in the policies of " + defaultPolicyDir + ", with WARDEN_ENGINE=gvisor in containerd's environment, or with a BinaryName wrapper running `warden --engine gvisor` (docs/kubernetes.md)")
				}
				if ociGlobals.policy != "" || ociGlobals.policyDir != "" || len(ociGlobals.capAllow) > 0 || len(ociGlobals.bindAllow) > 0 || len(ociGlobals.hookAllow) > 0 {
					return errors.New("install containerd: containerd passes a runtime no arguments; put policies in " + defaultPolicyDir + " (or set WARDEN_POLICY_DIR in containerd's environment) instead of --policy or --policy-dir, and WARDEN_CAP_ALLOW, WARDEN_BIND_ALLOW or WARDEN_HOOK_ALLOW in its environment instead of the flags")
				}
				return install(cliContext, "/etc/containerd/config.toml", oci.InstallContainerd, "restart containerd; Kubernetes pods choose it with a RuntimeClass whose handler is %s")
			},
		},
	},
}

func install(cliContext *cli.Context, defaultConfig string, edit func([]byte, oci.RuntimeEntry) ([]byte, error), next string) error {
	if err := checkArgs(cliContext, 0, 0, "no arguments"); err != nil {
		return err
	}
	path := cliContext.String("config")
	if path == "" {
		path = defaultConfig
	}
	binary := cliContext.String("binary")
	if binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		binary = exe
	}
	binary, err := filepath.Abs(binary)
	if err != nil {
		return err
	}
	e := oci.RuntimeEntry{Name: cliContext.String("name"), Binary: binary}
	baseline := ociGlobals.policy == "" && ociGlobals.policyDir == "" && !ociGlobals.allowUnconfined
	var baselineNote string
	if baseline {
		note, err := installBaseline(cliContext.Bool("dry-run"))
		if err != nil {
			return fmt.Errorf("install: %w", err)
		}
		baselineNote = note
		if defaultConfig == dockerConfig {
			e.Args = append(e.Args, "--policy-dir", defaultPolicyDir)
		}
	}
	if p := ociGlobals.policy; p != "" {
		// The engine would otherwise accept it and fail every container.
		if _, err := policies.Load(p); err != nil {
			return fmt.Errorf("install: %w", err)
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return err
		}
		e.Args = append(e.Args, "--policy", abs)
	}
	if d := ociGlobals.policyDir; d != "" {
		abs, err := filepath.Abs(d)
		if err != nil {
			return err
		}
		e.Args = append(e.Args, "--policy-dir", abs)
	}
	if ociGlobals.allowUnconfined {
		e.Args = append(e.Args, "--allow-unconfined")
	}
	if en := ociGlobals.engine.Or(); en != policies.EngineContainer {
		// The engine would otherwise accept it and fail every container.
		if _, err := sandbox.FindRunsc(binary); err != nil {
			return fmt.Errorf("install: --engine %s: %w", en, err)
		}
		e.Args = append(e.Args, "--engine", string(en))
	}
	for _, h := range ociGlobals.hookAllow {
		e.Args = append(e.Args, "--hook-allow", h)
	}
	for _, b := range ociGlobals.bindAllow {
		e.Args = append(e.Args, "--bind-allow", b)
	}
	for _, c := range ociGlobals.capAllow {
		e.Args = append(e.Args, "--cap-allow", c)
	}
	current, err := policies.ReadFile(path, "engine config", policies.MaxSpecFile)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("install: %w", err)
	}
	out, err := edit(current, e)
	if err != nil {
		return fmt.Errorf("install: %s: %w", path, err)
	}
	notes := []string{baselineNote, usernsNote(ociGlobals.engine.Or())}
	if cliContext.Bool("dry-run") {
		printNotes(cliContext, notes)
		_, err := cliContext.App.Writer.Write(out)
		return err
	}
	if err := oci.WriteConfig(path, out); err != nil {
		return fmt.Errorf("install: %w", err)
	}
	fmt.Fprintf(cliContext.App.ErrWriter, "warden: registered runtime %q in %s; "+next+"\n", e.Name, path, e.Name)
	printNotes(cliContext, notes)
	return nil
}

func printNotes(cliContext *cli.Context, notes []string) {
	for _, n := range notes {
		if n != "" {
			fmt.Fprintf(cliContext.App.ErrWriter, "warden: %s\n", n)
		}
	}
}

// usernsNote tells the operator whether containers under a policy get a
// user namespace here: tried in the temporary folder ($TMPDIR).
func usernsNote(engine policies.Engine) string {
	if engine != policies.EngineContainer {
		return ""
	}
	if err := oci.CheckUserNamespaces(os.TempDir()); err != nil {
		return fmt.Sprintf("this host cannot give containers a user namespace with an id-mapped root (tried in %s: %v): containers under a policy will run as the host's root without capabilities; run them on gVisor instead (--engine gvisor: their code meets gVisor's kernel, not the host's), or let the engine give them a user namespace (dockerd's \"userns-remap\"; Kubernetes' hostUsers: false with containerd 2 and kernel 6.3 or later), which warden keeps", os.TempDir(), err)
	}
	return fmt.Sprintf("containers under a policy run in a user namespace of their own: their root is an unprivileged host uid (%s), their image's files id-mapped", oci.UsernsRange)
}

// dockerConfig is dockerd's configuration file.
const dockerConfig = "/etc/docker/daemon.json"

// installBaseline makes sure containers that select no policy run under a
// policy: the operator's default.toml in the default policy folder when
// there is one (it must load), else the shipped baseline-container policy,
// written there (not with dryRun). It never replaces a file. It returns
// what it did, for the operator.
func installBaseline(dryRun bool) (string, error) {
	file := filepath.Join(defaultPolicyDir, oci.DefaultPolicyName+".toml")
	// Whoever may write the folder or the file chooses every container's
	// policy: both must be root's alone.
	for _, p := range []string{"/etc/warden", defaultPolicyDir, file} {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			continue
		}
		if st.Uid != 0 || st.Mode&0o022 != 0 || st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return "", fmt.Errorf("%s decides the policy of every container that selects none, yet it is a symlink, not root's, or writable by others (owner %d, mode %04o); make it root's and not group or other writable (chown root: %s; chmod go-w %s)", p, st.Uid, st.Mode&0o7777, p, p)
		}
	}
	if _, err := os.Lstat(file); err == nil {
		if _, err := policies.Load(file); err != nil {
			return "", fmt.Errorf("%w; fix it, or pass --policy FILE, or --allow-unconfined to register containers without a policy", err)
		}
		return "containers that select no policy run under " + file + " (kept as it is)", nil
	}
	what := "containers that select no policy run under " + file + ", the shipped baseline-container policy (docs/oci.md); pass --policy FILE to choose another, or --allow-unconfined to run them as configured"
	if dryRun {
		return "would write " + file + "; " + what, nil
	}
	if err := os.MkdirAll(defaultPolicyDir, 0o755); err != nil {
		return "", err
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", err
	}
	_, err = f.Write(policies.BaselineContainer)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(file) // made just now, and not whole
		return "", err
	}
	return "wrote " + file + "; " + what, nil
}
