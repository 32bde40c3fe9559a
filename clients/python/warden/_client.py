"""The client of a warden daemon: its socket protocol (docs/protocol.md)."""

from __future__ import annotations

import array
import json
import os
import secrets
import select
import shutil
import socket
import subprocess
import threading
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from ._errors import CalledProcessError, DaemonUnavailable, InvalidInput, NoSuchSession, NotPooled, error_for

PROTOCOL_VERSION = 1
MAX_MESSAGE = 1 << 20  # a packet is at most 1 MiB
# A request above this raises the socket's send buffer first (the default,
# net.core.wmem_default, is ~208 KiB); smaller ones save the system call.
_BIG_MESSAGE = 32 << 10
_SO_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32)
_DEFAULT_ROOT = "/run/warden"
_START_TIMEOUT = 10.0  # seconds to wait for a daemon this client started, as the CLI
# What a daemon that finds the root's lock taken says as it exits.
_ALREADY_SERVED = "a warden daemon already serves this root"

Argv = Union[str, Sequence[Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]]]


class CompletedProcess(subprocess.CompletedProcess):  # type: ignore[type-arg]
    """How a command ended, as ``subprocess.run`` reports it, plus what warden
    knows: ``killed_by`` ("timeout", "memory" or None), ``signal`` (the
    signal that ended it, or 0), ``duration`` (seconds) and ``error``
    (warden's message when the command never started or warden killed it,
    else "")."""

    args: List[str]
    returncode: int
    stdout: bytes
    stderr: bytes

    def __init__(
        self,
        args: List[str],
        returncode: int,
        stdout: bytes,
        stderr: bytes,
        *,
        killed_by: Optional[str] = None,
        signal: int = 0,
        duration: float = 0.0,
        error: str = "",
    ) -> None:
        super().__init__(args, returncode, stdout, stderr)
        self.killed_by = killed_by
        self.signal = signal
        self.duration = duration
        self.error = error

    def check_returncode(self) -> None:
        if self.returncode:
            raise CalledProcessError(self.returncode, self.args, self.stdout, self.stderr)

    def __repr__(self) -> str:
        return (
            f"CompletedProcess(args={self.args!r}, returncode={self.returncode!r}, "
            f"killed_by={self.killed_by!r}, duration={self.duration:.3f}, "
            f"stdout={self.stdout[:80]!r}, stderr={self.stderr[:80]!r})"
        )


class Client:
    """A client of the warden daemon of one state root.

    ``root`` defaults to $WARDEN_ROOT, else /run/warden. When no daemon
    answers on ROOT/warden.sock, the client starts one with
    ``BINARY --root ROOT daemon`` (as the warden CLI does) and waits for it.
    """

    def __init__(self, root: Optional[str] = None, binary: str = "warden") -> None:
        root = root or os.environ.get("WARDEN_ROOT") or _DEFAULT_ROOT
        self.root = os.path.abspath(root)
        self.binary = binary
        self.socket_path = os.path.join(self.root, "warden.sock")
        self._start_lock = threading.Lock()

    # -- connections ------------------------------------------------------

    def _dial(self, big: bool = True) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        try:
            sock.connect(self.socket_path)
        except BaseException:
            sock.close()
            raise
        # A large request (a policy, a long argv) must fit in one packet.
        if big:
            for opt in (_SO_SNDBUFFORCE, socket.SO_SNDBUF):
                try:
                    sock.setsockopt(socket.SOL_SOCKET, opt, 2 * MAX_MESSAGE)
                    break
                except OSError:
                    continue
        return sock

    def _connect(self, big: bool = True) -> socket.socket:
        """A connection to the daemon (started if none answers); ``big``
        when the request to send is above _BIG_MESSAGE bytes."""
        try:
            return self._dial(big)
        except (FileNotFoundError, ConnectionRefusedError):
            pass
        except OSError as e:
            raise DaemonUnavailable(f"warden daemon at {self.socket_path}: {e.strerror or e}") from None
        with self._start_lock:
            try:
                return self._dial(big)
            except (FileNotFoundError, ConnectionRefusedError):
                return self._start_daemon(big)

    def _start_daemon(self, big: bool = True) -> socket.socket:
        """Start ``warden --root ROOT daemon`` detached (its output to
        ROOT/daemon.log) and wait until its socket answers. A second daemon
        started by a racing client finds the root locked and exits, so the
        socket answering is what counts, not our child living."""
        binary = shutil.which(self.binary) if os.sep not in self.binary else self.binary
        if not binary or not os.access(binary, os.X_OK):
            raise DaemonUnavailable(
                f"no warden daemon answers on {self.socket_path}, and the warden binary "
                f"{self.binary!r} to start one was not found; install warden or pass "
                f"Client(binary=PATH)"
            )
        try:
            os.makedirs(self.root, mode=0o711, exist_ok=True)
        except OSError as e:
            raise DaemonUnavailable(f"state root {self.root}: {e.strerror or e}") from None
        log_path = os.path.join(self.root, "daemon.log")
        with open(log_path, "ab") as log:
            os.chmod(log_path, 0o600)
            offset = log.tell()
            proc = subprocess.Popen(
                [binary, "--root", self.root, "daemon"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd="/",
                start_new_session=True,
                close_fds=True,
            )
        # Reap it whenever it exits, so it never lingers as a zombie.
        threading.Thread(target=proc.wait, name="warden-daemon-reaper", daemon=True).start()
        deadline = time.monotonic() + _START_TIMEOUT
        other_serves = False
        while True:
            try:
                return self._dial(big)
            except (FileNotFoundError, ConnectionRefusedError):
                pass
            code = proc.poll() if not other_serves else None
            if code is not None:
                last = _last_line(log_path, offset)
                if _ALREADY_SERVED not in last:
                    raise DaemonUnavailable(
                        f"the warden daemon did not start (exit status {code}): {last}; see {log_path}"
                    )
                # Another daemon holds the root (a racing client's, or one
                # making its socket again): that is the one to wait for.
                other_serves = True
            if time.monotonic() > deadline:
                if other_serves:
                    raise DaemonUnavailable(
                        f"the warden daemon that holds {self.root} does not answer on {self.socket_path}; see {log_path}"
                    )
                raise DaemonUnavailable(
                    f"the warden daemon did not come up within {_START_TIMEOUT:.0f}s; see {log_path}"
                )
            time.sleep(0.005)

    def _call(self, req: Dict[str, Any]) -> Dict[str, Any]:
        """Send one request and return its one reply (raising its error).
        A request no daemon read (see _Unheard) is sent again, for as long
        as a client waits for a daemon to come up."""
        data = _encode(req)
        deadline = time.monotonic() + _START_TIMEOUT
        while True:
            sock = self._connect(len(data) > _BIG_MESSAGE)
            try:
                _send(sock, data)
                reply = _receive(sock, first=True)
                break
            except _Unheard:
                if time.monotonic() > deadline:
                    raise
            finally:
                sock.close()
            time.sleep(0.005)
        if reply is None:
            raise DaemonUnavailable("warden daemon: the connection closed before the reply")
        _raise_error(reply)
        return reply

    # -- requests ---------------------------------------------------------

    def ping(self) -> int:
        """The daemon's protocol version (starting the daemon if needed)."""
        return int(self._call({"op": "ping"}).get("v", 1))

    def sessions(self) -> List[Dict[str, Any]]:
        """The root's sessions, as the protocol's ``list`` gives them (dicts
        with id, policy, workspace, state, created, lastUsed, execs, running)."""
        return list(self._call({"op": "list"}).get("sessions") or [])

    def session(
        self,
        policy: Optional[str] = None,
        workspace: Optional[str] = None,
        id: Optional[str] = None,
        skill_dir: Optional[str] = None,
        data_dir: Optional[str] = None,
    ) -> "Session":
        """Create a session from a policy file, or, with ``id`` alone, join
        an existing one. ``skill_dir`` defaults to the policy file's folder,
        as ``warden session create`` does. Used as a context manager, a
        session this call created is removed on exit."""
        if policy is None:
            if id is None:
                raise ValueError("session() needs policy= (to create a session) or id= (to join one)")
            if not any(s.get("id") == id for s in self.sessions()):
                raise NoSuchSession(f"no such session: {id}")
            return Session(self, id, owned=False)
        create = _create_request(policy, workspace, skill_dir, data_dir)
        sid = id if id is not None else secrets.token_hex(6)
        self._call({"op": "create", "id": sid, "create": create})
        return Session(self, sid, owned=True)

    def do(
        self,
        args: Argv,
        policy: str,
        workspace: Optional[str] = None,
        skill_dir: Optional[str] = None,
        data_dir: Optional[str] = None,
        id: Optional[str] = None,
        input: Optional[bytes] = None,
        timeout: Optional[float] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        check: bool = False,
    ) -> CompletedProcess:
        """Run one command in a sandbox of its own, discarded after, as
        ``warden do`` does: a ready sandbox of the daemon's warm pool of
        the policy when there is one, else a session made for this call and
        removed after it. ``id`` names the run (default: a new ``do-`` id;
        the id of a session that exists raises SessionExists). The other
        arguments are session()'s and Session.run's."""
        create = _create_request(policy, workspace, skill_dir, data_dir)
        sid = id if id is not None else "do-" + secrets.token_hex(6)
        def run(s: Session) -> CompletedProcess:
            return s.run(args, input=input, timeout=timeout, env=env, cwd=cwd, check=check)

        try:
            return run(Session(self, sid, _op="do", _create=create))
        except NotPooled:
            pass
        except InvalidInput as e:
            # A daemon older than the op: nothing ran.
            if 'unknown operation "do"' not in str(e):
                raise
        self._call({"op": "create", "id": sid, "create": create})
        with Session(self, sid, owned=True) as s:
            return run(s)


def _create_request(policy: str, workspace: Optional[str], skill_dir: Optional[str], data_dir: Optional[str]) -> Dict[str, Any]:
    """The create part of a request: the policy file's text and the
    session's folders (skill_dir defaults to the policy file's folder)."""
    with open(policy, encoding="utf-8") as f:
        policy_toml = f.read()
    vars = {
        "WorkDir": _folder("workspace", workspace),
        "SkillDir": _folder("skill_dir", skill_dir if skill_dir is not None else os.path.dirname(os.path.abspath(policy))),
        "DataDir": _folder("data_dir", data_dir),
        "Home": os.path.expanduser("~"),
    }
    return {"policyToml": policy_toml, "vars": vars}


class Session:
    """One warm sandbox of the daemon; ``run`` runs commands in it."""

    def __init__(
        self,
        client: Client,
        id: str,
        owned: bool = False,
        _op: str = "exec",
        _create: Optional[Dict[str, Any]] = None,
    ) -> None:
        self.client = client
        self.id = id
        self.owned = owned
        # Client.do's one-shot run: the do op, carrying its policy.
        self._op = _op
        self._create = _create

    def __repr__(self) -> str:
        return f"Session(id={self.id!r}, root={self.client.root!r})"

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.owned:
            self.remove()

    def remove(self, force: bool = True) -> None:
        """Remove the session (its sandbox, processes and state; the
        workspace stays). Removing a session that is already gone is fine."""
        try:
            self.client._call({"op": "remove", "id": self.id, "force": force})
        except NoSuchSession:
            pass

    def run(
        self,
        args: Argv,
        input: Optional[bytes] = None,
        timeout: Optional[float] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        check: bool = False,
    ) -> CompletedProcess:
        """Run a command in the session and return how it ended, with its
        stdout and stderr as bytes. A str is a command string, run as
        ``["sh", "-c", args]``. ``input`` is its stdin (else it reads an
        empty one); ``timeout`` is in seconds (None: the policy's
        limits.timeout), ``env`` variables to set (names the policy's
        env.allow lists), ``cwd`` relative to the workspace or absolute in
        the sandbox. warden's own failures raise WardenError; the command's
        exit status is ``returncode`` (``check=True`` raises
        CalledProcessError when it is not 0). A command that never started
        (127: not in exec.allow) or that warden killed (timeout, memory
        limit) has warden's message in ``error``, and as a last line
        ``warden: MESSAGE`` of stderr, as ``warden exec`` prints it."""
        argv = ["sh", "-c", args] if isinstance(args, str) else [_text(a, "argument") for a in args]
        if isinstance(input, str):
            raise TypeError("input must be bytes, not str (encode it)")
        exec_req: Dict[str, Any] = {"argv": argv}
        if env:
            exec_req["env"] = [f"{k}={v}" for k, v in env.items()]
        caller_env = _caller_env()
        if caller_env:
            exec_req["callerEnv"] = caller_env
        if cwd:
            exec_req["cwd"] = cwd
        if timeout is not None:
            exec_req["timeout"] = max(1, int(timeout * 1e9))
        req: Dict[str, Any] = {"op": self._op, "id": self.id, "exec": exec_req}
        if self._create is not None:
            req["create"] = self._create
        data = _encode(req)

        # Without input the command reads /dev/null: the same empty stdin
        # as a pipe closed at once, with no pipe to make and feed.
        if input:
            stdin_r, stdin_w = os.pipe()
        else:
            stdin_r, stdin_w = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC), -1
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        ours = [fd for fd in (stdin_w, out_r, err_r) if fd >= 0]
        theirs = [stdin_r, out_w, err_w]
        sock: Optional[socket.socket] = None
        try:
            sock = self.client._connect(len(data) > _BIG_MESSAGE)
            _send(sock, data, theirs)
            # The sandbox holds its copies now; ours would keep the pipes
            # open past the command.
            for fd in theirs:
                os.close(fd)
            theirs = []
            ours = []  # _pump closes them, whatever happens
            reply, stdout, stderr = _pump(sock, stdin_w, input or b"", out_r, err_r)
        finally:
            for fd in theirs + ours:
                os.close(fd)
            if sock is not None:
                sock.close()  # before a result, this kills the command
        if reply is None:
            raise DaemonUnavailable("warden daemon: the connection closed before the command's result")
        _raise_error(reply)
        res = reply.get("result") or {}
        killed_by = "timeout" if res.get("timedOut") else "memory" if res.get("oom") else None
        error = str(res.get("error", ""))
        if error:
            # As `warden exec` prints it: the command's reader (a model, a
            # log) sees why it never ran or was killed where it looks.
            stderr += f"warden: {error}\n".encode("utf-8")
        done = CompletedProcess(
            argv,
            int(res.get("exit", 0)),
            stdout,
            stderr,
            killed_by=killed_by,
            signal=int(res.get("signal", 0)),
            duration=float(res.get("duration", 0)) / 1e9,
            error=error,
        )
        if check:
            done.check_returncode()
        return done


def _folder(name: str, path: Optional[str]) -> str:
    """An absolute folder path, or "" for none. A mistyped folder would
    leave its mount point empty rather than fail, so it must exist."""
    if not path:
        return ""
    path = os.path.abspath(path)
    if not os.path.isdir(path):
        raise InvalidInput(f"{name} {path}: not a directory; create it first")
    return path


def _utf8(s: str) -> bool:
    try:
        s.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _text(a: Any, what: str) -> str:
    """An argument as text: bytes must be UTF-8, paths are their str."""
    if isinstance(a, bytes):
        try:
            return a.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInput(f"{what} {a!r} is not valid UTF-8; warden passes arguments as UTF-8 text") from None
    if isinstance(a, os.PathLike):
        p = os.fspath(a)
        return p if isinstance(p, str) else _text(p, what)
    return str(a)


# The caller's environment as callerEnv sends it, and the environment it
# was made from: made again only when os.environ changes.
_env_cache: "tuple[Optional[Dict[bytes, bytes]], List[str]]" = (None, [])


def _caller_env() -> List[str]:
    """The caller's variables, NAME=VALUE, as the CLI sends them: those
    that are not UTF-8 are left out (only env.allow names pass anyway)."""
    global _env_cache
    # os.environ keeps the bytes it decodes in _data (POSIX); a dict
    # compare of them is far cheaper than decoding every variable again.
    data = getattr(os.environ, "_data", None)
    cached_data, cached = _env_cache
    if cached_data is not None and cached_data == data:
        return cached
    if not isinstance(data, dict) or not all(isinstance(k, bytes) and isinstance(v, bytes) for k, v in data.items()):
        return [kv for kv in (f"{k}={v}" for k, v in os.environ.items()) if _utf8(kv)]
    env: List[str] = []
    for k, v in data.items():
        try:
            env.append((k + b"=" + v).decode("utf-8"))
        except UnicodeDecodeError:
            pass
    _env_cache = (dict(data), env)
    return env


def _encode(req: Dict[str, Any]) -> bytes:
    """The request's packet: JSON with the protocol version."""
    msg = dict(req)
    msg["v"] = PROTOCOL_VERSION
    try:
        # Strict: a name that is not UTF-8 (os.listdir's surrogate escapes)
        # would reach the sandbox as another name (U+FFFD), so it is refused.
        data = json.dumps(msg, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidInput(
            f"the request holds text that is not valid UTF-8 ({e.object[e.start:e.end]!r}); "
            f"warden passes names and arguments as UTF-8 text: convert them"
        ) from None
    if len(data) > MAX_MESSAGE:
        raise InvalidInput(
            f"request of {len(data)} bytes is above the protocol's 1 MiB per message; "
            f"shorten the policy, arguments or environment (pass large data as input)"
        )
    return data


def _send(sock: socket.socket, data: bytes, fds: Sequence[int] = ()) -> None:
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())] if fds else []
    try:
        sock.sendmsg([data], anc)
    except (ConnectionResetError, BrokenPipeError) as e:
        raise _Unheard(f"warden daemon: send the request: {e.strerror or e}") from None
    except OSError as e:
        raise DaemonUnavailable(f"warden daemon: send the request: {e.strerror or e}") from None


class _Unheard(DaemonUnavailable):
    """No daemon read the request, so sending it again runs nothing twice:
    a unix socket closed with a message still queued resets its peer (a
    daemon killed with the request unread, or a listening socket that
    outlived its daemon for a moment and took the connection)."""


def _receive(sock: socket.socket, first: bool = False) -> Optional[Dict[str, Any]]:
    """One message, or None at the end of the connection. Descriptors the
    daemon attaches (only a -t exec's terminal, which this client does not
    ask for) are closed. A reset before the first reply raises _Unheard."""
    try:
        data, anc, flags, _ = sock.recvmsg(MAX_MESSAGE + 1, socket.CMSG_SPACE(4 * 4))
    except ConnectionResetError:
        if first:
            raise _Unheard("warden daemon: the connection was reset before the daemon read the request") from None
        return None
    except OSError as e:
        raise DaemonUnavailable(f"warden daemon: read the reply: {e.strerror or e}") from None
    for level, kind, payload in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds = array.array("i")
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
            for fd in fds:
                os.close(fd)
    if not data:
        return None
    try:
        msg = json.loads(data.decode("utf-8"))
    except ValueError as e:
        raise DaemonUnavailable(f"warden daemon: a reply that is not JSON: {e}") from None
    if not isinstance(msg, dict):
        raise DaemonUnavailable("warden daemon: a reply that is not a JSON object")
    return msg


def _raise_error(reply: Dict[str, Any]) -> None:
    if reply.get("error"):
        raise error_for(reply.get("code"), str(reply["error"]))


def _pump(
    sock: socket.socket, stdin_w: int, data: bytes, out_r: int, err_r: int
) -> "tuple[Optional[Dict[str, Any]], bytes, bytes]":
    """Feed stdin (stdin_w is -1 when there is none), drain stdout and
    stderr and read the daemon's replies until its last one (a result or
    an error) and both outputs' end, all in one poll loop, so no output
    size can deadlock. Closes the descriptors."""
    outs: Dict[int, List[bytes]] = {out_r: [], err_r: []}
    reading = {out_r, err_r}
    poller = select.poll()
    reply: Optional[Dict[str, Any]] = None
    sock_fd = sock.fileno()
    try:
        poller.register(sock_fd, select.POLLIN)
        for fd in outs:
            os.set_blocking(fd, False)
            poller.register(fd, select.POLLIN)
        view = memoryview(data)
        if stdin_w >= 0 and not view:
            os.close(stdin_w)
            stdin_w = -1
        if stdin_w >= 0:
            os.set_blocking(stdin_w, False)
            poller.register(stdin_w, select.POLLOUT)
        done = False
        while reading or not done:
            for fd, _ in poller.poll():
                if fd == sock_fd:
                    if done:
                        continue
                    msg = _receive(sock)
                    if msg is None or "result" in msg or msg.get("error"):
                        reply = msg
                        done = True
                        poller.unregister(sock_fd)
                        if stdin_w >= 0:
                            # The command has ended: nobody reads stdin.
                            poller.unregister(stdin_w)
                            os.close(stdin_w)
                            stdin_w = -1
                elif fd == stdin_w:
                    try:
                        n = os.write(fd, view[:65536])
                        view = view[n:]
                    except BlockingIOError:
                        continue
                    except (BrokenPipeError, OSError):
                        view = view[:0]  # the command stopped reading
                    if not view:
                        poller.unregister(fd)
                        os.close(fd)
                        stdin_w = -1
                elif fd in reading:
                    try:
                        chunk = os.read(fd, 1 << 16)
                    except BlockingIOError:
                        continue
                    if chunk:
                        outs[fd].append(chunk)
                    else:
                        poller.unregister(fd)
                        reading.discard(fd)
    finally:
        for fd in (stdin_w, out_r, err_r):
            if fd >= 0:
                os.close(fd)
    return reply, b"".join(outs[out_r]), b"".join(outs[err_r])


def _last_line(path: str, offset: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            text = f.read(64 << 10).decode("utf-8", "replace").strip()
    except OSError:
        return "(no log)"
    if not text:
        return "(its log is empty)"
    line = text.splitlines()[-1]
    return line[len("warden: ") :] if line.startswith("warden: ") else line
