/// <reference types="bun-types" />
// The baseline: the least a proxy can do (fetch the photos, wrap them), with no routing,
// validation or exact ids. Ours is measured against this.

const base = process.env.PHOTOS_API_BASE_URL;
const server = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  async fetch(request) {
    const albumId = new URL(request.url).pathname.split("/").pop();
    const upstream = await fetch(`${base}/albums/${albumId}/photos`, { headers: { accept: "application/json" } });
    return Response.json({ albumId: Number(albumId), photos: await upstream.json() });
  },
});
console.log(`bare proxy listening on http://127.0.0.1:${server.port}`);

export {};
