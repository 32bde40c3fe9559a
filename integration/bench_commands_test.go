package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"
)

// BenchmarkCommandRules: what an allow decision of [commands] adds to
// `warden exec` (docs/policy.md#command-rules): the same command in two
// sessions of one daemon, one whose policy rules the program and allows
// the call, one without rules, measured interleaved in the same run. The
// budget is 0.1 ms at p50 for a top-level call; a call from a shell goes
// through the stub and is shown beside it.
func BenchmarkCommandRules(b *testing.B) {
	dir := tempDir(b)
	root := filepath.Join(dir, "root")
	ws := filepath.Join(dir, "ws")
	os.MkdirAll(ws, 0o755)
	defer stopDaemon(root)
	base := "[fs]\nwrite = [\"$WORK_DIR\"]\n[limits]\ntimeout = \"60s\"\n"
	policies := map[string]string{
		"plain": "name = \"bench-plain\"\n" + base,
		"ruled": "name = \"bench-ruled\"\n" + base + "[commands]\nallow = [\"true **\"]\nask = [\"true --ask **\"]\n",
		// a ruled script (zcat is a sh script): its own session, as its
		// folder gets an overlay the other rows should not pay for
		"script": "name = \"bench-script\"\n" + base + "[commands]\nallow = [\"zcat --version\"]\n",
	}
	for id, text := range policies {
		file := filepath.Join(dir, id+".toml")
		os.WriteFile(file, []byte(text), 0o644)
		if err := runQuiet(wardenBinary, "--root", root, "session", "create", "--id", id, "--policy", file, "--workspace", ws)(); err != nil {
			b.Fatal(err)
		}
	}
	run := func(id string, argv ...string) func() error {
		return runQuiet(wardenBinary, append([]string{"--root", root, "exec", "--session", id, "--"}, argv...)...)
	}
	// interleaved medians of a and b
	pair := func(a, c func() error) (pa, pc time.Duration) {
		var da, dc []time.Duration
		for i := 0; i < benchRuns+benchRuns/10; i++ {
			for _, x := range []struct {
				f func() error
				d *[]time.Duration
			}{{a, &da}, {c, &dc}} {
				start := time.Now()
				if err := x.f(); err != nil {
					b.Fatal(err)
				}
				if i >= benchRuns/10 {
					*x.d = append(*x.d, time.Since(start))
				}
			}
		}
		sort.Slice(da, func(i, j int) bool { return da[i] < da[j] })
		sort.Slice(dc, func(i, j int) bool { return dc[i] < dc[j] })
		return da[len(da)/2], dc[len(dc)/2]
	}
	plain, ruled := pair(run("plain", "true"), run("ruled", "true"))
	shPlain, shRuled := pair(run("plain", "sh", "-c", "/usr/bin/true"), run("ruled", "sh", "-c", "/usr/bin/true"))
	zPlain, zRuled := pair(run("plain", "sh", "-c", "zcat --version"), run("script", "sh", "-c", "zcat --version"))
	// An approved ask: from the start of `warden approvals approve` to
	// the end of the waiting command, beside the same command's exec.
	var approveToEnd []time.Duration
	for i := 0; i < 30; i++ {
		cmd := exec.Command(wardenBinary, "--root", root, "exec", "--session", "ruled", "--", "true", "--ask")
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		var id string
		for deadline := time.Now().Add(10 * time.Second); id == "" && time.Now().Before(deadline); {
			out, _ := exec.Command(wardenBinary, "--root", root, "approvals", "ls", "--format", "json").Output()
			var list []struct{ ID string }
			json.Unmarshal(out, &list)
			if len(list) > 0 {
				id = list[0].ID
			}
		}
		start := time.Now()
		if err := runQuiet(wardenBinary, "--root", root, "approvals", "approve", id)(); err != nil {
			b.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			b.Fatal(err)
		}
		approveToEnd = append(approveToEnd, time.Since(start))
	}
	sort.Slice(approveToEnd, func(i, j int) bool { return approveToEnd[i] < approveToEnd[j] })
	approved := approveToEnd[len(approveToEnd)/2]

	verdict := "within the 0.1 ms budget"
	if ruled-plain > 100*time.Microsecond {
		verdict = "OVER the 0.1 ms budget"
	}
	fmt.Printf("\ncommand rules: an allow decision, interleaved medians of %d runs each\n", benchRuns)
	fmt.Printf("%-58s %10s %10s %10s\n", "path", "p50 ms", "+ms", "ratio")
	fmt.Printf("%-58s %10.3f\n", "warden exec -- true (no rules)", ms(plain))
	fmt.Printf("%-58s %10.3f %10.3f %10.3f  %s\n", "warden exec -- true (allowed by commands.allow)", ms(ruled), ms(ruled-plain), float64(ruled)/float64(plain), verdict)
	fmt.Printf("%-58s %10.3f %10.3f %10.3f  %s\n", "approvals approve -> the asked `true --ask` ends (30 runs)", ms(approved), ms(approved-plain), float64(approved)/float64(plain), "(against the plain exec: the CLI's call, then the run)")
	fmt.Printf("%-58s %10.3f\n", "warden exec -- sh -c /usr/bin/true (no rules)", ms(shPlain))
	fmt.Printf("%-58s %10.3f %10.3f %10.3f  %s\n", "warden exec -- sh -c /usr/bin/true (allowed, via the stub)", ms(shRuled), ms(shRuled-shPlain), float64(shRuled)/float64(shPlain), "(a call from inside the sandbox)")
	fmt.Printf("%-58s %10.3f\n", "warden exec -- sh -c 'zcat --version' (no rules)", ms(zPlain))
	fmt.Printf("%-58s %10.3f %10.3f %10.3f  %s\n", "warden exec -- sh -c 'zcat --version' (a ruled script)", ms(zRuled), ms(zRuled-zPlain), float64(zRuled)/float64(zPlain), "(the stub, then sh on its text)")
}
