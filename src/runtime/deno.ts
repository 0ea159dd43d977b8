import { Agent as HttpAgent } from "node:http";
import { callFetch, nodeHttpSend } from "./node-client.ts";
import { serveWithNodeHttp } from "./node-http.ts";
import { nodeSpawn } from "./node-spawn.ts";
import { keepAliveUpstreamFetch } from "./undici-fetch.ts";
import { onFirstShutdownSignal } from "./shutdown.ts";
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
  addSignalListener(signal: "SIGINT" | "SIGTERM", fn: () => void): void;
  exit(code: number): never;
}
declare const Deno: DenoApi;

// node:http's client, not Deno.createHttpClient's unix proxy: that sends the absolute URL as the
// request target (proxy style), which llama-server answers with 404.
const unixFetch = (socketPath: string): typeof fetch => callFetch(nodeHttpSend(new HttpAgent({ keepAlive: true }), socketPath));

// The photo service's fetch, made when first asked for (the album service asks as it starts).
let upstreamFetch: typeof fetch | undefined;

async function spawn(command: string, args: string[], options: SpawnOptions): Promise<ChildProcess> {
  // Its output to a file: handed to the child, as Node's and Bun's spawn do (see node-spawn.ts).
  if (options.output !== undefined) return nodeSpawn(command, args, options);
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
  // undici, not Deno's fetch or node:http client: both resend a request on a reset reused
  // connection (undici-fetch.ts).
  get upstreamFetch() {
    return (upstreamFetch ??= keepAliveUpstreamFetch());
  },
  spawn,
  onShutdownSignal: (fn) => onFirstShutdownSignal((signal, handler) => Deno.addSignalListener(signal, handler), fn),
  exit: (code) => Deno.exit(code),
};
