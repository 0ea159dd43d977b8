/// <reference types="bun-types" />
// The floor for any proxy in front of a runner: Bun, Unix socket in, Unix socket out, the body
// passed as it is; no routing, validation, model lookup or scheduling. Ours is measured against it.

const runner = process.env.RUNNER_UPSTREAM_SOCKET!;
const listen = process.env.PROXY_SOCKET!;
const server = Bun.serve({
  unix: listen,
  idleTimeout: 0,
  async fetch(request: Request) {
    const path = new URL(request.url).pathname;
    return fetch(`http://runner${path}`, {
      method: request.method,
      headers: { "content-type": "application/json" },
      body: await request.arrayBuffer(),
      unix: runner,
    });
  },
} as unknown as Parameters<typeof Bun.serve>[0]);
console.log(`bare proxy listening on unix:${listen}`);
process.on("SIGTERM", () => {
  void server.stop(true);
  process.exit(0);
});
