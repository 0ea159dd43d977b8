import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { pickEviction, type RunnerView } from "../../src/scheduler/policy.ts";
import { createScheduler } from "../../src/scheduler/scheduler.ts";
import type { SettingsStore } from "../../src/scheduler/settings.ts";
import type { ModelRef } from "../../src/scheduler/types.ts";
import { fakeStarter, tick } from "./fake-runner.ts";

// Pinned runners (PINNED_MODELS): loaded at start, never evicted, never unloaded for their keep-alive
// or by /engines/unload, and back at once after a crash or a reload.

const model = (name: string): ModelRef => ({ id: `sha256:${name}`, tags: [`ai/${name}:latest`], ggufPath: `${name}.gguf` });
const [A, B, C] = [model("a"), model("b"), model("c")];

const noSettings: SettingsStore = { get: async () => ({}), all: async () => ({}), update: async () => ({}) };

const flush = async () => {
  await vi.advanceTimersByTimeAsync(0);
  await tick();
};

function setup(maxRunners = 2) {
  const fake = fakeStarter();
  const scheduler = createScheduler({
    start: fake.start,
    settings: noSettings,
    limits: { maxRunners, slots: 1, queueDepth: 1, keepAlive: "1m", cpuCores: 4, threads: 1 },
  });
  /** Pins the model and lets its load through. */
  const pinLoaded = async (m: ModelRef) => {
    const pinned = scheduler.pin(m, "completion");
    await flush();
    await fake.finishLoads();
    await pinned;
  };
  return { ...fake, scheduler, pinLoaded };
}

const view = (key: string, lastUsed: number, pinned = false): RunnerView => ({ key, lastUsed, busy: false, stopping: false, pinned });

describe("pickEviction with pinned runners", () => {
  it.each<[string, RunnerView[], ReturnType<typeof pickEviction>]>([
    ["skips a pinned runner, however old", [view("a", 1, true), view("b", 5)], { kind: "evict", keys: ["b"] }],
    ["waits when every idle runner is pinned", [view("a", 1, true), view("b", 2, true)], { kind: "wait" }],
  ])("%s", (_, running, plan) => {
    expect(pickEviction(running, 2)).toEqual(plan);
  });
});

describe("pinned runners", () => {
  beforeEach(() => void vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] }));
  afterEach(() => void vi.useRealTimers());

  it("keeps its context whatever context a request asks for", async () => {
    const { scheduler, started, pinLoaded } = setup();
    await pinLoaded(A);
    (await scheduler.acquire(A, "completion", undefined, { contextSize: 8192 })).release();
    await flush();
    expect(started).toHaveLength(1);
    expect(started[0]!.stopped).toBe(false);
  });

  it("resolves once the runner is ready, and outlives every keep-alive", async () => {
    const { scheduler, started, pinLoaded } = setup();
    await pinLoaded(A);
    expect(scheduler.runners()).toMatchObject([{ model: "ai/a:latest", state: "ready", inUse: 0, pinned: true, keepAlive: "-1" }]);
    vi.advanceTimersByTime(24 * 3_600_000);
    await flush();
    expect(started[0]!.stopped).toBe(false);
  });

  it("keeps its keep-alive whatever a request asks for (Ollama's keep_alive)", async () => {
    const { scheduler, started, pinLoaded } = setup();
    await pinLoaded(A);
    (await scheduler.acquire(A, "completion", undefined, { keepAlive: "0" })).release();
    await flush();
    expect(scheduler.runners()).toMatchObject([{ pinned: true, keepAlive: "-1" }]);
    expect(started[0]!.stopped).toBe(false);
  });

  it("is never evicted for another model, and is left alone by unload", async () => {
    const { scheduler, started, pending, finishLoads, pinLoaded } = setup(2);
    await pinLoaded(A);
    const b = scheduler.acquire(B, "completion");
    await flush();
    await finishLoads();
    (await b).release();
    vi.advanceTimersByTime(10); // B is now the more recent; A would go first were it not pinned
    const c = scheduler.acquire(C, "completion");
    await flush();
    expect(started[0]!.stopped).toBe(false);
    expect(started[1]!.stopped).toBe(true);
    expect(pending.map((p) => p.spec.modelPath)).toEqual(["c.gguf"]);
    await finishLoads();
    (await c).release();
    expect(await scheduler.unload(() => true)).toBe(1);
    expect(scheduler.runners().map((r) => r.model)).toEqual(["ai/a:latest"]);
  });

  it("keeps a runner pinned after it was loaded with a keep-alive", async () => {
    const { scheduler, started, finishLoads } = setup();
    const lease = scheduler.acquire(A, "completion");
    await flush();
    await finishLoads();
    (await lease).release();
    await scheduler.pin(A, "completion");
    vi.advanceTimersByTime(10 * 60_000);
    await flush();
    expect(started[0]!.stopped).toBe(false);
  });

  it("is launched again at once after a crash and after a reload", async () => {
    const { scheduler, started, pending, finishLoads, pinLoaded } = setup();
    await pinLoaded(A);
    started[0]!.crash("SIGKILL");
    await flush();
    expect(pending.map((p) => p.spec.modelPath)).toEqual(["a.gguf"]);
    await finishLoads();
    scheduler.reload(A);
    await flush();
    expect(started[1]!.stopped).toBe(true);
    expect(pending.map((p) => p.spec.modelPath)).toEqual(["a.gguf"]);
    await finishLoads();
    expect(scheduler.runners()).toMatchObject([{ state: "ready", pinned: true }]);
  });

  it("cannot be deleted: 409, and it stays loaded", async () => {
    const { scheduler, started, pinLoaded } = setup();
    await pinLoaded(A);
    let removed = false;
    await expect(scheduler.whileDeleting(A, async () => (removed = true))).rejects.toMatchObject({ status: 409, code: "model_pinned" });
    expect(removed).toBe(false);
    expect(started[0]!.stopped).toBe(false);
  });

  it("is not launched again after stopAll", async () => {
    const { scheduler, pending, pinLoaded } = setup();
    await pinLoaded(A);
    await scheduler.stopAll();
    await flush();
    expect(pending).toHaveLength(0);
    expect(scheduler.runners()).toEqual([]);
  });
});
