import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hang, startPhotoService, type PhotoService } from "../album/photo-service.ts";
import { ask } from "../support/http.ts";
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
    photos.answerWith(hang);
    const held = [1, 2, 3].map((id) => ask({ url: `http://127.0.0.1:${port}` }, "GET", `/api/albums/${id}`).catch((e: Error) => e));
    await new Promise((resolve) => setTimeout(resolve, 300));
    const extra = await ask({ url: `http://127.0.0.1:${port}` }, "GET", "/api/albums/4").catch((e: Error) => e);
    // Bun answers 503 JSON; node:http (Node's, and Deno's) closes connections beyond its cap.
    if (extra instanceof Error) expect(runtime).not.toBe("bun");
    else expect([extra.status, extra.json().error.code]).toEqual([503, "too_many_connections"]);
    await photos.close(); // the held calls fail, their places come back
    await Promise.all(held);
    photos = await startPhotoService();
  });
});
