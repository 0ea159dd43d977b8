import { describe, expect, it } from "vitest";
import { routeTable } from "../../src/http/router.ts";
import { inferenceRoutes } from "../../src/inference/routes.ts";
import { createMetrics } from "../../src/inference/metrics.ts";
import type { StoredModel } from "../../src/models/index.ts";
import { createScheduler } from "../../src/scheduler/scheduler.ts";

// The inference routes as pure handlers: a real scheduler whose runners fail to load (the file is
// gone), and a store whose model a delete removes between the route's lookup and the load.

const model: StoredModel = { id: `sha256:${"a".repeat(64)}`, tags: ["ai/tiny:latest"], created: 0, config: {}, ggufPath: "/gone/tiny.gguf" };

function handler(deletedAfterLookup: boolean) {
  let lookups = 0;
  const store = {
    resolve: async () => (deletedAfterLookup && lookups++ > 0 ? undefined : model),
    list: async () => [model],
  };
  const scheduler = createScheduler({
    start: async () => {
      throw new Error("model file not found: /gone/tiny.gguf");
    },
    settings: { get: async () => ({}), all: async () => ({}), update: async () => ({}) },
    limits: { maxRunners: 1, slots: 1, queueDepth: 1, keepAlive: "5m", cpuCores: 2 },
  });
  return routeTable(inferenceRoutes({ store, scheduler, metrics: createMetrics(), bodyLimit: 65536, bodyPolicy: { allowRemoteMedia: false }, bounds: { timeoutMs: 60_000, maxTokens: 4096, clientStallMs: 60_000 } }));
}

const chat = () =>
  new Request("http://runner/engines/llama.cpp/v1/chat/completions", {
    method: "POST",
    body: JSON.stringify({ model: "ai/tiny", messages: [{ role: "user", content: "hi" }] }),
  });

describe("a model deleted between the lookup and the load", () => {
  it("answers 404 model_not_found, not a load failure", async () => {
    const response = await handler(true)(chat());
    expect(response.status).toBe(404);
    expect(await response.json()).toEqual({ error: { type: "not_found_error", code: "model_not_found", message: "model not found: ai/tiny" } });
  });

  it("keeps the 503 of a load that failed while the model is still there", async () => {
    const response = await handler(false)(chat());
    expect(response.status).toBe(503);
    expect((await response.json()).error).toMatchObject({ code: "model_load_failed", message: expect.stringMatching(/model file not found/) });
  });
});
