"""warden: run commands in warden sandboxes from Python.

    import warden
    with warden.Client().session(policy="policy.toml", workspace="/srv/work") as s:
        print(s.run("echo hi").stdout)

The client speaks the daemon's socket protocol (warden's docs/protocol.md),
standard library only.
"""

from ._client import PROTOCOL_VERSION, Client, CompletedProcess, Session
from ._errors import (
    AuditUnwritable,
    CalledProcessError,
    DaemonUnavailable,
    Internal,
    InvalidInput,
    NoSuchSession,
    NotPooled,
    PolicyRefused,
    SandboxStopped,
    SessionBusy,
    SessionExists,
    SessionFrozen,
    SessionMismatch,
    UnsupportedVersion,
    WardenError,
)

__version__ = "0.1.0"

__all__ = [
    "PROTOCOL_VERSION",
    "AuditUnwritable",
    "CalledProcessError",
    "Client",
    "CompletedProcess",
    "DaemonUnavailable",
    "Internal",
    "InvalidInput",
    "NoSuchSession",
    "NotPooled",
    "PolicyRefused",
    "SandboxStopped",
    "Session",
    "SessionBusy",
    "SessionExists",
    "SessionFrozen",
    "SessionMismatch",
    "UnsupportedVersion",
    "WardenError",
]
