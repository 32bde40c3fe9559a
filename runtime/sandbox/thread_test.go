package sandbox

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// threads is the process's thread count.
func threads(t *testing.T) int {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if n, ok := strings.CutPrefix(l, "Threads:"); ok {
			c, err := strconv.Atoi(strings.TrimSpace(n))
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
	}
	t.Fatal("no Threads: line in /proc/self/status")
	return 0
}

// TestOnOwnThread: f never runs on the main thread (whose namespaces
// /proc/self shows), its error comes back, and its threads end with it.
// The package pins the main goroutine to the main thread (its init), so
// this holds by that as well; many calls from many goroutines would show
// it if that pin went.
func TestOnOwnThread(t *testing.T) {
	before := threads(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	onMain := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				err := OnOwnThread(func() error {
					if unix.Gettid() == unix.Getpid() {
						mu.Lock()
						onMain++
						mu.Unlock()
					}
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if onMain > 0 {
		t.Fatalf("f ran on the main thread %d times", onMain)
	}
	want := errors.New("from f")
	if err := OnOwnThread(func() error { return want }); err != want {
		t.Fatalf("OnOwnThread returned %v, want f's error", err)
	}
	if after := threads(t); after > before+10 {
		t.Fatalf("threads: %d before, %d after 1600 calls; f's threads must end with it", before, after)
	}
}
