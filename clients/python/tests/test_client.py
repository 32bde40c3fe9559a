"""The warden Python client against a real daemon on a temporary state root."""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
import unittest
from typing import Any, Dict, List, Optional

import harness
import warden  # noqa: E402 (harness puts the package on sys.path)

ROOT: Optional[harness.Root] = None
SESSION: Optional[warden.Session] = None
WORKSPACE = ""


def setUpModule() -> None:
    global ROOT, SESSION, WORKSPACE
    ROOT = harness.Root()  # raises (the run fails) without root or a binary
    WORKSPACE = ROOT.workspace()
    SESSION = ROOT.session(WORKSPACE)


def tearDownModule() -> None:
    if ROOT is None:
        return
    problems = ROOT.close()
    if problems:
        raise AssertionError("; ".join(problems))


def session() -> warden.Session:
    assert SESSION is not None
    return SESSION


def root() -> harness.Root:
    assert ROOT is not None
    return ROOT


class RunTest(unittest.TestCase):
    def test_echo(self) -> None:
        r = session().run(["sh", "-c", "echo hello; echo to-stderr >&2"])
        self.assertEqual(r.returncode, 0)
        self.assertEqual(r.stdout, b"hello\n")
        self.assertEqual(r.stderr, b"to-stderr\n")
        self.assertEqual(r.args, ["sh", "-c", "echo hello; echo to-stderr >&2"])
        self.assertIsNone(r.killed_by)
        self.assertEqual(r.error, "")
        self.assertGreater(r.duration, 0)
        self.assertLess(r.duration, 10)

    def test_command_string(self) -> None:
        r = session().run("echo $((6 * 7)) | cat")
        self.assertEqual(r.args, ["sh", "-c", "echo $((6 * 7)) | cat"])
        self.assertEqual((r.returncode, r.stdout), (0, b"42\n"))

    def test_text_that_is_not_utf8(self) -> None:
        # UTF-8 bytes are text; other bytes, and os.listdir's surrogate
        # escapes of them, are refused rather than turned into another name.
        r = session().run([b"sh", b"-c", b'echo "$0"', "caf\u00e9".encode("utf-8")])
        self.assertEqual((r.returncode, r.stdout), (0, "caf\u00e9\n".encode("utf-8")))
        with self.assertRaises(warden.InvalidInput):
            session().run(["sh", "-c", "true", b"\xff".decode("utf-8", "surrogateescape")])
        with self.assertRaises(warden.InvalidInput):
            session().run([b"sh", b"\xff"])

    def test_exit_status_is_the_commands(self) -> None:
        r = session().run("exit 3")
        self.assertEqual(r.returncode, 3)
        self.assertEqual(r.stderr, b"")
        with self.assertRaises(warden.CalledProcessError) as cm:
            session().run("echo out; exit 4", check=True)
        self.assertEqual((cm.exception.returncode, cm.exception.output), (4, b"out\n"))
        self.assertNotIsInstance(cm.exception, warden.WardenError)
        self.assertIsInstance(cm.exception, subprocess.CalledProcessError)
        self.assertEqual(session().run("true", check=True).returncode, 0)

    def test_stdin_round_trip(self) -> None:
        data = os.urandom(3 << 20)  # above any pipe buffer: stdin and stdout flow at once
        r = session().run(["cat"], input=data)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(hashlib.sha256(r.stdout).hexdigest(), hashlib.sha256(data).hexdigest())
        # A command that reads none of a large input ends all the same.
        r = session().run("echo ignored", input=data)
        self.assertEqual((r.returncode, r.stdout), (0, b"ignored\n"))
        # No input is an empty stdin, not the caller's.
        self.assertEqual(session().run(["cat"]).stdout, b"")

    def test_large_output_byte_exact(self) -> None:
        data = hashlib.shake_256(b"warden").digest(10 << 20)
        with open(os.path.join(WORKSPACE, "big.bin"), "wb") as f:
            f.write(data)
        start = time.monotonic()
        r = session().run(["cat", "big.bin"])
        elapsed = time.monotonic() - start
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(r.stdout), len(data))
        self.assertTrue(r.stdout == data, "10 MB of output came back changed")
        self.assertLess(elapsed, 20)
        # Both streams large at once: neither may block the other.
        r = session().run("head -c 5000000 /dev/zero; head -c 5000000 /dev/zero >&2")
        self.assertEqual((len(r.stdout), len(r.stderr)), (5000000, 5000000))

    def test_env_and_cwd(self) -> None:
        os.makedirs(os.path.join(WORKSPACE, "sub"), exist_ok=True)
        r = session().run('echo "$GREETING"; pwd', env={"GREETING": "hi there"}, cwd="sub")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.decode().splitlines()
        self.assertEqual(lines[0], "hi there")
        self.assertTrue(lines[1].endswith("/sub"), lines[1])

    def test_caller_env_follows_changes(self) -> None:
        # The caller's env.allow names pass, as the environment is at each
        # call: a change between two calls reaches the second; a value
        # that is not UTF-8 is left out, the others still pass.
        saved = {k: os.environb.get(k) for k in (b"GREETING", b"LANG")}
        try:
            for value in (b"first", b"second"):
                os.environb[b"GREETING"] = value
                r = session().run('echo "${GREETING-unset}"; echo "${LANG-unset}"')
                self.assertEqual(r.stdout.decode().splitlines()[0], value.decode(), r.stderr)
            os.environ["LANG"] = "C.UTF-8"
            os.environb[b"GREETING"] = b"\xff"
            r = session().run('echo "${GREETING-unset}"; echo "${LANG-unset}"')
            self.assertEqual(r.stdout.decode().splitlines(), ["unset", "C.UTF-8"], r.stderr)
            del os.environ["GREETING"]
            r = session().run('echo "${GREETING-unset}"')
            self.assertEqual(r.stdout, b"unset\n", r.stderr)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environb.pop(k, None)
                else:
                    os.environb[k] = v

    def test_refused_program(self) -> None:
        # cat is in exec.allow and runs; ls is not: 127, and warden's line.
        self.assertEqual(session().run(["cat", "/dev/null"]).returncode, 0)
        r = session().run(["ls", "/"])
        self.assertEqual(r.returncode, 127)
        self.assertEqual(r.stdout, b"")
        self.assertIn("ls: command not found", r.error)
        self.assertIn("exec.allow", r.error)
        self.assertEqual(r.stderr, f"warden: {r.error}\n".encode())
        self.assertIsNone(r.killed_by)
        # Through a shell the shell reports it, as it would on the host.
        r = session().run("ls /")
        self.assertEqual(r.returncode, 127)
        self.assertIn(b"not found", r.stderr)

    def test_timeout(self) -> None:
        start = time.monotonic()
        r = session().run("echo started; sleep 10", timeout=0.5)
        elapsed = time.monotonic() - start
        self.assertEqual(r.killed_by, "timeout")
        self.assertEqual(r.returncode, 137)
        self.assertEqual(r.stdout, b"started\n")
        self.assertIn("timeout", r.error)
        self.assertIn(b"warden: killed: timeout", r.stderr)
        self.assertGreaterEqual(r.duration, 0.5)
        self.assertLess(elapsed, 5)
        # The session goes on.
        self.assertEqual(session().run("echo after").stdout, b"after\n")


class ErrorTest(unittest.TestCase):
    def test_unknown_session(self) -> None:
        s = warden.Session(root().client, "no-such-session-7")
        with self.assertRaises(warden.NoSuchSession) as cm:
            s.run("echo never")
        e = cm.exception
        self.assertIsInstance(e, warden.WardenError)
        self.assertEqual(e.code, "no_such_session")
        self.assertIn("no such session: no-such-session-7", e.message)
        with self.assertRaises(warden.NoSuchSession):
            root().client.session(id="no-such-session-7")

    def test_policy_refused(self) -> None:
        with self.assertRaises(warden.PolicyRefused) as cm:
            session().run("true", env={"NOT_ALLOWED": "x"})
        self.assertEqual(cm.exception.code, "policy_refused")
        self.assertIn("NOT_ALLOWED", cm.exception.message)
        with self.assertRaises(warden.PolicyRefused):
            session().run("true", timeout=60)  # above limits.timeout (20s)

    def test_invalid_input(self) -> None:
        with self.assertRaises(warden.InvalidInput) as cm:
            root().client.session(policy=root().policy, workspace=root().workspace(), id="bad id!")
        self.assertEqual(cm.exception.code, "invalid_input")
        with self.assertRaises(warden.InvalidInput) as cm2:
            root().client.session(policy=root().policy, workspace=os.path.join(root().dir, "missing"))
        self.assertIn("not a directory", cm2.exception.message)
        # A request above the protocol's 1 MiB is refused before it is sent.
        with self.assertRaises(warden.InvalidInput) as cm3:
            session().run(["sh", "-c", "touch ran", "x" * (1 << 20)])
        self.assertIn("1 MiB", cm3.exception.message)
        self.assertFalse(os.path.exists(os.path.join(WORKSPACE, "ran")))
        # Just below it passes: the socket's send buffer takes one packet
        # (in arguments of 120 KiB: the kernel takes 128 KiB at most each).
        count = 'n=0; for a; do n=$((n + ${#a})); done; echo "$#" "$n"'
        r = session().run(["sh", "-c", count, "sh"] + ["x" * (120 << 10)] * 8)
        self.assertEqual((r.returncode, r.stdout), (0, b"8 983040\n"), r.stderr)

    def test_session_exists(self) -> None:
        with self.assertRaises(warden.SessionExists) as cm:
            root().client.session(policy=root().policy, workspace=WORKSPACE, id=session().id)
        self.assertEqual(cm.exception.code, "session_exists")

    def test_unknown_code_is_a_warden_error(self) -> None:
        e = warden._errors.error_for("a_code_of_tomorrow", "something new")
        self.assertIs(type(e), warden.WardenError)
        self.assertEqual((e.code, e.message), ("a_code_of_tomorrow", "something new"))
        self.assertIs(type(warden._errors.error_for(None, "old daemon")), warden.Internal)

    def test_every_reply_code_has_a_class(self) -> None:
        # docs/protocol.md's table is the list of codes; those of results
        # and of clients only never come in an error reply.
        with open(os.path.join(harness.PACKAGE_DIR, "..", "..", "docs", "protocol.md")) as f:
            errors = f.read().split("\n## Errors\n", 1)[1]
        codes = re.findall(r"^\| `([a-z_]+)` \|", errors, re.M)
        self.assertIn("no_such_session", codes)
        for code in sorted(set(codes) - {"command_not_found", "command_cannot_run", "interrupted"}):
            e = warden._errors.error_for(code, "m")
            self.assertIsNot(type(e), warden.WardenError, f"no class for the code {code}")
            self.assertEqual(e.code, code)
            self.assertIn(type(e).__name__, warden.__all__)

    def test_daemon_that_cannot_start(self) -> None:
        d = harness.traversable_tempdir("warden-pyclient-nodaemon-")
        try:
            c = warden.Client(root=os.path.join(d, "root"), binary="/bin/false")
            with self.assertRaises(warden.DaemonUnavailable) as cm:
                c.sessions()
            self.assertEqual(cm.exception.code, "daemon_unavailable")
            self.assertIn(os.path.join(d, "root", "daemon.log"), cm.exception.message)
            # A daemon that says why it failed: its last line is the error.
            fake = os.path.join(d, "broken-warden")
            with open(fake, "w") as f:
                f.write("#!/bin/sh\necho 'warden: the configuration is broken: line 3' >&2\nexit 1\n")
            os.chmod(fake, 0o755)
            c = warden.Client(root=os.path.join(d, "root"), binary=fake)
            start = time.monotonic()
            with self.assertRaises(warden.DaemonUnavailable) as cm:
                c.ping()
            self.assertIn("the configuration is broken: line 3", cm.exception.message)
            self.assertLess(time.monotonic() - start, 5)
            c = warden.Client(root=os.path.join(d, "root"), binary=os.path.join(d, "no-warden"))
            with self.assertRaises(warden.DaemonUnavailable) as cm:
                c.sessions()
            self.assertIn("Client(binary=PATH)", cm.exception.message)
        finally:
            subprocess.run(["rm", "-rf", d], check=True)


class SessionTest(unittest.TestCase):
    def test_removal_leaves_nothing(self) -> None:
        client = root().client
        ws = root().workspace()
        with open(os.path.join(ws, "keep.txt"), "w") as f:
            f.write("the caller's file\n")
        sid = "pyclient-rm-" + secrets.token_hex(3)  # cgroups are named by id, host-wide
        with root().session(ws, id=sid) as s:
            self.assertEqual(s.id, sid)
            self.assertIn(sid, [x["id"] for x in client.sessions()])
            self.assertEqual(s.run("cat keep.txt; echo made > made.txt").stdout, b"the caller's file\n")
            self.assertNotEqual(root().leftovers(s.id), [], "the leftover check finds nothing even while the session lives")
            # Joined by id, the session is the same one, and leaving its
            # block does not remove it.
            with client.session(id=s.id) as joined:
                self.assertEqual(joined.run("cat made.txt").stdout, b"made\n")
            self.assertIn(s.id, [x["id"] for x in client.sessions()])
        self.assertNotIn(sid, [x["id"] for x in client.sessions()])
        self.assertEqual(root().leftovers(sid), [])
        # The workspace is the caller's: kept, with what the command wrote.
        self.assertEqual(sorted(os.listdir(ws)), ["keep.txt", "made.txt"])
        s.remove()  # removing it again is fine

    def test_session_list_empty_after_removal(self) -> None:
        client = root().client
        ids = [x["id"] for x in client.sessions()]
        self.assertIn(session().id, ids)
        info = [x for x in client.sessions() if x["id"] == session().id][0]
        self.assertEqual(info["policy"], "pyclient-test")
        self.assertEqual(info["workspace"], WORKSPACE)
        self.assertEqual(info["state"], "running")
        with root().session(root().workspace()) as other:
            other.run("true", check=True)
        for s in client.sessions():
            if s["id"] != session().id:
                warden.Session(client, s["id"]).remove()
        session_id = session().id
        try:
            session().remove()
            self.assertEqual(client.sessions(), [])
            self.assertEqual(root().leftovers(session_id), [])
            self.assertEqual(root().leftovers(other.id), [])
            self.assertEqual(root().processes(), [], "sandbox processes are left")
        finally:
            # The other tests share the module's session: give it back.
            global SESSION
            SESSION = root().session(WORKSPACE)


class DoTest(unittest.TestCase):
    def pool(self, *args: str) -> str:
        out = subprocess.run([harness.BINARY, "--root", root().root, "pool", *args], capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        return out.stdout

    def pool_status(self) -> Dict[str, Any]:
        st = json.loads(self.pool("status", "--format", "json"))
        self.assertEqual(len(st), 1, st)
        return st[0]  # type: ignore[no-any-return]

    def test_do_cold_and_pooled(self) -> None:
        client = root().client
        ws = root().workspace()
        before = {s["id"] for s in client.sessions()}

        def words(how: str) -> None:
            r = client.do(["sh", "-c", "cat; echo err >&2; exit 4"], policy=root().policy, workspace=ws, input=b"one two three\n")
            self.assertEqual((r.returncode, r.stdout, r.stderr), (4, b"one two three\n", b"err\n"), how)
            self.assertEqual({s["id"] for s in client.sessions()}, before, f"{how}: a session is left")

        # No pool: a session made for the call and removed after it.
        words("cold")
        r = client.do("echo $GREETING", policy=root().policy, workspace=ws, env={"GREETING": "hi"}, check=True)
        self.assertEqual(r.stdout, b"hi\n")
        with self.assertRaises(warden.CalledProcessError):
            client.do("exit 2", policy=root().policy, workspace=ws, check=True)
        # The id of a session that exists is refused; that session stays.
        with self.assertRaises(warden.SessionExists):
            client.do("true", policy=root().policy, workspace=ws, id=session().id)
        self.assertEqual(session().run("echo alive").stdout, b"alive\n")

        # A warm pool of the policy: the do claims from it.
        self.pool("fill", "--policy", root().policy, "--size", "1")
        try:
            deadline = time.monotonic() + 60
            while self.pool_status()["ready"] != 1:
                self.assertLess(time.monotonic(), deadline, "the pool never got ready")
                time.sleep(0.05)
            hits = self.pool_status()["hits"]
            words("pooled")
            self.assertEqual(self.pool_status()["hits"], hits + 1, "the do did not claim from the pool")
        finally:
            self.pool("drain")


class InterruptTest(unittest.TestCase):
    def test_interrupted_caller_kills_the_command(self) -> None:
        # Ctrl-C in the caller (KeyboardInterrupt in run) closes the
        # connection, and the daemon kills the command.
        script = (
            "import sys, time, warden\n"
            "c = warden.Client(root=sys.argv[1], binary=sys.argv[2])\n"
            "try:\n"
            "    warden.Session(c, sys.argv[3]).run('sleep 30')\n"
            "except KeyboardInterrupt as e:\n"
            "    kept = e  # its traceback keeps run's frame: the close must not wait for it\n"
            "    print('interrupted', flush=True)\n"
            "    time.sleep(5)\n"
        )
        env = dict(os.environ, PYTHONPATH=harness.PACKAGE_DIR)
        child = subprocess.Popen(
            [sys.executable, "-c", script, root().root, harness.BINARY, session().id],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        try:
            self.assertTrue(self._running_becomes(1), "the command never ran")
            child.send_signal(signal.SIGINT)
            assert child.stdout is not None
            self.assertEqual(child.stdout.readline(), b"interrupted\n")
            self.assertTrue(self._running_becomes(0), "the command still runs after its caller was interrupted")
            self.assertIsNone(child.poll())  # its caller is still there: run() let go itself
        finally:
            child.kill()
            child.communicate()
        self.assertEqual(session().run("echo fine").stdout, b"fine\n")

    def _running_becomes(self, n: int) -> bool:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            info = [x for x in root().client.sessions() if x["id"] == session().id]
            if info and info[0].get("running", 0) == n:
                return True
            time.sleep(0.02)
        return False


class DaemonTest(unittest.TestCase):
    def test_killed_daemon_is_restarted(self) -> None:
        # kill -9 leaves a socket file nobody answers on: the next call
        # starts a daemon again, which adopts the running session.
        before = root().daemons()
        self.assertEqual(len(before), 1, f"daemons of the root: {before}")
        os.kill(before[0], signal.SIGKILL)
        deadline = time.monotonic() + 10
        # Gone means reaped (the client's thread waits for its daemon): a
        # dying process loses its cmdline before its listening socket.
        while os.path.exists(f"/proc/{before[0]}") and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertFalse(os.path.exists(f"/proc/{before[0]}"), "the killed daemon was not reaped")
        self.assertTrue(os.path.exists(os.path.join(root().root, "warden.sock")))
        r = session().run("echo back")
        self.assertEqual((r.returncode, r.stdout), (0, b"back\n"))
        after = root().daemons()
        self.assertEqual(len(after), 1)
        self.assertNotEqual(after, before)
        self.assertEqual(root().client.ping(), warden.PROTOCOL_VERSION)


class RaceTest(unittest.TestCase):
    def test_clients_racing_to_start_the_daemon(self) -> None:
        # Clients that find no daemon at once each start one; one gets the
        # root's lock, the others exit, and every client is served.
        r = harness.Root()
        try:
            results: List[object] = []

            def ping() -> None:
                try:
                    results.append(warden.Client(root=r.root, binary=harness.BINARY).ping())
                except Exception as e:  # reported below
                    results.append(e)

            threads = [threading.Thread(target=ping) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            self.assertEqual(results, [warden.PROTOCOL_VERSION] * 4)
            # The losers exit as soon as they find the lock taken.
            deadline = time.monotonic() + 5
            while len(r.daemons()) > 1 and time.monotonic() < deadline:
                time.sleep(0.02)
            self.assertEqual(len(r.daemons()), 1, r.daemons())
        finally:
            problems = r.close()
        self.assertEqual(problems, [])


class ExampleTest(unittest.TestCase):
    def test_tool_loop(self) -> None:
        example = os.path.join(harness.PACKAGE_DIR, "examples", "tool_loop.py")
        ws = root().workspace()
        env = dict(os.environ, WARDEN_ROOT=root().root, WARDEN_BINARY=harness.BINARY, PYTHONPATH=harness.PACKAGE_DIR)
        p = subprocess.run([sys.executable, example, "--workspace", ws], env=env, capture_output=True, timeout=60)
        out = p.stdout.decode()
        self.assertEqual(p.returncode, 0, f"stdout:\n{out}\nstderr:\n{p.stderr.decode()}")
        self.assertIn("write_file notes.txt -> wrote 3 lines", out)
        self.assertIn("execute_command 'wc -l < notes.txt' -> exit 0: 3", out)
        self.assertIn("read_file ../../etc/passwd -> refused: ../../etc/passwd is outside the workspace", out)
        self.assertIn("execute_command 'cat /etc/shadow' -> exit 1:", out)
        self.assertIn("execute_command 'curl https://example.com' -> exit 127: ", out)
        self.assertIn("done: 6 tool calls in session ", out)
        root().ids.append(out.split("in session ")[1].split()[0])
        with open(os.path.join(ws, "notes.txt")) as f:
            self.assertEqual(f.read().splitlines()[0], "warden keeps the tools inside")
        # The example's session is gone with it.
        self.assertEqual([x["id"] for x in root().client.sessions()], [session().id])
        # Without --workspace it makes a temporary one, and removes it.
        tmp = harness.traversable_tempdir("warden-pyclient-tmp-")
        try:
            p = subprocess.run([sys.executable, example], env=dict(env, TMPDIR=tmp), capture_output=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr.decode())
            self.assertIn(b"execute_command 'wc -l < notes.txt' -> exit 0: 3", p.stdout)
            root().ids.append(p.stdout.decode().split("in session ")[1].split()[0])
            self.assertEqual(os.listdir(tmp), [])
        finally:
            os.rmdir(tmp)


if __name__ == "__main__":
    unittest.main()
