package integration

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/runtime/client"
	"github.com/warden-sandbox/warden/runtime/sandbox"
)

// The clients' benchmark: each client's exec of /bin/true in a warm
// session against the way its own language starts a process, measured
// interleaved in one process (Go here, Python and Node in child programs
// this test writes), and 1 GiB through cat over the stream socket's
// frames against passed descriptors.

const clientsPolicy = `name = "bench-clients"
[fs]
write = ["$WORK_DIR"]
[exec]
allow = ["true", "cat"]
[limits]
timeout = "120s"
`

// clientsPy times subprocess.run and the Python client's Session.run of
// /bin/true, alternately, and prints the seconds of each call as JSON.
const clientsPy = `import json, subprocess, sys, time
import warden

root, binary, sid, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
s = warden.Client(root, binary=binary).session(id=sid)
rows = {"subprocess.run": [], "subprocess.run capture_output": [], "client": []}
calls = {
    "subprocess.run": lambda: subprocess.run(["/bin/true"]).returncode,
    "subprocess.run capture_output": lambda: subprocess.run(["/bin/true"], capture_output=True).returncode,
    "client": lambda: s.run(["/bin/true"]).returncode,
}
for i in range(n + n // 10):  # the first tenth warms up
    for name, call in calls.items():
        start = time.perf_counter()
        code = call()
        took = time.perf_counter() - start
        if code != 0:
            sys.exit(f"{name}: exit status {code}")
        if i >= n // 10:
            rows[name].append(took)
json.dump(rows, sys.stdout)
`

// clientsMjs does the same in Node: child_process.spawnSync against the
// TypeScript client's run.
const clientsMjs = `import { spawnSync } from "node:child_process";
const [dist, root, binary, sid, nText] = process.argv.slice(2);
const { Warden } = await import(dist);
const n = Number(nText);
const s = await new Warden({ root, binary }).session({ id: sid });
const rows = { "spawnSync": [], "client": [] };
const calls = {
  "spawnSync": async () => spawnSync("/bin/true").status,
  "client": async () => (await s.run(["/bin/true"])).exitCode,
};
for (let i = 0; i < n + Math.floor(n / 10); i++) {
  for (const [name, call] of Object.entries(calls)) {
    const start = process.hrtime.bigint();
    const code = await call();
    const took = Number(process.hrtime.bigint() - start) / 1e9;
    if (code !== 0) {
      console.error(name + ": exit status " + code);
      process.exit(1);
    }
    if (i >= Math.floor(n / 10)) rows[name].push(took);
  }
}
process.stdout.write(JSON.stringify(rows));
`

// quantiles is the median and 90th percentile of d.
func quantiles(d []time.Duration) (p50, p90 time.Duration) {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2], s[len(s)*9/10]
}

type clientRow struct {
	name     string
	p50, p90 time.Duration
}

func printClientRows(title string, base time.Duration, rows []clientRow) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%s (%d interleaved runs each)\n", title, benchRuns)
	fmt.Fprintf(&sb, "%-52s %10s %10s %9s\n", "path", "p50 ms", "p90 ms", "x base")
	for _, r := range rows {
		fmt.Fprintf(&sb, "%-52s %10.3f %10.3f %9.2f\n", r.name, ms(r.p50), ms(r.p90), float64(r.p50)/float64(base))
	}
	fmt.Print(sb.String())
}

// childLoop runs a loop program and reads the seconds of each call per
// row name.
func childLoop(b *testing.B, env []string, argv ...string) map[string][]time.Duration {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("%s: %v: %s", strings.Join(argv, " "), err, stderr.String())
	}
	var secs map[string][]float64
	if err := json.Unmarshal(out, &secs); err != nil {
		b.Fatalf("%s: output %q: %v", argv[0], out, err)
	}
	rows := map[string][]time.Duration{}
	for name, s := range secs {
		for _, v := range s {
			rows[name] = append(rows[name], time.Duration(v*1e9))
		}
	}
	return rows
}

func BenchmarkClients(b *testing.B) {
	repo, err := filepath.Abs("..")
	if err != nil {
		b.Fatal(err)
	}
	python, err := exec.LookPath("python3")
	if err != nil {
		b.Fatal("no python3 for the Python client's row: run `make deps`")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		b.Fatal("no node for the TypeScript client's row: run `make deps`")
	}
	dist := filepath.Join(repo, "clients", "typescript", "dist", "src", "index.js")
	if _, err := os.Stat(dist); err != nil {
		b.Fatalf("the TypeScript client is not built (%v): run `make ts-client-build`", err)
	}
	dir := tempDir(b)
	root := filepath.Join(dir, "root")
	ws := filepath.Join(dir, "ws")
	policyFile := filepath.Join(dir, "bench.toml")
	for _, err := range []error{os.MkdirAll(ws, 0o755), os.WriteFile(policyFile, []byte(clientsPolicy), 0o644),
		os.WriteFile(filepath.Join(dir, "loop.py"), []byte(clientsPy), 0o644),
		os.WriteFile(filepath.Join(dir, "loop.mjs"), []byte(clientsMjs), 0o644)} {
		if err != nil {
			b.Fatal(err)
		}
	}
	defer stopDaemon(root)
	ctx := context.Background()
	c := client.New(root)
	c.Binary = wardenBinary
	s, err := c.Session(ctx, client.SessionOptions{ID: "clients", Policy: client.PolicyFile(policyFile), Workspace: ws})
	if err != nil {
		b.Fatal(err)
	}

	// Go: host fork+exec against the Go client, alternately.
	floor := func() error { return exec.Command("/bin/true").Run() }
	goExec := func() error {
		res, err := s.Exec(ctx, client.Cmd{Argv: []string{"/bin/true"}})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit %d: %s", res.ExitCode, res.Error)
		}
		return err
	}
	// The same sandbox without the daemon: a session of this process's
	// own (runtime/sandbox), to tell the daemon's hop from the agent's.
	rt := apiRuntime(b, filepath.Join(dir, "api-root"))
	p, err := policies.Parse("bench.toml", []byte(clientsPolicy))
	if err != nil {
		b.Fatal(err)
	}
	api, err := rt.Create(sandbox.SessionConfig{ID: "api", Policy: p, Vars: policies.Vars{WorkDir: ws}})
	if err != nil {
		b.Fatal(err)
	}
	defer api.Close()
	apiExec := func() error {
		res, err := api.Exec(ctx, sandbox.ExecOptions{Argv: []string{"/bin/true"}})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit %d: %s", res.ExitCode, res.Error)
		}
		return err
	}
	var fd, gd, ad []time.Duration
	for i := 0; i < benchRuns+benchRuns/10; i++ {
		for _, f := range []struct {
			d   *[]time.Duration
			run func() error
		}{{&fd, floor}, {&gd, goExec}, {&ad, apiExec}} {
			start := time.Now()
			if err := f.run(); err != nil {
				b.Fatal(err)
			}
			if i >= benchRuns/10 {
				*f.d = append(*f.d, time.Since(start))
			}
		}
	}
	rows := []clientRow{{name: "host fork+exec /bin/true (floor)"}, {name: "Go client Session.Exec /bin/true"},
		{name: "in-process sandbox.Session.Exec (no daemon)"}}
	rows[0].p50, rows[0].p90 = quantiles(fd)
	rows[1].p50, rows[1].p90 = quantiles(gd)
	rows[2].p50, rows[2].p90 = quantiles(ad)
	printClientRows("Go client exec", rows[0].p50, rows)
	fmt.Printf("Go client p50 / host fork+exec %.2f (target <= 1.5)\n", float64(rows[1].p50)/float64(rows[0].p50))

	n := fmt.Sprint(benchRuns)
	py := childLoop(b, []string{"PYTHONPATH=" + filepath.Join(repo, "clients", "python")},
		python, filepath.Join(dir, "loop.py"), root, wardenBinary, s.ID, n)
	rows = nil
	for _, name := range []string{"subprocess.run", "subprocess.run capture_output", "client"} {
		r := clientRow{name: "Python " + name + " /bin/true"}
		if name == "client" {
			r.name = "Python client Session.run /bin/true"
		}
		r.p50, r.p90 = quantiles(py[name])
		rows = append(rows, r)
	}
	printClientRows("Python client exec", rows[0].p50, rows)
	fmt.Printf("Python client p50 / subprocess.run %.2f (target <= 1.5)\n", float64(rows[2].p50)/float64(rows[0].p50))

	js := childLoop(b, nil, node, filepath.Join(dir, "loop.mjs"), "file://"+dist, root, wardenBinary, s.ID, n)
	rows = []clientRow{{name: "Node child_process.spawnSync /bin/true"}, {name: "TypeScript client Session.run /bin/true"}}
	rows[0].p50, rows[0].p90 = quantiles(js["spawnSync"])
	rows[1].p50, rows[1].p90 = quantiles(js["client"])
	printClientRows("TypeScript client exec", rows[0].p50, rows)
	fmt.Printf("TypeScript client p50 / spawnSync %.2f (target <= 1.5)\n", float64(rows[1].p50)/float64(rows[0].p50))

	// 1 GiB through cat: descriptors passed against frames, alternately.
	const rounds = 3
	var passed, framed []float64
	for i := 0; i < rounds; i++ {
		mbs, err := catPassed(ctx, s)
		if err != nil {
			b.Fatalf("cat with passed descriptors: %v", err)
		}
		passed = append(passed, mbs)
		mbs, err = catFramed(filepath.Join(root, "warden.stream.sock"), s.ID)
		if err != nil {
			b.Fatalf("cat over the stream socket: %v", err)
		}
		framed = append(framed, mbs)
	}
	sort.Float64s(passed)
	sort.Float64s(framed)
	fmt.Printf("\n1 GiB through cat in the session (%d interleaved rounds each, medians)\n", rounds)
	fmt.Printf("%-52s %10s\n", "path", "MiB/s")
	fmt.Printf("%-52s %10.0f\n", "descriptors passed (Go client, pipes)", passed[rounds/2])
	fmt.Printf("%-52s %10.0f\n", "framed stdio (stream socket, 1 MiB frames)", framed[rounds/2])
	fmt.Printf("framed / passed %.2f (target >= 0.50)\n", framed[rounds/2]/passed[rounds/2])
}

const catBytes = 1 << 30

// catPassed streams catBytes through cat with the client's own pipes as
// the command's stdin and stdout, and returns MiB/s.
func catPassed(ctx context.Context, s *client.Session) (float64, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return 0, err
	}
	defer outR.Close()
	start := time.Now()
	go func() {
		buf := make([]byte, 1<<20)
		for sent := 0; sent < catBytes; sent += len(buf) {
			if _, err := inW.Write(buf); err != nil {
				break
			}
		}
		inW.Close()
	}()
	got := make(chan int64, 1)
	go func() {
		n, _ := io.CopyBuffer(io.Discard, outR, make([]byte, 1<<20))
		got <- n
	}()
	res, err := s.Exec(ctx, client.Cmd{Argv: []string{"cat"}, Stdin: inR, Stdout: outW})
	inR.Close()
	outW.Close()
	n := <-got
	took := time.Since(start)
	if err != nil {
		return 0, err
	}
	if res.ExitCode != 0 || n != catBytes {
		return 0, fmt.Errorf("exit %d (%s), %d bytes out of %d", res.ExitCode, res.Error, n, catBytes)
	}
	return float64(n) / (1 << 20) / took.Seconds(), nil
}

// catFramed streams catBytes through cat over the stream socket, stdin
// in frames of the protocol's largest size, and returns MiB/s.
func catFramed(sock, id string) (float64, error) {
	conn, err := net.Dial("unix", sock)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	frame := func(w io.Writer, kind byte, payload []byte) error {
		var hdr [5]byte
		binary.BigEndian.PutUint32(hdr[:], uint32(len(payload)))
		hdr[4] = kind
		if _, err := w.Write(hdr[:]); err != nil {
			return err
		}
		_, err := w.Write(payload)
		return err
	}
	req, _ := json.Marshal(map[string]any{"v": 1, "op": "exec", "id": id, "exec": map[string]any{"argv": []string{"cat"}}})
	start := time.Now()
	if err := frame(conn, 3, req); err != nil {
		return 0, err
	}
	go func() {
		buf := make([]byte, 1<<20)
		for sent := 0; sent < catBytes; sent += len(buf) {
			if frame(conn, 0, buf) != nil {
				return
			}
		}
		frame(conn, 0, nil)
	}()
	r := bufio.NewReaderSize(conn, 1<<20)
	var hdr [5]byte
	payload := make([]byte, 1<<20)
	var n int64
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return 0, fmt.Errorf("the stream ended before the result: %v", err)
		}
		size := binary.BigEndian.Uint32(hdr[:])
		if size > uint32(len(payload)) {
			return 0, fmt.Errorf("a frame of %d bytes", size)
		}
		if _, err := io.ReadFull(r, payload[:size]); err != nil {
			return 0, err
		}
		switch hdr[4] {
		case 1:
			n += int64(size)
		case 3:
			took := time.Since(start)
			var msg struct {
				Error  string
				Result *client.Result
			}
			if err := json.Unmarshal(payload[:size], &msg); err != nil {
				return 0, err
			}
			switch {
			case msg.Error != "":
				return 0, errors.New(msg.Error)
			case msg.Result == nil || msg.Result.ExitCode != 0 || n != catBytes:
				return 0, fmt.Errorf("%s, %d bytes out of %d", payload[:size], n, catBytes)
			}
			return float64(n) / (1 << 20) / took.Seconds(), nil
		default:
			return 0, fmt.Errorf("a frame of kind %d: %q", hdr[4], payload[:size])
		}
	}
}
