import { fetch as undiciFetch } from "undici";
import { serveWithNodeHttp } from "./node-http.ts";
import { onFirstShutdownSignal } from "./shutdown.ts";
import { unixDispatcher } from "./unix-dispatcher.ts";
import type { ChildProcess, Runtime, SpawnOptions } from "./types.ts";

// The few Deno APIs we use, typed here so that the rest of the project needs no Deno types.
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
  createHttpClient(options: { proxy?: { transport: "unix"; path: string }; poolMaxIdlePerHost?: number }): unknown;
  addSignalListener(signal: "SIGINT" | "SIGTERM", fn: () => void): void;
  exit(code: number): never;
}
declare const Deno: DenoApi;

function unixFetch(socketPath: string): typeof fetch {
  // Not Deno.createHttpClient's unix proxy: it sends the absolute URL as the request target (proxy
  // style), which llama-server answers with 404. undici sends the path, as Bun and Node do; its
  // response is re-wrapped as one of Deno's own, the class the server adapter is given.
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
  serve: serveWithNodeHttp,
  unixFetch,
  upstreamFetch: onceFetch(),
  spawn,
  onShutdownSignal: (fn) => onFirstShutdownSignal((signal, handler) => Deno.addSignalListener(signal, handler), fn),
  exit: (code) => Deno.exit(code),
};
