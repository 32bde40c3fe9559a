"""A private warden state root for the tests: a temporary folder, the warden
binary of WARDEN_BINARY (default: the repository's bin/warden), and the
daemon the client starts on it, stopped and checked for leftovers at the
end. The tests need root (real sandboxes) and fail, not skip, without it."""

from __future__ import annotations

import glob
import hashlib
import os
import secrets
import shutil
import signal
import sys
import tempfile
import time
from typing import List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_DIR = os.path.dirname(HERE)
sys.path.insert(0, PACKAGE_DIR)

import warden  # noqa: E402

BINARY = os.path.abspath(os.environ.get("WARDEN_BINARY") or os.path.join(PACKAGE_DIR, "..", "..", "bin", "warden"))

POLICY = """\
name = "pyclient-test"
[fs]
write = ["$WORK_DIR"]
[exec]
allow = ["sh", "cat", "head", "sleep"]
[env]
allow = ["LANG", "GREETING"]
[limits]
timeout = "20s"
"""


def require() -> None:
    """Fail (the caller raises) when the tests cannot run here."""
    if os.geteuid() != 0:
        raise RuntimeError("the warden Python client's tests run real sandboxes and need root: run them with sudo")
    if not os.access(BINARY, os.X_OK):
        raise RuntimeError(f"no warden binary at {BINARY}: run `make build`, or set WARDEN_BINARY")


def traversable_tempdir(prefix: str) -> str:
    """A temporary folder the sandbox's unprivileged host user can traverse."""
    d = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    os.chmod(d, 0o755)
    return d


class Root:
    def __init__(self) -> None:
        require()
        self.dir = traversable_tempdir("warden-pyclient-")
        self.root = os.path.join(self.dir, "root")
        self.skill = os.path.join(self.dir, "skill")
        os.mkdir(self.skill, 0o755)
        self.policy = os.path.join(self.skill, "policy.toml")
        with open(self.policy, "w") as f:
            f.write(POLICY)
        self.client = warden.Client(root=self.root, binary=BINARY)
        self.ids: List[str] = []  # every session the tests made, for the leak checks
        # The root's cgroups are named by a hash of its path.
        self.cgroup_key = hashlib.sha256(self.root.encode()).hexdigest()[:12]

    def session(self, workspace: str, id: Optional[str] = None) -> warden.Session:
        s = self.client.session(policy=self.policy, workspace=workspace, id=id)
        self.ids.append(s.id)
        return s

    def workspace(self) -> str:
        d = os.path.join(self.dir, "ws-" + secrets.token_hex(3))
        os.mkdir(d, 0o755)
        return d

    def daemons(self) -> List[int]:
        """The pids of this root's daemons (started by this test's client)."""
        want = [BINARY, "--root", self.root, "daemon"]
        pids = []
        for p in glob.glob("/proc/[0-9]*/cmdline"):
            try:
                with open(p, "rb") as f:
                    argv = f.read().split(b"\0")[:-1]
            except OSError:
                continue
            if [a.decode("utf-8", "replace") for a in argv] == want:
                pids.append(int(p.split("/")[2]))
        return pids

    def leftovers(self, session_id: str) -> List[str]:
        """What is left on the host of a session: state, container, cgroups."""
        left = []
        for d in ("sessions", "containers"):
            if os.path.lexists(os.path.join(self.root, d, session_id)):
                left.append(f"{d}/{session_id} under the root")
        left += glob.glob(f"/sys/fs/cgroup/*/warden/{self.cgroup_key}/{session_id}")
        left += glob.glob(f"/sys/fs/cgroup/warden/{self.cgroup_key}/{session_id}")
        return left

    def processes(self) -> List[int]:
        """Processes whose mounts name this root's folder: its sandboxes'
        agents and commands (their mounts live in their own namespaces)."""
        pids = []
        for p in glob.glob("/proc/[0-9]*/mountinfo"):
            try:
                with open(p, "rb") as f:
                    if (self.dir + "/").encode() in f.read():
                        pids.append(int(p.split("/")[2]))
            except OSError:
                continue
        return pids

    def close(self) -> List[str]:
        """Remove every session, stop the daemon, and return what is left
        (nothing, when all went well); the folder goes only then."""
        problems: List[str] = []
        try:
            for s in self.client.sessions():
                self.ids.append(s["id"])
                warden.Session(self.client, s["id"]).remove()
            left = self.client.sessions()
            if left:
                problems.append(f"sessions left after their removal: {[s['id'] for s in left]}")
        except warden.WardenError as e:
            problems.append(f"removing the sessions: {e}")
        for pid in self.daemons():
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while self.daemons() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.daemons():
            problems.append(f"the daemon of {self.root} did not stop: {self.daemons()}")
        groups = glob.glob(f"/sys/fs/cgroup/*/warden/{self.cgroup_key}") + glob.glob(f"/sys/fs/cgroup/warden/{self.cgroup_key}")
        if groups:
            problems.append(f"the root's cgroup folders are left: {groups}")
        for id in sorted(set(self.ids)):
            problems += [f"session {id}: {x} left" for x in self.leftovers(id)]
        pids = self.processes()
        if pids:
            # Never delete the state of sandboxes that still run: leave
            # the folder for whoever looks into the failure.
            problems.append(f"processes of {self.dir}'s sandboxes are left: {pids}; the folder is kept")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)
        return problems
