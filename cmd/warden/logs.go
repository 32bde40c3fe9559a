package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/warden-sandbox/warden/runtime/sandbox"
)

var logsCommand = &cli.Command{
	Name:  "logs",
	Usage: "print the audit log: one JSON line per command and session event",
	Flags: []cli.Flag{
		&cli.StringFlag{Name: "session", Aliases: []string{"s"}, Usage: "only this session `ID`"},
		&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep printing new lines"},
		&cli.StringFlag{Name: "audit-log", Usage: "audit log `FILE` (default: /var/log/warden/audit.log for the default root, else ROOT/audit.log)"},
	},
	Action: func(cliContext *cli.Context) error {
		if err := checkArgs(cliContext, 0, 0, "no arguments"); err != nil {
			return err
		}
		path := cliContext.String("audit-log")
		if path == "" {
			root, _ := filepath.Abs(cliContext.String("root"))
			path = sandbox.AuditPath(root)
		}
		// A device (/dev/zero) would be one endless line; opening a FIFO
		// would block.
		if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
			return fmt.Errorf("audit log %s: not a regular file; give the audit log's path", path)
		}
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("audit log: %w (nothing has run under this root yet?)", err)
		}
		defer f.Close()
		session := cliContext.String("session")
		r := bufio.NewReader(f)
		w := cliContext.App.Writer
		var partial []byte
		for {
			line, err := r.ReadBytes('\n')
			partial = append(partial, line...)
			if err == io.EOF {
				if !cliContext.Bool("follow") {
					return nil
				}
				time.Sleep(100 * time.Millisecond)
				continue
			} else if err != nil {
				return err
			}
			if wanted(partial, session) {
				// (lines an older warden wrote may hold raw controls)
				w.Write(sandbox.TerminalSafe(partial))
			}
			partial = partial[:0]
		}
	},
}

func wanted(line []byte, session string) bool {
	if session == "" {
		return true
	}
	var rec struct {
		Session string `json:"session"`
	}
	return json.Unmarshal(line, &rec) == nil && rec.Session == session
}
