package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"

	"github.com/warden-sandbox/warden/runtime/client"
)

// The calls of docs/go-api.md's client example, in order. It needs a
// warden daemon (started from `warden` on PATH), so it is compiled, not
// run; integration/goclient_test.go runs the same calls.
func Example() {
	ctx := context.Background()
	c := client.New("") // $WARDEN_ROOT, else /run/warden; the daemon from `warden` on PATH
	s, err := c.Session(ctx, client.SessionOptions{
		ID:        "chat-42",
		Policy:    "/srv/skills/transform/policy.toml", // or TOML text, or a *policies.Policy
		Workspace: "/srv/conversations/chat-42",        // yours; never removed by warden
	})
	if err != nil {
		log.Fatal(err) // a *client.Error: err.Code says what kind
	}
	defer s.Remove(ctx)

	// Any reader or writer: *os.File is passed to the command as is,
	// anything else goes through a pipe.
	res, err := s.Exec(ctx, client.Cmd{
		Argv:   []string{"wc", "-w"},
		Stdin:  strings.NewReader("one two three\n"),
		Stdout: os.Stdout,
	})
	if err != nil {
		log.Fatal(err) // warden failed; the command's own failure is in res
	}
	fmt.Println("exit", res.ExitCode, res.Error)

	// A command string runs as `sh -c`, as an agent's shell tool does.
	out, err := s.Shell(ctx, "echo one two | wc -w")
	fmt.Printf("%s%v\n", out, err)

	// A program the policy does not list never starts.
	_, err = s.Output(ctx, client.Cmd{Argv: []string{"curl", "https://example.com"}})
	var exit *client.ExitError
	if errors.As(err, &exit) && exit.Code() == client.CodeCommandNotFound {
		log.Printf("the policy does not let it run: %s", exit.Result.Error)
	}
}
