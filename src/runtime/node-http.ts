import { createServer, type Server, type ServerResponse } from "node:http";
import { createServerAdapter } from "@whatwg-node/server";
import { clearStaleSocket, ownerOnly, removeSocket } from "./socket-file.ts";
import type { FetchHandler, ListenTarget, Listener, ServeLimits } from "./types.ts";

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

/**
 * The answer, its body cancelled when its client leaves before the end, as Bun does. The adapter
 * stops writing to a closed connection but never cancels the body it reads: a stream that produces
 * on its own went on for nobody (an abandoned pull kept downloading), and one that waits to be read
 * held whatever it held until it was collected.
 */
function cancelledOnDeparture(response: Response, res: ServerResponse): Response {
  const body = response.body;
  if (!body) return response;
  const reader = body.getReader();
  res.once("close", () => {
    if (!res.writableFinished) reader.cancel(new Error("the client went away")).catch(() => {});
  });
  const relayed = new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        const next = await reader.read();
        if (next.done) controller.close();
        else controller.enqueue(next.value);
      },
      cancel: (reason) => reader.cancel(reason),
    },
    { highWaterMark: 0 },
  );
  return new Response(relayed, { status: response.status, statusText: response.statusText, headers: response.headers });
}

export async function serveWithNodeHttp(handler: FetchHandler, target: ListenTarget, limits: ServeLimits): Promise<Listener> {
  // The native Request/Response, not the ponyfill, so handlers see the same classes as on Bun/Deno.
  const adapter = createServerAdapter<{ res: ServerResponse }>(async (request, { res }) => cancelledOnDeparture(await handler(request), res), {
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
