package integration

import (
	"fmt"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/runtime/sandbox"
)

// busyPolicy lets a command spin for the whole benchmark.
const busyPolicy = `name = "busy"
[exec]
allow = ["sh"]
[limits]
timeout = "10m"
`

// BenchmarkFreezeAll: how long `session freeze --all` (the Go client's
// FreezeAll, one daemon call) takes over 100 sessions that each spin a
// shell loop, beside freezing one such session alone; medians over a few
// runs, each thawed (untimed) and left to spin again before the next.
func BenchmarkFreezeAll(b *testing.B) {
	const sessions, runs = 100, 7
	pb := newPoolBench(b)
	defer pb.stop()
	p, err := policies.Parse("busy.toml", []byte(busyPolicy))
	if err != nil {
		b.Fatal(err)
	}
	pb.p = p
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = "busy-" + strconv.Itoa(i)
		if err := pb.create(ids[i]); err != nil {
			b.Fatalf("session %d of %d: %v", i+1, sessions, err)
		}
	}
	spin := sandbox.ExecOptions{Argv: []string{"sh", "-c", "while :; do :; done"}}
	for _, id := range ids {
		go pb.c.Exec(sandbox.SessionConfig{ID: id}, spin) // ends with the session
	}
	deadline := time.Now().Add(time.Minute)
	for spinning(b, pb) < sessions {
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d sessions spin after a minute", spinning(b, pb), sessions)
		}
		time.Sleep(10 * time.Millisecond)
	}

	median := func(f func() (time.Duration, error)) time.Duration {
		var d []time.Duration
		for i := 0; i < runs; i++ {
			time.Sleep(300 * time.Millisecond) // spinning again
			took, err := f()
			if err != nil {
				b.Fatal(err)
			}
			d = append(d, took)
		}
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return d[len(d)/2]
	}
	one := median(func() (time.Duration, error) {
		start := time.Now()
		if err := pb.c.Freeze(ids[0]); err != nil {
			return 0, err
		}
		took := time.Since(start)
		return took, pb.c.Thaw(ids[0])
	})
	all := median(func() (time.Duration, error) {
		start := time.Now()
		frozen, err := pb.c.FreezeAll()
		took := time.Since(start)
		if err == nil && len(frozen) != sessions {
			err = fmt.Errorf("freeze --all froze %d sessions of %d", len(frozen), sessions)
		}
		if err != nil {
			return 0, err
		}
		_, err = pb.c.ThawAll()
		return took, err
	})
	fmt.Printf("\nkill switch (%d runs each, medians; every session spins a shell loop)\n", runs)
	fmt.Printf("freeze one busy session:               %8.2f ms\n", ms(one))
	fmt.Printf("freeze --all over %d busy sessions:   %8.2f ms (%.2f ms a session)\n", sessions, ms(all), ms(all)/sessions)
}

// spinning is how many commands the root's sessions run.
func spinning(b *testing.B, pb *poolBench) int {
	ss, err := pb.c.Sessions()
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, s := range ss {
		n += s.Running
	}
	return n
}
