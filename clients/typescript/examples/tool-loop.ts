// A tiny agent tool loop on a warden session.
//
// An agent framework gives its model three tools: execute_command runs in
// the session's sandbox (bound to tool-loop.toml, next to this file);
// read_file and write_file run in this process, confined to the session's
// workspace. The "model" here is a fixed list of the calls a model would
// make, so the example runs without one; put an LLM's tool calls in its
// place.
//
//     sudo node dist/examples/tool-loop.js [--workspace DIR] [--policy FILE]
//
// The state root is $WARDEN_ROOT (default /run/warden), the warden binary
// that starts the daemon when none runs $WARDEN_BINARY (default: warden on
// PATH).

import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

import { Session, Warden } from "../src/index.js";

// Compiled to dist/examples: the policy stays beside the source.
const here = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..", "examples");

class Tools {
  readonly workspace: string;
  constructor(
    readonly session: Session,
    workspace: string,
  ) {
    this.workspace = fs.realpathSync(workspace);
  }

  async execute_command(command: string): Promise<string> {
    // The command's own failure is the model's to read; warden's failures
    // (WardenError) are the framework's and propagate.
    const r = await this.session.run(command, { timeout: 10_000 });
    const out = Buffer.concat([r.stdout, r.stderr]).toString("utf8").trim();
    return r.killedBy ? `killed by ${r.killedBy}: ${out}` : `exit ${r.exitCode}: ${out}`;
  }

  /** The host path of a workspace file; anything that resolves outside the
   * workspace (.., an absolute path, a symlink a command planted) is refused. */
  private inside(p: string): string {
    const within = (q: string) => q === this.workspace || q.startsWith(this.workspace + path.sep);
    const full = path.resolve(this.workspace, p);
    if (!within(full)) throw new RefusedError(`${p} is outside the workspace`);
    // A new file's folder, or an existing file, resolved through symlinks.
    const real = fs.existsSync(full) ? fs.realpathSync(full) : path.join(fs.realpathSync(path.dirname(full)), path.basename(full));
    if (!within(real)) throw new RefusedError(`${p} is outside the workspace`);
    return real;
  }

  async read_file(p: string): Promise<string> {
    const fd = fs.openSync(this.inside(p), fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW);
    try {
      const buf = Buffer.alloc(64 << 10);
      return buf.subarray(0, fs.readSync(fd, buf)).toString("utf8");
    } finally {
      fs.closeSync(fd);
    }
  }

  async write_file(p: string, content: string): Promise<string> {
    const fd = fs.openSync(this.inside(p), fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_TRUNC | fs.constants.O_NOFOLLOW, 0o644);
    try {
      fs.writeSync(fd, content);
    } finally {
      fs.closeSync(fd);
    }
    return `wrote ${content.split("\n").length - 1} lines`;
  }
}

class RefusedError extends Error {}

// What a model would ask for, one tool call at a time.
const script: [keyof Omit<Tools, "workspace" | "session">, string[]][] = [
  ["write_file", ["notes.txt", "warden keeps the tools inside\nsecond line\nthird line\n"]],
  ["execute_command", ["wc -l < notes.txt"]],
  ["read_file", ["notes.txt"]],
  ["read_file", ["../../etc/passwd"]],
  ["execute_command", ["cat /etc/shadow"]],
  ["execute_command", ["curl https://example.com"]],
];

async function run(workspace: string, policy: string): Promise<void> {
  const w = new Warden();
  const session = await w.session({ policy, workspace });
  try {
    const tools = new Tools(session, workspace);
    for (const [name, args] of script) {
      let result: string;
      try {
        result = await (tools[name] as (...a: string[]) => Promise<string>).apply(tools, args);
      } catch (e) {
        if (e instanceof RefusedError) result = `refused: ${e.message}`;
        else if ((e as NodeJS.ErrnoException).code) result = `error: ${(e as Error).message}`;
        else throw e;
      }
      const shown = name === "execute_command" ? JSON.stringify(args[0]) : args[0];
      // What goes back to the model as the tool's answer.
      console.log(`${name} ${shown} -> ${result.split("\n")[0]}`);
    }
    console.log(`done: ${script.length} tool calls in session ${session.id}`);
  } finally {
    await session.close();
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: { workspace: { type: "string" }, policy: { type: "string", default: path.join(here, "tool-loop.toml") } },
  });
  let workspace = values.workspace;
  const ours = !workspace;
  if (!workspace) {
    workspace = fs.mkdtempSync(path.join(os.tmpdir(), "tool-loop-"));
    fs.chmodSync(workspace, 0o755); // the sandbox's user must reach it
  }
  try {
    await run(workspace, values.policy as string);
  } finally {
    if (ours) fs.rmSync(workspace, { recursive: true }); // ours: made above
  }
}

main().catch((e: Error) => {
  console.error(`tool-loop: ${e.message}`);
  process.exit(1);
});
