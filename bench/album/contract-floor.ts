/// <reference types="bun-types" />
import { deadline } from "../../src/album/deadline.ts";

// The bare proxy plus the duties of the contract that it skips and that no design can: the
// client's disconnect and a timeout reach the upstream call (with the same wiring as ours), no
// redirect is followed, and unknown photo fields are dropped. Still no routing, no validation and
// no exact 64-bit ids. What this reaches is about the most any implementation can reach here.

type Photo = { id: number; title: string; url: string; thumbnailUrl: string };
const base = process.env.PHOTOS_API_BASE_URL;
const server = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  async fetch(request) {
    const albumId = new URL(request.url).pathname.split("/").pop();
    const call = deadline(request.signal, 10_000);
    try {
      const url = `${base}/albums/${albumId}/photos`;
      const upstream = await fetch(url, { headers: { accept: "application/json" }, signal: call.signal, redirect: "manual" });
      const photos = ((await upstream.json()) as Photo[]).map(({ id, title, url, thumbnailUrl }) => ({ id, title, url, thumbnailUrl }));
      return Response.json({ albumId: Number(albumId), photos });
    } finally {
      call.finish();
    }
  },
});
console.log(`contract floor listening on http://127.0.0.1:${server.port}`);

export {};
