package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/runtime/internal/wire"
	"github.com/warden-sandbox/warden/runtime/sandbox"
	"github.com/warden-sandbox/warden/spec"
)

// One-shot runs (`warden do`, the do op): a ready sandbox of a warm pool
// runs one command and is discarded, so a one-shot call costs a claim
// and an exec instead of a container start. The daemon serves one only
// from a pool; anything that keeps it from claiming one is not_pooled,
// with nothing run and nothing written, and the caller runs the command
// cold as it did before pools served it.

// do serves the do op: claim, run as exec runs, reply, discard. The
// audit log gets what a cold `warden do` writes: the command's exec line.
func (d *Daemon) do(ctx context.Context, p peer, req *request, files []*os.File) {
	fail := func(err error) { p.send(reply{Error: err.Error(), Code: CodeOf(err)}) }
	e := req.Exec
	if e == nil || len(e.Argv) == 0 {
		fail(kindf(spec.ErrInvalid, "no command given"))
		return
	}
	if e.Tty {
		fail(kindf(spec.ErrInvalid, "a one-shot run has no terminal; run it in a session (warden exec -t)"))
		return
	}
	stdio, stdioDone, err := p.stdio(false, files)
	if err != nil {
		fail(err)
		return
	}
	if p.gone() {
		stdioDone()
		return // it gave up waiting (a signal) before the request was read: run nothing
	}
	s, err := d.claimOneShot(req.ID, req.Create)
	if err != nil {
		stdioDone()
		fail(err)
		return
	}
	res, err := d.run(ctx, p, s, e, stdio, stdioDone, false)
	// The caller's descriptors are let go before the reply: a reader of
	// the command's output sees its end now, not after the discard.
	wire.CloseAll(files)
	d.mu.Lock()
	mine := d.sessions[s.ID] == s // not removed meanwhile (session rm --force)
	if mine {
		delete(d.sessions, s.ID)
	}
	d.mu.Unlock()
	if err != nil {
		fail(err)
	} else {
		p.send(reply{Result: &res})
	}
	if !mine {
		return
	}
	// Off the caller's path: it has its answer, and the end of the
	// connection, before the sandbox goes.
	p.close()
	if err := s.Close(); err != nil {
		logrus.Warnf("one-shot run %s: removing its sandbox: %v", s.ID, err)
	}
}

// notPooled is why a one-shot call is not served from a pool.
func notPooled(format string, a ...any) error {
	return kindf(ErrNotPooled, "not run from a warm pool: "+format, a...)
}

// claimOneShot claims a ready sandbox for a one-shot run of the policy and
// folders c names, as session id; a not_pooled error says why none
// serves it. The session is the daemon's while its command runs, so the
// kill switch, stats and gc see it, but no other command runs in it.
func (d *Daemon) claimOneShot(id string, c *createRequest) (*daemonSession, error) {
	if err := sandbox.CheckID(id); err != nil {
		return nil, err
	}
	if c == nil || c.PolicyTOML == "" {
		return nil, kindf(spec.ErrInvalid, "do: no policy given (create.policyToml)")
	}
	if d.pools.empty() {
		return nil, notPooled("this daemon keeps no pool")
	}
	p, err := policies.Parse(id+" policy", []byte(c.PolicyTOML))
	if err != nil {
		return nil, notPooled("%v", err)
	}
	hash := p.Hash()
	if !d.pools.hasPolicy(hash) {
		return nil, notPooled("no pool keeps sandboxes of policy %s", p.Name)
	}
	if err := checkVars(c.Vars); err != nil {
		return nil, notPooled("%v", err)
	}
	cfg := sandbox.SessionConfig{ID: id, Policy: p, Vars: c.Vars, OneShot: true}
	defer d.rt.Changing()()
	d.mu.Lock()
	_, taken := d.sessions[id]
	d.mu.Unlock()
	if taken {
		return nil, fmt.Errorf("%w: %s", sandbox.ErrSessionExists, id)
	}
	start := time.Now()
	s, err := d.claim(cfg, hash)
	var failed *claimError
	switch {
	case errors.As(err, &failed):
		logrus.Warnf("one-shot run %s: %v", id, err)
		d.audit.Write(sandbox.AuditRecord{Event: "pool.claim-failed", Session: id, Policy: p.Name, Error: failed.err.Error()})
		return nil, notPooled("claiming a ready sandbox failed: %v", failed.err)
	case err != nil:
		return nil, notPooled("%v", err)
	case s == nil:
		return nil, notPooled("the pool of policy %s has no sandbox of these folders ready", p.Name)
	}
	logrus.Debugf("one-shot run %s: claimed %s in %s", id, s.Container, time.Since(start))
	ds := &daemonSession{Session: s, oneShot: true}
	d.mu.Lock()
	d.sessions[id] = ds
	d.mu.Unlock()
	return ds, nil
}
