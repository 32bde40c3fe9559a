package policies

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	kib = 1 << 10
	mib = 1 << 20
	gib = 1 << 30
	tib = 1 << 40
)

// DefaultLimits fill whatever a policy file leaves out of [limits].
var DefaultLimits = Limits{
	Memory:  512 * mib,
	Pids:    128,
	CPU:     1.0,
	Timeout: 60 * time.Second,
	Idle:    15 * time.Minute,
}

// WithDefaults returns l with every zero field taken from DefaultLimits: a
// Policy built in Go may leave out any limit, as a file may leave it out
// of [limits]. Zero is never a valid limit, so it cannot mean anything else.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits
	if l.Memory == 0 {
		l.Memory = d.Memory
	}
	if l.Pids == 0 {
		l.Pids = d.Pids
	}
	if l.CPU == 0 {
		l.CPU = d.CPU
	}
	if l.Timeout == 0 {
		l.Timeout = d.Timeout
	}
	if l.Idle == 0 {
		l.Idle = d.Idle
	}
	return l
}

// Bounds on limits. Pids counts threads as well as processes: a Go program
// starts about 7 threads before main runs, a JVM dozens.
const (
	MinMemory  = 8 * mib
	MaxMemory  = 1 * tib
	MinPids    = 1
	MaxPids    = 65536
	MinCPU     = 0.01
	MaxCPU     = 1024
	MinTimeout = time.Millisecond
	MaxTimeout = 24 * time.Hour
	MinIdle    = time.Second
	MaxIdle    = 168 * time.Hour
)

// sizeUnits: binary units are the canonical ones; KB/MB/GB/TB are accepted
// as powers of 1000, because people write them and mean it.
var sizeUnits = map[string]float64{
	"B":   1,
	"KiB": kib, "MiB": mib, "GiB": gib, "TiB": tib,
	"KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
}

var sizeRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)([A-Za-z]+)$`) })

// parseSize reads "256MiB", "1.5GiB", "100MB" or "4096B".
func parseSize(s string) (int64, error) {
	m := sizeRE().FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("%q is not a size; write a number and a unit, e.g. \"256MiB\" (units B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)", s)
	}
	unit, ok := sizeUnits[m[2]]
	if !ok {
		return 0, fmt.Errorf("%q has unknown unit %q; use B, KiB, MiB, GiB, TiB (or KB, MB, GB, TB for powers of 1000)", s, m[2])
	}
	f, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size: %v", s, err)
	}
	f *= unit
	if f > MaxMemory*2 || math.IsInf(f, 0) {
		return math.MaxInt64, nil // caught by the bound check with a clear message
	}
	return int64(math.Round(f)), nil
}

// FormatSize prints bytes exactly, in the largest binary unit that
// divides them ("64MiB", "1536KiB", "100B"): what a policy's sizes read
// as everywhere, and what ParseSize reads back.
func FormatSize(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"TiB", tib}, {"GiB", gib}, {"MiB", mib}, {"KiB", kib}} {
		if n != 0 && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

// formatDuration prints "30s", "15m", "1h30m" rather than "1m0s".
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func formatCPU(f float64) string {
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}

func checkMemory(n int64) error {
	if n < MinMemory || n > MaxMemory {
		return fmt.Errorf("%s is out of range; use %s to %s", describeSize(n), FormatSize(MinMemory), FormatSize(MaxMemory))
	}
	return nil
}

func describeSize(n int64) string {
	if n == math.MaxInt64 {
		return "the size"
	}
	return FormatSize(n)
}

func checkPids(n int64) error {
	if n < MinPids || n > MaxPids {
		return fmt.Errorf("%d is out of range; use %d to %d (threads count too)", n, MinPids, MaxPids)
	}
	return nil
}

func checkCPU(f float64) error {
	if math.IsNaN(f) || f < MinCPU || f > MaxCPU {
		return fmt.Errorf("%s is out of range; use %v to %v cores", describeCPU(f), MinCPU, MaxCPU)
	}
	return nil
}

// describeCPU spells infinities and NaN as TOML does, as the file has them.
func describeCPU(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

func parseDuration(s string, lo, hi time.Duration) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration; write e.g. \"30s\", \"15m\", \"1h30m\"", s)
	}
	if err := checkDuration(d, lo, hi); err != nil {
		return 0, err
	}
	return d, nil
}

func checkDuration(d, lo, hi time.Duration) error {
	if d < lo || d > hi {
		return fmt.Errorf("%s is out of range; use %s to %s", formatDuration(d), formatDuration(lo), formatDuration(hi))
	}
	return nil
}

// Checked returns a copy of p whose zero limits are the defaults, or an
// error naming the first field Parse would refuse. A Policy built in Go
// goes through it before it is used.
func (p *Policy) Checked() (*Policy, error) {
	q := *p
	q.Limits = q.Limits.WithDefaults()
	if _, err := q.TOML(); err != nil {
		return nil, err
	}
	return &q, nil
}
