import { describe, expect, it } from "vitest";
import { createMetrics } from "../../src/inference/metrics.ts";
import { runnerInfo } from "../support/runner-info.ts";

// The Prometheus text: our counters, and runners' expositions merged under one HELP/TYPE per family.

const exposition = (value: number) =>
  [
    "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.",
    "# TYPE llamacpp:prompt_tokens_total counter",
    `llamacpp:prompt_tokens_total ${value}`,
    "# HELP llamacpp:requests_processing Number of requests processing.",
    "# TYPE llamacpp:requests_processing gauge",
    'llamacpp:requests_processing{slot="0"} 1',
    "",
  ].join("\n");

describe("metrics", () => {
  it("counts requests, loads and crashes, and reports queue depth per runner", () => {
    const metrics = createMetrics();
    metrics.countRequest("chat/completions", 200);
    metrics.countRequest("chat/completions", 200);
    metrics.countRequest("embeddings", 503);
    metrics.observer.loaded!("ai/a", "completion", 1500);
    metrics.observer.loadFailed!("ai/b", "embedding");
    metrics.observer.crashed!("ai/a", "completion");
    const text = metrics.render([runnerInfo("ai/a", "completion", 3, 2)], []);
    expect(text).toContain('llamadock_requests_total{route="chat/completions",status="200"} 2\n');
    expect(text).toContain('llamadock_requests_total{route="embeddings",status="503"} 1\n');
    expect(text).toContain('llamadock_runner_loads_total{model="ai/a",mode="completion",result="ok"} 1\n');
    expect(text).toContain('llamadock_runner_loads_total{model="ai/b",mode="embedding",result="error"} 1\n');
    expect(text).toContain('llamadock_runner_load_seconds_sum{model="ai/a",mode="completion"} 1.5\n');
    expect(text).toContain('llamadock_runner_crashes_total{model="ai/a",mode="completion"} 1\n');
    expect(text).toContain('llamadock_queue_depth{model="ai/a",mode="completion"} 3\n');
    expect(text).toContain('llamadock_requests_in_flight{model="ai/a",mode="completion"} 2\n');
    expect(text).toContain('llamadock_runners{state="ready"} 1\n');
  });

  it("labels each runner's samples and keeps one HELP and TYPE per family", () => {
    const text = createMetrics().render([], [
      { model: "ai/a", mode: "completion", text: exposition(10) },
      { model: 'ai/"q"', mode: "embedding", text: exposition(20) },
    ]);
    const family = text.slice(text.indexOf("# HELP llamacpp:prompt_tokens_total"));
    expect(family.split("\n").slice(0, 4)).toEqual([
      "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.",
      "# TYPE llamacpp:prompt_tokens_total counter",
      'llamacpp:prompt_tokens_total{backend="llama.cpp",model="ai/a",mode="completion"} 10',
      'llamacpp:prompt_tokens_total{backend="llama.cpp",model="ai/\\"q\\"",mode="embedding"} 20',
    ]);
    expect(text).toContain('llamacpp:requests_processing{backend="llama.cpp",model="ai/a",mode="completion",slot="0"} 1\n');
    expect(text.match(/^# TYPE llamacpp:requests_processing /gm)).toHaveLength(1);
  });
});
