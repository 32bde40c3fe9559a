package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/runtime/internal/protocol"
	"github.com/warden-sandbox/warden/runtime/sandbox"
	"github.com/warden-sandbox/warden/spec"
)

// PoolRequest configures a warm pool: the policy files it keeps
// containers for (merged when several), their $SKILL_DIR and $HOME, and how
// many containers it keeps ready.
type PoolRequest = protocol.PoolRequest

// PoolInfo is one pool's line in `pool status`.
type PoolInfo = protocol.PoolInfo

// MaxPoolSize bounds one pool.
const MaxPoolSize = 1000

// pool keeps Size containers ready for one policy.
type pool struct {
	PoolRequest
	name       string // the files, joined: a pool's identity
	policy     *policies.Policy
	hash       string // policy's Hash, made once: a claim compares it
	policyText []byte // the files' content when the key was made
	key        string
	ready      []*sandbox.Pooled
	refilling  int
	hits       int
	misses     int
	err        string
	// A sandbox that cannot start is retried less and less often:
	// failures in a row, the time of the next try, and how many starts
	// ended (for a fill waiting on its first).
	failures int
	retryAt  time.Time
	attempts int
}

// maxRetryDelay bounds the wait between the failed starts of a pool.
const maxRetryDelay = 5 * time.Minute

// retryDelay is the wait after the n-th failed start in a row: 1 s, then
// doubling up to maxRetryDelay.
func retryDelay(n int) time.Duration {
	if n > 9 {
		return maxRetryDelay
	}
	return min(time.Second<<(n-1), maxRetryDelay)
}

// pools is the daemon's set of warm pools. Its lock is never held while a
// container starts or stops.
type pools struct {
	rt   *sandbox.Runtime
	kick chan struct{}

	mu       sync.Mutex
	byName   map[string]*pool
	starting map[string]bool // container ids being started or claimed
	// saveMu keeps a change's save and its taking effect together, so
	// pools.json always lists what the pools are.
	saveMu sync.Mutex
	// saved is what pools.json listed when the daemon started (load).
	saved []PoolRequest
}

func newPools(rt *sandbox.Runtime) *pools {
	return &pools{rt: rt, kick: make(chan struct{}, 1), byName: map[string]*pool{}, starting: map[string]bool{}}
}

func poolName(files []string) string { return strings.Join(files, ":") }

// statePath keeps the pools `pool fill` configured, so a restarted daemon
// keeps them.
func (ps *pools) statePath() string { return filepath.Join(ps.rt.PoolDir(), "pools.json") }

func (ps *pools) wake() {
	select {
	case ps.kick <- struct{}{}:
	default:
	}
}

// set creates or resizes a pool. The policy is loaded now, so a bad file is
// an error for the caller and changes nothing; so is a pools.json that
// cannot be written (a full disk): a pool a restarted daemon would not
// know is not made.
func (ps *pools) set(req PoolRequest) error {
	return ps.apply(req, true)
}

func (ps *pools) apply(req PoolRequest, persist bool) error {
	if req.Size < 0 || req.Size > MaxPoolSize {
		return fmt.Errorf("pool size %d: use 0 to %d", req.Size, MaxPoolSize)
	}
	if len(req.Files) == 0 {
		return errors.New("pool: no policy file given")
	}
	for i, f := range req.Files {
		if !filepath.IsAbs(f) {
			return fmt.Errorf("pool: policy file %q must be an absolute path", f)
		}
		req.Files[i] = filepath.Clean(f)
	}
	p, text, err := loadPoolPolicy(req.Files)
	if err != nil {
		return err
	}
	key, err := ps.rt.PoolKey(p, req.Vars)
	if err != nil {
		return err
	}
	name, hash := poolName(req.Files), p.Hash()
	ps.saveMu.Lock()
	defer ps.saveMu.Unlock()
	if persist {
		if err := ps.save(name, &req); err != nil {
			return err
		}
	}
	ps.mu.Lock()
	pl, ok := ps.byName[name]
	if !ok {
		pl = &pool{name: name}
		ps.byName[name] = pl
	}
	var retired []*sandbox.Pooled
	if pl.key != key {
		retired, pl.ready = pl.ready, nil
	}
	pl.PoolRequest, pl.policy, pl.hash, pl.policyText, pl.key, pl.err = req, p, hash, text, key, ""
	pl.failures, pl.retryAt = 0, time.Time{} // a fill tries at once
	for len(pl.ready) > req.Size {
		retired = append(retired, pl.ready[len(pl.ready)-1])
		pl.ready = pl.ready[:len(pl.ready)-1]
	}
	ps.mu.Unlock()
	ps.destroy(retired)
	ps.wake()
	return nil
}

// loadPoolPolicy reads and merges a pool's policy files.
func loadPoolPolicy(files []string) (*policies.Policy, []byte, error) {
	var all []*policies.Policy
	var text []byte
	for _, f := range files {
		data, err := policies.ReadFile(f, "pool policy", policies.MaxPolicyFile)
		if err != nil {
			return nil, nil, err
		}
		p, err := policies.Parse(f, data)
		if err != nil {
			return nil, nil, err
		}
		all = append(all, p)
		text = append(append(text, data...), 0)
	}
	if len(all) == 1 {
		return all[0], text, nil
	}
	p, err := policies.Merge(all...)
	return p, text, err
}

func (ps *pools) has(name string) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.byName[name] != nil
}

func (ps *pools) attempts(name string) int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if pl := ps.byName[name]; pl != nil {
		return pl.attempts
	}
	return 0
}

// firstStart waits, for a fill that left its pool with nothing ready, for
// the next start to end, and returns its error: a sandbox that cannot
// start fails the fill instead of a pool retrying in the background.
func (ps *pools) firstStart(name string, attempts int) error {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		ps.mu.Lock()
		pl := ps.byName[name]
		if pl == nil || pl.Size == 0 || len(pl.ready) > 0 {
			ps.mu.Unlock()
			return nil
		}
		ended, err := pl.attempts > attempts, pl.err
		ps.mu.Unlock()
		if ended && err != "" {
			return fmt.Errorf("pool %s: the first sandbox did not start: %s", name, err)
		}
	}
	return nil // still starting: the pool goes on, as pool status shows
}

// drain removes a pool (every pool when name is empty) and its ready
// containers. Sessions already claimed from it are not touched.
func (ps *pools) drain(name string) error {
	ps.saveMu.Lock()
	ps.mu.Lock()
	var retired []*sandbox.Pooled
	var drained []*pool
	for n, pl := range ps.byName {
		if name == "" || n == name {
			drained = append(drained, pl)
			retired = append(retired, pl.ready...)
			pl.ready = nil
			delete(ps.byName, n)
		}
	}
	ps.mu.Unlock()
	if name != "" && len(drained) == 0 {
		ps.saveMu.Unlock()
		return fmt.Errorf("no pool for %s; see `warden pool status`", name)
	}
	err := ps.destroy(retired)
	// Saved after the containers are gone, which frees room on a full
	// disk; a save that fails still says so.
	if serr := ps.save("", nil); serr != nil {
		err = errors.Join(err, fmt.Errorf("%w; a restarted daemon would fill the drained pools again: free space, then drain again", serr))
	}
	ps.saveMu.Unlock()
	// A container still starting for a drained pool is stopped by its
	// starter; wait for that, so nothing of the pool outlives the drain.
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		ps.mu.Lock()
		busy := 0
		for _, pl := range drained {
			busy += pl.refilling
		}
		ps.mu.Unlock()
		if busy == 0 {
			break
		}
	}
	return err
}

func (ps *pools) destroy(list []*sandbox.Pooled) error {
	var errs []error
	for _, pc := range list {
		pc.Close()
		if err := ps.rt.DestroyPooled(pc.ID); err != nil {
			errs = append(errs, fmt.Errorf("pooled container %s: %w", pc.ID, err))
		}
	}
	return errors.Join(errs...)
}

// take atomically removes a ready container with the key from its pool
// and counts a hit; with none, it counts a miss for the policy's pool.
func (ps *pools) take(key, policyHash string) *sandbox.Pooled {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var missed *pool
	for _, name := range ps.names() {
		pl := ps.byName[name]
		if pl.key == key && len(pl.ready) > 0 {
			pc := pl.ready[0]
			pl.ready = pl.ready[1:]
			pl.hits++
			ps.starting[pc.ID] = true
			return pc
		}
		if missed == nil && pl.policy != nil && pl.hash == policyHash {
			missed = pl
		}
	}
	if missed != nil {
		missed.misses++
	}
	return nil
}

// hasPolicy reports whether a pool keeps sandboxes of the policy with
// this hash (for whichever folders).
func (ps *pools) hasPolicy(hash string) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, pl := range ps.byName {
		if pl.policy != nil && pl.hash == hash {
			return true
		}
	}
	return false
}

// refillGrace is how long after a claim the refill waits: a new session's
// first command usually follows its create at once, and a refill (a
// container start) running beside it slows both on a small machine.
const refillGrace = 30 * time.Millisecond

// claimed ends a claim of pc, and counts a failed one as a miss. The
// refill starts only refillGrace later, so it does not compete with the
// claim nor with the session's first command.
func (ps *pools) claimed(pc *sandbox.Pooled, ok bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	defer time.AfterFunc(refillGrace, ps.wake)
	delete(ps.starting, pc.ID)
	if ok {
		return
	}
	for _, pl := range ps.byName {
		if pl.key == pc.Key {
			pl.hits--
			pl.misses++
			return
		}
	}
}

func (ps *pools) empty() bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return len(ps.byName) == 0
}

func (ps *pools) names() []string {
	names := make([]string, 0, len(ps.byName))
	for n := range ps.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// status reports every pool; claimed counts the live sessions per key.
func (ps *pools) status(claimed map[string]int) []PoolInfo {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := []PoolInfo{}
	for _, name := range ps.names() {
		pl := ps.byName[name]
		info := PoolInfo{Files: pl.Files, Key: pl.key, Size: pl.Size, Ready: len(pl.ready), Claimed: claimed[pl.key],
			Refilling: pl.refilling, Hits: pl.hits, Misses: pl.misses, Error: pl.err}
		if pl.failures > 0 && pl.err != "" {
			info.Error = fmt.Sprintf("%s (%d failed starts in a row; next try in %s)", pl.err, pl.failures,
				max(time.Until(pl.retryAt), 0).Round(time.Second))
		}
		if pl.policy != nil {
			info.Policy, info.PolicyHash = pl.policy.Name, pl.hash
		}
		out = append(out, info)
	}
	return out
}

// live adds every container id the pools own to ids.
func (ps *pools) live(ids map[string]bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for id := range ps.starting {
		ids[id] = true
	}
	for _, pl := range ps.byName {
		for _, pc := range pl.ready {
			ids[pc.ID] = true
		}
	}
}

// loop keeps every pool full and follows changes of its policy files.
func (ps *pools) loop(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		ps.refresh()
		ps.refill(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-ps.kick:
		}
	}
}

// refresh re-reads the pools' policy files: a pool whose policy changed
// replaces its ready containers; one whose file is gone or broken keeps
// none until it is fixed.
func (ps *pools) refresh() {
	ps.mu.Lock()
	type check struct {
		pl    *pool
		files []string
		vars  policies.Vars
		text  []byte
	}
	var checks []check
	for _, pl := range ps.byName {
		checks = append(checks, check{pl, pl.Files, pl.Vars, pl.policyText})
	}
	ps.mu.Unlock()
	for _, c := range checks {
		p, text, err := loadPoolPolicy(c.files)
		if err == nil && bytes.Equal(text, c.text) {
			continue
		}
		key, hash := "", ""
		if err == nil {
			key, err = ps.rt.PoolKey(p, c.vars)
			hash = p.Hash()
		}
		ps.mu.Lock()
		var retired []*sandbox.Pooled
		if ps.byName[c.pl.name] == c.pl {
			retired, c.pl.ready = c.pl.ready, nil
			c.pl.policy, c.pl.hash, c.pl.policyText, c.pl.key, c.pl.err = p, hash, text, key, ""
			c.pl.failures, c.pl.retryAt = 0, time.Time{}
			if err != nil {
				c.pl.policy, c.pl.hash, c.pl.err = nil, "", err.Error()
			}
		}
		ps.mu.Unlock()
		if len(retired) > 0 {
			logrus.Infof("pool %s: policy changed, replacing %d container(s)", c.pl.name, len(retired))
		}
		ps.destroy(retired)
	}
}

// refill starts containers until every pool holds its size, one at a time
// per pool so a large fill does not starve the sessions being served.
func (ps *pools) refill(ctx context.Context) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, pl := range ps.byName {
		if pl.policy == nil || pl.refilling > 0 || len(pl.ready) >= pl.Size || time.Now().Before(pl.retryAt) {
			continue
		}
		pl.refilling++
		id := sandbox.NewPoolID()
		ps.starting[id] = true
		go ps.startOne(ctx, pl, id)
	}
}

func (ps *pools) startOne(ctx context.Context, pl *pool, id string) {
	for {
		ps.mu.Lock()
		p, vars, key := pl.policy, pl.Vars, pl.key
		ps.mu.Unlock()
		changed := ps.rt.Changing()
		pc, err := ps.rt.StartPooled(id, p, vars)
		ps.mu.Lock()
		delete(ps.starting, id)
		changed()
		current := ps.byName[pl.name] == pl && pl.policy != nil
		pl.attempts++
		if err == nil && current && key == pl.key && pc.Key != key {
			// The pool did not change, yet what it starts does not match
			// it (its skill folder moved away): a failure, backed off like
			// any other, not a start to throw away and repeat at once.
			ps.mu.Unlock()
			pc.Close()
			ps.rt.DestroyPooled(pc.ID)
			ps.mu.Lock()
			err = errors.New("a sandbox it started no longer matches the pool (its policy file or folders changed since `pool fill`); fill it again")
		}
		switch {
		case err != nil:
			pl.failures++
			pl.retryAt = time.Now().Add(retryDelay(pl.failures))
			pl.err = err.Error()
		case !current || pc.Key != key || pc.Key != pl.key || len(pl.ready) >= pl.Size:
			ps.mu.Unlock()
			pc.Close()
			ps.rt.DestroyPooled(pc.ID)
			ps.mu.Lock()
		default:
			pl.ready = append(pl.ready, pc)
			pl.err, pl.failures, pl.retryAt = "", 0, time.Time{}
		}
		more := err == nil && current && ps.byName[pl.name] == pl && len(pl.ready) < pl.Size && ctx.Err() == nil
		if !more {
			pl.refilling--
			failures, delay := pl.failures, time.Until(pl.retryAt).Round(time.Second)
			ps.mu.Unlock()
			if err != nil {
				logrus.Warnf("pool %s: start %d failed in a row, next try in %s: %v", pl.name, failures, delay, err)
			}
			return
		}
		id = sandbox.NewPoolID()
		ps.starting[id] = true
		ps.mu.Unlock()
	}
}

// savedPools is pools.json.
type savedPools struct {
	Pools []PoolRequest `json:"pools"`
}

// save writes pools.json: the pools as they are, with the pool name set
// to req (or, with req nil, as they are). The caller holds saveMu.
func (ps *pools) save(name string, req *PoolRequest) error {
	ps.mu.Lock()
	var sp savedPools
	for _, n := range ps.names() {
		if n != name {
			sp.Pools = append(sp.Pools, ps.byName[n].PoolRequest)
		}
	}
	ps.mu.Unlock()
	if req != nil {
		sp.Pools = append(sp.Pools, *req)
		sort.Slice(sp.Pools, func(i, j int) bool { return poolName(sp.Pools[i].Files) < poolName(sp.Pools[j].Files) })
	}
	data, err := json.MarshalIndent(sp, "", "  ")
	if err != nil {
		return err
	}
	if err := ps.rt.MakePoolDir(); err != nil {
		return fmt.Errorf("pool state: %w", err)
	}
	if err := sandbox.WriteStateFile(ps.statePath(), data); err != nil {
		return fmt.Errorf("pool state: %w", err)
	}
	return nil
}

// load reads pools.json, the pools `pool fill` set up. One that cannot be
// read (garbled, or not a regular file) is an error that stops the
// daemon from starting: starting without it would forget every pool and
// reap their ready sandboxes.
func (ps *pools) load() error {
	data, err := sandbox.ReadStateFile(ps.statePath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pool state: %w", err)
	}
	var sp savedPools
	if err := json.Unmarshal(data, &sp); err != nil {
		return fmt.Errorf("pool state %s is damaged (%v); it lists the pools `warden pool fill` set up: repair it, or remove it to start without them and fill them again", ps.statePath(), err)
	}
	ps.saved = sp.Pools
	return nil
}

// adopt restores the pools of pools.json and of the configuration file,
// re-adopts the ready containers that still match one and reaps the rest:
// containers whose claim was cut short, whose sandbox died, or whose
// policy changed while no daemon watched.
func (ps *pools) adopt(config []PoolRequest, audit func(id string, err error)) {
	for _, r := range ps.saved {
		if err := ps.apply(r, false); err != nil { // pools.json says it already
			logrus.Warnf("pool %s: %v", poolName(r.Files), err)
		}
	}
	for _, r := range config {
		if err := ps.apply(r, false); err != nil {
			logrus.Warnf("pool %s: %v", poolName(r.Files), err)
		}
	}
	if len(config) > 0 { // the configuration's pools join pools.json
		ps.saveMu.Lock()
		if err := ps.save("", nil); err != nil {
			logrus.Warnf("%v; the pools of the configuration file run all the same", err)
		}
		ps.saveMu.Unlock()
	}
	for _, id := range ps.rt.PooledIDs() {
		pc, err := ps.rt.LoadPooled(id)
		if err == nil {
			err = ps.readopt(pc)
		}
		if err != nil {
			if pc != nil {
				pc.Close()
			}
			logrus.Warnf("reaping pooled container %s: %v", id, err)
			ps.rt.DestroyPooled(id)
			audit(id, err)
			continue
		}
		logrus.Infof("re-adopted pooled container %s", id)
	}
}

func (ps *pools) readopt(pc *sandbox.Pooled) error {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, name := range ps.names() {
		pl := ps.byName[name]
		if pl.key == pc.Key && len(pl.ready) < pl.Size {
			pl.ready = append(pl.ready, pc)
			return nil
		}
	}
	return errors.New("no pool wants it (its policy changed, or the pool was drained or shrunk)")
}

// gc removes pooled containers and folders the pools do not own.
func (ps *pools) gc(live map[string]bool) ([]string, error) {
	var removed []string
	var errs []error
	for _, id := range ps.rt.PooledIDs() {
		if live[id] {
			continue
		}
		if err := ps.rt.DestroyPooled(id); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, "pooled container "+id)
	}
	return removed, errors.Join(errs...)
}

// AdoptPools starts the pools of the configuration file and of the last
// `pool fill`s, re-adopting the ready containers a previous daemon left
// and reaping the rest. Call it before Serve.
func (d *Daemon) AdoptPools(cfg *Config) {
	var config []PoolRequest
	if cfg != nil {
		config = cfg.Pools
	}
	d.pools.adopt(config, func(id string, err error) {
		d.audit.Write(sandbox.AuditRecord{Event: "pool.reap", Session: id, Error: err.Error()})
	})
	d.reapOrphans()
}

// reapOrphans removes the containers, cgroups and uid leases of the root
// that no session or pool owns once both are adopted: what a previous daemon
// lost track of (a pooled container whose folder is gone, say). Nothing
// of this daemon's is under way yet.
func (d *Daemon) reapOrphans() {
	owned := map[string]bool{}
	d.mu.Lock()
	for _, s := range d.sessions {
		owned[s.ContainerID()] = true
	}
	d.mu.Unlock()
	// A session folder this daemon did not adopt (another process holds
	// it: a warden do, a Go program) still owns its container, which for
	// a claimed session is a pool-… one.
	if entries, err := os.ReadDir(filepath.Dir(d.rt.SessionDir("x"))); err == nil {
		for _, e := range entries {
			if sandbox.CheckID(e.Name()) == nil {
				owned[d.rt.SessionContainer(e.Name())] = true
			}
		}
	}
	d.pools.live(owned)
	for _, id := range d.rt.Orphans(owned) {
		err := d.rt.RemoveContainer(id)
		rec := sandbox.AuditRecord{Event: "container.reap", Session: id}
		if err != nil {
			rec.Error = err.Error()
			logrus.Warnf("reaping container %s, which no session or pool owns: %v", id, err)
		} else {
			logrus.Warnf("reaped container %s, which no session or pool owned", id)
		}
		d.audit.Write(rec)
	}
	// A uid lease whose owner is gone is freed too: a daemon killed
	// between a lease and its owner's folder, or before the lease named
	// its owner, leaves one that no owner's removal would ever free.
	for _, lease := range d.rt.GCLeases(owned) {
		logrus.Warnf("freed %s, which no session or pool owned", lease)
	}
}

// createSession claims a ready container from a warm pool when one can
// serve the session, and starts the sandbox cold otherwise: an empty pool,
// or a claim that fails, is never the caller's error.
func (d *Daemon) createSession(cfg sandbox.SessionConfig) (*sandbox.Session, error) {
	if d.pools.empty() {
		return d.rt.Create(cfg)
	}
	start := time.Now()
	s, err := d.claim(cfg, cfg.Policy.Hash())
	var failed *claimError
	switch {
	case s != nil:
		logrus.Debugf("session %s: claimed %s in %s", cfg.ID, s.Container, time.Since(start))
		return s, nil
	case errors.As(err, &failed):
		logrus.Warnf("session %s: %v; starting cold", cfg.ID, err)
		d.audit.Write(sandbox.AuditRecord{Event: "pool.claim-failed", Session: cfg.ID, Policy: cfg.Policy.Name, Error: failed.err.Error()})
	case err != nil:
		return nil, err
	}
	return d.rt.Create(cfg)
}

func (d *Daemon) poolOp(op string, req *PoolRequest) ([]PoolInfo, error) {
	switch op {
	case "pool.fill":
		if req == nil {
			return nil, kindf(spec.ErrInvalid, "pool.fill: no pool given")
		}
		existed := d.pools.has(poolName(req.Files))
		attempts := d.pools.attempts(poolName(req.Files))
		if err := d.pools.set(*req); err != nil {
			return nil, err
		}
		if err := d.pools.firstStart(poolName(req.Files), attempts); err != nil {
			if !existed {
				d.pools.drain(poolName(req.Files))
			}
			return nil, err
		}
		d.audit.Write(sandbox.AuditRecord{Event: "pool.fill", Policy: poolName(req.Files)})
	case "pool.drain":
		name := ""
		if req != nil {
			name = poolName(req.Files)
		}
		if err := d.pools.drain(name); err != nil {
			return nil, err
		}
		d.audit.Write(sandbox.AuditRecord{Event: "pool.drain", Policy: name})
	}
	claimed := map[string]int{}
	d.mu.Lock()
	for _, s := range d.sessions {
		if s.Pool != "" {
			claimed[s.Pool]++
		}
	}
	d.mu.Unlock()
	return d.pools.status(claimed), nil
}
