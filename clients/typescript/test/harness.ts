// A private warden state root for the tests: a temporary folder, the
// warden binary of WARDEN_BINARY (default: the repository's bin/warden),
// and the daemon the client starts on it, stopped and checked for
// leftovers at the end. The tests need root (real sandboxes) and fail, not
// skip, without it.

import { createHash, randomBytes } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { fileURLToPath } from "node:url";

import { Session, Warden, WardenError } from "../src/index.js";

const here = path.dirname(fileURLToPath(import.meta.url));
/** The package's folder (tests run from dist/test). */
export const packageDir = path.resolve(here, "..", "..");
export const binary = path.resolve(process.env.WARDEN_BINARY || path.join(packageDir, "..", "..", "bin", "warden"));

export const policy = `name = "tsclient-test"
[fs]
write = ["$WORK_DIR"]
[exec]
allow = ["sh", "cat", "head", "sleep", "true"]
[env]
allow = ["LANG", "GREETING"]
[limits]
timeout = "20s"
`;

/** Throws when the tests cannot run here. */
export function require(): void {
  if (process.geteuid?.() !== 0) throw new Error("the warden TypeScript client's tests run real sandboxes and need root: run them with sudo");
  try {
    fs.accessSync(binary, fs.constants.X_OK);
  } catch {
    throw new Error(`no warden binary at ${binary}: run \`make build\`, or set WARDEN_BINARY`);
  }
}

/** A temporary folder the sandbox's unprivileged host user can traverse. */
export function traversableTempdir(prefix: string): string {
  const d = fs.mkdtempSync(path.join("/tmp", prefix));
  fs.chmodSync(d, 0o755);
  return d;
}

export class Root {
  readonly dir: string;
  readonly root: string;
  readonly skill: string;
  readonly policy: string;
  readonly warden: Warden;
  readonly ids: string[] = []; // every session the tests made, for the leak checks
  /** The root's cgroups are named by a hash of its path. */
  readonly cgroupKey: string;

  constructor() {
    require();
    this.dir = traversableTempdir("warden-tsclient-");
    this.root = path.join(this.dir, "root");
    this.skill = path.join(this.dir, "skill");
    fs.mkdirSync(this.skill, { mode: 0o755 });
    this.policy = path.join(this.skill, "policy.toml");
    fs.writeFileSync(this.policy, policy);
    this.warden = new Warden({ root: this.root, binary });
    this.cgroupKey = createHash("sha256").update(this.root).digest("hex").slice(0, 12);
  }

  async session(workspace: string, id?: string): Promise<Session> {
    const s = await this.warden.session({ policy: this.policy, workspace, id });
    this.ids.push(s.id);
    return s;
  }

  workspace(): string {
    const d = path.join(this.dir, "ws-" + randomBytes(3).toString("hex"));
    fs.mkdirSync(d, { mode: 0o755 });
    return d;
  }

  /** The pids of this root's daemons. */
  daemons(): number[] {
    const want = [binary, "--root", this.root, "daemon"].join("\0") + "\0";
    return procs().filter((pid) => read(`/proc/${pid}/cmdline`) === want);
  }

  /** What is left on the host of a session: state, container, cgroups. */
  leftovers(id: string): string[] {
    const left: string[] = [];
    for (const d of ["sessions", "containers"]) {
      if (exists(path.join(this.root, d, id))) left.push(`${d}/${id} under the root`);
    }
    return left.concat(this.cgroups(id));
  }

  /** The root's cgroup folders (of one session, with id). */
  cgroups(id?: string): string[] {
    const out: string[] = [];
    const suffix = id ? path.join(this.cgroupKey, id) : this.cgroupKey;
    for (const c of fs.readdirSync("/sys/fs/cgroup")) {
      for (const p of [path.join("/sys/fs/cgroup", c, "warden", suffix), path.join("/sys/fs/cgroup", "warden", suffix)]) {
        if (exists(p) && !out.includes(p)) out.push(p);
      }
    }
    return out;
  }

  /** Processes whose mounts name this root's folder: its sandboxes'
   * agents and commands (their mounts live in their own namespaces). */
  processes(): number[] {
    return procs().filter((pid) => read(`/proc/${pid}/mountinfo`).includes(this.dir + "/"));
  }

  /** Removes every session, stops the daemon, and returns what is left
   * (nothing, when all went well); the folder goes only then. */
  async close(): Promise<string[]> {
    const problems: string[] = [];
    try {
      for (const s of await this.warden.sessions()) {
        this.ids.push(s.id);
        await new Session(this.warden, s.id, true).remove();
      }
      const left = await this.warden.sessions();
      if (left.length) problems.push(`sessions left after their removal: ${left.map((s) => s.id)}`);
    } catch (e) {
      if (!(e instanceof WardenError)) throw e;
      problems.push(`removing the sessions: ${e.message}`);
    }
    for (const pid of this.daemons()) process.kill(pid, "SIGTERM");
    const deadline = Date.now() + 10_000;
    while (this.daemons().length && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    if (this.daemons().length) problems.push(`the daemon of ${this.root} did not stop: ${this.daemons()}`);
    const groups = this.cgroups();
    if (groups.length) problems.push(`the root's cgroup folders are left: ${groups}`);
    for (const id of new Set(this.ids)) problems.push(...this.leftovers(id).map((x) => `session ${id}: ${x} left`));
    for (const sock of ["warden.sock", "warden.stream.sock"]) {
      if (exists(path.join(this.root, sock))) problems.push(`${sock} is left after the daemon stopped`);
    }
    const pids = this.processes();
    if (pids.length) {
      // Never delete the state of sandboxes that still run: leave the
      // folder for whoever looks into the failure.
      problems.push(`processes of ${this.dir}'s sandboxes are left: ${pids}; the folder is kept`);
    } else {
      fs.rmSync(this.dir, { recursive: true, force: true });
    }
    return problems;
  }
}

function procs(): number[] {
  return fs
    .readdirSync("/proc")
    .filter((n) => /^\d+$/.test(n))
    .map(Number);
}

function read(p: string): string {
  try {
    return fs.readFileSync(p, "latin1");
  } catch {
    return "";
  }
}

function exists(p: string): boolean {
  try {
    fs.lstatSync(p);
    return true;
  } catch {
    return false;
  }
}
