import { describe, expect, it } from "vitest";
import { createLoads } from "../../src/inference/loads.ts";
import type { RunnerProcess, RunnerSpec, StartRunner } from "../../src/scheduler/types.ts";

// The loads the status page and /engines/events show, and /metrics' histogram of load times:
// a load queued, starting, restoring a cache, done; its time; whether a cache was restored.

const spec = (name: string, alias = "ai/talk:latest"): RunnerSpec => ({ name, alias, modelPath: "m.gguf", mode: "completion" });
const process = {} as RunnerProcess;

describe("loads", () => {
  it("shows each phase of a load, then its time and whether a cache was restored", async () => {
    let clock = 1_000;
    const loads = createLoads(() => clock);
    loads.waitingForRoom("ai/talk:latest", "completion", 1);
    expect(loads.view().in_progress).toEqual([{ model: "ai/talk:latest", mode: "completion", phase: "queued", since: 1_000 }]);
    loads.waitingForRoom("ai/talk:latest", "completion", 0);
    let finish!: () => void;
    // What the slot cache does inside a start: restoring, then how many slots it restored.
    const start: StartRunner = (s) =>
      new Promise((resolve) => {
        finish = () => {
          loads.restoring(s);
          expect(loads.view().in_progress).toMatchObject([{ phase: "restoring" }]);
          loads.restored(s, 1);
          clock += 1_500;
          resolve(process);
        };
      });
    const loading = loads.track(start)(spec("a-1"));
    expect(loads.view().in_progress).toEqual([{ model: "ai/talk:latest", mode: "completion", phase: "starting", since: 1_000 }]);
    finish();
    await loading;
    expect(loads.view()).toEqual({ in_progress: [], last: { "ai/talk:latest": [{ mode: "completion", seconds: 1.5, cache_restored: true, at: 2_500 }] } });
    await loads.track(async () => process)(spec("a-2"));
    expect(loads.view().last["ai/talk:latest"]!.map((l) => l.cache_restored)).toEqual([false, true]);
    const lines = loads.histogramLines();
    expect(lines).toContain('llamadock_runner_load_duration_seconds_bucket{model="ai/talk:latest",mode="completion",cache_restored="true",le="1"} 0');
    expect(lines).toContain('llamadock_runner_load_duration_seconds_bucket{model="ai/talk:latest",mode="completion",cache_restored="true",le="2.5"} 1');
    expect(lines).toContain('llamadock_runner_load_duration_seconds_count{model="ai/talk:latest",mode="completion",cache_restored="false"} 1');
  });

  it("forgets a load that failed, and keeps the last five of a model", async () => {
    const loads = createLoads();
    await expect(loads.track(async () => Promise.reject(new Error("bad model")))(spec("b-1"))).rejects.toThrow("bad model");
    expect(loads.view()).toEqual({ in_progress: [], last: {} });
    for (let i = 0; i < 7; i++) await loads.track(async () => process)(spec(`b-${i + 2}`));
    expect(loads.view().last["ai/talk:latest"]).toHaveLength(5);
  });
});
