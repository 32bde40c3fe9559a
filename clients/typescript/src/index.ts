// @warden/client: run commands in warden sandboxes from Node (docs/clients.md).
export { Command, CommandFailed, PROTOCOL_VERSION, Session, Warden } from "./client.js";
export type { Output, RunOptions, RunResult, SessionInfo, SessionOptions, WardenOptions } from "./client.js";
export * from "./errors.js";
