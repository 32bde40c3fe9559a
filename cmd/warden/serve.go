package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os/signal"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/runtime/dashboard"
	"github.com/warden-sandbox/warden/runtime/sandbox"
)

var serveCommand = &cli.Command{
	Name:  "serve",
	Usage: "serve the dashboard (sessions, commands, audit lines, freeze and kill, pools) and /metrics on loopback",
	Flags: []cli.Flag{
		&cli.StringFlag{Name: "listen", Value: "127.0.0.1:8765", Usage: "loopback `ADDR`ESS:PORT to listen on (port 0: any free one)"},
		&cli.StringFlag{Name: "audit-log", Usage: "audit log `FILE` the session pages show (default: /var/log/warden/audit.log for the default root, else ROOT/audit.log)"},
	},
	Action: func(cliContext *cli.Context) error {
		if err := checkArgs(cliContext, 0, 0, "no arguments"); err != nil {
			return err
		}
		addr, err := loopbackAddr(cliContext.String("listen"))
		if err != nil {
			return err
		}
		// From here on SIGINT and SIGTERM stop it cleanly, exit 0.
		ctx, stop := signal.NotifyContext(context.Background(), unix.SIGINT, unix.SIGTERM)
		defer stop()
		c := client(cliContext)
		if _, err := c.Ping(); err != nil { // starts the daemon, as every command does
			return err
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("--listen %s: %w", addr, err)
		}
		// After the listen: a token made is a token printed.
		token, created, err := dashboard.LoadToken(c.Root)
		if err != nil {
			ln.Close()
			return err
		}
		audit := cliContext.String("audit-log")
		if audit == "" {
			audit = sandbox.AuditPath(c.Root)
		}
		srv, err := dashboard.New(dashboard.Config{Client: c, AuditLog: audit, Addr: ln.Addr().String(), Token: token})
		if err != nil {
			ln.Close()
			return err
		}
		url := "http://" + ln.Addr().String() + "/"
		w := cliContext.App.Writer
		fmt.Fprintf(w, "warden serve: %s\n", url)
		if created {
			fmt.Fprintf(w, "token (shown this once; kept in %s, mode 0600): %s\n", dashboard.TokenPath(c.Root), token)
			fmt.Fprintf(w, "sign in: %slogin?token=%s\n", url, token)
		} else {
			fmt.Fprintf(w, "token: in %s (mode 0600)\n", dashboard.TokenPath(c.Root))
		}
		hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute,
			BaseContext: func(net.Listener) context.Context { return ctx }} // live pages end with the server
		go func() {
			<-ctx.Done()
			shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			hs.Shutdown(shut)
		}()
		if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	},
}

// loopbackAddr checks --listen names a loopback address (localhost is
// 127.0.0.1). warden serve has no TLS: anything it serves beyond this
// machine would travel, token and all, in clear text.
func loopbackAddr(listen string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("--listen %q: %v; give ADDRESS:PORT, such as 127.0.0.1:8765", listen, err)
	}
	if host == "localhost" {
		host = "127.0.0.1"
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.IsLoopback() {
		return "", fmt.Errorf("--listen %s: warden serve listens on loopback only (127.0.0.1, ::1 or localhost): it has no TLS; to reach it from another machine forward its port over SSH (ssh -L 8765:127.0.0.1:8765 HOST)", listen)
	}
	return net.JoinHostPort(ip.String(), port), nil
}
