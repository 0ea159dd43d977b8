import { createServer, type Server } from "node:http";
import { serveExchange } from "./node-exchange.ts";
import { useLightWebTypes } from "./node-response.ts";
import { clearStaleSocket, ownerOnly, removeSocket } from "./socket-file.ts";
import type { FetchHandler, ListenTarget, Listener, ServeOptions } from "./types.ts";

// Serving a fetch handler with node:http, under Node and under Deno. Deno's own Deno.serve has no
// header timeout and does not count connections, so a client that never finishes its headers
// held a connection forever there; Deno's node:http has both (at a cost: the album service served
// about 14% fewer requests per second through it than through Deno.serve, measured here).

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

export async function serveWithNodeHttp(handler: FetchHandler, target: ListenTarget, limits: ServeOptions): Promise<Listener> {
  useLightWebTypes();
  // Headers must arrive in time (slowloris); connections beyond the cap are closed as they come.
  // Node checks header deadlines every connectionsCheckingInterval (30 s by default): as often as needed.
  // No total deadline for a request (requestTimeout, 300 s by default, cut a large upload midway):
  // its body has an idle one instead (body-deadline.ts).
  const deadline = { idleMs: limits.bodyIdleTimeoutMs, stalled: limits.stalledBody };
  const server = createServer(
    { headersTimeout: limits.headersTimeoutMs, requestTimeout: 0, connectionsCheckingInterval: Math.min(1_000, limits.headersTimeoutMs), keepAliveTimeout: 5_000 },
    (req, res) => serveExchange(handler, req, res, deadline),
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
