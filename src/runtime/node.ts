import { spawn as spawnChild } from "node:child_process";
import { once } from "node:events";
import { Readable } from "node:stream";
import { serveWithNodeHttp } from "./node-http.ts";
import { onFirstShutdownSignal } from "./shutdown.ts";
import { keepAliveUpstreamFetch, undiciFetch } from "./undici-fetch.ts";
import { endedStream, type ChildExit, type ChildProcess, type Runtime, type SpawnOptions } from "./types.ts";

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
  // Made when first asked for (the album service asks as it starts).
  get upstreamFetch() {
    return (upstreamFetch ??= keepAliveUpstreamFetch());
  },
  spawn,
  onShutdownSignal: (fn) => onFirstShutdownSignal((signal, handler) => process.once(signal, handler), fn),
  exit: (code) => process.exit(code),
};
