package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sirupsen/logrus"
	"github.com/urfave/cli/v2"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/runtime/oci"
)

// ociGlobalFlags are the global flags of the runc-compatible face, as
// containerd's shim and dockerd pass them (runtimeArgs come first).
var ociGlobalFlags = []cli.Flag{
	&cli.StringFlag{Name: "log", Usage: "write log messages (and a failing command's error) to `FILE`"},
	&cli.StringFlag{Name: "log-format", Usage: "log format: text or json", Value: "text"},
	&cli.BoolFlag{Name: "systemd-cgroup", Usage: "use systemd cgroups (not supported: warden uses cgroupfs)"},
	&cli.StringFlag{Name: "policy", Usage: "OCI face: apply the policy `FILE` to every container that does not choose one", EnvVars: []string{"WARDEN_POLICY"}},
	&cli.StringFlag{Name: "policy-dir", Usage: "OCI face: `DIR` of NAME.toml policies a container may choose with the annotation dev.warden.policy=NAME (default " + defaultPolicyDir + " when it exists and no --policy is given); a container that selects none runs under its default.toml", EnvVars: []string{"WARDEN_POLICY_DIR"}},
	&cli.BoolFlag{Name: "allow-unconfined", Usage: "OCI face: with a policy directory, a container that selects no policy and finds no default.toml there runs as configured (without: it is refused)", EnvVars: []string{"WARDEN_ALLOW_UNCONFINED"}},
	&cli.StringSliceFlag{Name: "hook-allow", Usage: "OCI face: a host program `PATH` a container's hooks may run under a policy (docker's own libnetwork-setkey is always allowed); other hooks refuse the container; without the flag: $WARDEN_HOOK_ALLOW, comma-separated"},
	&cli.StringSliceFlag{Name: "bind-allow", Usage: "OCI face: a host path `PATTERN` (filepath.Match) containers under a policy may bind read-only though the policy does not grant it; without the flag: $WARDEN_BIND_ALLOW, comma-separated"},
	&cli.StringFlag{Name: "engine", Usage: "run containers (and sessions) under at least `ENGINE`: container (the default) or gvisor (runsc); a policy's stronger [sandbox] engine wins", EnvVars: []string{"WARDEN_ENGINE"}},
	&cli.StringSliceFlag{Name: "cap-allow", Usage: "OCI face: a capability (CAP_CHOWN) containers under a policy may keep; default none; without the flag: $WARDEN_CAP_ALLOW, comma-separated"},
}

// listFlag is a repeatable global flag's values, each as written, or
// when the flag is not given, its variable's comma-separated list: an
// engine's environment holds one value per variable.
func listFlag(cliContext *cli.Context, name, variable string) []string {
	if cliContext.IsSet(name) {
		return cliContext.StringSlice(name)
	}
	v := os.Getenv(variable)
	if v == "" {
		return nil
	}
	list := strings.Split(v, ",")
	for i := range list {
		list[i] = strings.TrimSpace(list[i])
	}
	return list
}

// defaultPolicyDir is the operator's policy directory when neither
// --policy-dir nor WARDEN_POLICY_DIR names one: containerd's CRI entry can
// name a binary but pass it no arguments.
const defaultPolicyDir = "/etc/warden/policies"

// logFile is the --log file, when one was given.
var logFile *os.File

// ociGlobals are the OCI face's global flag values, read once in the
// app's Before (commands may have flags of the same names).
var ociGlobals struct {
	policy, policyDir              string
	capAllow, bindAllow, hookAllow []string
	allowUnconfined                bool
	engine                         policies.Engine
}

// setupLogging configures logrus from the global flags, once, before any
// command runs, and keeps the OCI face's global flags.
func setupLogging(cliContext *cli.Context) error {
	ociGlobals.policy = cliContext.String("policy")
	ociGlobals.policyDir = cliContext.String("policy-dir")
	ociGlobals.capAllow = listFlag(cliContext, "cap-allow", "WARDEN_CAP_ALLOW")
	ociGlobals.bindAllow = listFlag(cliContext, "bind-allow", "WARDEN_BIND_ALLOW")
	ociGlobals.hookAllow = listFlag(cliContext, "hook-allow", "WARDEN_HOOK_ALLOW")
	ociGlobals.allowUnconfined = cliContext.Bool("allow-unconfined")
	if name := cliContext.String("engine"); name != "" {
		e, err := policies.ParseEngine(name)
		if err != nil {
			return fmt.Errorf("--engine: %w", err)
		}
		ociGlobals.engine = e
	}
	logrus.SetOutput(cliContext.App.ErrWriter)
	if cliContext.Bool("debug") {
		logrus.SetLevel(logrus.DebugLevel)
	}
	switch f := cliContext.String("log-format"); f {
	case "text":
	case "json":
		logrus.SetFormatter(&logrus.JSONFormatter{})
	default:
		return fmt.Errorf("--log-format %q: use text or json", f)
	}
	if path := cliContext.String("log"); path != "" {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND|os.O_SYNC, 0o644)
		if err != nil {
			return fmt.Errorf("--log %s: %w", path, err)
		}
		logFile = f
		logrus.SetOutput(f)
	}
	if cliContext.Bool("systemd-cgroup") {
		return errors.New("--systemd-cgroup: this host has no systemd; configure the engine for cgroupfs (dockerd: exec-opts native.cgroupdriver=cgroupfs; containerd: SystemdCgroup = false)")
	}
	return nil
}

// logError writes a failing command's error to the --log file, where
// containerd's shim and dockerd read it from (the last JSON line).
func logError(err error) {
	if err == nil || logFile == nil {
		return
	}
	var ee *exitError
	if errors.As(err, &ee) && ee.err == nil {
		return
	}
	logrus.Error(err.Error())
}

// ociRuntime builds the OCI face from the global flags.
func ociRuntime(cliContext *cli.Context) (*oci.Runtime, error) {
	o := &oci.Runtime{Root: cliContext.String("root"), PolicyDir: ociGlobals.policyDir, CapAllow: ociGlobals.capAllow, BindAllow: ociGlobals.bindAllow, HookAllow: ociGlobals.hookAllow, AllowUnconfined: ociGlobals.allowUnconfined, Engine: ociGlobals.engine,
		LogFile: cliContext.String("log"), LogFormat: cliContext.String("log-format")}
	if !filepath.IsAbs(o.Root) {
		abs, err := filepath.Abs(o.Root)
		if err != nil {
			return nil, fmt.Errorf("--root: %w", err)
		}
		o.Root = abs
	}
	if file := ociGlobals.policy; file != "" {
		p, err := policies.Load(file)
		if err != nil {
			return nil, fmt.Errorf("--policy: %w", err)
		}
		o.Policy, o.PolicyFile = p, file
	}
	// The default directory only when the operator named no policy: an
	// explicit --policy is not switched away from by an annotation.
	if o.PolicyDir == "" && o.Policy == nil {
		if fi, err := os.Stat(defaultPolicyDir); err == nil && fi.IsDir() {
			o.PolicyDir = defaultPolicyDir
		}
	} else if o.PolicyDir != "" {
		if fi, err := os.Stat(o.PolicyDir); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("--policy-dir %s: not a directory", o.PolicyDir)
		}
	}
	for _, h := range o.HookAllow {
		if !filepath.IsAbs(h) {
			return nil, fmt.Errorf("--hook-allow %q: give the absolute path of the hook's program, such as /usr/libexec/oci/hooks.d/setup", h)
		}
	}
	for _, b := range o.BindAllow {
		if _, err := filepath.Match(b, "/"); err != nil || !filepath.IsAbs(b) {
			return nil, fmt.Errorf("--bind-allow %q: give an absolute path pattern such as /var/lib/kubelet/pods/*/etc-hosts", b)
		}
	}
	for _, c := range o.CapAllow {
		if len(c) < 5 || c[:4] != "CAP_" {
			return nil, fmt.Errorf("--cap-allow %q: name a capability such as CAP_CHOWN", c)
		}
	}
	return o, nil
}

// containerArg returns the container id, the first positional argument.
// onContainer is the action of a command that takes one container id: it
// checks the argument and opens the OCI runtime before calling act.
func onContainer(act func(cliContext *cli.Context, o *oci.Runtime, id string) error) cli.ActionFunc {
	return func(cliContext *cli.Context) error {
		id, err := containerArg(cliContext, 1, 1, "a container id")
		if err != nil {
			return err
		}
		o, err := ociRuntime(cliContext)
		if err != nil {
			return err
		}
		return act(cliContext, o, id)
	}
}

func containerArg(cliContext *cli.Context, min, max int, usage string) (string, error) {
	if err := checkArgs(cliContext, min, max, usage); err != nil {
		return "", err
	}
	return cliContext.Args().First(), nil
}

// statusError turns a process's exit status into warden's exit.
func statusError(status int) error {
	if status == 0 {
		return nil
	}
	return &exitError{code: status}
}
