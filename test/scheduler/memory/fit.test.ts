import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { createScheduler } from "../../../src/scheduler/scheduler.ts";
import type { ModelRef } from "../../../src/scheduler/types.ts";
import { estimateMemory, shapeOf } from "../../../src/scheduler/memory/estimate.ts";
import { fakeStarter, tick } from "../fake-runner.ts";
import { tinyLlamaHeader } from "../../support/tiny-gguf.ts";

// "Will it fit?" against what the scheduler then does, with a recording stand-in for the
// supervisor: the answer names the runners a launch unloads or waits for, and starts nothing.

const MIB = 1024 * 1024;
const model = (name: string): ModelRef => ({
  id: `sha256:${name}`,
  tags: [`ai/${name}:latest`],
  ggufPath: `${name}.gguf`,
  config: {
    architecture: "llama",
    gguf: tinyLlamaHeader(),
  },
});
const [A, B, C] = [model("a"), model("b"), model("c")];
/** One runner at the model's own context. */
const COST = estimateMemory(shapeOf(A.config!.gguf!)!, MIB, { contextSize: 512, slots: 1 }).total;
const flush = async () => {
  await vi.advanceTimersByTimeAsync(1);
  await tick();
};

function setup(bytes: number) {
  const fake = fakeStarter();
  const scheduler = createScheduler({
    start: fake.start,
    settings: { get: async () => ({}), all: async () => ({}), update: async () => ({}) },
    limits: { maxRunners: 8, slots: 1, queueDepth: 1, keepAlive: "5m", cpuCores: 4, threads: 1 },
    memory: async () => ({ budget: { where: "cpu", bytes, source: "setting", reserveBytes: 0, devices: [] }, minContext: 512 }),
    modelBytes: async () => MIB,
  });
  const lease = async (m: ModelRef) => {
    const leased = scheduler.acquire(m, "completion");
    await flush();
    await fake.finishLoads();
    return leased;
  };
  return { ...fake, scheduler, lease };
}

describe("fit", () => {
  beforeEach(() => void vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] }));
  afterEach(() => void vi.useRealTimers());

  it("names the idle runner a launch evicts, and the launch evicts that one", async () => {
    // Room for two runners.
    const { scheduler, lease, started } = setup(2.5 * COST);
    (await lease(A)).release();
    await vi.advanceTimersByTimeAsync(10);
    (await lease(B)).release();
    const answer = await scheduler.fit(C, "completion");
    expect(answer).toMatchObject({ action: "evict", evicts: [{ model: "ai/a:latest" }], beside: [{ model: "ai/b:latest" }] });
    expect(started).toHaveLength(2); // the answer started nothing
    expect(scheduler.runners().map((r) => r.model).sort()).toEqual(["ai/a:latest", "ai/b:latest"]);
    (await lease(C)).release();
    expect(scheduler.runners().map((r) => r.model).sort()).toEqual(["ai/b:latest", "ai/c:latest"]);
  });

  it("says it waits for a busy runner, which the launch then does", async () => {
    const { scheduler, lease, pending, finishLoads } = setup(1.5 * COST);
    const held = await lease(A);
    expect(await scheduler.fit(B, "completion")).toMatchObject({ action: "wait", waitsFor: [{ model: "ai/a:latest" }], evicts: [] });
    const waiting = scheduler.acquire(B, "completion");
    await flush();
    expect(pending).toHaveLength(0);
    held.release();
    await flush();
    expect(pending).toHaveLength(1);
    await finishLoads();
    (await waiting).release();
    expect(scheduler.runners().map((r) => r.model)).toEqual(["ai/b:latest"]);
  });

  it("answers loaded for a loaded runner, and for changed settings as if it were reloaded", async () => {
    const { scheduler, lease } = setup(1.5 * COST);
    (await lease(A)).release();
    expect(await scheduler.fit(A, "completion")).toMatchObject({ action: "loaded", runner: { contextSize: 512 } });
    // Configured anew, its runner reloads: its own room counts for the new one.
    expect(await scheduler.fit(A, "completion", { contextSize: 512 })).toMatchObject({ action: "load", beside: [], contextSize: 512 });
  });

  it("for changed settings of a busy runner, waits for it to drain, as the reload then does", async () => {
    const { scheduler, lease, pending, finishLoads } = setup(1.5 * COST);
    const held = await lease(A);
    expect(await scheduler.fit(A, "completion", { contextSize: 512 })).toMatchObject({ action: "wait", waitsFor: [{ model: "ai/a:latest" }] });
    scheduler.reload(A);
    const next = scheduler.acquire(A, "completion");
    await flush();
    expect(pending).toHaveLength(0); // the new runner waits for the old one to drain
    held.release();
    await flush();
    expect(pending).toHaveLength(1);
    await finishLoads();
    (await next).release();
  });

  it("refuses a model too large with the 507 a load gives, naming the context that fits", async () => {
    const { scheduler, started } = setup(1.5 * COST);
    const refused = await scheduler.fit(A, "completion", { contextSize: 1 << 20 }).catch((e: unknown) => e);
    expect(refused).toMatchObject({ status: 507, code: "model_too_large", need: { contextSize: 1 << 20 } });
    const fitting = (refused as { need: { fittingContext: number } }).need.fittingContext;
    expect(fitting).toBeGreaterThanOrEqual(512);
    expect(await scheduler.fit(A, "completion", { contextSize: fitting })).toMatchObject({ action: "load", contextSize: fitting });
    expect(started).toHaveLength(0);
  });
});
