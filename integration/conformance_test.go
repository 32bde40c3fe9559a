package integration

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// conformanceRuntimes are scripts/conformance.sh's columns, in pairs: a
// face of warden, then its reference.
var conformanceRuntimes = []string{"warden", "runc", "warden-gvisor", "runsc"}

const (
	conformanceDoc   = "../docs/conformance.md"
	conformanceBegin = "<!-- conformance:begin: written by `make conformance UPDATE=1` from a run; each difference's reason is kept by hand -->"
	conformanceEnd   = "<!-- conformance:end -->"
	// conformanceTries is how often a program whose counts differ from the
	// doc's row runs in all: some of the programs race with a loaded
	// machine (docs/conformance.md names them).
	conformanceTries = 3
	// racyTries is the same for a program the doc says races: its race
	// (runsc's, under either gVisor runtime) decides each run's counts,
	// and one in two runs or more may end unequal within the pair. Each
	// try of one program takes ~10 s.
	racyTries = 10
)

// TestConformance runs scripts/conformance.sh as docs/conformance.md
// shows it: runtime-tools' validation programs against warden beside runc
// and warden's gVisor engine beside runsc. Each program's counts must be
// the doc's (a program that differs runs again, up to conformanceTries in
// all), and every program whose counts differ within a pair must have
// its reason in the doc.
func TestConformance(t *testing.T) {
	runsc := os.Getenv("WARDEN_RUNSC")
	if runsc == "" {
		t.Fatal("TestConformance needs WARDEN_RUNSC (runsc for the gVisor pair): run `make conformance`")
	}
	start := time.Now()
	data, err := os.ReadFile(conformanceDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	docRows, reasons, racy, err := conformanceSection(doc)
	if err != nil {
		t.Fatal(err)
	}
	rows := runConformance(t, runsc, "all", nil)
	if len(rows) < 50 {
		t.Fatalf("the script reported %d programs; runtime-tools v0.9.0 has 58", len(rows))
	}
	t.Logf("first run: %s", time.Since(start).Round(time.Second))
	// A program runs again when its counts differ from the doc's row or,
	// when the run rewrites the doc, within a pair: a difference kept is
	// one seen in every try. A program the doc says races needs only the
	// same counts within each pair (its row keeps the counts of the run
	// that wrote it).
	settled := func(name string, r []string) bool {
		if *updateDocs || racy[name] != "" {
			return len(pairDifferences(r)) == 0
		}
		return slices.Equal(r, docRows[name])
	}
	for try := 2; try <= racyTries; try++ {
		var again []string
		for name, r := range rows {
			if !settled(name, r) && (try <= conformanceTries || racy[name] != "") {
				again = append(again, name)
			}
		}
		if len(again) == 0 {
			break
		}
		slices.Sort(again)
		t.Logf("running again (try %d; %d for a program that races, else %d): %s", try, racyTries, conformanceTries, strings.Join(again, " "))
		for name, r := range runConformance(t, runsc, fmt.Sprintf("try%d", try), again) {
			if settled(name, r) {
				rows[name] = r
			}
		}
	}
	if !*updateDocs {
		for name, r := range rows {
			if racy[name] != "" && docRows[name] != nil && len(pairDifferences(r)) == 0 {
				rows[name] = docRows[name]
			}
		}
	}
	section := renderConformanceSection(rows, reasons, racy)
	if *updateDocs {
		// The page as it is now: it may have been edited during the run.
		if data, err = os.ReadFile(conformanceDoc); err != nil {
			t.Fatal(err)
		}
		doc = string(data)
	}
	begin, end := strings.Index(doc, conformanceBegin), strings.Index(doc, conformanceEnd)
	if begin < 0 || end < begin {
		t.Fatalf("%s has no conformance section (%s ... %s)", conformanceDoc, conformanceBegin, conformanceEnd)
	}
	if *updateDocs {
		doc = doc[:begin] + section + doc[end+len(conformanceEnd):]
		if err := os.WriteFile(conformanceDoc, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	} else if got := doc[begin : end+len(conformanceEnd)]; got != section {
		t.Errorf("docs/conformance.md's table does not match this run (%d tries of a differing program); review and run `make conformance UPDATE=1`:\n%s", conformanceTries, firstLineDiff(section, got))
	}
	for _, d := range conformanceDifferences(rows) {
		if reasons[d] == "" {
			t.Errorf("docs/conformance.md gives no reason why %s differs between %s: write one in its row", d[0], d[1])
		}
	}
	t.Logf("whole run: %s", time.Since(start).Round(time.Second))
}

// runConformance runs the script (for programs, or all of them when nil)
// and returns its counts: program -> "ok/total" per runtime.
func runConformance(t *testing.T, runsc, name string, programs []string) map[string][]string {
	t.Helper()
	// Kept after the test for reading the programs' TAP output (the
	// script's own default place).
	out := filepath.Join(os.TempDir(), "warden-conformance", name)
	if err := os.RemoveAll(out); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "scripts/conformance.sh", out)
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "WARDEN="+wardenBinary, "RUNC="+runcBinary, "RUNSC="+runsc, "PROGRAMS="+strings.Join(programs, " "))
	cmd.WaitDelay = 10 * time.Second
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("scripts/conformance.sh did not finish within 45 minutes:\n%s", lastLines(log.String(), 20))
	}
	if err != nil {
		t.Fatalf("scripts/conformance.sh: %v\n%s", err, lastLines(log.String(), 30))
	}
	t.Logf("the programs' TAP output: %s", out)
	for _, line := range strings.Split(log.String(), "\n") {
		if strings.HasPrefix(line, "conformance: ") {
			t.Log(line) // containers a program left behind, deleted by the script
		}
		if strings.Contains(line, "not removing it") {
			t.Errorf("scripts/conformance.sh left mounts behind: %s", line)
		}
	}
	f, err := os.Open(filepath.Join(out, "summary.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows := map[string][]string{}
	sc := bufio.NewScanner(f)
	for n := 0; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		if n == 0 {
			var cols []string
			for i := 1; i+1 < len(fields); i += 2 {
				cols = append(cols, fields[i])
			}
			if !slices.Equal(cols, conformanceRuntimes) {
				t.Fatalf("summary.txt's columns %q, want %q", cols, conformanceRuntimes)
			}
			continue
		}
		if len(fields) != 1+len(conformanceRuntimes) {
			t.Fatalf("summary.txt: line %q", sc.Text())
		}
		if fields[0] != "TOTAL" {
			rows[fields[0]] = fields[1:]
		}
	}
	if len(programs) > 0 && len(rows) != len(programs) {
		t.Fatalf("the script reported %d programs of the %d asked for", len(rows), len(programs))
	}
	return rows
}

// conformanceDifferences lists the programs whose counts differ within a
// pair, as {program, "A and B"}, sorted.
func conformanceDifferences(rows map[string][]string) [][2]string {
	var out [][2]string
	for name, r := range rows {
		for _, pair := range pairDifferences(r) {
			out = append(out, [2]string{name, pair})
		}
	}
	slices.SortFunc(out, func(a, b [2]string) int { return strings.Compare(a[0]+a[1], b[0]+b[1]) })
	return out
}

// pairDifferences names the pairs ("A and B") whose counts in row differ.
func pairDifferences(row []string) []string {
	var out []string
	for i := 0; i+1 < len(conformanceRuntimes); i += 2 {
		if row[i] != row[i+1] {
			out = append(out, conformanceRuntimes[i]+" and "+conformanceRuntimes[i+1])
		}
	}
	return out
}

// conformanceSection reads the doc's counts (program -> counts), its
// reasons ({program, pair} -> why) and the programs that race (program ->
// why).
func conformanceSection(doc string) (rows map[string][]string, reasons map[[2]string]string, racy map[string]string, err error) {
	begin, end := strings.Index(doc, conformanceBegin), strings.Index(doc, conformanceEnd)
	if begin < 0 || end < begin {
		return nil, nil, nil, fmt.Errorf("%s has no conformance section (%s ... %s)", conformanceDoc, conformanceBegin, conformanceEnd)
	}
	rows, reasons, racy = map[string][]string{}, map[[2]string]string{}, map[string]string{}
	table := ""
	for _, line := range strings.Split(doc[begin:end], "\n") {
		switch {
		case strings.HasPrefix(line, "| program | warden |"):
			table = "counts"
			continue
		case strings.HasPrefix(line, "| program | differs between |"):
			table = "reasons"
			continue
		case strings.HasPrefix(line, "| program | races because |"):
			table = "racy"
			continue
		case !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "|---"):
			continue
		}
		cells := strings.Split(strings.TrimSuffix(strings.TrimPrefix(line, "| "), " |"), " | ")
		switch {
		case table == "counts" && len(cells) == 1+len(conformanceRuntimes):
			name := strings.Trim(cells[0], "*")
			if name != "TOTAL" {
				rows[name] = cells[1:]
			}
		case table == "reasons" && len(cells) == 3:
			reasons[[2]string{cells[0], cells[1]}] = strings.TrimSpace(cells[2])
		case table == "racy" && len(cells) == 2:
			racy[cells[0]] = strings.TrimSpace(cells[1])
		default:
			return nil, nil, nil, fmt.Errorf("%s: conformance table row %q has %d cells", conformanceDoc, line, len(cells))
		}
	}
	return rows, reasons, racy, nil
}

// renderConformanceSection writes the counts per program and in total, the
// programs that differ within a pair, each with the doc's reason, and the
// programs the doc says race.
func renderConformanceSection(rows map[string][]string, reasons map[[2]string]string, racy map[string]string) string {
	var b strings.Builder
	b.WriteString(conformanceBegin + "\n")
	b.WriteString("| program | " + strings.Join(conformanceRuntimes, " | ") + " |\n|---|---|---|---|---|\n")
	names := make([]string, 0, len(rows))
	for name := range rows {
		names = append(names, name)
	}
	slices.Sort(names)
	ok, total := make([]int, len(conformanceRuntimes)), make([]int, len(conformanceRuntimes))
	for _, name := range names {
		fmt.Fprintf(&b, "| %s | %s |\n", name, strings.Join(rows[name], " | "))
		for i, c := range rows[name] {
			var o, n int
			fmt.Sscanf(c, "%d/%d", &o, &n)
			ok[i] += o
			total[i] += n
		}
	}
	b.WriteString("| **TOTAL** |")
	for i := range conformanceRuntimes {
		fmt.Fprintf(&b, " %d/%d |", ok[i], total[i])
	}
	b.WriteString("\n\n| program | differs between | why |\n|---|---|---|\n")
	for _, d := range conformanceDifferences(rows) {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", d[0], d[1], reasons[d])
	}
	b.WriteString("\n| program | races because |\n|---|---|\n")
	names = names[:0]
	for name := range racy {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		fmt.Fprintf(&b, "| %s | %s |\n", name, racy[name])
	}
	b.WriteString(conformanceEnd)
	return b.String()
}
