import { fetch as undiciFetch } from "undici";
import { clearStaleSocket, ownerOnly, removeSocket } from "./socket-file.ts";
import { onFirstShutdownSignal } from "./shutdown.ts";
import { unixDispatcher } from "./unix-dispatcher.ts";
import { capInFlight } from "./in-flight.ts";
import { DEFAULT_SERVE_LIMITS, type ChildProcess, type FetchHandler, type ListenTarget, type Listener, type Runtime, type SpawnOptions } from "./types.ts";

// The few Deno APIs we use, typed here so that the rest of the project needs no Deno types.
interface DenoHttpServer {
  addr: { port?: number };
  finished: Promise<void>;
  shutdown(): Promise<void>;
}
interface DenoChild {
  pid: number;
  stdout: ReadableStream<Uint8Array>;
  stderr: ReadableStream<Uint8Array>;
  status: Promise<{ code: number; signal: string | null }>;
  kill(signal: string): void;
}
interface DenoApi {
  Command: new (command: string, options: Record<string, unknown>) => { spawn(): DenoChild };
  version: { deno: string };
  serve(options: Record<string, unknown>, handler: FetchHandler): DenoHttpServer;
  createHttpClient(options: { proxy?: { transport: "unix"; path: string }; poolMaxIdlePerHost?: number }): unknown;
  addSignalListener(signal: "SIGINT" | "SIGTERM", fn: () => void): void;
  exit(code: number): never;
}
declare const Deno: DenoApi;

async function serve(handler: FetchHandler, target: ListenTarget, limits = DEFAULT_SERVE_LIMITS): Promise<Listener> {
  if (target.kind === "unix") await clearStaleSocket(target.path);
  const where =
    target.kind === "tcp"
      ? { port: target.port, hostname: target.hostname }
      : { path: target.path, transport: "unix" };
  const server = Deno.serve({ ...where, onListen() {} }, capInFlight(handler, limits.maxConnections));
  if (target.kind === "unix") ownerOnly(target.path);
  const port = target.kind === "tcp" ? server.addr.port : undefined;
  return {
    address: target.kind === "tcp" ? `http://${target.hostname}:${port}` : `unix:${target.path}`,
    port,
    async close(graceMs = 10_000) {
      // Deno's shutdown waits for in-flight requests; past the grace we stop waiting.
      let timer: ReturnType<typeof setTimeout> | undefined;
      const grace = new Promise<void>((resolve) => (timer = setTimeout(resolve, graceMs)));
      await Promise.race([server.shutdown(), grace]);
      clearTimeout(timer);
      if (target.kind === "unix") removeSocket(target.path);
    },
  };
}

function unixFetch(socketPath: string): typeof fetch {
  // Not Deno.createHttpClient's unix proxy: it sends the absolute URL as the request target (proxy
  // style), which llama-server answers with 404. undici sends the path, as Bun and Node do; its
  // response is re-wrapped as a native one so that Deno.serve can return it.
  const dispatcher = unixDispatcher(socketPath);
  return (async (input: RequestInfo | URL, init?: RequestInit) => {
    const request = new Request(input, init);
    const response = await undiciFetch(request.url, {
      method: request.method,
      headers: [...request.headers],
      body: request.body ? await request.arrayBuffer() : undefined,
      signal: request.signal,
      dispatcher,
    });
    const { status, statusText } = response;
    return new Response(response.body as ReadableStream | null, { status, statusText, headers: [...response.headers] });
  }) as typeof fetch;
}

/**
 * Deno's fetch sends a request again when a reused keep-alive connection is reset before the
 * answer. A client that keeps no idle connection never reuses one, so never resends: one TCP
 * connect per call is the price of exactly-once. (undici would keep connections, but it reads env
 * variables of its own, which the album service's narrow `--allow-env` does not grant.)
 */
function onceFetch(): typeof fetch {
  const client = Deno.createHttpClient({ poolMaxIdlePerHost: 0 });
  return ((input: RequestInfo | URL, init?: RequestInit) => fetch(input, { ...init, client } as RequestInit)) as typeof fetch;
}

async function spawn(command: string, args: string[], options: SpawnOptions): Promise<ChildProcess> {
  const child = new Deno.Command(command, {
    args,
    env: options.env,
    clearEnv: true,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  return {
    pid: child.pid,
    stdout: child.stdout,
    stderr: child.stderr,
    exited: child.status.then(({ code, signal }) => ({ code: signal ? null : code, signal })),
    kill(signal) {
      try {
        child.kill(signal);
      } catch {
        // Already exited: Deno throws where the other runtimes ignore it.
      }
    },
  };
}

export const denoRuntime: Runtime = {
  name: "deno",
  version: Deno.version.deno,
  serve,
  unixFetch,
  upstreamFetch: onceFetch(),
  spawn,
  onShutdownSignal: (fn) => onFirstShutdownSignal((signal, handler) => Deno.addSignalListener(signal, handler), fn),
  exit: (code) => Deno.exit(code),
};
