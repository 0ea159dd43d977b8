import { createServer, type Server, type Socket } from "node:net";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { albumOf, json, photoJson, startPhotoService, type Answer, type PhotoService } from "../album/photo-service.ts";
import { denoPermissions, startServer, type RuntimeName, type ServerProcess } from "../support/server-process.ts";
import { ask, type Target } from "../support/http.ts";

// Seed rule: each album request causes exactly one call to the photo service, whatever happens
// to that call. Regression (B14.1): Bun's and Deno's own fetch sent the GET again on a new
// connection when the photo service reset a reused keep-alive connection without answering.
// Exactly-once is not bought with a connection per call: on every runtime the calls reuse
// kept-alive connections (undici's, which fail a call on a reset reused connection, never resend).

const runtimes: RuntimeName[] = ["bun", "deno", "node"];
const TIMEOUT_MS = 600;

async function startAlbum(runtime: RuntimeName, photosUrl: string): Promise<{ server: ServerProcess; target: Target }> {
  const server = await startServer({
    runtime,
    runtimeArgs: runtime === "deno" ? denoPermissions() : [],
    env: { SERVICES: "album", ALBUM_HOST: "127.0.0.1", ALBUM_PORT: "0", PHOTOS_API_BASE_URL: photosUrl, PHOTOS_API_TIMEOUT_MS: String(TIMEOUT_MS) },
    ready: [/album service listening on http:/],
  });
  const port = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(server.output())![1];
  return { server, target: { url: `http://127.0.0.1:${port}` } };
}

/** A TCP server that counts connections and resets each one as soon as it has any bytes. */
async function resetting(): Promise<{ url: string; connections: () => number; close(): Promise<void> }> {
  let count = 0;
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    count++;
    sockets.add(socket);
    socket.once("data", () => socket.resetAndDestroy());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    connections: () => count,
    close: () => new Promise((resolve) => (sockets.forEach((s) => s.destroy()), server.close(() => resolve()))),
  };
}

/** Sends the headers and a first photo, then nothing more (past the timeout). */
const slowBody: Answer = (_request, response) => {
  response.writeHead(200, { "content-type": "application/json", "content-length": "100000" });
  response.write(`[${photoJson("1")},`);
};

describe.each(runtimes)("under %s, one album request is one call to the photo service", (runtime) => {
  let photos: PhotoService;
  let album: { server: ServerProcess; target: Target };

  beforeAll(async () => {
    photos = await startPhotoService();
    album = await startAlbum(runtime, photos.url);
  });
  afterAll(async () => {
    await album?.server.stop();
    await photos?.close();
  });
  beforeEach(() => {
    photos.requests.length = 0;
    photos.answerWith(albumOf(2));
  });

  it("when the photo service resets a reused keep-alive connection without answering: 502, one call", async () => {
    expect((await ask(album.target, "GET", "/api/albums/1")).status).toBe(200);
    photos.answerWith((request) => request.socket.destroy());
    const reset = await ask(album.target, "GET", "/api/albums/2");
    expect([reset.status, JSON.parse(reset.body).error.code]).toEqual([502, "upstream_unreachable"]);
    expect(photos.requests.map((r) => r.url)).toEqual(["/albums/1/photos", "/albums/2/photos"]);
    photos.answerWith(albumOf(2));
    expect((await ask(album.target, "GET", "/api/albums/3")).status).toBe(200);
    expect(photos.requests).toHaveLength(3);
  });

  it("albums one after another reuse kept-alive connections to the photo service", async () => {
    const connections = new Set<Socket>();
    photos.answerWith((request, response) => (connections.add(request.socket), albumOf(2)(request, response)));
    for (let id = 1; id <= 6; id++) expect((await ask(album.target, "GET", `/api/albums/${id}`)).status).toBe(200);
    expect(photos.requests).toHaveLength(6);
    // undici's Agent takes turns between two connections when calls follow one another (a call's
    // connection counts as busy until its answer's end is handled); without keep-alive: six.
    expect(connections.size).toBeLessThanOrEqual(2);
  });

  it("when the photo service does not answer in time: 504, one call", async () => {
    photos.answerWith(() => {});
    expect((await ask(album.target, "GET", "/api/albums/1")).status).toBe(504);
    expect(photos.requests).toHaveLength(1);
  });

  it("when the body stops halfway until the time limit: 504, one call", async () => {
    photos.answerWith(slowBody);
    expect((await ask(album.target, "GET", "/api/albums/1")).status).toBe(504);
    expect(photos.requests).toHaveLength(1);
  });

  it("when the photo service redirects: 502, one call (the redirect is not followed)", async () => {
    photos.answerWith((_request, response) => (response.writeHead(307, { location: "/albums/2/photos" }), response.end()));
    expect((await ask(album.target, "GET", "/api/albums/1")).status).toBe(502);
    expect(photos.requests).toHaveLength(1);
  });

  it("when the photo service answers an error status: that status, one call", async () => {
    photos.answerWith(json("{}", 500));
    expect((await ask(album.target, "GET", "/api/albums/1")).status).toBe(500);
    expect(photos.requests).toHaveLength(1);
  });

  it("when every connection is reset before an answer: 502, one connection", async () => {
    const upstream = await resetting();
    const other = await startAlbum(runtime, upstream.url);
    try {
      expect((await ask(other.target, "GET", "/api/albums/1")).status).toBe(502);
      expect(upstream.connections()).toBe(1);
    } finally {
      await other.server.stop();
      await upstream.close();
    }
  });

  it("when the connection is refused: 502, and the album service stays up", async () => {
    const closed = await resetting();
    await closed.close();
    const other = await startAlbum(runtime, closed.url);
    try {
      expect((await ask(other.target, "GET", "/api/albums/1")).status).toBe(502);
      expect((await ask(other.target, "GET", "/api/albums/2")).status).toBe(502);
    } finally {
      await other.server.stop();
    }
  });
});
