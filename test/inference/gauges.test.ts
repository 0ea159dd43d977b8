import { describe, expect, it } from "vitest";
import { modelGauges } from "../../src/inference/gauges.ts";
import { createLatency, timingsIn } from "../../src/inference/latency.ts";
import { createMetrics } from "../../src/inference/metrics.ts";
import { runnerInfo } from "../support/runner-info.ts";

// The model-server protocol's gauges and the latency histograms, from fixed inputs: the shapes
// llama-server answers on /metrics and /slots (seen from release v0.5.0) and in its `timings`.

const deferred = (n: number) => `# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred ${n}\n`;
const slot = (n_ctx: number, is_processing: boolean, n_prompt_tokens?: number) => ({ id: 0, n_ctx, is_processing, ...(n_prompt_tokens === undefined ? {} : { n_prompt_tokens }) });

describe("modelGauges", () => {
  it("adds our queue and llama-server's deferred requests, counts slots held, per model across modes", () => {
    const gauges = modelGauges(
      [runnerInfo("ai/a", "completion", 3, 2), runnerInfo("ai/a", "embedding", 1, 1), runnerInfo("ai/b", "completion", 0, 0)],
      [{ model: "ai/a", mode: "completion", text: deferred(2) }],
      [
        // An idle slot keeps its last prompt cached (455 tokens here): reusable room, not counted.
        { model: "ai/a", mode: "completion", text: JSON.stringify([slot(512, true, 128), slot(512, false, 455)]) },
        { model: "ai/b", mode: "completion", text: JSON.stringify([slot(512, false)]) },
      ],
    );
    // The 2 deferred are among the 3 we count in use (handed ahead to llama-server's queue): waiting.
    expect(Object.fromEntries(gauges)).toEqual({
      "ai/a": { waiting: 6, running: 1, kvUsage: 0.125 },
      "ai/b": { waiting: 0, running: 0, kvUsage: 0 },
    });
  });

  it.each([
    ["not JSON", "Loading model"],
    ["not a list", '{"error":{"code":501}}'],
  ])("reads a /slots answer that is %s as no slots", (_, text) => {
    expect(modelGauges([], [], [{ model: "ai/a", mode: "completion", text }]).get("ai/a")).toEqual({ waiting: 0, running: 0, kvUsage: 0 });
  });
});

const TIMINGS = '"timings":{"cache_n":22,"prompt_n":54,"prompt_ms":2.4,"predicted_n":400,"predicted_ms":160,"predicted_per_token_ms":0.4,"predicted_per_second":2500}}';

describe("latency", () => {
  it("finds the last timings object of an answer's tail", () => {
    expect(timingsIn(`data: {"x":1,${TIMINGS}\n\ndata: [DONE]\n\n`)).toMatchObject({ cache_n: 22, prompt_n: 54, predicted_n: 400 });
    expect(timingsIn('{"usage":{"prompt_tokens":3}}')).toBeUndefined();
  });

  it("reads the timings' counts and times as JSON writes them, and nothing outside the object", () => {
    const text = '{"timings":{"cache_n": 7 ,"prompt_n":1e2,"predicted_n":-1,"predicted_ms":12.5e-1,"predicted_per_token_ms":},"prompt_n":9}';
    expect(timingsIn(text)).toEqual({ cache_n: 7, prompt_n: 100, predicted_n: -1, predicted_ms: 1.25 });
    expect(timingsIn('{"timings":{"draft_prompt_n":5}}')).toEqual({});
    expect(timingsIn('{"timings":{"prompt_n":3')).toBeUndefined();
  });

  it("times a stream from its first byte, a whole answer from where generation began", () => {
    let now = 1000;
    const latency = createLatency();
    const stream = latency.timer("ai/a", 1000, () => now);
    now = 1050;
    stream.firstByte();
    now = 1300;
    stream.end(true, `data: {${TIMINGS}\n\ndata: [DONE]`);
    const whole = latency.timer("ai/a", 2000, () => now);
    now = 2500;
    whole.end(true, `{${TIMINGS}`);
    const failed = latency.timer("ai/a", 3000, () => now);
    failed.end(false, "");
    const a = latency.models().get("ai/a")!;
    expect(a.promptTokens).toBe(2 * 76);
    expect(a.generationTokens).toBe(800);
    expect(a.histograms.e2e).toMatchObject({ count: 2, sum: 0.8 });
    // 50 ms to the stream's first byte; 500 ms less 160 ms of generation for the whole answer.
    expect(a.histograms.ttft.count).toBe(2);
    expect(a.histograms.ttft.sum).toBeCloseTo(0.05 + 0.34);
    expect(a.histograms.itl).toMatchObject({ count: 2 * 399 });
    expect(a.histograms.itl.buckets[0]).toBe(2 * 399); // 0.4 ms each: the first bucket (10 ms)
  });

  it("renders each family once under our prefix and vLLM's, with cumulative buckets", () => {
    const metrics = createMetrics();
    const timer = metrics.timer("ai/a", performance.now());
    timer.end(true, `{${TIMINGS}`);
    const text = metrics.render([runnerInfo("ai/a", "completion", 1, 2)], [], []);
    for (const prefix of ["llamadock:", "vllm:"]) {
      expect(text).toContain(`# TYPE ${prefix}num_requests_waiting gauge\n${prefix}num_requests_waiting{model_name="ai/a"} 1\n`);
      expect(text).toContain(`${prefix}num_requests_running{model_name="ai/a"} 2\n`);
      expect(text).toContain(`${prefix}kv_cache_usage_perc{model_name="ai/a"} 0\n`);
      expect(text).toContain(`${prefix}generation_tokens_total{model_name="ai/a"} 400\n`);
      expect(text).toContain(`${prefix}prompt_tokens_total{model_name="ai/a"} 76\n`);
      expect(text).toContain(`${prefix}inter_token_latency_seconds_bucket{model_name="ai/a",le="+Inf"} 399\n`);
      expect(text).toContain(`${prefix}e2e_request_latency_seconds_count{model_name="ai/a"} 1\n`);
      expect(text.match(new RegExp(`^# TYPE ${prefix}time_to_first_token_seconds histogram$`, "gm"))).toHaveLength(1);
    }
  });
});
