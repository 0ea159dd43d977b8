import { readFileSync } from "node:fs";
import { gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { albumOf, flood, gzipBomb, photosJson, startPhotoService, type PhotoService } from "../album/photo-service.ts";
import { startServer, type RuntimeName, type ServerProcess } from "../support/server-process.ts";
import { ask, type Target } from "../support/http.ts";
import { until } from "../support/until.ts";

// A hostile photo service that answers gigabytes (endlessly, with a huge declared length, or as a
// small gzip body that inflates) costs the album service no memory: under each runtime, every
// such album is a 502 upstream_too_large after one call whose connection is then closed, and the
// server's resident memory grows by far less than what the photo service tried to send.

const runtimes: RuntimeName[] = ["bun", "deno", "node"];
const MAX_BYTES = 1 << 20;
const ROUNDS = 8;
const GIB = 2 ** 30;

/** The resident memory of a process, from /proc. */
function rssOf(pid: number): number {
  const kib = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1];
  if (!kib) throw new Error(`no VmRSS for ${pid}`);
  return Number(kib) * 1024;
}

let bomb: Buffer;
beforeAll(async () => {
  bomb = await gzipBomb(256 * 2 ** 20);
}, 60_000);

describe.each(runtimes)("under %s, the photo service's answer is bounded", (runtime) => {
  let photos: PhotoService;
  let server: ServerProcess;
  let target: Target;

  beforeAll(async () => {
    photos = await startPhotoService();
    server = await startServer({
      runtime,
      env: { SERVICES: "album", ALBUM_HOST: "127.0.0.1", ALBUM_PORT: "0", PHOTOS_API_BASE_URL: photos.url, PHOTOS_API_MAX_BYTES: "1MiB" },
      ready: [/album service listening on http:/],
    });
    target = { url: `http://127.0.0.1:${/listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(server.output())![1]}` };
  });
  afterAll(async () => {
    await server?.stop();
    await photos?.close();
  });

  const expectTooLarge = async () => {
    const answer = await ask(target, "GET", "/api/albums/1");
    expect(answer.status).toBe(502);
    expect((JSON.parse(answer.body) as { error: { code: string } }).error.code).toBe("upstream_too_large");
  };

  it("stays flat in memory while the photo service tries to send gigabytes, and serves after", async () => {
    // Warm up on answers just within the bound, so that the baseline has the heap those take.
    photos.answerWith(albumOf(6000));
    for (let i = 0; i < 2 * ROUNDS; i++) expect((await ask(target, "GET", "/api/albums/1")).status).toBe(200);
    const before = rssOf(server.pid);
    photos.requests.length = 0;

    const endless = flood({ upTo: GIB });
    photos.answerWith(endless.answer);
    for (let i = 0; i < ROUNDS; i++) await expectTooLarge();
    await until(() => endless.closed() === ROUNDS, "every flooding connection to close");

    const declared = flood({ declaredLength: 10 * GIB, upTo: GIB });
    photos.answerWith(declared.answer);
    for (let i = 0; i < ROUNDS; i++) await expectTooLarge();
    await until(() => declared.closed() === ROUNDS, "every connection that declared 10 GiB to close");

    photos.answerWith((_request, response) => {
      response.writeHead(200, { "content-type": "application/json", "content-encoding": "gzip", "content-length": String(bomb.byteLength) });
      response.end(bomb);
    });
    for (let i = 0; i < ROUNDS; i++) await expectTooLarge();

    const after = rssOf(server.pid);
    const offered = ROUNDS * (GIB + 10 * GIB + 256 * 2 ** 20);
    const sent = endless.sent() + declared.sent();
    console.log(
      `${runtime}: RSS ${(before / 2 ** 20).toFixed(1)} -> ${(after / 2 ** 20).toFixed(1)} MiB; the photo service offered ` +
        `${(offered / GIB).toFixed(0)} GiB, got ${(sent / 2 ** 20).toFixed(1)} MiB written before the cuts (plus ${ROUNDS} gzip bodies of 256 MiB)`,
    );
    // One call per album, whatever it answered.
    expect(photos.requests).toHaveLength(3 * ROUNDS);
    // Each cut call wrote about the bound plus what the sockets' buffers hold, never its gigabyte.
    expect(sent).toBeLessThan(2 * ROUNDS * 32 * 2 ** 20);
    // Half of one gzip body's 256 MiB (a runtime's heap moves by tens of MiB between readings).
    expect(after - before).toBeLessThan(128 * 2 ** 20);

    photos.answerWith(albumOf(3));
    expect((await ask(target, "GET", "/api/albums/1")).status).toBe(200);
  }, 120_000);

  it("serves a gzip-encoded album within the bound, decoded", async () => {
    const body = gzipSync(photosJson(["1", "2", "3"]));
    photos.answerWith((_request, response) => {
      response.writeHead(200, { "content-type": "application/json", "content-encoding": "gzip", "content-length": String(body.byteLength) });
      response.end(body);
    });
    const answer = await ask(target, "GET", "/api/albums/1");
    expect(answer.status).toBe(200);
    expect((answer.json() as { photos: { id: number }[] }).photos.map((photo) => photo.id)).toEqual([1, 2, 3]);
  });
});
