#!/usr/bin/env python3
"""A tiny agent tool loop on a warden session.

An agent framework gives its model three tools: execute_command runs in the
session's sandbox (bound to tool-loop.toml, next to this file); read_file
and write_file run in this process, confined to the session's workspace.
The "model" here is a fixed list of the calls a model would make, so the
example runs without one; put an LLM's tool calls in its place.

    sudo python3 tool_loop.py [--workspace DIR] [--policy FILE]

The state root is $WARDEN_ROOT (default /run/warden), the warden binary
that starts the daemon when none runs $WARDEN_BINARY (default: warden on
PATH).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from typing import Callable, Dict, List, Tuple

import warden

HERE = os.path.dirname(os.path.abspath(__file__))


class Tools:
    def __init__(self, session: warden.Session, workspace: str) -> None:
        self.session = session
        self.workspace = os.path.realpath(workspace)

    def execute_command(self, command: str) -> str:
        # The command's own failure is the model's to read; warden's
        # failures (WardenError) are the framework's and propagate.
        r = self.session.run(command, timeout=10)
        out = (r.stdout + r.stderr).decode("utf-8", "replace").strip()
        if r.killed_by:
            return f"killed by {r.killed_by}: {out}"
        return f"exit {r.returncode}: {out}"

    def _inside(self, path: str) -> str:
        """The host path of a workspace file; anything that resolves
        outside the workspace (.., an absolute path, a symlink a command
        planted) is refused."""
        full = os.path.realpath(os.path.join(self.workspace, path))
        if os.path.commonpath([full, self.workspace]) != self.workspace:
            raise PermissionError(f"{path} is outside the workspace")
        return full

    def read_file(self, path: str) -> str:
        fd = os.open(self._inside(path), os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, encoding="utf-8", errors="replace") as f:
            return f.read(64 << 10)

    def write_file(self, path: str, content: str) -> str:
        fd = os.open(self._inside(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(content)
        return f"wrote {content.count(chr(10))} lines"


# What a model would ask for, one tool call at a time.
SCRIPT: List[Tuple[str, Tuple[str, ...]]] = [
    ("write_file", ("notes.txt", "warden keeps the tools inside\nsecond line\nthird line\n")),
    ("execute_command", ("wc -l < notes.txt",)),
    ("read_file", ("notes.txt",)),
    ("read_file", ("../../etc/passwd",)),
    ("execute_command", ("cat /etc/shadow",)),
    ("execute_command", ("curl https://example.com",)),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workspace", help="the session's workspace (default: a new temporary folder)")
    ap.add_argument("--policy", default=os.path.join(HERE, "tool-loop.toml"))
    args = ap.parse_args()
    workspace = args.workspace or tempfile.mkdtemp(prefix="tool-loop-")
    try:
        if not args.workspace:
            os.chmod(workspace, 0o755)  # the sandbox's user must reach it
        return run(workspace, args.policy)
    finally:
        if not args.workspace:
            shutil.rmtree(workspace)  # ours: made above


def run(workspace: str, policy: str) -> int:
    client = warden.Client(binary=os.environ.get("WARDEN_BINARY", "warden"))
    with client.session(policy=policy, workspace=workspace) as session:
        tools = Tools(session, workspace)
        table: Dict[str, Callable[..., str]] = {
            "execute_command": tools.execute_command,
            "read_file": tools.read_file,
            "write_file": tools.write_file,
        }
        for name, call_args in SCRIPT:
            try:
                result = table[name](*call_args)
            except (OSError, PermissionError) as e:
                result = f"refused: {e}" if isinstance(e, PermissionError) else f"error: {e}"
            shown = repr(call_args[0]) if name == "execute_command" else call_args[0]
            # What goes back to the model as the tool's answer.
            print(f"{name} {shown} -> {result.splitlines()[0] if result else ''}")
        print(f"done: {len(SCRIPT)} tool calls in session {session.id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
