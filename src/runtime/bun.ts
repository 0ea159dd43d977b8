/// <reference types="bun-types" />
import { clearStaleSocket, ownerOnly, removeSocket } from "./socket-file.ts";
import { onFirstShutdownSignal } from "./shutdown.ts";
import { watchBody } from "./bun-body.ts";
import { keepAliveUpstreamFetch } from "./undici-fetch.ts";
import { endedStream, type ChildExit, type ChildProcess, type FetchHandler, type ListenTarget, type Listener, type Runtime, type ServeOptions, type SpawnOptions } from "./types.ts";

/**
 * What Bun.serve takes to serve `handler` with our limits: the standalone server's listeners, and a
 * module's default export served by `bun <module>` (Bun reads its options from that object).
 */
function serverOptions(handler: FetchHandler, limits: ServeOptions) {
  const max = limits.maxConnections;
  const deadline = { idleMs: limits.bodyIdleTimeoutMs, stalled: limits.stalledBody };
  // Bun's idle timer, in whole seconds and at most 255.
  const seconds = (ms: number) => Math.min(255, Math.max(1, Math.ceil(ms / 1000)));
  // The idle timeout bounds a client that sends its headers slowly (and an idle keep-alive
  // connection); once a request is in, it is lifted for that request: an SSE stream may be silent
  // for long during a long prompt. A request with a body keeps it, at the body's deadline, until
  // the body is read whole or watched by our own clock (bun-body.ts): one nobody reads is cut by
  // Bun if it goes silent. Once one stalls, Bun's timer is back to close its connection after the answer.
  return {
    idleTimeout: Math.max(1, Math.ceil(limits.headersTimeoutMs / 1000)),
    // Bun's own cap (128 MiB) answered a model archive (POST /models/load) 413 with no body. Each
    // route bounds what it reads itself (see src/http/body.ts); a model is as large as it is.
    maxRequestBodySize: Number.MAX_SAFE_INTEGER,
    fetch: (request: Request, server: { timeout(request: Request, seconds: number): void; pendingRequests: number }) => {
      // Bun's server does not count connections, but counts requests in flight (this one too) until
      // their answer is sent, a streamed one until it ends or its client leaves: past the cap, 503
      // at once, so a flood of clients cannot pile up work without bound.
      if (server.pendingRequests > max) return limits.overloaded(max);
      // An HTTP/1.0 request without a Host header (HAProxy's health checks send them) comes with a
      // relative URL, which no handler can parse: made absolute, as Node's and Deno's servers do.
      const served = request.url.charCodeAt(0) === SLASH ? new Request(`http://localhost${request.url}`, request) : request;
      if (!hasBody(request)) {
        server.timeout(request, 0);
        return handler(served);
      }
      server.timeout(request, seconds(deadline.idleMs));
      watchBody(served, deadline, {
        released: () => server.timeout(request, 0),
        stalled: () => server.timeout(request, 1),
      });
      return handler(served);
    },
  };
}

async function serve(handler: FetchHandler, target: ListenTarget, limits: ServeOptions): Promise<Listener> {
  if (target.kind === "unix") await clearStaleSocket(target.path);
  const options = serverOptions(handler, limits);
  const server =
    target.kind === "tcp"
      ? Bun.serve({ port: target.port, hostname: target.hostname, ...options })
      : // bun-types omit idleTimeout for Unix sockets, but the server applies it there too, and
        // there (Bun 1.4) server.timeout() does not lift it for a request: a stream silent through a
        // long prompt's prefill was cut after twice the header timeout. The socket is the owner's
        // alone and trusted, so it goes without an idle timeout.
        Bun.serve({ unix: target.path, ...options, idleTimeout: 0 } as unknown as { unix: string; fetch: FetchHandler });
  if (target.kind === "unix") ownerOnly(target.path);
  return {
    address: target.kind === "tcp" ? `http://${target.hostname}:${server.port}` : `unix:${target.path}`,
    port: target.kind === "tcp" ? server.port : undefined,
    async close(graceMs = 10_000) {
      const timer = setTimeout(() => void server.stop(true), graceMs);
      await server.stop(false);
      clearTimeout(timer);
      if (target.kind === "unix") removeSocket(target.path);
    },
  };
}

const SLASH = 47;

/** Whether a request comes with a body, by its headers (Bun makes a stream for `request.body` when asked). */
function hasBody(request: Request): boolean {
  if (request.method === "GET" || request.method === "HEAD") return false;
  const length = request.headers.get("content-length");
  return length !== null ? length !== "0" : request.headers.has("transfer-encoding");
}

function unixFetch(socketPath: string): typeof fetch {
  // timeout: false turns off Bun's 5-minute socket idle timer, which would cut a generation whose
  // prompt processing sends nothing for longer than that.
  return ((input: RequestInfo | URL, init?: RequestInit) =>
    fetch(input, { ...init, unix: socketPath, timeout: false } as RequestInit)) as typeof fetch;
}

// The photo service's fetch, made when first asked for (the album service asks as it starts).
let upstreamFetch: typeof fetch | undefined;

async function spawn(command: string, args: string[], options: SpawnOptions): Promise<ChildProcess> {
  const out = options.output ?? "pipe";
  const child = Bun.spawn([command, ...args], { env: options.env, stdin: "ignore", stdout: out, stderr: out });
  return {
    pid: child.pid,
    stdout: child.stdout instanceof ReadableStream ? child.stdout : endedStream(),
    stderr: child.stderr instanceof ReadableStream ? child.stderr : endedStream(),
    wroteToOutput: options.output !== undefined,
    exited: child.exited.then((code): ChildExit => {
      const signal = child.signalCode ? String(child.signalCode) : null;
      return { code: signal ? null : code, signal };
    }),
    kill: (signal) => child.kill(signal),
  };
}

export const bunRuntime: Runtime = {
  name: "bun",
  version: Bun.version,
  serve,
  ownServerOptions: serverOptions,
  unixFetch,
  // undici, not Bun's fetch: that resends a request on a reset reused connection (undici-fetch.ts).
  get upstreamFetch() {
    return (upstreamFetch ??= keepAliveUpstreamFetch());
  },
  spawn,
  onShutdownSignal: (fn) => onFirstShutdownSignal((signal, handler) => process.once(signal, handler), fn),
  exit: (code) => process.exit(code),
};
