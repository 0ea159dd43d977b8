import { spawn as spawnChild } from "node:child_process";
import { once } from "node:events";
import { createServer, type Server } from "node:http";
import { Readable } from "node:stream";
import { createServerAdapter } from "@whatwg-node/server";
import { clearStaleSocket, ownerOnly, removeSocket } from "./socket-file.ts";
import { onFirstShutdownSignal } from "./shutdown.ts";
import { unixDispatcher } from "./unix-dispatcher.ts";
import { DEFAULT_SERVE_LIMITS, type ChildExit, type ChildProcess, type FetchHandler, type ListenTarget, type Listener, type Runtime, type SpawnOptions } from "./types.ts";

function listen(server: Server, target: ListenTarget): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    const done = () => {
      server.off("error", reject);
      resolve();
    };
    if (target.kind === "tcp") server.listen(target.port, target.hostname, done);
    else server.listen(target.path, done);
  });
}

async function serve(handler: FetchHandler, target: ListenTarget, limits = DEFAULT_SERVE_LIMITS): Promise<Listener> {
  // The native Request/Response, not the ponyfill, so handlers see the same classes as on Bun/Deno.
  const adapter = createServerAdapter(handler, {
    fetchAPI: { Request, Response, Headers, fetch, ReadableStream, URL },
  });
  // Headers must arrive in time (slowloris); connections beyond the cap are closed as they come.
  // Node checks header deadlines every connectionsCheckingInterval (30 s by default): as often as needed.
  const server = createServer(
    { headersTimeout: limits.headersTimeoutMs, connectionsCheckingInterval: Math.min(1_000, limits.headersTimeoutMs), keepAliveTimeout: 5_000 },
    adapter,
  );
  server.maxConnections = limits.maxConnections;
  if (target.kind === "unix") await clearStaleSocket(target.path);
  await listen(server, target);
  if (target.kind === "unix") ownerOnly(target.path);
  const bound = server.address();
  const port = typeof bound === "object" && bound ? bound.port : undefined;
  return {
    address: target.kind === "tcp" ? `http://${target.hostname}:${port}` : `unix:${target.path}`,
    port,
    async close(graceMs = 10_000) {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      const timer = setTimeout(() => server.closeAllConnections(), graceMs);
      await closed;
      clearTimeout(timer);
      if (target.kind === "unix") removeSocket(target.path);
    },
  };
}

function unixFetch(socketPath: string): typeof fetch {
  const dispatcher = unixDispatcher(socketPath);
  return ((input: RequestInfo | URL, init?: RequestInit) =>
    fetch(input, { ...init, dispatcher } as RequestInit)) as typeof fetch;
}

async function spawn(command: string, args: string[], options: SpawnOptions): Promise<ChildProcess> {
  const child = spawnChild(command, args, { env: options.env, stdio: ["ignore", "pipe", "pipe"] });
  // "close" (not "exit"): by then stdout and stderr are drained, so the caller sees all output.
  // A plain listener, not once(): that would also reject on a failed spawn, unhandled.
  const exited = new Promise<ChildExit>((resolve) => child.once("close", (code, signal) => resolve({ code, signal })));
  await once(child, "spawn"); // rejects with the "error" event (ENOENT, EACCES...)
  // From here "error" only means a signal could not be sent; kill() reports that by returning false.
  child.on("error", () => {});
  return {
    pid: child.pid as number,
    stdout: Readable.toWeb(child.stdout) as unknown as ReadableStream<Uint8Array>,
    stderr: Readable.toWeb(child.stderr) as unknown as ReadableStream<Uint8Array>,
    exited,
    kill: (signal) => void child.kill(signal),
  };
}

export const nodeRuntime: Runtime = {
  name: "node",
  version: process.versions.node,
  serve,
  unixFetch,
  // undici, Node's fetch, never resends a request on a connection that failed.
  upstreamFetch: fetch,
  spawn,
  onShutdownSignal: (fn) => onFirstShutdownSignal((signal, handler) => process.once(signal, handler), fn),
  exit: (code) => process.exit(code),
};
