package daemon

import (
	"errors"
	"fmt"
	"sync"

	"github.com/sirupsen/logrus"

	"github.com/warden-sandbox/warden/runtime/sandbox"
)

// Claims from a warm pool. A claim needs the spec a cold start of the
// session would use: its key picks the pooled sandbox, its late mounts
// are what the claim binds, and generating it again on every claim is
// what keeps a host that changed since the pool started (a denied folder
// made meanwhile, a program installed) out of a pooled sandbox. That
// generation is most of a claim's time (~2 ms of a one-shot run's ~7).
//
// So a claim of the same policy and folders as an earlier one starts
// with the spec that one made, and generates the fresh spec beside it,
// on the other CPU. The claim is kept only if the fresh spec is the same
// (sandbox.ClaimSpec.Same); otherwise the claimed sandbox is discarded,
// and the claim made again with the fresh spec. The check comes before
// the claimed sandbox takes the session's name (the check of
// sandbox.Runtime.ClaimPooled): no command runs in a sandbox claimed on a
// stale spec, and none becomes a session, even for a daemon killed
// meanwhile.

// claimError is a claim that failed: its sandbox is gone.
type claimError struct {
	container string
	err       error
}

func (e *claimError) Error() string {
	return fmt.Sprintf("claiming pooled container %s: %v", e.container, e.err)
}
func (e *claimError) Unwrap() error { return e.err }

// maxGuesses bounds the claim specs kept, one per policy and folders
// (~0.1 MiB each).
const maxGuesses = 32

// guesses are the claim specs of the latest claims, by what they were
// made from.
type guesses struct {
	mu   sync.Mutex
	last map[string]*sandbox.ClaimSpec
}

func guessKey(hash string, cfg sandbox.SessionConfig) string {
	v := cfg.Vars
	return fmt.Sprintf("%s\x00%q\x00%q\x00%q\x00%q\x00%d:%d", hash, v.SkillDir, v.WorkDir, v.DataDir, v.Home, cfg.Identity.UID, cfg.Identity.GID)
}

func (g *guesses) get(key string) *sandbox.ClaimSpec {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.last[key]
}

func (g *guesses) put(key string, cs *sandbox.ClaimSpec) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.last == nil {
		g.last = map[string]*sandbox.ClaimSpec{}
	}
	if _, ok := g.last[key]; !ok && len(g.last) >= maxGuesses {
		for other := range g.last { // any one: the next claim of it generates its spec again
			delete(g.last, other)
			break
		}
	}
	g.last[key] = cs
}

func (g *guesses) drop(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.last, key)
}

// errStale refuses a claim made on a spec the fresh one is not Same as.
var errStale = errors.New("the host changed since the claim spec was made")

// claim makes cfg's session of a ready sandbox of the pool that serves
// it (policy hash). It returns nil and no error when no sandbox of cfg's
// folders is ready, a *claimError when the claim failed, and any other
// error when the session's spec could not be generated.
func (d *Daemon) claim(cfg sandbox.SessionConfig, hash string) (*sandbox.Session, error) {
	key := guessKey(hash, cfg)
	guess := d.guesses.get(key)
	if guess == nil {
		cs, err := d.rt.NewClaimSpec(cfg)
		if err != nil {
			return nil, err
		}
		d.guesses.put(key, cs)
		return d.claimWith(cfg, hash, cs, nil)
	}
	type generated struct {
		cs  *sandbox.ClaimSpec
		err error
	}
	fresh := make(chan generated, 1)
	go func() {
		cs, err := d.rt.NewClaimSpec(cfg)
		fresh <- generated{cs, err}
	}()
	var f generated
	waited := false
	wait := func() generated {
		if !waited {
			f, waited = <-fresh, true
		}
		return f
	}
	s, err := d.claimWith(cfg, hash, guess, func() error {
		if f := wait(); f.err != nil || !f.cs.Same(guess) {
			return errStale
		}
		return nil
	})
	f = wait()
	if f.err != nil {
		d.guesses.drop(key)
		return nil, f.err // no session: the check refused it
	}
	d.guesses.put(key, f.cs)
	if f.cs.Same(guess) {
		return s, err // what the fresh spec would have done, no sandbox or a failed claim included
	}
	logrus.Debugf("session %s: the host changed since the last claim of its policy and folders; claiming again", cfg.ID)
	return d.claimWith(cfg, hash, f.cs, nil)
}

// claimWith claims a ready sandbox with the claim spec cs; check is
// ClaimPooled's.
func (d *Daemon) claimWith(cfg sandbox.SessionConfig, hash string, cs *sandbox.ClaimSpec, check func() error) (*sandbox.Session, error) {
	pc := d.pools.take(cs.Key(), hash)
	if pc == nil {
		return nil, nil
	}
	s, err := d.rt.ClaimPooled(pc, cfg, cs, check)
	d.pools.claimed(pc, err == nil)
	if err != nil {
		return nil, &claimError{container: pc.ID, err: err}
	}
	return s, nil
}
