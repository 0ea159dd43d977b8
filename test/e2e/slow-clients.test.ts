import type { IncomingMessage, ServerResponse } from "node:http";
import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { albumOf, startPhotoService, type PhotoService } from "../album/photo-service.ts";
import { ask } from "../support/http.ts";
import { until } from "../support/until.ts";
import { denoPermissions, startServer, type RuntimeName, type ServerProcess } from "../support/server-process.ts";

// Slow and numerous clients cannot hold a listener: a client that sends its headers slowly
// (slowloris) is cut off after HTTP_HEADERS_TIMEOUT_MS; past HTTP_MAX_CONNECTIONS, new ones are
// turned away. The album service under each runtime (the same adapters serve the model runner).
// Regression: under Deno.serve a client that never finished its headers held its connection forever.

const runtimes: RuntimeName[] = ["bun", "deno", "node"];

describe.each(runtimes)("slow and numerous clients under %s", (runtime) => {
  let photos: PhotoService;
  let server: ServerProcess;
  let port: number;
  beforeAll(async () => {
    photos = await startPhotoService();
    server = await startServer({
      runtime,
      runtimeArgs: runtime === "deno" ? denoPermissions() : [],
      env: { SERVICES: "album", ALBUM_PORT: "0", PHOTOS_API_BASE_URL: photos.url, HTTP_HEADERS_TIMEOUT_MS: "1000", HTTP_MAX_CONNECTIONS: "3" },
      ready: [/album service listening on http:/],
    });
    port = Number(/listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(server.output())![1]);
  });
  afterAll(async () => {
    await server?.stop();
    await photos?.close();
  });

  it("closes a connection whose headers do not arrive in time", async () => {
    const socket = connect(port, "127.0.0.1");
    await new Promise((resolve) => socket.once("connect", resolve));
    socket.write("GET /api/albums/1 HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ");
    const closed = new Promise<string>((resolve) => socket.once("close", () => resolve("closed")));
    socket.resume(); // read what comes (Node answers 408 first), so the end is seen
    // Node checks every second; Bun's own timer is coarse (it closed after 10-12 s here).
    const waited = new Promise<string>((resolve) => setTimeout(() => resolve("still open"), 20_000));
    expect(await Promise.race([closed, waited])).toBe("closed");
    socket.destroy();
    expect((await ask({ url: `http://127.0.0.1:${port}` }, "GET", "/api/albums/1")).status).toBe(200);
  });

  it("turns away requests beyond the cap while the others are held, and serves again after", async () => {
    // The photo service holds each call until released: three album requests in flight fill the cap.
    const calls: [IncomingMessage, ServerResponse][] = [];
    photos.answerWith((request, response) => void calls.push([request, response]));
    const settled: number[] = [];
    const held = [1, 2, 3].map((id) => ask({ url: `http://127.0.0.1:${port}` }, "GET", `/api/albums/${id}`).finally(() => settled.push(id)));
    await until(() => calls.length === 3, "the three held requests to reach the photo service");
    const extra = await ask({ url: `http://127.0.0.1:${port}` }, "GET", "/api/albums/4").catch((e: NodeJS.ErrnoException) => e);
    // Bun answers 503 JSON; node:http (Node's, and Deno's) closes connections beyond its cap at once.
    if (runtime === "bun") expect(extra instanceof Error ? extra : [extra.status, extra.json().error.code]).toEqual([503, "too_many_connections"]);
    else expect(extra instanceof Error ? extra.code : extra).toBe("ECONNRESET");
    expect(settled).toEqual([]); // the three were held meanwhile, not turned away
    // Released, the held requests are answered, and their places come back.
    photos.answerWith(albumOf(2));
    for (const [request, response] of calls) albumOf(2)(request, response);
    expect((await Promise.all(held)).map((answer) => [answer.status, answer.json().photos.length])).toEqual([[200, 2], [200, 2], [200, 2]]);
    const again = await ask({ url: `http://127.0.0.1:${port}` }, "GET", "/api/albums/5");
    expect([again.status, again.json().albumId]).toEqual([200, 5]);
  });
});
