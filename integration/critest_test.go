package integration

import (
	"context"
	"encoding/xml"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

var updateDocs = flag.Bool("update", false, "rewrite the table a doc keeps of this run: docs/kubernetes.md's critest section (TestCritest), docs/conformance.md's (TestConformance)")

// critestHandlers are the CRI runtime handlers critest runs against, in
// order: runc is the reference. The gVisor pair (runsc as its reference,
// and warden on its gVisor engine) joins this list when warden has that
// engine.
var critestHandlers = []string{"runc", "warden", "warden-baseline"}

const (
	critestDoc      = "../docs/kubernetes.md"
	critestBegin    = "<!-- critest:begin: written by `make k8s UPDATE=1` from a run; each row's reason is kept by hand -->"
	critestEnd      = "<!-- critest:end -->"
	failsEverywhere = "every handler"
	failsBaseline   = "baseline policy"
)

// TestCritest runs Kubernetes' CRI validation suite against a private
// containerd for runc, warden without a policy and warden under
// policies/baseline-container.toml. warden without a policy must give
// exactly runc's results; under the baseline every spec that fails must
// be listed with its reason in docs/kubernetes.md.
func TestCritest(t *testing.T) {
	critest, crictl, busybox := os.Getenv("WARDEN_CRITEST"), os.Getenv("WARDEN_CRICTL"), os.Getenv("WARDEN_K8S_BUSYBOX")
	if critest == "" || crictl == "" || busybox == "" {
		t.Fatal("TestCritest needs WARDEN_CRITEST, WARDEN_CRICTL and WARDEN_K8S_BUSYBOX: run `make k8s` (it builds critest and crictl into bin/tools)")
	}
	start := time.Now()
	policy, err := filepath.Abs("../policies/baseline-container.toml")
	if err != nil {
		t.Fatal(err)
	}
	if r := runWarden(t, nil, "policy", "check", policy); r.Exit != 0 {
		t.Fatalf("warden policy check %s: %s", policy, r.Stderr)
	}
	// The way docs/kubernetes.md enforces one policy for a runtime class.
	wrapper := filepath.Join(tempDir(t), "warden-baseline")
	script := fmt.Sprintf("#!/bin/sh\nexec %s --policy %s \"$@\"\n", wardenBinary, policy)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	handlers := map[string]string{"runc": runcBinary, "warden": wardenBinary, "warden-baseline": wrapper}
	e := startCRI(t, crictl, busybox, handlers)
	t.Logf("containerd, registry and images ready in %s", time.Since(start).Round(time.Second))

	results := map[string]map[string]specResult{}
	for _, h := range critestHandlers {
		began := time.Now()
		results[h] = e.runCritest(t, critest, h)
		left := e.removePods(t)
		p, f, s := countResults(results[h])
		t.Logf("%-16s %3d passed, %2d failed, %2d skipped of %d in %s; %d pods and containers left behind, removed",
			h, p, f, s, len(results[h]), time.Since(began).Round(time.Second), left)
	}
	if len(results["runc"]) < 100 {
		t.Fatalf("critest reported %d specs for runc; expected about 140 (see %s.log)", len(results["runc"]), filepath.Join(e.dir, "runc"))
	}
	data, err := os.ReadFile(critestDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	reasons, err := critestReasons(doc)
	if err != nil {
		t.Fatal(err)
	}
	// A spec whose result differs from what this run expects (warden
	// unlike runc; under the baseline, unlike runc without a refusal on
	// record) runs once more, for runc and that handler, before it
	// counts: some of critest's specs race with a loaded machine.
	suspect := map[string]bool{}
	for name, w := range results["warden"] {
		if w.status != results["runc"][name].status {
			suspect[name] = true
		}
	}
	for name, b := range results["warden-baseline"] {
		if ref := results["runc"][name]; b.status != ref.status && (b.status != "failed" || reasons[name] == "") {
			suspect[name] = true
		}
	}
	if len(suspect) > 0 && !*updateDocs {
		var focus []string
		for name := range suspect {
			focus = append(focus, name)
		}
		sort.Strings(focus)
		t.Logf("running again, once: %s", strings.Join(focus, "; "))
		for _, h := range critestHandlers {
			for name, r := range e.runCritest(t, critest, h, focus...) {
				if r.status != "skipped" || results[h][name].status == "skipped" {
					results[h][name] = r
				}
			}
			e.removePods(t)
		}
	}
	for _, d := range diffResults(results["runc"], results["warden"]) {
		t.Errorf("warden without a policy differs from runc: %s", d)
	}

	rows := map[string]string{} // spec -> failsEverywhere or failsBaseline
	for name, r := range results["runc"] {
		if r.status == "failed" {
			rows[name] = failsEverywhere
		}
	}
	for name, b := range results["warden-baseline"] {
		ref := results["runc"][name]
		switch {
		case b.status == ref.status:
		case b.status == "failed":
			rows[name] = failsBaseline
			if reasons[name] == "" {
				t.Logf("under the baseline policy %q fails: %s", name, b.message)
			}
		default:
			t.Errorf("under the baseline policy %q is %s, under runc %s (only refusals may differ)", name, b.status, ref.status)
		}
	}
	section := renderCritestSection(results, rows, reasons)
	begin, end := strings.Index(doc, critestBegin), strings.Index(doc, critestEnd)
	if begin < 0 || end < begin {
		t.Fatalf("%s has no critest section (%s ... %s)", critestDoc, critestBegin, critestEnd)
	}
	if *updateDocs {
		doc = doc[:begin] + section + doc[end+len(critestEnd):]
		if err := os.WriteFile(critestDoc, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	} else if got := doc[begin : end+len(critestEnd)]; got != section {
		t.Errorf("docs/kubernetes.md's critest section does not match this run; review and run `make k8s UPDATE=1`:\n%s", firstLineDiff(section, got))
	}
	for name, where := range rows {
		if reasons[name] == "" {
			t.Errorf("docs/kubernetes.md gives no reason why %q fails under the %s: write one in its row", name, where)
		}
	}
	t.Logf("whole run: %s", time.Since(start).Round(time.Second))
}

type specResult struct {
	status  string // passed, failed or skipped
	message string // the failure's first line
}

// runCritest runs the suite for one handler inside the private namespaces
// and reads its JUnit report. TMPDIR keeps the host folders the specs bind
// inside the private folder.
// With focus, only those specs run (a second try of specs whose result
// looked like a flake).
func (e *criEnv) runCritest(t *testing.T, critest, handler string, focus ...string) map[string]specResult {
	t.Helper()
	name := handler
	var extra []string
	if len(focus) > 0 {
		name += ".retry"
		quoted := make([]string, len(focus))
		for i, f := range focus {
			quoted[i] = regexp.QuoteMeta(f)
		}
		extra = []string{"-ginkgo.focus", strings.Join(quoted, "|")}
	}
	report := filepath.Join(e.dir, name+".xml")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	argv := e.nsArgv(append([]string{critest, "-runtime-endpoint", "unix://" + e.sock, "-image-endpoint", "unix://" + e.sock,
		"-runtime-handler", handler, "-ginkgo.junit-report", report, "-ginkgo.no-color"}, extra...)...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/root", "TMPDIR=" + filepath.Join(e.dir, "tmp")}
	cmd.WaitDelay = 10 * time.Second
	logPath := filepath.Join(e.dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	// critest exits non-zero when a spec fails; the report says which.
	runErr := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("critest for %s did not finish within 10 minutes (log %s)", handler, logPath)
	}
	data, err := os.ReadFile(report)
	if err == nil {
		var res map[string]specResult
		if res, err = parseJUnit(data); err == nil {
			return res
		}
	}
	log, _ := os.ReadFile(logPath)
	if len(focus) > 0 {
		// A second try that reports nothing leaves the first one's results.
		t.Logf("critest's second try for %s reported nothing (%v, %v); its output:\n%s", handler, runErr, err, lastLines(string(log), 10))
		return nil
	}
	t.Fatalf("critest for %s: no report (%v, %v); its output:\n%s", handler, runErr, err, lastLines(string(log), 30))
	return nil
}

func parseJUnit(data []byte) (map[string]specResult, error) {
	var doc struct {
		Suites []struct {
			Cases []struct {
				Name    string `xml:"name,attr"`
				Status  string `xml:"status,attr"`
				Failure *struct {
					Message string `xml:"message,attr"`
				} `xml:"failure"`
				Error *struct {
					Message string `xml:"message,attr"`
				} `xml:"error"`
				Skipped *struct{} `xml:"skipped"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	out := map[string]specResult{}
	for _, s := range doc.Suites {
		for _, c := range s.Cases {
			name := strings.TrimSpace(strings.TrimPrefix(c.Name, "[It]"))
			r := specResult{status: "passed"}
			switch {
			case c.Failure != nil:
				r = specResult{status: "failed", message: c.Failure.Message}
			case c.Error != nil:
				r = specResult{status: "failed", message: c.Error.Message}
			case c.Skipped != nil || strings.HasPrefix(c.Status, "skipped") || c.Status == "pending":
				r.status = "skipped"
			}
			r.message, _, _ = strings.Cut(strings.TrimSpace(r.message), "\n")
			if _, dup := out[name]; dup {
				return nil, fmt.Errorf("spec %q reported twice", name)
			}
			out[name] = r
		}
	}
	return out, nil
}

func countResults(rs map[string]specResult) (passed, failed, skipped int) {
	for _, r := range rs {
		switch r.status {
		case "passed":
			passed++
		case "failed":
			failed++
		default:
			skipped++
		}
	}
	return
}

// diffResults lists the specs whose outcome differs, sorted.
func diffResults(ref, got map[string]specResult) []string {
	var out []string
	for name, r := range ref {
		g, ok := got[name]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%q: %s under runc, not run", name, r.status))
		case g.status != r.status:
			out = append(out, fmt.Sprintf("%q: %s under runc, %s (%s)", name, r.status, g.status, g.message))
		}
	}
	for name, g := range got {
		if _, ok := ref[name]; !ok {
			out = append(out, fmt.Sprintf("%q: not run under runc, %s", name, g.status))
		}
	}
	slices.Sort(out)
	return out
}

// critestReasons reads the reasons from the doc's table: spec -> reason.
func critestReasons(doc string) (map[string]string, error) {
	out := map[string]string{}
	begin, end := strings.Index(doc, critestBegin), strings.Index(doc, critestEnd)
	if begin < 0 || end < begin {
		return nil, fmt.Errorf("%s has no critest section (%s ... %s)", critestDoc, critestBegin, critestEnd)
	}
	inTable := false
	for _, line := range strings.Split(doc[begin:end], "\n") {
		if strings.HasPrefix(line, "| spec |") {
			inTable = true
			continue
		}
		if !inTable || !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "|---") {
			continue
		}
		cells := strings.Split(strings.TrimSuffix(strings.TrimPrefix(strings.ReplaceAll(line, `\|`, "\x00"), "| "), "|"), " | ")
		if len(cells) != 3 {
			return nil, fmt.Errorf("%s: critest table row %q: want | spec | fails under | why |", critestDoc, line)
		}
		out[strings.ReplaceAll(strings.TrimSpace(cells[0]), "\x00", "|")] = strings.ReplaceAll(strings.TrimSpace(cells[2]), "\x00", "|")
	}
	return out, nil
}

// renderCritestSection writes the counts per handler and the failing
// specs, each with the reason the doc gives.
func renderCritestSection(results map[string]map[string]specResult, rows, reasons map[string]string) string {
	var b strings.Builder
	b.WriteString(critestBegin + "\n")
	b.WriteString("| handler | passed | failed | skipped | specs |\n|---|---|---|---|---|\n")
	for _, h := range critestHandlers {
		p, f, s := countResults(results[h])
		fmt.Fprintf(&b, "| `%s` | %d | %d | %d | %d |\n", h, p, f, s, len(results[h]))
	}
	b.WriteString("\n| spec | fails under | why |\n|---|---|---|\n")
	for _, where := range []string{failsEverywhere, failsBaseline} {
		var names []string
		for name, w := range rows {
			if w == where {
				names = append(names, name)
			}
		}
		slices.Sort(names)
		for _, name := range names {
			esc := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
			fmt.Fprintf(&b, "| %s | %s | %s |\n", esc(name), where, esc(reasons[name]))
		}
	}
	b.WriteString(critestEnd)
	return b.String()
}

func firstLineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d of the section:\n this run: %s\n the doc:  %s", i+1, wl, gl)
		}
	}
	return "no difference"
}
