// The client of a warden daemon, over its stream socket
// (ROOT/warden.stream.sock; docs/protocol.md): Node cannot pass
// descriptors, so the command's stdin, stdout and stderr travel as frames.

import { spawn as spawnProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import * as fs from "node:fs";
import * as net from "node:net";
import * as os from "node:os";
import * as path from "node:path";

import { DaemonUnavailable, Interrupted, InvalidInput, NoSuchSession, NotPooled, errorFor } from "./errors.js";
import { FRAME_MESSAGE, FRAME_STDERR, FRAME_STDIN, FRAME_STDOUT, FrameReader, MAX_PAYLOAD, header } from "./frames.js";

/** The protocol version this client speaks. */
export const PROTOCOL_VERSION = 1;
const DEFAULT_ROOT = "/run/warden";
/** How long to wait for a daemon this client started, and to send again a
 * request no daemon read, as the CLI does. */
const START_TIMEOUT_MS = 10_000;
/** What a daemon that finds the root's lock taken says as it exits. */
const ALREADY_SERVED = "a warden daemon already serves this root";
/** stdin goes out in frames of at most this many bytes. */
const STDIN_FRAME = 256 << 10;
/** A streamed command's unread output above this pauses the socket. */
const STREAM_HIGH_WATER = 1 << 20;

export interface WardenOptions {
  /** The state root; default $WARDEN_ROOT, else /run/warden. */
  root?: string;
  /** The warden binary that starts the daemon when none answers; default
   * $WARDEN_BINARY, else `warden` on PATH. */
  binary?: string;
}

export interface SessionOptions {
  /** A policy file (its folder is $SKILL_DIR unless skillDir says). */
  policy?: string;
  /** A policy's TOML text, instead of a file. */
  policyText?: string;
  /** The session's workspace ($WORK_DIR), an existing folder. */
  workspace?: string;
  /** The session's id; default a random one. With neither policy nor
   * policyText, joins the existing session of this id. */
  id?: string;
  skillDir?: string;
  dataDir?: string;
}

export interface RunOptions {
  /** The command's stdin (a string is sent as UTF-8); default empty. */
  input?: Buffer | Uint8Array | string;
  /** Variables to set; each name must be in the policy's env.allow. */
  env?: Record<string, string>;
  /** The working folder: relative to the workspace, or absolute in the sandbox. */
  cwd?: string;
  /** Milliseconds; default the policy's limits.timeout (a longer one is refused). */
  timeout?: number;
  /** Aborting kills the command; the call rejects with Interrupted. */
  signal?: AbortSignal;
  /** Reject with CommandFailed when the command exits non-zero. */
  check?: boolean;
}

/** How a command ended. */
export interface RunResult {
  argv: string[];
  /** The command's exit status; 128+N when signal N ended it; 126/127 when it never started. */
  exitCode: number;
  /** The signal that ended it, or 0. */
  signal: number;
  /** "timeout" or "memory" when warden killed it for a limit. */
  killedBy: "timeout" | "memory" | null;
  /** Its output; with spawn(), empty (the output went to the iterator). */
  stdout: Buffer;
  stderr: Buffer;
  durationMs: number;
  /** warden's message when the command never started or warden killed it; else "". */
  error: string;
}

/** A command that exited non-zero, for run(..., {check: true}). It is the
 * command's failure, not warden's: it is not a WardenError. */
export class CommandFailed extends Error {
  constructor(readonly result: RunResult) {
    super(`command ${JSON.stringify(result.argv)} exited with status ${result.exitCode}`);
    this.name = "CommandFailed";
  }
}

export interface SessionInfo {
  id: string;
  policy: string;
  workspace: string;
  state: string;
  created: string;
  lastUsed: string;
  execs: number;
  running: number;
  pool?: string;
}

type Reply = Record<string, unknown>;

/** The daemon of one state root. When none answers, the first call starts
 * one with `BINARY --root ROOT daemon` (as the warden CLI does). */
export class Warden {
  readonly root: string;
  readonly binary: string;
  readonly socketPath: string;
  private starting: Promise<void> | undefined;

  constructor(options: WardenOptions = {}) {
    this.root = path.resolve(options.root || process.env.WARDEN_ROOT || DEFAULT_ROOT);
    this.binary = options.binary || process.env.WARDEN_BINARY || "warden";
    this.socketPath = path.join(this.root, "warden.stream.sock");
  }

  /** The daemon's protocol version (starting the daemon if needed). */
  async ping(): Promise<number> {
    const r = await this.call({ op: "ping" });
    return typeof r.v === "number" ? r.v : 1;
  }

  /** The root's sessions, as the protocol's `list` gives them. */
  async sessions(): Promise<SessionInfo[]> {
    const r = await this.call({ op: "list" });
    return (r.sessions as SessionInfo[] | undefined) ?? [];
  }

  /** Creates a session from a policy (file or text), or, with an id alone,
   * joins an existing one. */
  async session(options: SessionOptions): Promise<Session> {
    const { policy, policyText, id } = options;
    if (policy === undefined && policyText === undefined) {
      if (id === undefined) throw new InvalidInput("session() needs policy or policyText (to create a session) or id (to join one)");
      if (!(await this.sessions()).some((s) => s.id === id)) throw new NoSuchSession(`no such session: ${id}`);
      return new Session(this, id, false);
    }
    const create = createRequest("session()", options);
    const sid = id ?? randomBytes(6).toString("hex");
    await this.call({ op: "create", id: sid, create });
    return new Session(this, sid, true);
  }

  /** Runs one command in a sandbox of its own, discarded after, as `warden
   * do` does: a ready sandbox of the daemon's warm pool of the policy when
   * there is one, else a session made for this call and removed after it.
   * `id` names the run (default a new `do-` id; the id of a session that
   * exists rejects with SessionExists). The options are session()'s and
   * run()'s. */
  async do(command: string | readonly string[], options: SessionOptions & RunOptions): Promise<RunResult> {
    if (options.policy === undefined && options.policyText === undefined) throw new InvalidInput("do() needs policy or policyText: a one-shot run makes its own sandbox");
    const create = createRequest("do()", options);
    const sid = options.id ?? "do-" + randomBytes(6).toString("hex");
    try {
      return await new Session(this, sid, false, create).run(command, options);
    } catch (e) {
      // Nothing ran: no pool serves the policy, or the daemon is older than the op.
      if (!(e instanceof NotPooled || (e instanceof InvalidInput && e.message.includes('unknown operation "do"')))) throw e;
    }
    await this.call({ op: "create", id: sid, create });
    const session = new Session(this, sid, true);
    try {
      return await session.run(command, options);
    } finally {
      await session.remove();
    }
  }

  /** Sends one request and returns its one reply (throwing its error). A
   * request no daemon read is sent again, for as long as a client waits
   * for a daemon to come up. */
  async call(req: Reply): Promise<Reply> {
    const deadline = Date.now() + START_TIMEOUT_MS;
    for (;;) {
      const conv = new Conversation(await this.connect());
      try {
        conv.send(req);
        const reply = await conv.reply;
        throwIfError(reply);
        return reply;
      } catch (e) {
        if (!(e instanceof Unheard) || Date.now() > deadline) throw e;
      } finally {
        conv.close();
      }
      await sleep(5);
    }
  }

  /** A connection to the daemon's stream socket, starting the daemon when
   * none answers. */
  async connect(): Promise<net.Socket> {
    const deadline = Date.now() + START_TIMEOUT_MS;
    for (;;) {
      try {
        return await dial(this.socketPath);
      } catch (e) {
        if (absent(e)) break;
        // A listener that went away as we connected: a daemon dying (a
        // kill), which the next attempt finds gone and replaces.
        if (!dying(e) || Date.now() > deadline) throw new DaemonUnavailable(`warden daemon at ${this.socketPath}: ${(e as Error).message}`);
      }
      await sleep(5);
    }
    this.starting ??= this.startDaemon().finally(() => {
      this.starting = undefined;
    });
    await this.starting;
    try {
      return await dial(this.socketPath);
    } catch (e) {
      throw new DaemonUnavailable(`warden daemon at ${this.socketPath}: ${(e as Error).message}`);
    }
  }

  /** Starts `warden --root ROOT daemon` detached, its output to
   * ROOT/daemon.log, and waits until its socket answers. A second daemon
   * started by a racing client finds the root locked and exits, so the
   * socket answering is what counts, not our child living. */
  private async startDaemon(): Promise<void> {
    const binary = findBinary(this.binary);
    if (!binary) {
      throw new DaemonUnavailable(
        `no warden daemon answers on ${this.socketPath}, and the warden binary ${JSON.stringify(this.binary)} to start one was not found; install warden or pass new Warden({binary: PATH})`,
      );
    }
    const logPath = path.join(this.root, "daemon.log");
    let log: number;
    let offset: number;
    try {
      fs.mkdirSync(this.root, { recursive: true, mode: 0o711 });
      log = fs.openSync(logPath, "a", 0o600);
      offset = fs.fstatSync(log).size;
    } catch (e) {
      throw new DaemonUnavailable(`state root ${this.root}: ${(e as Error).message}`);
    }
    let exitCode: number | null = null;
    try {
      const child = spawnProcess(binary, ["--root", this.root, "daemon"], { cwd: "/", detached: true, stdio: ["ignore", log, log] });
      child.on("exit", (code, signal) => {
        exitCode = code ?? 128 + (signal ? os.constants.signals[signal] : 0);
      });
      child.on("error", () => {
        exitCode = 127;
      });
      child.unref();
    } finally {
      fs.closeSync(log);
    }
    const deadline = Date.now() + START_TIMEOUT_MS;
    let otherServes = false;
    for (;;) {
      try {
        (await dial(this.socketPath)).destroy();
        return;
      } catch (e) {
        if (!absent(e) && !dying(e)) throw new DaemonUnavailable(`warden daemon at ${this.socketPath}: ${(e as Error).message}`);
      }
      if (exitCode !== null && !otherServes) {
        const last = lastLine(logPath, offset);
        if (!last.includes(ALREADY_SERVED)) {
          throw new DaemonUnavailable(`the warden daemon did not start (exit status ${exitCode}): ${last}; see ${logPath}`);
        }
        // Another daemon holds the root (a racing client's, or one making
        // its socket again): that is the one to wait for.
        otherServes = true;
      }
      if (Date.now() > deadline) {
        if (otherServes) {
          throw new DaemonUnavailable(
            `the warden daemon that holds ${this.root} does not answer on ${this.socketPath} (a daemon of a warden older than the stream socket? restart it); see ${logPath}`,
          );
        }
        throw new DaemonUnavailable(`the warden daemon did not come up within ${START_TIMEOUT_MS / 1000}s; see ${logPath}`);
      }
      await sleep(5);
    }
  }
}

/** One warm sandbox of the daemon; run() runs commands in it. */
export class Session {
  constructor(
    readonly warden: Warden,
    readonly id: string,
    /** Made by this client's session(): close() removes it. */
    readonly owned: boolean,
    /** For Warden.do's one-shot run: the do op's create part. */
    private readonly oneShot?: Reply,
  ) {}

  /** Runs a command and returns how it ended, with its output. A string is
   * a command string, run as `sh -c STRING`. warden's own failures reject
   * with a WardenError; the command's exit status is exitCode. A command
   * that never started (127: not in exec.allow) or that warden killed
   * (timeout, memory limit) has warden's message in `error`, and as the
   * last line `warden: MESSAGE` of stderr, as `warden exec` prints it. */
  async run(command: string | readonly string[], options: RunOptions = {}): Promise<RunResult> {
    const stdout: Buffer[] = [];
    const stderr: Buffer[] = [];
    const argv = toArgv(command);
    const input = toBuffer(options.input);
    const req = this.request(argv, options);
    const deadline = Date.now() + START_TIMEOUT_MS;
    let reply: Reply;
    for (;;) {
      const conv = new Conversation(await this.warden.connect(), options.signal);
      conv.onOutput = (kind, data) => (kind === FRAME_STDOUT ? stdout : stderr).push(data);
      try {
        if (input.length === 0) {
          conv.sendEmptyStdin(req);
        } else {
          conv.send(req);
          await conv.writeStdin(input);
          conv.endStdin();
        }
        reply = await conv.reply;
        break;
      } catch (e) {
        // A request no daemon read ran nothing: send it again.
        if (!(e instanceof Unheard) || Date.now() > deadline) throw e;
      } finally {
        conv.close();
      }
      await sleep(5);
    }
    const result = toResult(argv, reply, Buffer.concat(stdout), Buffer.concat(stderr));
    if (result.error) result.stderr = Buffer.concat([result.stderr, Buffer.from(`warden: ${result.error}\n`)]);
    if (options.check && result.exitCode !== 0) throw new CommandFailed(result);
    return result;
  }

  /** Starts a command and streams it: iterate the returned Command for its
   * output as it comes, write() to its stdin and end() it, await wait()
   * for how it ended. */
  async spawn(command: string | readonly string[], options: Omit<RunOptions, "check"> = {}): Promise<Command> {
    const argv = toArgv(command);
    const req = this.request(argv, options);
    const conv = new Conversation(await this.warden.connect(), options.signal);
    conv.send(req);
    const cmd = new Command(argv, conv);
    const input = toBuffer(options.input);
    if (input.length) await cmd.write(input);
    return cmd;
  }

  /** Removes the session (its sandbox, processes and state; the workspace
   * stays). Removing a session that is already gone is fine. */
  async remove(force = true): Promise<void> {
    try {
      await this.warden.call({ op: "remove", id: this.id, force });
    } catch (e) {
      if (!(e instanceof NoSuchSession)) throw e;
    }
  }

  /** Removes the session if this client's session() made it. */
  async close(): Promise<void> {
    if (this.owned) await this.remove();
  }

  private request(argv: string[], options: Omit<RunOptions, "check">): Reply {
    const exec: Reply = { argv };
    if (options.env) exec.env = Object.entries(options.env).map(([k, v]) => `${k}=${v}`);
    // Only the names the policy's env.allow lists pass.
    const callerEnv = Object.entries(process.env).flatMap(([k, v]) => (v === undefined ? [] : [`${k}=${v}`]));
    if (callerEnv.length) exec.callerEnv = callerEnv;
    if (options.cwd) exec.cwd = options.cwd;
    if (options.timeout !== undefined) {
      if (!(options.timeout > 0)) throw new InvalidInput(`timeout ${options.timeout}: give milliseconds above 0`);
      exec.timeout = Math.max(1, Math.round(options.timeout * 1e6));
    }
    if (this.oneShot) return { op: "do", id: this.id, create: this.oneShot, exec };
    return { op: "exec", id: this.id, exec };
  }
}

/** The create part of a request: the policy's text and the session's
 * folders (skillDir defaults to a policy file's folder). */
function createRequest(caller: string, options: SessionOptions): Reply {
  const { policy, policyText } = options;
  if (policy !== undefined && policyText !== undefined) throw new InvalidInput(`${caller} takes policy or policyText, not both`);
  let text = policyText ?? "";
  if (policy !== undefined) {
    try {
      text = fs.readFileSync(policy, "utf8");
    } catch (e) {
      throw new InvalidInput(`policy ${policy}: ${(e as Error).message}`);
    }
  }
  const skillDir = options.skillDir ?? (policy !== undefined ? path.dirname(path.resolve(policy)) : undefined);
  const vars = {
    WorkDir: folder("workspace", options.workspace),
    SkillDir: folder("skillDir", skillDir),
    DataDir: folder("dataDir", options.dataDir),
    Home: os.homedir(),
  };
  return { policyToml: text, vars };
}

/** A chunk of a streamed command's output. */
export interface Output {
  stream: "stdout" | "stderr";
  data: Buffer;
}

/** A running command started by Session.spawn. */
export class Command implements AsyncIterable<Output> {
  private queue: Output[] = [];
  private queued = 0;
  private waiting: (() => void) | undefined;
  private ended = false;
  private failure: unknown;
  private iterated = false;
  private readonly done: Promise<RunResult>;

  constructor(
    readonly argv: string[],
    private readonly conv: Conversation,
  ) {
    conv.onOutput = (kind, data) => {
      this.queue.push({ stream: kind === FRAME_STDOUT ? "stdout" : "stderr", data });
      this.queued += data.length;
      // Backpressure only for a reader: output nobody iterates is kept.
      if (this.iterated && this.queued > STREAM_HIGH_WATER) conv.pause();
      this.wake();
    };
    this.done = conv.reply.then(
      (reply) => toResult(argv, reply, Buffer.alloc(0), Buffer.alloc(0)),
      (e) => {
        this.failure = e;
        throw e;
      },
    );
    this.done.catch(() => {}).finally(() => {
      this.ended = true;
      conv.close();
      this.wake();
    });
  }

  /** Writes to the command's stdin; resolves when the socket took it. */
  write(data: Buffer | Uint8Array | string): Promise<void> {
    return this.conv.writeStdin(toBuffer(data));
  }

  /** Ends the command's stdin. */
  end(): void {
    this.conv.endStdin();
  }

  /** Sends a signal (a number, default SIGTERM) to the command's process group. */
  kill(signal = 15): void {
    this.conv.send({ signal });
  }

  /** How the command ended (its output went to the iterator). */
  wait(): Promise<RunResult> {
    return this.done;
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Output> {
    this.iterated = true;
    for (;;) {
      const next = this.queue.shift();
      if (next) {
        this.queued -= next.data.length;
        if (this.queued <= STREAM_HIGH_WATER / 2) this.conv.resume();
        yield next;
        continue;
      }
      if (this.ended) {
        if (this.failure) throw this.failure;
        return;
      }
      await new Promise<void>((resolve) => (this.waiting = resolve));
    }
  }

  private wake(): void {
    const w = this.waiting;
    this.waiting = undefined;
    w?.();
  }
}

/** No daemon read the request, so sending it again runs nothing twice: a
 * unix socket closed with data still queued resets its peer (a daemon
 * killed with the request unread, or a listening socket that outlived its
 * daemon for a moment). */
class Unheard extends DaemonUnavailable {}

/** One connection's frames: requests and stdin out, output and the last
 * message (a reply, a result or an error) in. */
class Conversation {
  readonly reply: Promise<Reply>;
  onOutput: (kind: number, data: Buffer) => void = () => {};
  private settled = false;
  private heard = false;
  private settle!: (r: Reply) => void;
  private fail!: (e: unknown) => void;
  private readonly frames = new FrameReader();
  private readonly abort: (() => void) | undefined;

  constructor(
    private readonly sock: net.Socket,
    private readonly signal?: AbortSignal,
  ) {
    this.reply = new Promise<Reply>((resolve, reject) => {
      this.settle = resolve;
      this.fail = reject;
    });
    this.reply.catch(() => {}); // a caller that stopped waiting is not an unhandled rejection
    sock.on("data", (chunk: Buffer) => this.data(chunk));
    sock.on("error", (e: NodeJS.ErrnoException) => {
      if (!this.heard && (e.code === "ECONNRESET" || e.code === "EPIPE")) {
        this.finish(new Unheard(`warden daemon: the connection was reset before the daemon read the request`));
      } else {
        this.finish(new DaemonUnavailable(`warden daemon: ${e.message}`));
      }
    });
    sock.on("close", () => this.finish(new DaemonUnavailable("warden daemon: the connection closed before the reply")));
    if (signal) {
      if (signal.aborted) queueMicrotask(() => this.interrupt());
      this.abort = () => this.interrupt();
      signal.addEventListener("abort", this.abort, { once: true });
    }
  }

  send(msg: Reply): void {
    const data = Buffer.from(JSON.stringify(msg.op ? { v: PROTOCOL_VERSION, ...msg } : msg), "utf8");
    if (data.length > MAX_PAYLOAD) {
      throw new InvalidInput(
        `request of ${data.length} bytes is above the protocol's 1 MiB per message; shorten the policy, arguments or environment (pass large data as input)`,
      );
    }
    this.frame(FRAME_MESSAGE, data);
  }

  /** Sends stdin in frames, waiting for the socket to drain between them,
   * until it is sent or the conversation is over. */
  async writeStdin(data: Buffer): Promise<void> {
    for (let off = 0; off < data.length && !this.settled; off += STDIN_FRAME) {
      if (!this.frame(FRAME_STDIN, data.subarray(off, off + STDIN_FRAME))) {
        await new Promise<void>((resolve) => {
          const go = () => {
            this.sock.off("drain", go);
            this.sock.off("close", go);
            resolve();
          };
          this.sock.on("drain", go);
          this.sock.on("close", go);
        });
      }
    }
  }

  endStdin(): void {
    this.frame(FRAME_STDIN, Buffer.alloc(0));
  }

  /** Sends the request and the end of an empty stdin in one write: the
   * daemon finds both at once instead of waking again for the second. */
  sendEmptyStdin(msg: Reply): void {
    this.sock.cork();
    try {
      this.send(msg);
      this.endStdin();
    } finally {
      this.sock.uncork();
    }
  }

  pause(): void {
    this.sock.pause();
  }

  resume(): void {
    this.sock.resume();
  }

  close(): void {
    if (this.abort) this.signal?.removeEventListener("abort", this.abort);
    this.finish(new DaemonUnavailable("warden daemon: the connection was closed"));
    this.sock.destroy();
  }

  private frame(kind: number, payload: Buffer): boolean {
    if (this.settled || this.sock.destroyed) return true;
    this.sock.cork();
    this.sock.write(header(kind, payload.length));
    const ok = this.sock.write(payload);
    this.sock.uncork();
    return ok;
  }

  private data(chunk: Buffer): void {
    this.heard = true;
    let frames;
    try {
      frames = this.frames.push(chunk);
    } catch (e) {
      this.finish(new DaemonUnavailable(`warden daemon: ${(e as Error).message}`));
      this.sock.destroy();
      return;
    }
    for (const f of frames) {
      if (this.settled) return;
      if (f.kind === FRAME_STDOUT || f.kind === FRAME_STDERR) {
        this.onOutput(f.kind, f.payload);
      } else if (f.kind === FRAME_MESSAGE) {
        let msg: unknown;
        try {
          msg = JSON.parse(f.payload.toString("utf8"));
        } catch (e) {
          this.finish(new DaemonUnavailable(`warden daemon: a reply that is not JSON: ${(e as Error).message}`));
          return;
        }
        if (typeof msg !== "object" || msg === null || Array.isArray(msg)) {
          this.finish(new DaemonUnavailable("warden daemon: a reply that is not a JSON object"));
          return;
        }
        if ((msg as Reply).started) continue; // a terminal's; this client asks for none
        this.settled = true;
        this.settle(msg as Reply);
      } else {
        this.finish(new DaemonUnavailable(`warden daemon: a frame of kind ${f.kind}`));
        this.sock.destroy();
        return;
      }
    }
  }

  private interrupt(): void {
    this.finish(new Interrupted("the call was aborted; its command was killed"));
    this.sock.destroy(); // closing the connection kills the command
  }

  private finish(e: unknown): void {
    if (this.settled) return;
    this.settled = true;
    this.fail(e);
  }
}

function toResult(argv: string[], reply: Reply, stdout: Buffer, stderr: Buffer): RunResult {
  throwIfError(reply);
  const res = (reply.result ?? {}) as Record<string, unknown>;
  return {
    argv,
    exitCode: Number(res.exit ?? 0),
    signal: Number(res.signal ?? 0),
    killedBy: res.timedOut ? "timeout" : res.oom ? "memory" : null,
    stdout,
    stderr,
    durationMs: Number(res.duration ?? 0) / 1e6,
    error: String(res.error ?? ""),
  };
}

function throwIfError(reply: Reply): void {
  if (reply.error) throw errorFor(reply.code as string | undefined, String(reply.error));
}

function toArgv(command: string | readonly string[]): string[] {
  if (typeof command === "string") return ["sh", "-c", command];
  if (!Array.isArray(command) || command.length === 0) throw new InvalidInput("no command given: pass an argv array or a command string");
  return command.map((a) => {
    if (typeof a !== "string") throw new InvalidInput(`argument ${JSON.stringify(a)} is not a string`);
    return a;
  });
}

function toBuffer(input: Buffer | Uint8Array | string | undefined): Buffer {
  if (input === undefined) return Buffer.alloc(0);
  if (typeof input === "string") return Buffer.from(input, "utf8");
  return Buffer.isBuffer(input) ? input : Buffer.from(input.buffer, input.byteOffset, input.byteLength);
}

/** An absolute folder path, or "" for none. A mistyped folder would leave
 * its mount point empty rather than fail, so it must exist. */
function folder(name: string, p: string | undefined): string {
  if (!p) return "";
  const abs = path.resolve(p);
  let isDir = false;
  try {
    isDir = fs.statSync(abs).isDirectory();
  } catch {
    // reported below
  }
  if (!isDir) throw new InvalidInput(`${name} ${abs}: not a directory; create it first`);
  return abs;
}

function dial(socketPath: string): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const sock = net.createConnection(socketPath);
    sock.once("error", reject);
    sock.once("connect", () => {
      sock.off("error", reject);
      resolve(sock);
    });
  });
}

/** No daemon listens: nothing at the path, or a socket no one serves. */
function absent(e: unknown): boolean {
  const code = (e as NodeJS.ErrnoException).code;
  return code === "ENOENT" || code === "ECONNREFUSED";
}

function dying(e: unknown): boolean {
  return (e as NodeJS.ErrnoException).code === "ECONNRESET";
}

function findBinary(binary: string): string | undefined {
  const candidates = binary.includes("/") ? [binary] : (process.env.PATH ?? "").split(":").filter(Boolean).map((d) => path.join(d, binary));
  for (const c of candidates) {
    try {
      fs.accessSync(c, fs.constants.X_OK);
      if (fs.statSync(c).isFile()) return path.resolve(c);
    } catch {
      // next
    }
  }
  return undefined;
}

function lastLine(logPath: string, offset: number): string {
  let text: string;
  try {
    const fd = fs.openSync(logPath, "r");
    try {
      const buf = Buffer.alloc(64 << 10);
      const n = fs.readSync(fd, buf, 0, buf.length, offset);
      text = buf.subarray(0, n).toString("utf8").trim();
    } finally {
      fs.closeSync(fd);
    }
  } catch {
    return "(no log)";
  }
  if (!text) return "(its log is empty)";
  const line = text.split("\n").pop() ?? "";
  return line.startsWith("warden: ") ? line.slice("warden: ".length) : line;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
