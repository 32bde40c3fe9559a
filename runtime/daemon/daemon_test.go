package daemon

import (
	"testing"
	"time"
)

func TestRetryDelay(t *testing.T) {
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 9: 256 * time.Second, 10: maxRetryDelay, 64: maxRetryDelay, 1000: maxRetryDelay} {
		if got := retryDelay(n); got != want {
			t.Errorf("retryDelay(%d) = %s, want %s", n, got, want)
		}
	}
}
