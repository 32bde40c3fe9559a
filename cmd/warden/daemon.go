package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/signal"

	"github.com/sirupsen/logrus"
	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/runtime/daemon"
	"github.com/warden-sandbox/warden/runtime/sandbox"
)

var daemonCommand = &cli.Command{
	Name:  "daemon",
	Usage: "own the sessions of a state root (the CLI starts it on demand)",
	Description: `The daemon serves the CLI on ROOT/warden.sock (mode 0600), expires idle
sessions and writes the audit log. Restarted after a crash, it re-adopts the
sessions still running and reaps the rest. One daemon serves a root: another
started on it exits 125; a socket removed under it is made again at once.

Warm pools listed in the configuration file (--config; default
/etc/warden/config.toml for the default root, ROOT/config.toml for any other)
are kept full from the start:

  [[pool]]
  policy = "/etc/warden/skills/web-fetch.toml"   # or a list of files, merged
  size = 4
  skill_dir = "/opt/skills/web-fetch"            # optional ($SKILL_DIR)
  home = "/root"                                 # optional ($HOME)

At start the daemon switches the kernel to cheap cgroup moves (favordynmods,
Linux 6.18 and later; see docs/sessions.md); cgroup_favordynmods = false at the top of
the file leaves the kernel as it is.`,
	Flags: []cli.Flag{
		&cli.StringFlag{Name: "config", Usage: "configuration `FILE` (default: /etc/warden/config.toml for the default root, else ROOT/config.toml)"},
		&cli.StringFlag{Name: "audit-log", Usage: "audit log `FILE` (default: /var/log/warden/audit.log for the default root, else ROOT/audit.log)"},
	},
	Action: func(cliContext *cli.Context) error {
		if err := checkArgs(cliContext, 0, 0, "no arguments"); err != nil {
			return err
		}
		if err := sandbox.ReexecSealed(); err != nil {
			// libcontainer then seals a copy per sandbox start instead.
			logrus.Warnf("running from a sealed copy of the binary: %v; every sandbox start seals its own", err)
		}
		// The configuration first: a bad one leaves no state root behind.
		configPath := cliContext.String("config")
		if configPath == "" {
			configPath = daemon.ConfigPath(cliContext.String("root"))
		} else if _, err := os.Stat(configPath); errors.Is(err, fs.ErrNotExist) {
			// Only the default file may be missing: a named one that is not
			// there is a typo, not an empty configuration.
			return fmt.Errorf("--config %s: no such file; give an existing file, or leave --config out for the default", configPath)
		}
		config, err := daemon.LoadConfig(configPath)
		if err != nil {
			return err
		}
		rt, err := newRuntime(cliContext)
		if err != nil {
			return err
		}
		audit := cliContext.String("audit-log")
		if audit == "" {
			audit = sandbox.AuditPath(rt.Root)
		}
		d, err := daemon.NewDaemon(rt, audit)
		if errors.Is(err, daemon.ErrDaemonRunning) {
			return fmt.Errorf("%w (%s): one daemon per state root; stop that one (SIGTERM) to start another", err, rt.Root)
		} else if err != nil {
			return err
		}
		defer d.Close()
		if config.FavorDynmods {
			// Before the pools fill: every sandbox start moves a process
			// into a cgroup.
			switch err := sandbox.FavorCgroupMoves(); {
			case errors.Is(err, sandbox.ErrFavorNoEffect):
				logrus.Debug(err)
			case err != nil:
				logrus.Warnf("%v; sandbox starts stay slower (set cgroup_favordynmods = false in %s to skip this)", err, configPath)
			default:
				logrus.Infof("cgroup moves: the kernel's favordynmods mode is on until reboot (cgroup_favordynmods = false in %s leaves it off)", configPath)
			}
		}
		d.AdoptPools(config)
		ctx, stop := signal.NotifyContext(context.Background(), unix.SIGTERM, unix.SIGINT)
		defer stop()
		logrus.Infof("warden daemon serving %s", daemon.SocketPath(rt.Root))
		return d.Serve(ctx)
	},
}
