import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NO_EARLY_STOP, startStack, type Stack } from "./harness.ts";
import { ask, openStream } from "../support/http.ts";
import { bulkyChat, pausedStream } from "../support/paused-stream.ts";
import { until } from "../support/until.ts";

// The gauges and latencies on /metrics against a real runner under load: two slots, requests held
// in them and queued behind them, then let go. Each value must move as requests queue, run and
// finish, and fall back to zero after.

const MODEL = "ai/gauged";
const NAME = "ai/gauged:latest";
let stack: Stack;

beforeAll(async () => {
  // The runners' figures are read on every scrape here (INFERENCE_METRICS_CACHE_MS=0): on the tiny
  // model, llama-server defers the queued requests for less than the default second a reading is
  // kept, and this test must see each reading as it is (test/inference/scrape-cache.test.ts shows the sharing).
  const env = { INFERENCE_SLOTS: "2", INFERENCE_QUEUE_DEPTH: "8", INFERENCE_METRICS_CACHE_MS: "0" };
  stack = await startStack({ models: [MODEL], embedders: ["ai/embedder"], env });
}, 120_000);
afterAll(async () => {
  await stack?.stop();
});

/** One sample's value on /metrics, by family name (the model's label), or undefined when absent. */
async function sample(text: string | undefined, name: string): Promise<number | undefined> {
  const body = text ?? (await ask({ url: stack.url }, "GET", "/metrics")).body;
  const escaped = name.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  const match = new RegExp(`^${escaped}\\{model_name="${NAME}"(?:,le="\\+Inf")?\\} (\\S+)$`, "m").exec(body);
  return match ? Number(match[1]) : undefined;
}
const metricsText = async () => (await ask({ url: stack.url }, "GET", "/metrics")).body;
const both = (name: string) => [`llamadock:${name}`, `vllm:${name}`];

describe("gauges under load", () => {
  it("count requests running and waiting while slots are held and a queue forms, then zero", async () => {
    // Loads the runner, and gives the histograms a first sample.
    expect((await ask({ url: stack.url }, "POST", "/v1/chat/completions", { model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 8, ...NO_EARLY_STOP })).status).toBe(200);
    const held = await Promise.all([0, 1].map(() => pausedStream(stack.socket, "/v1/chat/completions", bulkyChat(MODEL))));
    const queued = [0, 1, 2].map(() => openStream({ url: stack.url }, "/v1/chat/completions", { model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 200, stream: true, ...NO_EARLY_STOP }));
    await until(async () => (await sample(undefined, "llamadock:num_requests_waiting")) === 3, "3 requests waiting");
    const busy = await metricsText();
    for (const name of both("num_requests_running")) expect(await sample(busy, name)).toBe(2);
    for (const name of both("num_requests_waiting")) expect(await sample(busy, name)).toBe(3);

    // Let go: the held streams end, the queued ones run; the KV-cache gauge rises while slots generate.
    let kvSeen = 0;
    const reading = Promise.all([...held.map((s) => s.rest()), ...queued.map((s) => s.ended)]);
    let finished = false;
    void reading.then(() => (finished = true));
    while (!finished) {
      const text = await metricsText();
      kvSeen = Math.max(kvSeen, (await sample(text, "llamadock:kv_cache_usage_perc")) ?? 0);
      expect(await sample(text, "vllm:kv_cache_usage_perc")).toBeLessThanOrEqual(1);
    }
    const texts = await reading;
    expect(texts.every((t) => t.trimEnd().endsWith("data: [DONE]"))).toBe(true);
    expect(kvSeen).toBeGreaterThan(0);
    expect(kvSeen).toBeLessThanOrEqual(1);

    // All done: back to zero (the runner stays loaded, its idle slots' caches count as free).
    await until(async () => (await sample(undefined, "llamadock:num_requests_running")) === 0, "no request running");
    const after = await metricsText();
    for (const name of [...both("num_requests_running"), ...both("num_requests_waiting"), ...both("kv_cache_usage_perc")]) {
      expect(await sample(after, name), name).toBe(0);
    }
  }, 120_000);

  it("count tokens and time every answer, streamed or whole, under both names", async () => {
    const before = await metricsText();
    const generated = (await sample(before, "llamadock:generation_tokens_total"))!;
    const e2e = (await sample(before, "llamadock:e2e_request_latency_seconds_count"))!;
    const ttft = (await sample(before, "llamadock:time_to_first_token_seconds_count"))!;
    const itl = (await sample(before, "llamadock:inter_token_latency_seconds_count"))!;
    const prompt = (await sample(before, "llamadock:prompt_tokens_total"))!;
    const body = { model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 50, ...NO_EARLY_STOP };
    await Promise.all([
      ask({ url: stack.url }, "POST", "/v1/chat/completions", body),
      openStream({ url: stack.url }, "/v1/chat/completions", { ...body, stream: true }).ended,
      ask({ url: stack.url }, "POST", "/v1/completions", { model: MODEL, prompt: "hello", max_tokens: 50, ...NO_EARLY_STOP }),
    ]);
    const after = await metricsText();
    for (const prefix of ["llamadock:", "vllm:"]) {
      expect(await sample(after, `${prefix}generation_tokens_total`)).toBe(generated + 150);
      expect(await sample(after, `${prefix}e2e_request_latency_seconds_count`)).toBe(e2e + 3);
      expect(await sample(after, `${prefix}time_to_first_token_seconds_count`)).toBe(ttft + 3);
      expect(await sample(after, `${prefix}inter_token_latency_seconds_count`)).toBe(itl + 3 * 49);
      expect(await sample(after, `${prefix}prompt_tokens_total`)).toBeGreaterThan(prompt);
      expect(await sample(after, `${prefix}e2e_request_latency_seconds_bucket`)).toBe(e2e + 3);
    }
  }, 60_000);

  it("count an embedding's prompt tokens, from its usage", async () => {
    const embedding = await ask({ url: stack.url }, "POST", "/v1/embeddings", { model: "ai/embedder", input: "hello there" });
    expect(embedding.status).toBe(200);
    const used = embedding.json().usage.prompt_tokens as number;
    expect(used).toBeGreaterThan(0);
    const text = await metricsText();
    expect(text).toContain(`llamadock:prompt_tokens_total{model_name="ai/embedder:latest"} ${used}\n`);
    expect(text).toContain(`vllm:e2e_request_latency_seconds_count{model_name="ai/embedder:latest"} 1\n`);
  }, 60_000);
});
