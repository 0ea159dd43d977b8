import type { IncomingMessage, ServerResponse } from "node:http";
import { bodyStalled } from "../http/body.ts";
import { serveExchange } from "../runtime/node-exchange.ts";
import type { FetchHandler } from "../runtime/types.ts";

// `llamadock/node`: a fetch handler as a node:http request listener, for apps built on node:http
// (Express, Fastify's raw server, a plain createServer). The same exchange our own Node server
// runs: the request's signal aborts when its client leaves, a stream is cancelled then, and a
// request body that stops arriving fails its reads with 408.

export type NodeListenerOptions = {
  /** A request body silent for this long while it is read fails with 408 body_timeout (default 60 s, as HTTP_BODY_IDLE_TIMEOUT_MS). */
  bodyIdleTimeoutMs?: number;
};

/**
 * `handler` as `(req, res) => void` for `http.createServer` or a route of your own. The URL it
 * sees is `http://<Host header><req.url>`; mount under a prefix with `mountAt` first. It never
 * throws: a handler that fails answers 500.
 */
export function nodeListener(handler: FetchHandler, options: NodeListenerOptions = {}): (req: IncomingMessage, res: ServerResponse) => void {
  const deadline = { idleMs: options.bodyIdleTimeoutMs ?? 60_000, stalled: bodyStalled };
  return (req, res) => serveExchange(handler, req, res, deadline);
}
