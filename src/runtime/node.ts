import { serveWithNodeHttp } from "./node-http.ts";
import { nodeSpawn } from "./node-spawn.ts";
import { onFirstShutdownSignal } from "./shutdown.ts";
import { keepAliveUpstreamFetch, undiciFetch } from "./undici-fetch.ts";
import type { Runtime } from "./types.ts";

let upstreamFetch: typeof fetch | undefined;

const unixFetch = (socketPath: string) => undiciFetch(async () => (await import("./unix-dispatcher.ts")).unixDispatcher(socketPath));

export const nodeRuntime: Runtime = {
  name: "node",
  version: process.versions.node,
  serve: serveWithNodeHttp,
  unixFetch,
  // Made when first asked for (the album service asks as it starts).
  get upstreamFetch() {
    return (upstreamFetch ??= keepAliveUpstreamFetch());
  },
  spawn: nodeSpawn,
  onShutdownSignal: (fn) => onFirstShutdownSignal((signal, handler) => process.once(signal, handler), fn),
  exit: (code) => process.exit(code),
};
