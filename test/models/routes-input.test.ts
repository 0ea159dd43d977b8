import { afterEach, describe, expect, it } from "vitest";
import { routeTable } from "../../src/http/router.ts";
import { createMetrics } from "../../src/inference/metrics.ts";
import { inferenceRoutes } from "../../src/inference/routes.ts";
import type { Scheduler } from "../../src/scheduler/scheduler.ts";
import { call, modelApi, type ModelApi } from "./helpers.ts";

// What the model routes make of bad input: a body too large, a reference that is not a valid
// escape. Both are the client's errors, answered before any work.

let api: ModelApi;
afterEach(async () => {
  await api?.dispose();
});

const create = (body: BodyInit, headers: Record<string, string> = {}) =>
  api.handler(new Request("http://model-runner/models/create", { method: "POST", headers: { "content-type": "application/json", ...headers }, body, duplex: "half" } as RequestInit));

/** A body sent in chunks, so no length is declared and the limit must stop the reading. */
function streamed(text: string, chunk = 8192): ReadableStream<Uint8Array> {
  const bytes = new TextEncoder().encode(text);
  let offset = 0;
  return new ReadableStream({
    pull(controller) {
      if (offset >= bytes.byteLength) return controller.close();
      controller.enqueue(bytes.slice(offset, (offset += chunk)));
    },
  });
}

describe("POST /models/create body limit (B7: the body was read with no size limit)", () => {
  const huge = JSON.stringify({ from: "ai/tiny", pad: "x".repeat(70 * 1024) });

  it("answers 413 to a declared length over 64 KiB", async () => {
    api = await modelApi();
    const response = await create(huge, { "content-length": String(new TextEncoder().encode(huge).byteLength) });
    expect(response.status).toBe(413);
    expect((await response.json()).error).toMatchObject({ type: "payload_too_large_error", code: "body_too_large" });
  });

  it("answers 413 to a streamed body once it crosses 64 KiB", async () => {
    api = await modelApi();
    const response = await create(streamed(huge));
    expect(response.status).toBe(413);
  });

  it("still answers 400 to a body that is not JSON or lacks from", async () => {
    api = await modelApi();
    expect((await create("{not json")).status).toBe(400);
    expect((await create(JSON.stringify({ nope: 1 }))).status).toBe(400);
  });
});

describe("a malformed escape in a model reference (B6: decodeURIComponent threw a URIError -> 500)", () => {
  const bad = "%E0%A4%A";

  it("answers 400 on the model API", async () => {
    api = await modelApi();
    for (const [method, path] of [
      ["GET", `/models/ai/${bad}`],
      ["DELETE", `/models/${bad}`],
      ["POST", `/models/${bad}/tag?repo=x`],
    ] as const) {
      const answer = await call(api.handler, method, path);
      expect(answer.status, `${method} ${path}`).toBe(400);
      expect(answer.json.error).toMatchObject({ type: "invalid_request_error", code: "invalid_reference" });
    }
    expect((await call(api.handler, "GET", "/models/ai%2Fnothing")).status).toBe(404);
  });

  it("answers 400 on the OpenAI-compatible API", async () => {
    api = await modelApi();
    // Getting a model uses only the store; the scheduler is never reached.
    const handler = routeTable(inferenceRoutes({ store: api.store, scheduler: {} as Scheduler, metrics: createMetrics(), bodyLimit: 1024, bodyPolicy: { allowRemoteMedia: false }, bounds: { timeoutMs: 60_000, maxTokens: 4096, clientStallMs: 60_000 } }));
    for (const base of ["/v1", "/engines/llama.cpp/v1"]) {
      const answer = await call(handler, "GET", `${base}/models/${bad}`);
      expect(answer.status, base).toBe(400);
      expect(answer.json.error.code).toBe("invalid_reference");
      expect((await call(handler, "GET", `${base}/models/ai%2Fnothing`)).status).toBe(404);
    }
  });
});
