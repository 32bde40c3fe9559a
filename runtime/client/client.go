// Package client is warden's Go client: a program (an agent framework, a
// service) creates sessions and runs commands in them through the daemon
// of a state root, which it starts when none answers, as the warden CLI
// does. It is pure Go: it builds with CGO_ENABLED=0 and links neither
// libcontainer nor runtime/sandbox, so a framework gets warden's sandbox
// without warden's build. docs/go-api.md shows it in use; the socket it
// speaks is docs/protocol.md.
//
//	c := client.New("") // $WARDEN_ROOT, else /run/warden
//	s, err := c.Session(ctx, client.SessionOptions{ID: "chat-7", Policy: "/srv/skills/web/policy.toml", Workspace: "/srv/work/chat-7"})
//	out, err := s.Output(ctx, client.Cmd{Command: "curl -s https://example.com | wc -c"})
package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/runtime/internal/protocol"
)

// Client talks to the daemon of one state root. Its zero value is not
// ready: make one with New.
type Client struct {
	// Root is the state root whose daemon serves the calls.
	Root string
	// Binary is the warden binary that starts the daemon when none
	// answers; empty: `warden` found on PATH when it is needed.
	Binary string
}

// New is a client of the daemon of root; an empty root is $WARDEN_ROOT,
// else /run/warden. Nothing is contacted until the first call.
func New(root string) *Client {
	if root == "" {
		root = os.Getenv("WARDEN_ROOT")
	}
	if root == "" {
		root = protocol.DefaultRoot
	}
	return &Client{Root: root}
}

// dialer reaches the daemon. "warden" is looked up on PATH only when a
// daemon is to be started (exec.Command does), so a client of a running
// daemon needs no binary, and its calls search no PATH.
func (c *Client) dialer() *protocol.Dialer {
	bin := c.Binary
	if bin == "" {
		bin = "warden"
	}
	return &protocol.Dialer{Root: c.Root, Binary: bin}
}

func (c *Client) call(ctx context.Context, req protocol.Request) (protocol.Reply, error) {
	return c.dialer().Call(ctx, req)
}

// Ping asks the daemon (started if none runs) for the protocol version it
// speaks.
func (c *Client) Ping(ctx context.Context) (int, error) {
	r, err := c.call(ctx, protocol.Request{Op: "ping"})
	return r.V, err
}

// Sessions lists the root's sessions.
func (c *Client) Sessions(ctx context.Context) ([]SessionInfo, error) {
	r, err := c.call(ctx, protocol.Request{Op: "list"})
	return r.Sessions, err
}

// SessionOptions say which session to create or join.
type SessionOptions struct {
	// ID names the session: 1 to 64 letters, digits, '.', '_' or '-',
	// starting with a letter or digit. Empty: a new random one.
	ID string
	// Policy is the session's policy: a file path (string or PolicyFile),
	// TOML text (PolicyTOML, []byte, or a string holding a newline or
	// '='), or a *policies.Policy built in Go, whose zero limits are the
	// defaults. Nil joins a session that exists.
	Policy any
	// Workspace ($WORK_DIR), SkillDir ($SKILL_DIR; default: a policy
	// file's folder) and DataDir ($DATA_DIR) are the session's folders;
	// they must exist.
	Workspace, SkillDir, DataDir string
}

// PolicyFile is the path of a policy file, for SessionOptions.Policy.
type PolicyFile string

// PolicyTOML is a policy's TOML text, for SessionOptions.Policy.
type PolicyTOML string

// Session is a session of the daemon: commands run in its sandbox.
type Session struct {
	// ID is the session's id.
	ID string
	c  *Client

	mu      sync.Mutex
	create  *protocol.CreateRequest // nil once removed, or for a joined session
	policy  *policies.Policy
	vars    policies.Vars
	checker *policies.Checker
}

// Session creates the session o describes, or joins it when it exists.
// With a policy, a session of that id that exists is joined as it is:
// every Exec carries the policy and folders, and the daemon refuses one
// that differs (ErrSessionMismatch) and makes it again if it expired.
// Without a policy, a session that does not exist is ErrNoSession.
func (c *Client) Session(ctx context.Context, o SessionOptions) (*Session, error) {
	s, err := c.newSession(o, "s-")
	if err != nil {
		return nil, err
	}
	if s.create == nil {
		list, err := c.Sessions(ctx)
		if err != nil {
			return nil, err
		}
		if !slices.ContainsFunc(list, func(i SessionInfo) bool { return i.ID == s.ID }) {
			return nil, &Error{Code: CodeNoSuchSession, Message: fmt.Sprintf("no such session: %s; create it with a SessionOptions.Policy (and Workspace)", s.ID)}
		}
		return s, nil
	}
	_, err = c.call(ctx, protocol.Request{Op: "create", ID: s.ID, Create: s.create})
	if err != nil && !errors.Is(err, ErrSessionExists) {
		return nil, err
	}
	return s, nil
}

// newSession is the Session o describes, not yet created: an empty ID is
// a new random one after prefix; without a policy, create is nil.
func (c *Client) newSession(o SessionOptions, prefix string) (*Session, error) {
	s := &Session{ID: o.ID, c: c}
	if s.ID == "" {
		b := make([]byte, 6)
		rand.Read(b)
		s.ID = prefix + hex.EncodeToString(b)
	}
	if o.Policy == nil {
		if o.Workspace != "" || o.SkillDir != "" || o.DataDir != "" {
			return nil, invalid("session %s: folders given without a policy; give SessionOptions.Policy too, or leave the folders out to join the session", s.ID)
		}
		return s, nil
	}
	p, vars, err := loadPolicy(o)
	if err != nil {
		return nil, err
	}
	text, err := p.TOML()
	if err != nil {
		return nil, invalid("session %s: policy %s: %v", s.ID, p.Name, err)
	}
	s.policy, s.vars = p, vars
	s.create = &protocol.CreateRequest{PolicyTOML: string(text), Vars: vars}
	return s, nil
}

// loadPolicy reads o's policy and makes its folders absolute.
func loadPolicy(o SessionOptions) (*policies.Policy, policies.Vars, error) {
	var vars policies.Vars
	var p *policies.Policy
	var err error
	switch v := o.Policy.(type) {
	case *policies.Policy:
		if v == nil {
			return nil, vars, invalid("SessionOptions.Policy is a nil *policies.Policy")
		}
		p, err = v.Checked()
	case PolicyFile:
		p, err = policies.Load(string(v))
		vars.SkillDir = filepath.Dir(string(v))
	case PolicyTOML:
		p, err = policies.Parse("policy", []byte(v))
	case []byte:
		p, err = policies.Parse("policy", v)
	case string:
		if strings.ContainsAny(v, "\n=") {
			p, err = policies.Parse("policy", []byte(v))
		} else {
			p, err = policies.Load(v)
			vars.SkillDir = filepath.Dir(v)
		}
	default:
		return nil, vars, invalid("SessionOptions.Policy is a %T; give a file path, TOML text or a *policies.Policy", o.Policy)
	}
	if err != nil {
		return nil, vars, &Error{Code: CodeOf(err), Message: err.Error()}
	}
	for _, f := range []struct {
		name string
		dir  string
		dst  *string
	}{{"Workspace", o.Workspace, &vars.WorkDir}, {"SkillDir", o.SkillDir, &vars.SkillDir}, {"DataDir", o.DataDir, &vars.DataDir}} {
		dir := f.dir
		if dir == "" {
			dir = *f.dst
		}
		if dir == "" {
			continue
		}
		abs, err := filepath.Abs(dir)
		if err != nil {
			return nil, vars, invalid("SessionOptions.%s: %v", f.name, err)
		}
		// A mistyped folder would leave its mount point empty, not fail.
		if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
			return nil, vars, invalid("SessionOptions.%s %s: not a directory; create it first", f.name, abs)
		}
		*f.dst = abs
	}
	vars.Home, _ = os.UserHomeDir()
	return p, vars, nil
}

// Policy is the session's policy; nil for a session joined without one.
func (s *Session) Policy() *policies.Policy { return s.policy }

// Checker answers the session's policy's questions in this process, for
// tools that never enter the sandbox (read_file, write_file, web_fetch):
// CheckRead, CheckWrite, CheckExec, CheckNetwork, DialControl. A session
// joined without a policy has none.
func (s *Session) Checker() (*Checker, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.checker != nil {
		return s.checker, nil
	}
	if s.policy == nil {
		return nil, invalid("session %s was joined without a policy, so its checks are not known here; give SessionOptions.Policy", s.ID)
	}
	ck, err := policies.NewChecker(s.policy, s.vars)
	if err != nil {
		return nil, &Error{Code: CodeOf(err), Message: err.Error()}
	}
	s.checker = ck
	return ck, nil
}

// Remove removes the session, killing the commands it runs; its
// workspace and data folders stay. Later calls on s get ErrNoSession.
func (s *Session) Remove(ctx context.Context) error {
	s.mu.Lock()
	s.create = nil
	s.mu.Unlock()
	_, err := s.c.call(ctx, protocol.Request{Op: "remove", ID: s.ID, Force: true})
	return err
}

func invalid(format string, a ...any) error {
	return &Error{Code: CodeInvalidInput, Message: fmt.Sprintf(format, a...)}
}
