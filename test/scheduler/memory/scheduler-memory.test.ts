import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { createScheduler } from "../../../src/scheduler/scheduler.ts";
import type { ModelSettings } from "../../../src/scheduler/settings.ts";
import type { ModelRef } from "../../../src/scheduler/types.ts";
import type { MemoryBudget } from "../../../src/scheduler/memory/budget.ts";
import { estimateMemory, shapeOf, type PromptCacheLimits } from "../../../src/scheduler/memory/estimate.ts";
import { fakeStarter, tick } from "../fake-runner.ts";
import { tinyLlamaHeader } from "../../support/tiny-gguf.ts";

// The scheduler's memory decisions with a recording stand-in for the supervisor: which runners a
// launch unloads, what it refuses, and the context and GPU layers a runner starts with.

const MIB = 1024 * 1024;
const model = (name: string, context = 512): ModelRef => ({
  id: `sha256:${name}`,
  tags: [`ai/${name}:latest`],
  ggufPath: `${name}.gguf`,
  config: { architecture: "llama", gguf: tinyLlamaHeader(context) },
});
/** Weights per model: small ones 1 MiB, `big` 5 MiB, `huge` 100 MiB. */
const WEIGHTS: Record<string, number> = { "sha256:big": 5 * MIB, "sha256:huge": 100 * MIB };
const weightsOf = (m: ModelRef) => WEIGHTS[m.id] ?? MIB;
const cost = (m: ModelRef, contextSize: number, slots = 1) => estimateMemory(shapeOf(m.config!.gguf!)!, weightsOf(m), { contextSize, slots }).total;

const budget = (bytes: number, where: "gpu" | "cpu" = "cpu", hostBytes?: number): MemoryBudget => ({ where, bytes, source: "setting", reserveBytes: 0, devices: [], ...(hostBytes !== undefined ? { hostBytes } : {}) });

type Caches = { promptCache: PromptCacheLimits; hostBytes?: number };

function setup(bytes: number, where: "gpu" | "cpu" = "cpu", settings: Record<string, ModelSettings> = {}, caches?: Caches) {
  const fake = fakeStarter();
  const scheduler = createScheduler({
    start: fake.start,
    settings: { get: async (id) => settings[id] ?? {}, all: async () => settings, update: async () => ({}) },
    limits: { maxRunners: 8, slots: 1, queueDepth: 1, keepAlive: "5m", cpuCores: 4, threads: 1, ...(caches ? { promptCache: caches.promptCache } : {}) },
    memory: async () => ({ budget: budget(bytes, where, caches?.hostBytes), minContext: 1024 }),
    modelBytes: async (m) => weightsOf(m),
  });
  const use = async (m: ModelRef) => {
    const lease = scheduler.acquire(m, "completion");
    await flush();
    await fake.finishLoads();
    (await lease).release();
    await flush();
  };
  return { ...fake, scheduler, use };
}

const flush = async () => {
  await vi.advanceTimersByTimeAsync(1);
  await tick();
};
const names = (s: { runners(): { model: string }[] }) => s.runners().map((r) => r.model.replace(/^ai\/|:latest$/g, "")).sort();

describe("scheduling by memory", () => {
  beforeEach(() => void vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] }));
  afterEach(() => void vi.useRealTimers());

  it("unloads as many idle runners as the launch needs in one decision, least recently used first", async () => {
    const [a, b, c, big] = [model("a"), model("b"), model("c"), model("big")];
    const { scheduler, use, started } = setup(3 * cost(a, 512) + 2 * MIB);
    for (const m of [a, b, c]) {
      await use(m);
      await vi.advanceTimersByTimeAsync(10);
    }
    expect(cost(big, 512)).toBeGreaterThan(cost(a, 512) + 2 * MIB);
    await use(big);
    expect(names(scheduler)).toEqual(["big", "c"]);
    expect(started.filter((p) => p.stopped).map((p) => p.spec.alias)).toEqual(["ai/a:latest", "ai/b:latest"]);
  });

  it("refuses a model that cannot fit even alone at once (507), unloading nothing", async () => {
    const [a, huge] = [model("a"), model("huge")];
    const { scheduler, use, pending } = setup(20 * MIB);
    await use(a);
    const error = await scheduler.acquire(huge, "completion").catch((e: unknown) => e);
    expect(error).toMatchObject({ status: 507, code: "model_too_large", message: expect.stringMatching(/^model ai\/huge:latest needs [\d.]+MiB \(weights 100\.00MiB, .*\) but the memory budget is 20\.00MiB; it does not fit with any context size$/) });
    expect(pending).toHaveLength(0);
    expect(names(scheduler)).toEqual(["a"]);
  });

  it("starts a runner with its configured context, else the largest that fits beside the others (at least the floor)", async () => {
    const [a, long, fixed] = [model("a"), model("long", 65536), model("fixed", 65536)];
    const total = 8 * MIB;
    const { scheduler, use, started } = setup(total, "cpu", { "sha256:fixed": { contextSize: 2048 } });
    await use(a);
    await use(long);
    const spec = started.at(-1)!.spec;
    const free = total - cost(a, 512);
    expect(spec.contextSize).toBeGreaterThan(1024);
    expect(cost(long, spec.contextSize!)).toBeLessThanOrEqual(free);
    expect(cost(long, spec.contextSize! + 256)).toBeGreaterThan(free);
    expect(scheduler.runners().find((r) => r.model === "ai/long:latest")).toMatchObject({ contextSize: spec.contextSize, memory: { total: cost(long, spec.contextSize!), where: "cpu" } });
    await use(fixed);
    expect(started.at(-1)!.spec.contextSize).toBe(2048);
  });

  it("offloads every layer on a GPU budget unless the model's flags say how many; none on a CPU budget", async () => {
    const [a, b] = [model("a"), model("b")];
    const gpu = setup(100 * MIB, "gpu", { "sha256:b": { runtimeFlags: ["-ngl", "10"] } });
    await gpu.use(a);
    await gpu.use(b);
    expect(gpu.started.map((p) => p.spec.gpuLayers)).toEqual(["all", undefined]);
    expect(gpu.started[1]!.spec.extraArgs).toContain("-ngl");
    expect(gpu.scheduler.runners().map((r) => r.memory?.where)).toEqual(["gpu", "gpu"]);
    const cpu = setup(100 * MIB, "cpu");
    await cpu.use(a);
    expect(cpu.started[0]!.spec.gpuLayers).toBeUndefined();
  });

  it("passes the host caches' limits to every runner and counts them in its estimate on a CPU budget", async () => {
    const a = model("a");
    const promptCache = { bytes: 8 * MIB, checkpoints: 2 };
    const { scheduler, started, use } = setup(100 * MIB, "cpu", {}, { promptCache });
    await use(a);
    expect(started[0]!.spec.extraArgs).toEqual(expect.arrayContaining(["--cache-ram", "8", "--ctx-checkpoints", "2"]));
    const memory = scheduler.runners()[0]!.memory!;
    expect(memory.promptCache).toBeGreaterThan(8 * MIB);
    expect(memory.host).toBe(0);
    expect(memory.total).toBe(cost(a, memory.contextSize) + memory.promptCache);
  });

  it("a model's own cacheRam replaces the default for its runner, in its flags and its estimate", async () => {
    const [a, b] = [model("a"), model("b")];
    const promptCache = { bytes: 8 * MIB, checkpoints: 2 };
    const { scheduler, started, use } = setup(100 * MIB, "cpu", { "sha256:b": { cacheRam: 0 } }, { promptCache });
    await use(a);
    await use(b);
    expect(started[1]!.spec.extraArgs).toEqual(expect.arrayContaining(["--cache-ram", "0", "--ctx-checkpoints", "2"]));
    const [ma, mb] = ["a", "b"].map((n) => scheduler.runners().find((r) => r.model === `ai/${n}:latest`)!.memory!);
    expect(ma!.promptCache).toBeGreaterThan(8 * MIB);
    expect(mb!.promptCache).toBe(0);
  });

  it("beside a GPU budget, the caches are held to the host's budget: a launch evicts for it, a model whose caches exceed it alone is refused", async () => {
    const [a, b] = [model("a"), model("b")];
    const promptCache = { bytes: 8 * MIB, checkpoints: 2 };
    // The GPU holds both runners; the host's 12 MiB holds one prompt cache (8 MiB + a slot's state).
    const { scheduler, started, use } = setup(100 * MIB, "gpu", {}, { promptCache, hostBytes: 12 * MIB });
    await use(a);
    const memory = scheduler.runners()[0]!.memory!;
    expect(memory.host).toBe(memory.promptCache);
    expect(memory.total).toBe(cost(a, memory.contextSize));
    await use(b);
    expect(names(scheduler)).toEqual(["b"]);
    expect(started.map((p) => p.stopped)).toEqual([true, false]);
    const tight = setup(100 * MIB, "gpu", {}, { promptCache, hostBytes: 4 * MIB });
    const refused = await tight.scheduler.acquire(a, "completion").catch((e: unknown) => e);
    expect(refused).toMatchObject({ status: 507, message: expect.stringMatching(/host memory/) });
    expect(tight.started).toHaveLength(0);
  });

  it("names its estimate beside an out-of-memory at load", async () => {
    const a = model("a");
    const { scheduler, finishLoads } = setup(100 * MIB, "gpu");
    const request = scheduler.acquire(a, "completion");
    await flush();
    const oom = Object.assign(new Error("not enough GPU memory for the model: llama-server could not allocate 4.00 MiB on device 0"), { code: "out_of_memory" });
    void finishLoads(oom);
    const error = await request.catch((e: unknown) => e);
    expect(error).toMatchObject({ status: 503, code: "model_load_failed", message: expect.stringMatching(/could not allocate 4\.00 MiB on device 0; its estimate was 3\.00MiB of GPU memory$/) });
  });

  it("waits for a busy runner rather than load on top of it, as many requests as the slots and queue hold", async () => {
    const [a, b] = [model("a"), model("b")];
    const { scheduler, finishLoads, pending } = setup(4 * MIB);
    const holder = scheduler.acquire(a, "completion");
    await flush();
    await finishLoads();
    const lease = await holder;
    // One slot and a queue of one: two may wait for room, the third is refused at once.
    const waiting = [scheduler.acquire(b, "completion"), scheduler.acquire(b, "completion")];
    await flush();
    expect(pending).toHaveLength(0);
    await expect(scheduler.acquire(b, "completion")).rejects.toMatchObject({ status: 503, code: "queue_full" });
    lease.release();
    await flush();
    expect(names(scheduler)).toEqual(["b"]);
    await finishLoads();
    // Each lets go as soon as it is served: the one slot passes from one to the other.
    await Promise.all(waiting.map((w) => w.then((l) => l.release())));
  });
});
