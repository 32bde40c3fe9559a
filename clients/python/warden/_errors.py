"""warden's typed errors: one class per protocol error code."""

from __future__ import annotations

import subprocess
from typing import Dict, Optional, Type


class WardenError(Exception):
    """warden itself failed (not the command): ``code`` is the protocol's
    error code, ``message`` the line warden would print after ``warden:``."""

    code: str = "internal"

    def __init__(self, message: str, code: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"


class InvalidInput(WardenError):
    code = "invalid_input"


class PolicyRefused(WardenError):
    code = "policy_refused"


class NoSuchSession(WardenError):
    code = "no_such_session"


class SessionExists(WardenError):
    code = "session_exists"


class SessionMismatch(WardenError):
    code = "session_mismatch"


class SessionBusy(WardenError):
    code = "session_busy"


class SessionFrozen(WardenError):
    code = "session_frozen"


class DaemonUnavailable(WardenError):
    code = "daemon_unavailable"


class SandboxStopped(WardenError):
    code = "sandbox_stopped"


class AuditUnwritable(WardenError):
    code = "audit_unwritable"


class UnsupportedVersion(WardenError):
    code = "unsupported_version"


class NotPooled(WardenError):
    """(the do op only) no warm sandbox serves a one-shot run; nothing ran."""

    code = "not_pooled"


class Internal(WardenError):
    code = "internal"


_BY_CODE: Dict[str, Type[WardenError]] = {
    cls.code: cls
    for cls in (
        InvalidInput,
        PolicyRefused,
        NoSuchSession,
        SessionExists,
        SessionMismatch,
        SessionBusy,
        SessionFrozen,
        DaemonUnavailable,
        SandboxStopped,
        AuditUnwritable,
        UnsupportedVersion,
        NotPooled,
        Internal,
    )
}


def error_for(code: Optional[str], message: str) -> WardenError:
    """The typed error of an error reply. A reply without a code (a daemon
    older than codes) is internal; a code this client does not know yet
    (codes are added within a version) is a plain WardenError."""
    if not code:
        return Internal(message)
    cls = _BY_CODE.get(code)
    if cls is None:
        return WardenError(message, code)
    return cls(message)


class CalledProcessError(subprocess.CalledProcessError):
    """``run(..., check=True)`` of a command that exited non-zero. It is the
    command's failure, not warden's: it is not a WardenError."""
