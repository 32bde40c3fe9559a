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
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var updateDocs = flag.Bool("update", false, "rewrite the table a doc keeps of this run: docs/kubernetes.md's critest section (TestCritest), docs/conformance.md's (TestConformance)")

// critestHandlers are the CRI runtime handlers critest runs against, in
// the order of the doc's table. runsc itself is not among them: under
// runc's shim it cannot end a pod, and gVisor's own shim cannot start
// here (docs/kubernetes.md).
var critestHandlers = []string{"runc", "warden", "warden-baseline", "warden-gvisor"}

// critestRefs pairs a handler with the reference whose results it must
// have exactly.
var critestRefs = map[string]string{"warden": "runc"}

// critestListed are the handlers with no reference of their own: each
// spec that fails under one but not under runc must be in the doc's table
// with its reason (a policy's refusal, what gVisor does not do); any other
// difference from runc fails the test.
var critestListed = []string{"warden-baseline", "warden-gvisor"}

// critestFamilies are the handlers whose results are compared with each
// other: a second try of a spec runs for the whole family, so that every
// comparison is between results of the same try.
var critestFamilies = [][]string{{"runc", "warden", "warden-baseline", "warden-gvisor"}}

// critestShared matches the specs that take something every handler of
// the one containerd shares: the image specs pull and remove the images
// all specs run, the port specs take fixed ports (12000-12003) of the one
// network namespace; the OOM spec's memory pressure raced with the other
// runs (it timed out under every handler once); the stats specs without a
// filter list every container of the containerd (one another handler
// removed in between failed the listing). They run one handler at a
// time; the other specs of all handlers run at once.
const critestShared = `Image Manager|Image Consistency|Image Identifier Consistency|port mapping with host port|portforward|should output OOMKilled reason|when filter is nil`

// critestNodes is how many ginkgo nodes each critest run spreads its
// specs over (critest -parallel; ginkgo runs the specs marked Serial
// alone): most of a run's time is spent waiting, above all for the specs
// that fail under a policy, each of which waits out a minute.
const critestNodes = 6

const (
	critestDoc      = "../docs/kubernetes.md"
	critestBegin    = "<!-- critest:begin: written by `make k8s UPDATE=1` from a run; each row's reason is kept by hand -->"
	critestEnd      = "<!-- critest:end -->"
	failsEverywhere = "every handler"
)

// critestFailGroups are the handlers a spec can fail under, in the words
// of the doc's "fails under" column: each reference stands for its pair.
var critestFailGroups = []struct{ handler, words string }{
	{"runc", "runc and warden"}, {"warden-baseline", "baseline policy"}, {"warden-gvisor", "gVisor"},
}

// TestCritest runs Kubernetes' CRI validation suite against a private
// containerd for runc, warden without a policy, warden under
// policies/baseline-container.toml and warden on its gVisor engine.
// warden must give exactly runc's results; every spec that fails must be
// listed with its reason in docs/kubernetes.md (under the baseline and on
// gVisor, only failures may differ from runc).
func TestCritest(t *testing.T) {
	critest, crictl, busybox, ginkgo := os.Getenv("WARDEN_CRITEST"), os.Getenv("WARDEN_CRICTL"), os.Getenv("WARDEN_K8S_BUSYBOX"), os.Getenv("WARDEN_GINKGO")
	if critest == "" || crictl == "" || busybox == "" || ginkgo == "" || filepath.Base(ginkgo) != "ginkgo" {
		t.Fatal("TestCritest needs WARDEN_CRITEST, WARDEN_CRICTL, WARDEN_GINKGO (a binary named ginkgo) and WARDEN_K8S_BUSYBOX: run `make k8s` (it builds critest, crictl and ginkgo into bin/tools)")
	}
	start := time.Now()
	policy, err := filepath.Abs("../policies/baseline-container.toml")
	if err != nil {
		t.Fatal(err)
	}
	if r := runWarden(t, nil, "policy", "check", policy); r.Exit != 0 {
		t.Fatalf("warden policy check %s: %s", policy, r.Stderr)
	}
	// The wrappers docs/kubernetes.md registers: one policy for a runtime
	// class, and the gVisor engine.
	dir := tempDir(t)
	handlers := map[string]string{"runc": runcBinary, "warden": wardenBinary,
		"warden-baseline": writeWrapper(t, dir, "warden-baseline", "--policy", policy),
		"warden-gvisor":   writeWrapper(t, dir, "warden-gvisor", "--engine", "gvisor")}
	e := startCRI(t, crictl, busybox, handlers)
	e.ginkgoDir = filepath.Dir(ginkgo)
	t.Logf("containerd, registry and images ready in %s", time.Since(start).Round(time.Second))

	// Every handler at once, but for the shared specs.
	results := map[string]map[string]specResult{}
	took := map[string]time.Duration{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var failures []string
	began := time.Now()
	for _, h := range critestHandlers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := e.runCritest(critest, h, h, "-ginkgo.skip", critestShared)
			mu.Lock()
			defer mu.Unlock()
			results[h], took[h] = res, time.Since(began)
			if err != nil {
				failures = append(failures, err.Error())
			}
		}()
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatal(strings.Join(failures, "\n"))
	}
	left := e.removePods(t)
	t.Logf("all handlers at once, but the shared specs: %s; %d pods and containers left behind, removed", time.Since(began).Round(time.Second), left)
	for _, h := range critestHandlers {
		began := time.Now()
		res, err := e.runCritest(critest, h, h+".shared", "-ginkgo.focus", critestShared)
		if err != nil {
			t.Fatal(err)
		}
		mergeResults(results[h], res)
		left := e.removePods(t)
		p, f, s := countResults(results[h])
		t.Logf("%-16s %3d passed, %2d failed, %2d skipped of %d (beside the others in %s, the shared specs in %s); %d pods and containers left behind, removed",
			h, p, f, s, len(results[h]), took[h].Round(time.Second), time.Since(began).Round(time.Second), left)
	}
	if len(results["runc"]) < 100 {
		t.Fatalf("critest reported %d specs for runc; expected about 140 (see %s.log)", len(results["runc"]), filepath.Join(e.dir, "runc"))
	}
	data, err := os.ReadFile(critestDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	reasons, under, err := critestReasons(doc)
	if err != nil {
		t.Fatal(err)
	}
	// A spec whose result differs from what this run expects (warden
	// unlike its reference; under the baseline, unlike runc without a
	// refusal on record) runs once more, for its family, before it
	// counts: some of critest's specs race with a loaded machine.
	suspect := make([]map[string]bool, len(critestFamilies)) // per family
	family := func(h string) int {
		for i, f := range critestFamilies {
			if slices.Contains(f, h) {
				return i
			}
		}
		panic("no family: " + h)
	}
	for i := range suspect {
		suspect[i] = map[string]bool{}
	}
	for h, ref := range critestRefs {
		for _, name := range differing(results[ref], results[h]) {
			suspect[family(ref)][name] = true
		}
	}
	for _, h := range critestListed {
		for name, b := range results[h] {
			if ref := results["runc"][name]; b.status != ref.status && (b.status != "failed" || !failsOnRecord(under[name], h)) {
				suspect[family("runc")][name] = true
			}
		}
	}
	// A spec that fails under a reference with no reason on record (a
	// race the reference lost as well) runs once more too.
	for _, ref := range critestRefs {
		for name, r := range results[ref] {
			if r.status == "failed" && reasons[name] == "" {
				suspect[family(ref)][name] = true
			}
		}
	}
	for i, members := range critestFamilies {
		if len(suspect[i]) == 0 || *updateDocs {
			continue
		}
		var names, focus []string
		for name := range suspect[i] {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			focus = append(focus, regexp.QuoteMeta(name))
		}
		t.Logf("running again, once, for %s: %s", strings.Join(members, ", "), strings.Join(names, "; "))
		for _, h := range members {
			res, err := e.runCritest(critest, h, h+".retry", "-ginkgo.focus", strings.Join(focus, "|"))
			if err != nil {
				// A second try that reports nothing leaves the first one's results.
				t.Logf("critest's second try: %v", err)
			}
			mergeResults(results[h], res)
			e.removePods(t)
		}
	}
	for _, h := range critestHandlers {
		if ref, ok := critestRefs[h]; ok {
			for _, d := range diffResults(ref, results[ref], results[h]) {
				t.Errorf("%s differs from %s: %s", h, ref, d)
			}
		}
	}
	for _, h := range critestListed {
		for name, b := range results[h] {
			if ref := results["runc"][name]; b.status != ref.status && b.status != "failed" {
				t.Errorf("under %s %q is %s, under runc %s (only failures, each with its reason on record, may differ)", h, name, b.status, ref.status)
			}
		}
	}

	rows := map[string]int{} // spec -> the groups it fails under, a bit per critestFailGroups entry
	for i, g := range critestFailGroups {
		for name, r := range results[g.handler] {
			if r.status == "failed" {
				rows[name] |= 1 << i
				if reasons[name] == "" {
					t.Logf("under %s %q fails: %s", g.handler, name, r.message)
				}
			}
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
	for name, groups := range rows {
		if reasons[name] == "" {
			t.Errorf("docs/kubernetes.md gives no reason why %q fails under %s: write one in its row", name, failWords(groups))
		}
	}
	t.Logf("whole run: %s", time.Since(start).Round(time.Second))
}

type specResult struct {
	status  string // passed, failed or skipped
	message string // the failure's first line
}

// runCritest runs the suite for one handler inside the private namespaces
// and reads its JUnit report (name.xml, its output in name.log); args are
// more of critest's flags (a focus or a skip). TMPDIR keeps the host
// folders the specs bind inside the private folder.
func (e *criEnv) runCritest(critest, handler, name string, args ...string) (map[string]specResult, error) {
	report := filepath.Join(e.dir, name+".xml")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	argv := e.nsArgv(append([]string{critest, "-runtime-endpoint", "unix://" + e.sock, "-image-endpoint", "unix://" + e.sock,
		"-runtime-handler", handler, "-ginkgo.junit-report", report, "-ginkgo.no-color", "-parallel", strconv.Itoa(critestNodes)}, args...)...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=" + e.ginkgoDir + ":/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/root", "TMPDIR=" + filepath.Join(e.dir, "tmp")}
	cmd.WaitDelay = 10 * time.Second
	logPath := filepath.Join(e.dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	// critest exits non-zero when a spec fails; the report says which.
	runErr := cmd.Run()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("critest for %s did not finish within 10 minutes (log %s)", handler, logPath)
	}
	data, err := os.ReadFile(report)
	if err == nil {
		var res map[string]specResult
		if res, err = parseJUnit(data); err == nil {
			return res, nil
		}
	}
	log, _ := os.ReadFile(logPath)
	return nil, fmt.Errorf("critest for %s: no report (%v, %v); its output:\n%s", handler, runErr, err, lastLines(string(log), 30))
}

// mergeResults takes into into the results of a run that focused on some
// specs: the specs it skipped for the focus keep their results.
func mergeResults(into, run map[string]specResult) {
	for name, r := range run {
		if r.status != "skipped" || into[name].status == "" || into[name].status == "skipped" {
			into[name] = r
		}
	}
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
			if prev, dup := out[name]; dup {
				// Each parallel node reports the suite's set-up
				// ([BeforeSuite]) once: one entry, failed if any failed.
				if !strings.HasSuffix(name, "Suite]") {
					return nil, fmt.Errorf("spec %q reported twice", name)
				}
				if prev.status == "failed" {
					r = prev
				}
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

// differing lists the specs whose outcome differs between two runs.
func differing(ref, got map[string]specResult) []string {
	var out []string
	for name, r := range ref {
		if g, ok := got[name]; !ok || g.status != r.status {
			out = append(out, name)
		}
	}
	for name := range got {
		if _, ok := ref[name]; !ok {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// diffResults words the differences of got from the reference's results.
func diffResults(refName string, ref, got map[string]specResult) []string {
	var out []string
	for _, name := range differing(ref, got) {
		r, inRef := ref[name]
		g, inGot := got[name]
		switch {
		case !inGot:
			out = append(out, fmt.Sprintf("%q: %s under %s, not run", name, r.status, refName))
		case !inRef:
			out = append(out, fmt.Sprintf("%q: not run under %s, %s", name, refName, g.status))
		default:
			out = append(out, fmt.Sprintf("%q: %s under %s, %s (%s)", name, r.status, refName, g.status, g.message))
		}
	}
	return out
}

// failWords says which handlers a spec fails under (a bit per
// critestFailGroups entry).
func failWords(groups int) string {
	if groups == 1<<len(critestFailGroups)-1 {
		return failsEverywhere
	}
	var words []string
	for i, g := range critestFailGroups {
		if groups&(1<<i) != 0 {
			words = append(words, g.words)
		}
	}
	return strings.Join(words, ", ")
}

// TestCritestFailsOnRecord: a spec the doc lists as failing under gVisor
// only is on record there and not under the baseline policy, where its
// failure (a race containerd's shim can lose under load: no OOM event
// for a container that died at once) runs again instead; one failing
// under every handler is on record under each.
func TestCritestFailsOnRecord(t *testing.T) {
	doc, err := os.ReadFile(critestDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, under, err := critestReasons(string(doc))
	if err != nil {
		t.Fatal(err)
	}
	oom := "[k8s.io] Container OOM runtime should output OOMKilled reason should terminate with exitCode 137 and reason OOMKilled"
	notFound := "[k8s.io] Idempotence StopContainer should not return an error if not found"
	for _, c := range []struct {
		spec, handler string
		want          bool
	}{{oom, "warden-gvisor", true}, {oom, "warden-baseline", false}, {notFound, "warden-baseline", true}, {notFound, "warden-gvisor", true}} {
		if got := failsOnRecord(under[c.spec], c.handler); got != c.want {
			t.Errorf("%q under %s (doc: %q): on record %v, want %v", c.spec, c.handler, under[c.spec], got, c.want)
		}
	}
}

// failsOnRecord reports whether the doc's "fails under" words for a spec
// name handler's group: a failure there is a refusal on record, not a
// race to run again.
func failsOnRecord(words, handler string) bool {
	if words == failsEverywhere {
		return true
	}
	for _, g := range critestFailGroups {
		if g.handler == handler {
			return slices.Contains(strings.Split(words, ", "), g.words)
		}
	}
	return false
}

// critestReasons reads the doc's table: spec -> reason, and spec -> the
// handlers it fails under, in the table's words.
func critestReasons(doc string) (reasons, under map[string]string, err error) {
	reasons, under = map[string]string{}, map[string]string{}
	begin, end := strings.Index(doc, critestBegin), strings.Index(doc, critestEnd)
	if begin < 0 || end < begin {
		return nil, nil, fmt.Errorf("%s has no critest section (%s ... %s)", critestDoc, critestBegin, critestEnd)
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
			return nil, nil, fmt.Errorf("%s: critest table row %q: want | spec | fails under | why |", critestDoc, line)
		}
		name := strings.ReplaceAll(strings.TrimSpace(cells[0]), "\x00", "|")
		reasons[name] = strings.ReplaceAll(strings.TrimSpace(cells[2]), "\x00", "|")
		under[name] = strings.TrimSpace(cells[1])
	}
	return reasons, under, nil
}

// renderCritestSection writes the counts per handler and the failing
// specs (those failing under every handler first), each with the reason
// the doc gives.
func renderCritestSection(results map[string]map[string]specResult, rows map[string]int, reasons map[string]string) string {
	var b strings.Builder
	b.WriteString(critestBegin + "\n")
	b.WriteString("| handler | passed | failed | skipped | specs |\n|---|---|---|---|---|\n")
	for _, h := range critestHandlers {
		p, f, s := countResults(results[h])
		fmt.Fprintf(&b, "| `%s` | %d | %d | %d | %d |\n", h, p, f, s, len(results[h]))
	}
	b.WriteString("\n| spec | fails under | why |\n|---|---|---|\n")
	names := make([]string, 0, len(rows))
	for name := range rows {
		names = append(names, name)
	}
	all := 1<<len(critestFailGroups) - 1
	rank := func(groups int) int { return (groups + 1) & all } // every handler first, then by groups
	slices.SortFunc(names, func(a, b string) int {
		if ra, rb := rank(rows[a]), rank(rows[b]); ra != rb {
			return ra - rb
		}
		return strings.Compare(a, b)
	})
	esc := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	for _, name := range names {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", esc(name), failWords(rows[name]), esc(reasons[name]))
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
