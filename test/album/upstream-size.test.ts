import { gzipSync } from "node:zlib";
import { describe, expect, it } from "vitest";
import { album, usePhotoService, type ErrorBody } from "./harness.ts";
import { until } from "../support/until.ts";
import { flood, gzipBomb, photosJson, type Answer } from "./photo-service.ts";

// The photo service's answer is read up to PHOTOS_API_MAX_BYTES and no further: beyond it the call
// is cut (its connection closed) and the client gets 502 upstream_too_large, after one call.

const service = usePhotoService();
const MAX = 64 * 1024;
const get = () => album({ baseUrl: service.upstream.url, maxBytes: MAX })("/api/albums/1");

async function expectTooLarge(response: Response) {
  expect(response.status).toBe(502);
  const body = (await response.json()) as ErrorBody;
  expect(body.error.code).toBe("upstream_too_large");
  expect(body.error.message).toContain(String(MAX));
  expect(service.upstream.requests).toHaveLength(1);
}

/** A valid album whose JSON text is exactly `size` bytes (the last title padded). */
function albumOfSize(size: number): Buffer {
  const base = photosJson(["1", "2"]);
  const padded = base.replace(`"title":"photo 2"`, `"title":"photo 2${" ".repeat(size - Buffer.byteLength(base))}"`);
  expect(Buffer.byteLength(padded)).toBe(size);
  return Buffer.from(padded);
}

/** Answers `body` with its length declared (and `headers`). */
const raw =
  (body: Buffer, headers: Record<string, string> = {}): Answer =>
  (_request, response) => {
    response.writeHead(200, { "content-type": "application/json", "content-length": String(body.byteLength), ...headers });
    response.end(body);
  };

describe("an answer within the bound", () => {
  it.each([
    ["with its length declared", raw],
    ["streamed without a declared length", chunked],
  ])("of exactly the bound, %s, is served", async (_, answer) => {
    service.upstream.answerWith(answer(albumOfSize(MAX)));
    const response = await get();
    expect(response.status).toBe(200);
    expect(((await response.json()) as { photos: unknown[] }).photos).toHaveLength(2);
  });

  it("gzip-encoded, is served decoded", async () => {
    const body = albumOfSize(MAX);
    service.upstream.answerWith(raw(gzipSync(body), { "content-encoding": "gzip" }));
    const response = await get();
    expect(response.status).toBe(200);
    expect(((await response.json()) as { photos: unknown[] }).photos).toHaveLength(2);
  });
});

describe("an answer past the bound gives 502 upstream_too_large and the call is cut", () => {
  it("one byte over, streamed without a declared length", async () => {
    service.upstream.answerWith(chunked(albumOfSize(MAX + 1)));
    await expectTooLarge(await get());
  });

  it("a declared length over the bound: refused before its body is read", async () => {
    const hostile = flood({ declaredLength: 10 * 2 ** 30 });
    service.upstream.answerWith(hostile.answer);
    await expectTooLarge(await get());
    await until(() => hostile.closed() === 1, "the upstream connection to close");
    // What the kernel's buffers took before the cut, not the 10 GiB it announced.
    expect(hostile.sent()).toBeLessThan(64 * 2 ** 20);
  });

  it("an endless body without a declared length: read up to the bound, then the connection closed", async () => {
    const hostile = flood();
    service.upstream.answerWith(hostile.answer);
    await expectTooLarge(await get());
    await until(() => hostile.closed() === 1, "the upstream connection to close");
    expect(hostile.sent()).toBeLessThan(64 * 2 ** 20);
  });

  it("a small gzip body that inflates to 64 MiB (its Content-Length is no bound on what it inflates to)", async () => {
    const bomb = await gzipBomb(64 * 2 ** 20);
    expect(bomb.byteLength).toBeLessThan(MAX);
    service.upstream.answerWith(raw(bomb, { "content-encoding": "gzip" }));
    await expectTooLarge(await get());
  });
});

/** Answers `body` in two chunks without a declared length (chunked transfer encoding). */
function chunked(body: Buffer): Answer {
  return (_request, response) => {
    response.writeHead(200, { "content-type": "application/json" });
    response.write(body.subarray(0, body.byteLength >> 1));
    response.end(body.subarray(body.byteLength >> 1));
  };
}
