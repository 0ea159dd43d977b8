/// <reference types="bun-types" />
// The photo service for the benchmark: the same 50-photo album for every request, as fast as Bun
// can send a fixed body, so that the proxies in front of it are what the benchmark measures.

const photos = Array.from({ length: 50 }, (_, i) => ({
  albumId: 1,
  id: i + 1,
  title: `accusamus beatae ad facilis cum similique qui sunt ${i + 1}`,
  url: `https://via.placeholder.com/600/${(i * 7919).toString(16).padStart(6, "0")}`,
  thumbnailUrl: `https://via.placeholder.com/150/${(i * 7919).toString(16).padStart(6, "0")}`,
}));
const body = JSON.stringify(photos);

const server = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  fetch: () => new Response(body, { headers: { "content-type": "application/json" } }),
});
console.log(`upstream listening on http://127.0.0.1:${server.port}`);

export {};
