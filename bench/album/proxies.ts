/// <reference types="bun-types" />
import { deadline } from "../../src/album/deadline.ts";
import { systemClock } from "../../src/http/clock.ts";

// The two proxies ours is measured against, each a few lines, served on Bun as PROXY names:
// - bare: the least a proxy can do (fetch the photos, wrap them), with no routing, validation,
//   exact ids, timeout or abort;
// - floor: the bare proxy plus what the contract asks of any implementation and the bare one
//   skips: the client's disconnect and a timeout reach the upstream call (wired as ours is), no
//   redirect is followed, unknown photo fields are dropped, and the call is made exactly once:
//   Bun's fetch resends a request on a reset keep-alive connection, so (as ours) it keeps no
//   connection alive; and the ids are 64-bit: an albumId or photo id that a JS number would round
//   is noticed, and the answer is kept as text until it is (a conforming implementation then reads
//   that text again exactly; the floor leaves that path out and refuses those ids, which this bench
//   never sends). Still no routing and no validation of the photos, so about the most any
//   implementation can reach here.

type Photo = { id: number; title: string; url: string; thumbnailUrl: string };
const base = process.env.PHOTOS_API_BASE_URL;
/** Ids of up to 15 digits are exact as JS numbers; longer ones need the exact path. */
const SHORT_ID = /^-?\d{1,15}$/;
const albumIdOf = (request: Request) => new URL(request.url).pathname.split("/").pop();

const proxies: Record<string, (request: Request) => Promise<Response>> = {
  async bare(request) {
    const albumId = albumIdOf(request);
    const upstream = await fetch(`${base}/albums/${albumId}/photos`, { headers: { accept: "application/json" } });
    return Response.json({ albumId: Number(albumId), photos: await upstream.json() });
  },
  async floor(request) {
    const albumId = albumIdOf(request) ?? "";
    if (!SHORT_ID.test(albumId)) return new Response(null, { status: 400 });
    const call = deadline(request.signal, 10_000, systemClock);
    try {
      const init = { headers: { accept: "application/json" }, signal: call.signal, redirect: "manual", keepalive: false } as const;
      const upstream = await fetch(`${base}/albums/${albumId}/photos`, init);
      const text = await upstream.text();
      const photos = (JSON.parse(text) as Photo[]).map(({ id, title, url, thumbnailUrl }) => {
        if (!Number.isSafeInteger(id)) throw new Error("a photo id past 2^53: the exact path would read `text` again");
        return { id, title, url, thumbnailUrl };
      });
      return Response.json({ albumId: Number(albumId), photos });
    } finally {
      call.finish();
    }
  },
};

const kind = process.env.PROXY ?? "bare";
const server = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: proxies[kind]! });
console.log(`${kind} proxy listening on http://127.0.0.1:${server.port}`);

export {};
