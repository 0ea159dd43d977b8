import { spawn as spawnChild } from "node:child_process";
import { once } from "node:events";
import { Readable } from "node:stream";
import { serveWithNodeHttp } from "./node-http.ts";
import { onFirstShutdownSignal } from "./shutdown.ts";
import type { Dispatcher } from "undici";
import { callFetch, type Answer, type Call } from "./node-client.ts";
import { undiciSend } from "./undici-send.ts";
import { endedStream, type ChildExit, type ChildProcess, type Runtime, type SpawnOptions } from "./types.ts";

/**
 * Calls through undici's dispatch API (undici-send.ts: less than half the CPU of node:http's
 * client, a third of fetch's, per call here), undici loaded once a runner starts or the album
 * service asks for its fetch: an idle model runner holds none of it (about 11 MiB).
 */
function undiciFetch(dispatcher: () => Promise<Dispatcher>): typeof fetch {
  // Loading starts now, not on the first call: under load it took longer than a call's deadline.
  let loaded: ((call: Call) => Promise<Answer>) | undefined;
  const send = dispatcher().then((made) => (loaded = undiciSend(made)));
  send.catch(() => {}); // a failed load fails each call instead
  // Once loaded, a call goes straight on: an async frame awaiting the load cost each call a promise.
  return callFetch((call) => (loaded ? loaded(call) : send.then((ready) => ready(call))));
}

let upstreamFetch: typeof fetch | undefined;

const unixFetch = (socketPath: string) => undiciFetch(async () => (await import("./unix-dispatcher.ts")).unixDispatcher(socketPath));

async function spawn(command: string, args: string[], options: SpawnOptions): Promise<ChildProcess> {
  const out = options.output ?? "pipe";
  const child = spawnChild(command, args, { env: options.env, stdio: ["ignore", out, out] });
  // "close" (not "exit"): by then stdout and stderr are drained, so the caller sees all output.
  // A plain listener, not once(): that would also reject on a failed spawn, unhandled.
  const exited = new Promise<ChildExit>((resolve) => child.once("close", (code, signal) => resolve({ code, signal })));
  await once(child, "spawn"); // rejects with the "error" event (ENOENT, EACCES...)
  // From here "error" only means a signal could not be sent; kill() reports that by returning false.
  child.on("error", () => {});
  return {
    pid: child.pid as number,
    stdout: child.stdout ? (Readable.toWeb(child.stdout) as unknown as ReadableStream<Uint8Array>) : endedStream(),
    stderr: child.stderr ? (Readable.toWeb(child.stderr) as unknown as ReadableStream<Uint8Array>) : endedStream(),
    wroteToOutput: options.output !== undefined,
    exited,
    kill: (signal) => void child.kill(signal),
  };
}

export const nodeRuntime: Runtime = {
  name: "node",
  version: process.versions.node,
  serve: serveWithNodeHttp,
  unixFetch,
  // Keep-alive, and undici never resends a request on a connection that failed. Made when first
  // asked for (the album service asks as it starts).
  get upstreamFetch() {
    return (upstreamFetch ??= undiciFetch(async () => new (await import("undici")).Agent()));
  },
  spawn,
  onShutdownSignal: (fn) => onFirstShutdownSignal((signal, handler) => process.once(signal, handler), fn),
  exit: (code) => process.exit(code),
};
