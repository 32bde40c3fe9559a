// The client against a real daemon on a temporary root: real sessions,
// real sandboxes, as root. The root's daemon is started by the client on
// its first call; at the end every session is removed, the daemon stopped
// and nothing of the root may be left on the host.

import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { after, before, describe, test } from "node:test";

import * as warden from "../src/index.js";
import { Root, binary, packageDir, traversableTempdir } from "./harness.js";

let root: Root;
let session: warden.Session;
let workspace: string;

before(async () => {
  root = new Root();
  assert.deepEqual(root.daemons(), [], "a daemon runs on the new root");
  workspace = root.workspace();
  // The first call starts the daemon on demand.
  session = await root.session(workspace);
  assert.equal(root.daemons().length, 1, "the client did not start one daemon");
});

after(async () => {
  assert.deepEqual(await root.close(), []);
});

describe("run", () => {
  test("echo: output, exit status, result fields", async () => {
    const r = await session.run(["sh", "-c", "echo hello; echo to-stderr >&2"]);
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout.toString(), "hello\n");
    assert.equal(r.stderr.toString(), "to-stderr\n");
    assert.deepEqual(r.argv, ["sh", "-c", "echo hello; echo to-stderr >&2"]);
    assert.equal(r.killedBy, null);
    assert.equal(r.signal, 0);
    assert.equal(r.error, "");
    assert.ok(r.durationMs > 0 && r.durationMs < 10_000, `durationMs ${r.durationMs}`);
  });

  test("a command string runs in sh -c", async () => {
    const r = await session.run("echo $((6 * 7)) | cat");
    assert.deepEqual(r.argv, ["sh", "-c", "echo $((6 * 7)) | cat"]);
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout.toString(), "42\n");
  });

  test("the exit status is the command's; check throws CommandFailed, not a WardenError", async () => {
    const r = await session.run("exit 3");
    assert.equal(r.exitCode, 3);
    assert.equal(r.stderr.length, 0);
    await assert.rejects(session.run("echo out; exit 4", { check: true }), (e: unknown) => {
      assert.ok(e instanceof warden.CommandFailed);
      assert.ok(!(e instanceof warden.WardenError));
      assert.equal(e.result.exitCode, 4);
      assert.equal(e.result.stdout.toString(), "out\n");
      return true;
    });
    assert.equal((await session.run("true", { check: true })).exitCode, 0);
    const k = await session.run("kill -9 $$");
    assert.deepEqual([k.exitCode, k.signal], [137, 9]);
  });

  test("stdin round trip, larger than any pipe", async () => {
    const data = randomBytes(3 << 20);
    const r = await session.run(["cat"], { input: data });
    assert.equal(r.exitCode, 0, r.stderr.toString());
    assert.equal(sha(r.stdout), sha(data));
    // A command that reads none of a large input ends all the same, and
    // its result reaches the client still writing that input (a daemon
    // that closed at once would reset it first, now and then: try often).
    for (let i = 0; i < 20; i++) {
      const ignored = await session.run("echo ignored", { input: data });
      assert.deepEqual([ignored.exitCode, ignored.stdout.toString()], [0, "ignored\n"]);
    }
    // No input is an empty stdin, not the caller's; a string is UTF-8.
    assert.equal((await session.run(["cat"])).stdout.length, 0);
    assert.equal((await session.run(["cat"], { input: "café" })).stdout.toString(), "café");
  });

  test("10 MB of output, byte-exact; both streams large at once", async () => {
    const data = Buffer.alloc(10 << 20);
    for (let off = 0, i = 0; off < data.length; off += 32, i++) createHash("sha256").update(`warden ${i}`).digest().copy(data, off);
    fs.writeFileSync(path.join(workspace, "big.bin"), data);
    const start = performance.now();
    const r = await session.run(["cat", "big.bin"]);
    const elapsed = performance.now() - start;
    assert.equal(r.exitCode, 0, r.stderr.toString());
    assert.equal(r.stdout.length, data.length);
    assert.ok(r.stdout.equals(data), "10 MB of output came back changed");
    assert.ok(elapsed < 20_000, `took ${elapsed} ms`);
    const both = await session.run("head -c 5000000 /dev/zero; head -c 5000000 /dev/zero >&2");
    assert.deepEqual([both.stdout.length, both.stderr.length], [5000000, 5000000]);
  });

  test("env and cwd", async () => {
    fs.mkdirSync(path.join(workspace, "sub"), { recursive: true });
    const r = await session.run('echo "$GREETING"; pwd', { env: { GREETING: "hi there" }, cwd: "sub" });
    assert.equal(r.exitCode, 0, r.stderr.toString());
    const [greeting, cwd] = r.stdout.toString().split("\n");
    assert.equal(greeting, "hi there");
    assert.ok(cwd.endsWith("/sub"), cwd);
  });

  test("a program the policy does not allow: 127 and warden's line", async () => {
    assert.equal((await session.run(["cat", "/dev/null"])).exitCode, 0);
    const r = await session.run(["ls", "/"]);
    assert.equal(r.exitCode, 127);
    assert.equal(r.stdout.length, 0);
    assert.match(r.error, /ls: command not found/);
    assert.match(r.error, /exec\.allow/);
    assert.equal(r.stderr.toString(), `warden: ${r.error}\n`);
    assert.equal(r.killedBy, null);
  });

  test("timeout: killedBy timeout, in time, with the output before it", async () => {
    const start = performance.now();
    const r = await session.run("echo started; sleep 10", { timeout: 500 });
    const elapsed = performance.now() - start;
    assert.equal(r.killedBy, "timeout");
    assert.equal(r.stdout.toString(), "started\n");
    assert.ok(r.exitCode >= 128, `exit ${r.exitCode}`);
    assert.match(r.error, /timeout/);
    assert.ok(elapsed < 5000, `took ${elapsed} ms`);
  });

  test("spawn streams output as it comes, takes stdin, and ends", async () => {
    const cmd = await session.spawn(["sh", "-c", 'echo ready; read line; echo "got $line"; echo bye >&2']);
    const seen = { stdout: "", stderr: "" };
    for await (const chunk of cmd) {
      seen[chunk.stream] += chunk.data.toString();
      // The command waits for this line: "ready" came while it ran.
      if (chunk.data.toString().includes("ready")) {
        await cmd.write("hello\n");
        cmd.end();
      }
    }
    const r = await cmd.wait();
    assert.equal(r.exitCode, 0);
    assert.deepEqual(seen, { stdout: "ready\ngot hello\n", stderr: "bye\n" });
    // A signal ends a command that would not end by itself.
    const sleeper = await session.spawn(["sleep", "30"]);
    setTimeout(() => sleeper.kill(15), 200);
    const killed = await sleeper.wait();
    assert.deepEqual([killed.exitCode, killed.signal], [143, 15]);
  });

  test("aborting a call kills its command: Interrupted", async () => {
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 300);
    await assert.rejects(session.run("sleep 2; touch aborted-ran", { signal: ac.signal }), warden.Interrupted);
    await new Promise((r) => setTimeout(r, 2500));
    assert.ok(!fs.existsSync(path.join(workspace, "aborted-ran")), "the aborted command went on");
  });
});

describe("errors", () => {
  test("an unknown session: NoSuchSession", async () => {
    const gone = new warden.Session(root.warden, "no-such-" + randomBytes(3).toString("hex"), false);
    await assert.rejects(gone.run("true"), (e: unknown) => {
      assert.ok(e instanceof warden.NoSuchSession);
      assert.equal(e.code, "no_such_session");
      assert.match(e.message, /no such session/);
      return true;
    });
    await assert.rejects(root.warden.session({ id: gone.id }), warden.NoSuchSession);
  });

  test("a policy refusal: PolicyRefused, and the allowed call works", async () => {
    assert.equal((await session.run('echo "$GREETING"', { env: { GREETING: "ok" } })).stdout.toString(), "ok\n");
    await assert.rejects(session.run("true", { env: { SECRET: "x" } }), (e: unknown) => {
      assert.ok(e instanceof warden.PolicyRefused);
      assert.match(e.message, /SECRET/);
      return true;
    });
    await assert.rejects(session.run("true", { timeout: 60_000 }), warden.PolicyRefused);
  });

  test("invalid input: InvalidInput, nothing made", async () => {
    await assert.rejects(root.warden.session({ policy: root.policy, workspace, id: "../bad" }), warden.InvalidInput);
    await assert.rejects(root.warden.session({ policy: root.policy, workspace: path.join(workspace, "missing") }), warden.InvalidInput);
    await assert.rejects(root.warden.session({ policyText: 'name = "x"\nbogus = 1\n', workspace }), (e: unknown) => {
      assert.ok(e instanceof warden.InvalidInput);
      assert.match(e.message, /bogus/);
      return true;
    });
    await assert.rejects(session.run([]), warden.InvalidInput);
    assert.deepEqual(
      (await root.warden.sessions()).map((s) => s.id),
      [session.id],
    );
  });

  test("an id that is taken: SessionExists", async () => {
    await assert.rejects(root.warden.session({ policy: root.policy, workspace, id: session.id }), warden.SessionExists);
  });

  test("every reply code of docs/protocol.md has its class", () => {
    const doc = fs.readFileSync(path.join(packageDir, "..", "..", "docs", "protocol.md"), "utf8");
    const table = doc.split("\n## Errors\n")[1];
    const codes = [...table.matchAll(/^\| `([a-z_]+)` \|/gm)].map((m) => m[1]);
    assert.ok(codes.includes("no_such_session"));
    for (const code of codes.filter((c) => !["command_not_found", "command_cannot_run"].includes(c))) {
      const e = warden.errorFor(code, "m");
      assert.notEqual(e.constructor, warden.WardenError, `no class for the code ${code}`);
      assert.equal(e.code, code);
      assert.ok(e instanceof warden.WardenError);
    }
    const unknown = warden.errorFor("some_new_code", "m");
    assert.equal(unknown.constructor, warden.WardenError);
    assert.equal(unknown.code, "some_new_code");
    assert.equal(warden.errorFor(undefined, "m").code, "internal");
  });

  test("a daemon that cannot start: DaemonUnavailable saying why", async () => {
    const d = traversableTempdir("warden-tsclient-nodaemon-");
    try {
      let w = new warden.Warden({ root: path.join(d, "root"), binary: "/bin/false" });
      await assert.rejects(w.sessions(), (e: unknown) => {
        assert.ok(e instanceof warden.DaemonUnavailable);
        assert.ok(e.message.includes(path.join(d, "root", "daemon.log")), e.message);
        return true;
      });
      const fake = path.join(d, "broken-warden");
      fs.writeFileSync(fake, "#!/bin/sh\necho 'warden: the configuration is broken: line 3' >&2\nexit 1\n", { mode: 0o755 });
      w = new warden.Warden({ root: path.join(d, "root"), binary: fake });
      const start = performance.now();
      await assert.rejects(w.ping(), /the configuration is broken: line 3/);
      assert.ok(performance.now() - start < 5000);
      w = new warden.Warden({ root: path.join(d, "root"), binary: path.join(d, "no-warden") });
      await assert.rejects(w.sessions(), /new Warden\(\{binary: PATH\}\)/);
    } finally {
      fs.rmSync(d, { recursive: true, force: true });
    }
  });
});

describe("sessions and the daemon", () => {
  test("close removes the session and leaves nothing of it", async () => {
    const ws = root.workspace();
    const s = await root.session(ws);
    assert.equal((await s.run("echo x > file; cat file")).stdout.toString(), "x\n");
    assert.notDeepEqual(root.leftovers(s.id), []);
    await s.close();
    assert.deepEqual(root.leftovers(s.id), []);
    assert.ok(!(await root.warden.sessions()).some((x) => x.id === s.id));
    // The workspace stays, with what the command wrote.
    assert.equal(fs.readFileSync(path.join(ws, "file"), "utf8"), "x\n");
    await s.remove(); // already gone: fine
    // Joining by id does not own: close leaves the session.
    const joined = await root.warden.session({ id: session.id });
    await joined.close();
    assert.ok((await root.warden.sessions()).some((x) => x.id === session.id));
  });

  test("a killed daemon is started again on the next call; the session goes on", async () => {
    const [pid] = root.daemons();
    process.kill(pid, "SIGKILL");
    while (root.daemons().includes(pid)) await new Promise((r) => setTimeout(r, 20));
    const r = await session.run("echo still here");
    assert.equal(r.stdout.toString(), "still here\n");
    assert.equal(root.daemons().length, 1);
    assert.notEqual(root.daemons()[0], pid);
  });
});

describe("example", () => {
  test("the tool loop runs and keeps its tools inside", () => {
    const example = path.join(packageDir, "dist", "examples", "tool-loop.js");
    const ws = root.workspace();
    const env = { ...process.env, WARDEN_ROOT: root.root, WARDEN_BINARY: binary };
    const p = spawnSync(process.execPath, [example, "--workspace", ws], { env, encoding: "utf8", timeout: 60_000 });
    assert.equal(p.status, 0, `stdout:\n${p.stdout}\nstderr:\n${p.stderr}`);
    const out = p.stdout;
    assert.match(out, /write_file notes\.txt -> wrote 3 lines/);
    assert.match(out, /execute_command "wc -l < notes\.txt" -> exit 0: 3/);
    assert.match(out, /read_file \.\.\/\.\.\/etc\/passwd -> refused: \.\.\/\.\.\/etc\/passwd is outside the workspace/);
    assert.match(out, /execute_command "cat \/etc\/shadow" -> exit 1:/);
    assert.match(out, /execute_command "curl https:\/\/example\.com" -> exit 127: /);
    const id = /done: 6 tool calls in session (\S+)/.exec(out)?.[1];
    assert.ok(id, out);
    root.ids.push(id);
    assert.equal(fs.readFileSync(path.join(ws, "notes.txt"), "utf8").split("\n")[0], "warden keeps the tools inside");
    // Without --workspace it makes a temporary one, and removes it.
    const tmp = traversableTempdir("warden-tsclient-tmp-");
    try {
      const q = spawnSync(process.execPath, [example], { env: { ...env, TMPDIR: tmp }, encoding: "utf8", timeout: 60_000 });
      assert.equal(q.status, 0, q.stderr);
      assert.match(q.stdout, /execute_command "wc -l < notes\.txt" -> exit 0: 3/);
      root.ids.push(/in session (\S+)/.exec(q.stdout)?.[1] ?? "");
      assert.deepEqual(fs.readdirSync(tmp), []);
    } finally {
      fs.rmdirSync(tmp);
    }
    // The example's sessions are gone with it.
    assert.ok(!execFileSync(binary, ["--root", root.root, "session", "ls"], { encoding: "utf8" }).includes(id));
  });
});

function sha(b: Buffer): string {
  return createHash("sha256").update(b).digest("hex");
}

describe("do", () => {
  const pool = (...args: string[]): string => execFileSync(binary, ["--root", root.root, "pool", ...args], { encoding: "utf8" });
  const poolStatus = (): { ready: number; hits: number } => {
    const st = JSON.parse(pool("status", "--format", "json")) as { ready: number; hits: number }[];
    assert.equal(st.length, 1, JSON.stringify(st));
    return st[0];
  };

  test("one command in a sandbox of its own: cold, then from a warm pool; nothing left", async () => {
    const ws = root.workspace();
    const before = (await root.warden.sessions()).map((s) => s.id).sort();
    const once = async (how: string): Promise<void> => {
      const r = await root.warden.do(["sh", "-c", "cat; echo err >&2; exit 4"], { policy: root.policy, workspace: ws, input: "one two\n" });
      assert.deepEqual([r.exitCode, r.stdout.toString(), r.stderr.toString()], [4, "one two\n", "err\n"], how);
      assert.deepEqual((await root.warden.sessions()).map((s) => s.id).sort(), before, `${how}: a session is left`);
    };
    await once("cold");
    const r = await root.warden.do("echo $GREETING", { policyText: fs.readFileSync(root.policy, "utf8"), workspace: ws, env: { GREETING: "hi" } });
    assert.equal(r.stdout.toString(), "hi\n");
    // The id of a session that exists is refused; that session stays.
    await assert.rejects(root.warden.do("true", { policy: root.policy, workspace: ws, id: session.id }), warden.SessionExists);
    assert.equal((await session.run("echo alive")).stdout.toString(), "alive\n");
    await assert.rejects(root.warden.do("true", { workspace: ws }), warden.InvalidInput);

    pool("fill", "--policy", root.policy, "--size", "1");
    try {
      const deadline = Date.now() + 60_000;
      while (poolStatus().ready !== 1) {
        assert.ok(Date.now() < deadline, "the pool never got ready");
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      const hits = poolStatus().hits;
      await once("pooled");
      assert.equal(poolStatus().hits, hits + 1, "the do did not claim from the pool");
    } finally {
      pool("drain");
    }
  });
});
