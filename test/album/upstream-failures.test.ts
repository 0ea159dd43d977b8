import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, expect, it } from "vitest";
import { album, manualClock, usePhotoService, type ErrorBody } from "./harness.ts";
import { until } from "../support/until.ts";
import { hang, json, photoJson, type Answer } from "./photo-service.ts";

// How the album service answers when the photo service fails, answers badly, or is too slow.

const service = usePhotoService();
const get = (path: string, init?: RequestInit) => album({ baseUrl: service.upstream.url })(path, init);

async function expectGatewayError(response: Response, status: number, code: string) {
  expect(response.status).toBe(status);
  expect(response.headers.get("content-type")).toMatch(/^application\/json/);
  const body = (await response.json()) as ErrorBody;
  expect(body.error.code).toBe(code);
  expect(body.error.message).not.toBe("");
}

describe("an upstream error status", () => {
  it.each([400, 401, 403, 404, 418, 429, 500, 502, 503, 504, 599])(
    "%i is passed on with an empty body, after exactly one call",
    async (status) => {
      service.upstream.answerWith(json(`{"error":"upstream says no"}`, status));
      const response = await get("/api/albums/1");
      expect(response.status).toBe(status);
      expect(await response.text()).toBe("");
      expect(service.upstream.requests).toHaveLength(1);
    },
  );
});

describe("failures other than an error status", () => {
  it("an unreachable photo service gives 502", async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const { port } = closed.address() as AddressInfo;
    await new Promise((resolve) => closed.close(resolve));
    await expectGatewayError(await album({ baseUrl: `http://127.0.0.1:${port}` })("/api/albums/1"), 502, "upstream_unreachable");
  });

  it("a connection reset before the answer gives 502", async () => {
    service.upstream.answerWith((request) => request.socket.destroy());
    await expectGatewayError(await get("/api/albums/1"), 502, "upstream_unreachable");
    expect(service.upstream.requests).toHaveLength(1);
  });

  it("a connection reset in the middle of the body gives 502", async () => {
    service.upstream.answerWith((request, response) => {
      response.writeHead(200, { "content-type": "application/json", "content-length": "100000" });
      response.write(`[${photoJson("1")},`, () => request.socket.destroy());
    });
    await expectGatewayError(await get("/api/albums/1"), 502, "upstream_unreachable");
  });

  it("a redirect is not followed (that would be a second call) and gives 502", async () => {
    service.upstream.answerWith((_request, response) => {
      response.writeHead(302, { location: "/albums/2/photos" });
      response.end();
    });
    await expectGatewayError(await get("/api/albums/1"), 502, "upstream_unexpected_status");
    expect(service.upstream.requests).toHaveLength(1);
  });

  it.each<[string, Answer]>([
    ["before the headers", hang],
    [
      "in the middle of the body",
      (_request, response) => {
        response.writeHead(200, { "content-type": "application/json" });
        response.write("[");
      },
    ],
  ])("a photo service that hangs %s gives 504 once the timeout passes", async (_, answer) => {
    service.upstream.answerWith(answer);
    const response = await album({ baseUrl: service.upstream.url, timeoutMs: 200 })("/api/albums/1");
    await expectGatewayError(response, 504, "upstream_timeout");
    expect(service.upstream.requests).toHaveLength(1);
  });

  it.each([
    ["not JSON", "<html>oops</html>"],
    ["an empty body", ""],
    ["an object", `{"photos":[]}`],
    ["null", "null"],
    ["an array of numbers", "[1,2]"],
    ["a photo without an id", `[{"title":"t","url":"u","thumbnailUrl":"t"}]`],
    ["a photo without a title", `[{"id":1,"url":"u","thumbnailUrl":"t"}]`],
    ["a photo whose id is a string", `[{"id":"1","title":"t","url":"u","thumbnailUrl":"t"}]`],
    ["a photo whose id is a decimal", `[{"id":1.5,"title":"t","url":"u","thumbnailUrl":"t"}]`],
    ["a photo whose id is past 2^63 - 1", `[{"id":9223372036854775808,"title":"t","url":"u","thumbnailUrl":"t"}]`],
    ["a photo whose title is a number", `[{"id":1,"title":5,"url":"u","thumbnailUrl":"t"}]`],
  ])("a body that is %s gives 502", async (_, body) => {
    service.upstream.answerWith(json(body));
    await expectGatewayError(await get("/api/albums/1"), 502, "upstream_bad_body");
    expect(service.upstream.requests).toHaveLength(1);
  });
});

describe("the upstream timeout, on a clock the test moves", () => {
  const settledWithin = (promise: Promise<unknown>, ms: number) =>
    Promise.race([promise.then(() => true), new Promise((resolve) => setTimeout(() => resolve(false), ms))]);

  it("gives 504 when the default 10 s have passed, not a moment before", async () => {
    service.upstream.answerWith(hang);
    const clock = manualClock();
    const answered = album({ baseUrl: service.upstream.url, timeoutMs: 10_000, clock })("/api/albums/1");
    await until(() => service.upstream.requests.length === 1, "the call to the photo service");
    expect(clock.pending).toBe(1);
    clock.advance(9_999);
    expect(await settledWithin(answered, 50)).toBe(false);
    clock.advance(1);
    // Far less than the 10 s a real timer would take.
    expect(await settledWithin(answered, 2_000)).toBe(true);
    await expectGatewayError(await answered, 504, "upstream_timeout");
    expect(service.upstream.requests).toHaveLength(1);
  });

  it("leaves no timer behind once a call is over", async () => {
    const clock = manualClock();
    const ok = await album({ baseUrl: service.upstream.url, clock })("/api/albums/1");
    expect(ok.status).toBe(200);
    service.upstream.answerWith(json("oops"));
    expect((await album({ baseUrl: service.upstream.url, clock })("/api/albums/1")).status).toBe(502);
    expect(clock.pending).toBe(0);
  });
});

describe("a client that goes away", () => {
  it("aborts the call to the photo service", async () => {
    let upstreamClosed!: Promise<void>;
    const arrived = new Promise<void>((resolve) => {
      service.upstream.answerWith((request) => {
        upstreamClosed = new Promise((closed) => request.socket.once("close", () => closed()));
        resolve();
      });
    });
    const client = new AbortController();
    const answered = get("/api/albums/1", { signal: client.signal });
    await arrived;
    client.abort();
    await upstreamClosed; // the test times out if the upstream connection stays open
    const response = await answered;
    expect(response.status).toBe(499);
    expect(service.upstream.requests).toHaveLength(1);
  });
});
