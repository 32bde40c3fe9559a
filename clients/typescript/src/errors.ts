// warden's typed errors: one class per protocol error code
// (docs/protocol.md#errors). They are warden's failures, never the
// command's: a command's own exit status is a result's exitCode.

/** warden itself failed (not the command): `code` is the protocol's error
 * code, `message` the line warden would print after `warden: `. */
export class WardenError extends Error {
  readonly code: string;
  constructor(message: string, code = "internal") {
    super(message);
    this.code = code;
    this.name = new.target.name;
  }
}

/** The request is wrong (a bad id, policy, folder, argument); it fails the
 * same way until changed. */
export class InvalidInput extends WardenError {
  constructor(message: string) { super(message, "invalid_input"); }
}
/** Well-formed, but the session's policy does not allow it. */
export class PolicyRefused extends WardenError {
  constructor(message: string) { super(message, "policy_refused"); }
}
export class NoSuchSession extends WardenError {
  constructor(message: string) { super(message, "no_such_session"); }
}
export class SessionExists extends WardenError {
  constructor(message: string) { super(message, "session_exists"); }
}
export class SessionMismatch extends WardenError {
  constructor(message: string) { super(message, "session_mismatch"); }
}
export class SessionBusy extends WardenError {
  constructor(message: string) { super(message, "session_busy"); }
}
export class SessionFrozen extends WardenError {
  constructor(message: string) { super(message, "session_frozen"); }
}
/** The daemon could not be reached or started, or the connection broke
 * before its reply. */
export class DaemonUnavailable extends WardenError {
  constructor(message: string) { super(message, "daemon_unavailable"); }
}
export class SandboxStopped extends WardenError {
  constructor(message: string) { super(message, "sandbox_stopped"); }
}
export class AuditUnwritable extends WardenError {
  constructor(message: string) { super(message, "audit_unwritable"); }
}
/** The caller aborted the call (its AbortSignal); a running command was
 * killed. */
export class Interrupted extends WardenError {
  constructor(message: string) { super(message, "interrupted"); }
}
export class UnsupportedVersion extends WardenError {
  constructor(message: string) { super(message, "unsupported_version"); }
}
/** (the do op only) No warm sandbox serves a one-shot run; nothing ran. */
export class NotPooled extends WardenError {
  constructor(message: string) { super(message, "not_pooled"); }
}
export class Internal extends WardenError {
  constructor(message: string) { super(message, "internal"); }
}

const byCode: Record<string, new (message: string) => WardenError> = {
  invalid_input: InvalidInput,
  policy_refused: PolicyRefused,
  no_such_session: NoSuchSession,
  session_exists: SessionExists,
  session_mismatch: SessionMismatch,
  session_busy: SessionBusy,
  session_frozen: SessionFrozen,
  daemon_unavailable: DaemonUnavailable,
  sandbox_stopped: SandboxStopped,
  audit_unwritable: AuditUnwritable,
  interrupted: Interrupted,
  unsupported_version: UnsupportedVersion,
  not_pooled: NotPooled,
  internal: Internal,
};

/** The typed error of an error reply. A reply without a code (a daemon
 * older than codes) is Internal; a code this client does not know yet
 * (codes are added within a version) is a plain WardenError. */
export function errorFor(code: string | undefined, message: string): WardenError {
  if (!code) return new Internal(message);
  const cls = byCode[code];
  return cls ? new cls(message) : new WardenError(message, code);
}

/** The codes this client has a class for. */
export const knownCodes: readonly string[] = Object.keys(byCode);
