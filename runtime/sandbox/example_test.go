package sandbox_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/runtime/sandbox"
)

// A framework that links warden creates a session per conversation from
// a policy and runs each tool call in it. The binary that links the
// runtime package must hand itself to libcontainer first thing in main
// (when sandbox.IsInit(), call sandbox.Init()), and the session's agent
// is an installed warden binary. Run as root.
func Example() {
	p, err := policies.Parse("transform.toml", []byte(`
name = "transform"
[fs]
write = ["$WORK_DIR"]
[exec]
allow = ["sh", "wc"]
[limits]
memory = "256MiB"
timeout = "30s"
`))
	if err != nil {
		log.Fatal(err)
	}
	rt, err := sandbox.New("/run/warden-example", "/usr/local/bin/warden")
	if err != nil {
		log.Fatal(err)
	}
	workspace := "/srv/conversations/chat-42" // yours; never removed by warden
	s, err := rt.Create(sandbox.SessionConfig{ID: "chat-42", Policy: p, Vars: policies.Vars{WorkDir: workspace}})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	res, err := s.Exec(context.Background(), sandbox.ExecOptions{
		Argv:    []string{"sh", "-c", "echo one two three | wc -w"},
		Stdout:  os.Stdout, // any *os.File: passed to the command as is
		Timeout: 5 * time.Second,
	})
	if err != nil {
		log.Fatal(err) // warden failed; the command's own failure is in res
	}
	fmt.Println("exit", res.ExitCode, res.Error)
}
