import { Agent as HttpAgent } from "node:http";
import { callFetch, closesConnection, nodeHttpSend } from "./node-client.ts";
import { serveWithNodeHttp } from "./node-http.ts";
import { nodeSpawn } from "./node-spawn.ts";
import { onFirstShutdownSignal } from "./shutdown.ts";
import { keepAliveUpstreamFetch, lazyUndiciSend } from "./undici-fetch.ts";
import type { Runtime } from "./types.ts";

let upstreamFetch: typeof fetch | undefined;

/**
 * A runner's calls: those that keep their connection (whole answers) through undici's dispatch, and
 * those sent with `Connection: close` (streams: llama-server closes their connection anyway, see
 * forward.ts's send) through node:http's client, on a connection of their own. undici makes an Error
 * for each connection it closes, and Node's stream destroy formats its stack (about 11 µs). Measured
 * (docs/benchmarks.md, seventh stretch): a 1-token stream cost ours 11-24% less CPU this way, in three
 * A/B pairs; a call alone, node:http's client took 9% less CPU for a stream, undici's 20% less for a
 * whole answer.
 */
function unixFetch(socketPath: string): typeof fetch {
  const kept = lazyUndiciSend(async () => (await import("./unix-dispatcher.ts")).unixDispatcher(socketPath));
  const closing = nodeHttpSend(new HttpAgent(), socketPath);
  return callFetch((call) => (closesConnection(call) ? closing(call) : kept(call)));
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
  spawn: nodeSpawn,
  onShutdownSignal: (fn) => onFirstShutdownSignal((signal, handler) => process.once(signal, handler), fn),
  exit: (code) => process.exit(code),
};
