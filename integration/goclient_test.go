package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/runtime/client"
)

const goClientPolicy = `name = "goclient"
[fs]
write = ["$WORK_DIR"]
[exec]
allow = ["cat", "sleep", "wc"]
[limits]
timeout = "30s"
`

// newGoClient is a client of r's daemon, found through WARDEN_ROOT as a
// framework's would be; its first call starts the daemon.
func newGoClient(t *testing.T, r *wardenRoot) *client.Client {
	t.Setenv("WARDEN_ROOT", r.root)
	c := client.New("")
	if c.Root != r.root {
		t.Fatalf("client.New(\"\") root %q, want $WARDEN_ROOT %q", c.Root, r.root)
	}
	c.Binary = wardenBinary
	return c
}

// The three ways to give a policy make working sessions, and a built
// policy's zero limits are the defaults.
func TestGoClientSessions(t *testing.T) {
	r := newRoot(t)
	c := newGoClient(t, r)
	ctx := context.Background()
	ws := tempDir(t)
	for _, tc := range []struct {
		name   string
		policy any
	}{
		{"file", r.policy(goClientPolicy)},
		{"text", goClientPolicy},
		{"built", &policies.Policy{Name: "built", FS: policies.FS{Write: []string{"$WORK_DIR"}},
			Exec: policies.Exec{Allow: []string{"cat", "sleep", "wc"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := c.Session(ctx, client.SessionOptions{ID: r.id("gc-" + tc.name), Policy: tc.policy, Workspace: ws})
			if err != nil {
				t.Fatal(err)
			}
			out, err := s.Shell(ctx, "echo "+tc.name+" > "+tc.name+".txt && cat "+tc.name+".txt")
			if err != nil || string(out) != tc.name+"\n" {
				t.Fatalf("shell: %q %v", out, err)
			}
			if data, err := os.ReadFile(filepath.Join(ws, tc.name+".txt")); err != nil || string(data) != tc.name+"\n" {
				t.Errorf("the workspace file on the host: %q %v", data, err)
			}
			if err := s.Remove(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
	// The built policy left every limit at zero: the session has the
	// defaults (a timeout of 60s passes, one above it is refused), not
	// limits of zero.
	s, err := c.Session(ctx, client.SessionOptions{ID: r.id("gc-limits"), Policy: &policies.Policy{Name: "limits",
		Exec: policies.Exec{Allow: []string{"cat"}}}, Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Policy().Limits; got != policies.DefaultLimits {
		t.Errorf("built policy's limits %+v, want the defaults %+v", got, policies.DefaultLimits)
	}
	if res, err := s.Exec(ctx, client.Cmd{Argv: []string{"cat", "/dev/null"}, Timeout: policies.DefaultLimits.Timeout}); err != nil || res.ExitCode != 0 {
		t.Errorf("exec with the default timeout: %+v %v", res, err)
	}
	if _, err := s.Exec(ctx, client.Cmd{Argv: []string{"cat", "/dev/null"}, Timeout: policies.DefaultLimits.Timeout + time.Second}); client.CodeOf(err) != client.CodePolicyRefused {
		t.Errorf("exec above the default timeout: %v (code %q), want policy_refused", err, client.CodeOf(err))
	}
	s.Remove(ctx)
}

// Exec with readers and writers that are not files: 10 MB through the
// sandbox byte for byte, stderr apart, and *os.File passed as it is.
func TestGoClientExecStdio(t *testing.T) {
	r := newRoot(t)
	c := newGoClient(t, r)
	ctx := context.Background()
	s, err := c.Session(ctx, client.SessionOptions{ID: r.id("gc-io"), Policy: goClientPolicy, Workspace: tempDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Remove(ctx)

	in := make([]byte, 10<<20)
	rand.New(rand.NewSource(17)).Read(in)
	var out, errOut bytes.Buffer
	start := time.Now()
	res, err := s.Exec(ctx, client.Cmd{Argv: []string{"sh", "-c", "cat; echo done >&2"}, Stdin: bytes.NewReader(in), Stdout: &out, Stderr: &errOut})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %+v %v", res, err)
	}
	t.Logf("10 MB through cat: %s", time.Since(start))
	if !bytes.Equal(out.Bytes(), in) {
		t.Errorf("stdout: %d bytes, not the 10 MB of stdin (%d bytes)", out.Len(), len(in))
	}
	if errOut.String() != "done\n" {
		t.Errorf("stderr %q", errOut.String())
	}

	// A command that reads none of a large stdin ends the call as it ends.
	start = time.Now()
	if res, err := s.Exec(ctx, client.Cmd{Argv: []string{"cat", "/dev/null"}, Stdin: bytes.NewReader(in)}); err != nil || res.ExitCode != 0 {
		t.Errorf("exec leaving stdin unread: %+v %v", res, err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("exec leaving 10 MB of stdin unread took %s", took)
	}

	var lines bytes.Buffer
	if res, err := s.Exec(ctx, client.Cmd{Argv: []string{"wc", "-l"}, Stdin: strings.NewReader("a\nb\nc\n"), Stdout: &lines}); err != nil || res.ExitCode != 0 || strings.TrimSpace(lines.String()) != "3" {
		t.Errorf("wc -l of a strings.Reader: %q %+v %v", lines.String(), res, err)
	}

	f, err := os.Create(filepath.Join(tempDir(t), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if res, err := s.Exec(ctx, client.Cmd{Command: "echo to-a-file", Stdout: f}); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec to a file: %+v %v", res, err)
	}
	if data, _ := os.ReadFile(f.Name()); string(data) != "to-a-file\n" {
		t.Errorf("the file passed as stdout holds %q", data)
	}

	out2, err := s.CombinedOutput(ctx, client.Cmd{Command: "echo one; echo two >&2; exit 3"})
	var ee *client.ExitError
	if !errors.As(err, &ee) || ee.ExitCode != 3 || ee.Code() != "" || string(out2) != "one\ntwo\n" {
		t.Errorf("combined output of a failing command: %q %v", out2, err)
	}
}

// A program the policy does not list never starts and says so with its
// code; a listed one runs. The shell of a command string runs, and it can
// start only listed programs.
func TestGoClientRefusedProgram(t *testing.T) {
	r := newRoot(t)
	c := newGoClient(t, r)
	ctx := context.Background()
	s, err := c.Session(ctx, client.SessionOptions{ID: r.id("gc-refuse"), Policy: goClientPolicy, Workspace: tempDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Remove(ctx)
	if out, err := s.Output(ctx, client.Cmd{Argv: []string{"cat", "/etc/hostname"}}); err != nil || len(out) == 0 {
		t.Errorf("a listed program: %q %v", out, err)
	}
	res, err := s.Exec(ctx, client.Cmd{Argv: []string{"ls", "/"}})
	if err != nil || res.ExitCode != 127 || res.Error == "" || client.ResultCode(res) != client.CodeCommandNotFound {
		t.Errorf("an unlisted program: %+v %v (code %q), want exit 127 and command_not_found", res, err, client.ResultCode(res))
	}
	out, err := s.Output(ctx, client.Cmd{Argv: []string{"ls", "/"}})
	if !errors.Is(err, &client.Error{Code: client.CodeCommandNotFound}) || client.CodeOf(err) != client.CodeCommandNotFound || len(out) != 0 {
		t.Errorf("Output of an unlisted program: %q %v", out, err)
	}
	if out, err := s.Shell(ctx, "echo a | wc -c"); err != nil || strings.TrimSpace(string(out)) != "2" {
		t.Errorf("a command string of listed programs: %q %v", out, err)
	}
	out, err = s.Shell(ctx, "ls /")
	var ee *client.ExitError
	if !errors.As(err, &ee) || ee.ExitCode == 0 || strings.Contains(string(out), "proc") {
		t.Errorf("a command string running an unlisted program: %q %v", out, err)
	}
	ck, err := s.Checker()
	if err != nil {
		t.Fatal(err)
	}
	if err := ck.CheckExec("cat"); err != nil {
		t.Errorf("in-process check of a listed program: %v", err)
	}
	if err := ck.CheckExec("ls"); !errors.Is(err, policies.ErrDenied) {
		t.Errorf("in-process check of an unlisted program: %v", err)
	}
}

// Cancelling the context kills the command at once and the session goes
// on; an unknown or removed session is a typed error.
func TestGoClientCancelAndErrors(t *testing.T) {
	r := newRoot(t)
	c := newGoClient(t, r)
	ctx := context.Background()
	s, err := c.Session(ctx, client.SessionOptions{ID: r.id("gc-cancel"), Policy: goClientPolicy, Workspace: tempDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	// A second argument makes the sleep ours alone among the host's
	// processes; sleep adds them up.
	mark := fmt.Sprintf("0.%06d", rand.Intn(1000000))
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := s.Exec(cctx, client.Cmd{Argv: []string{"sleep", "100", mark}})
		done <- err
	}()
	sleeping := func() []int { return cmdlinePIDs("sleep\x00100\x00" + mark + "\x00") }
	for deadline := time.Now().Add(10 * time.Second); len(sleeping()) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("sleep 100 never ran: %v", <-done)
		}
	}
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Exec after cancel: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Exec did not return within 5s of the cancel")
	}
	for len(sleeping()) > 0 {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("sleep 100 still runs 5s after the cancel: %v", sleeping())
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("cancel to sleep gone: %s", time.Since(start))
	if out, err := s.Output(ctx, client.Cmd{Argv: []string{"cat"}, Stdin: strings.NewReader("still")}); err != nil || string(out) != "still" {
		t.Errorf("the session after the cancel: %q %v", out, err)
	}

	_, err = c.Session(ctx, client.SessionOptions{ID: "gc-unknown-" + randomHex(4)})
	if !errors.Is(err, client.ErrNoSession) || client.CodeOf(err) != client.CodeNoSuchSession {
		t.Errorf("joining an unknown session: %v (code %q)", err, client.CodeOf(err))
	}
	joined, err := c.Session(ctx, client.SessionOptions{ID: s.ID})
	if err != nil {
		t.Fatalf("joining the session: %v", err)
	}
	if out, err := joined.Shell(ctx, "echo joined"); err != nil || string(out) != "joined\n" {
		t.Errorf("the joined session: %q %v", out, err)
	}
	if err := s.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Exec(ctx, client.Cmd{Argv: []string{"cat", "/dev/null"}}); !errors.Is(err, client.ErrNoSession) {
		t.Errorf("exec in a removed session: %v", err)
	}
	if _, err := c.Session(ctx, client.SessionOptions{ID: "bad id!", Policy: goClientPolicy}); client.CodeOf(err) != client.CodeInvalidInput {
		t.Errorf("a bad session id: %v (code %q)", err, client.CodeOf(err))
	}
	if _, err := c.Session(ctx, client.SessionOptions{ID: r.id("gc-badpol"), Policy: "[exec]\nallow = 3\n"}); client.CodeOf(err) != client.CodeInvalidInput {
		t.Errorf("a bad policy: %v (code %q)", err, client.CodeOf(err))
	}
}

// cmdlinePIDs are the host's processes whose command line is cmdline
// (arguments each ended by NUL).
func cmdlinePIDs(cmdline string) []int {
	var pids []int
	for _, pid := range hostPIDs() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && string(b) == cmdline {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Client.Do runs one command in a sandbox of its own, as `warden do`
// does: from a warm pool of the policy when there is one, else in a
// session made for the call; nothing is left either way, and a session
// that is someone else's is neither joined nor removed.
func TestGoClientDo(t *testing.T) {
	r := newRoot(t)
	c := newGoClient(t, r)
	ctx := context.Background()
	ws := tempDir(t)
	policy := r.policy(goClientPolicy)
	opts := client.SessionOptions{Policy: policy, Workspace: ws}
	words := func(how string) {
		t.Helper()
		var out bytes.Buffer
		res, err := c.Do(ctx, opts, client.Cmd{Argv: []string{"wc", "-w"}, Stdin: strings.NewReader("one two three\n"), Stdout: &out})
		if err != nil || res.ExitCode != 0 || out.String() != "3\n" {
			t.Fatalf("%s: Do wc -w: %q, %+v, %v", how, out.String(), res, err)
		}
		if l := r.list(); len(l) != 0 {
			t.Fatalf("%s: sessions left after Do: %+v", how, l)
		}
	}
	words("cold")

	// A failing command and a refused program are results, as with Exec.
	res, err := c.Do(ctx, opts, client.Cmd{Argv: []string{"cat", "/nonexistent"}})
	if err != nil || res.ExitCode != 1 {
		t.Errorf("Do cat /nonexistent: %+v, %v; want exit 1", res, err)
	}
	res, err = c.Do(ctx, opts, client.Cmd{Argv: []string{"curl", "https://example.com"}})
	if err != nil || res.ExitCode != 127 || client.ResultCode(res) != client.CodeCommandNotFound {
		t.Errorf("Do of a program the policy does not list: %+v, %v", res, err)
	}

	// The id of a session that exists: refused, and that session stays.
	taken, err := c.Session(ctx, client.SessionOptions{ID: r.id("taken"), Policy: policy, Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Do(ctx, client.SessionOptions{ID: taken.ID, Policy: policy, Workspace: ws}, client.Cmd{Argv: []string{"wc"}})
	if !errors.Is(err, client.ErrSessionExists) {
		t.Errorf("Do with the id of a session that exists: %v; want ErrSessionExists", err)
	}
	if out, err := taken.Output(ctx, client.Cmd{Command: "echo still here"}); err != nil || string(out) != "still here\n" {
		t.Errorf("the session Do was refused is not usable: %q %v", out, err)
	}
	if err := taken.Remove(ctx); err != nil {
		t.Fatal(err)
	}

	// Cancelled: the command is killed and its session goes.
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = c.Do(cctx, opts, client.Cmd{Argv: []string{"sleep", "30"}})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Do cancelled: %v; want the context's error", err)
	}
	waitFor(t, 10*time.Second, "the cancelled Do's session removed", func() bool { return len(r.list()) == 0 })

	// With a warm pool of the policy, a Do claims from it.
	r.fill(policy, 1)
	r.waitPool(1)
	hits := r.poolStatus()[0].Hits
	words("pooled")
	if got := r.poolStatus()[0].Hits - hits; got != 1 {
		t.Errorf("Do with a warm pool: %d claims, want 1", got)
	}

	if _, err := c.Do(ctx, client.SessionOptions{Workspace: ws}, client.Cmd{Argv: []string{"wc"}}); !errors.Is(err, &client.Error{Code: client.CodeInvalidInput}) {
		t.Errorf("Do without a policy: %v; want invalid_input", err)
	}
}
