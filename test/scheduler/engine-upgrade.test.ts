import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { createScheduler, type SchedulerLimits } from "../../src/scheduler/scheduler.ts";
import type { SettingsStore } from "../../src/scheduler/settings.ts";
import type { EngineBuild, ModelRef } from "../../src/scheduler/types.ts";
import { fakeStarter, tick } from "./fake-runner.ts";

// The upgrade's state machine with a recording stand-in for the supervisor (the end-to-end test,
// test/engines, runs real builds): which runner serves while a runner on the new build loads, what
// happens when it is ready, when it fails, and when there is no room for both.

const A: ModelRef = { id: "sha256:a", tags: ["ai/a:latest"], ggufPath: "a.gguf" };
const build = (name: string): EngineBuild => ({ name, path: `/engines/${name}/llama-server`, version: `${name}-version` });
const settings: SettingsStore = { get: async () => ({}), all: async () => ({}), update: async () => ({}) };

function setup(limits: Partial<SchedulerLimits> = {}) {
  const fake = fakeStarter();
  let wanted = build("v1");
  /** The failed moves requests asked to try again; each is tried as the mover does, with `upgrade`. */
  const retries: Promise<unknown>[] = [];
  const scheduler = createScheduler({
    start: fake.start,
    settings,
    limits: { maxRunners: 2, slots: 1, queueDepth: 2, keepAlive: "5m", cpuCores: 4, threads: 1, ...limits },
    engineFor: async () => wanted,
    retryMove: (model, mode) => void retries.push(scheduler.upgrade(model, mode)),
  });
  const flush = async () => {
    await vi.advanceTimersByTimeAsync(0);
    await tick();
  };
  const want = (name: string) => (wanted = build(name));
  const enginesOf = () => scheduler.runners().map((r) => `${r.engine?.name} ${r.state}`).sort();
  return { ...fake, scheduler, flush, want, enginesOf, retries };
}

describe("moving a runner to another build", () => {
  beforeEach(() => void vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] }));
  afterEach(() => void vi.useRealTimers());

  it("loads the new build beside the old one, which serves until the new is ready and then finishes its request", async () => {
    const t = setup();
    const first = t.scheduler.acquire(A, "completion");
    await t.flush();
    await t.finishLoads();
    const held = await first;
    t.want("v2");
    const outcome = t.scheduler.upgrade(A, "completion");
    await t.flush();
    expect(t.pending.map((p) => p.spec.engine?.name)).toEqual(["v2"]);
    expect(t.enginesOf()).toEqual(["v1 ready", "v2 loading"]);
    await t.finishLoads();
    expect(await outcome).toEqual({ kind: "upgraded", from: "v1", to: "v2" });
    expect(t.enginesOf()).toEqual(["v1 draining", "v2 ready"]);
    // New requests go to the new build while the old one still serves its own.
    const next = await t.scheduler.acquire(A, "completion");
    expect(t.started.at(-1)!.spec.engine?.name).toBe("v2");
    expect(t.started[0]!.stopped).toBe(false);
    held.release();
    await t.flush();
    expect(t.started[0]!.stopped).toBe(true);
    expect(t.enginesOf()).toEqual(["v2 ready"]);
    next.release();
  });

  it("keeps the old build serving when the new one fails to load, and says why", async () => {
    const t = setup();
    (await (async () => {
      const lease = t.scheduler.acquire(A, "completion");
      await t.flush();
      await t.finishLoads();
      return lease;
    })()).release();
    t.want("broken");
    const outcome = t.scheduler.upgrade(A, "completion");
    await t.flush();
    await t.finishLoads(new Error("unknown model architecture"));
    expect(await outcome).toMatchObject({ kind: "failed", from: "v1", to: "broken", why: expect.stringMatching(/unknown model architecture/) });
    expect(t.enginesOf()).toEqual(["v1 ready"]);
    (await t.scheduler.acquire(A, "completion")).release();
    expect(t.started).toHaveLength(1);
  });

  it("shows a failed move on the runner left serving, and a request tries it again once its wait is over, the wait doubled after each failure", async () => {
    const t = setup({ engineMoveRetryMs: 60_000 });
    const use = async () => {
      const lease = t.scheduler.acquire(A, "completion");
      await t.flush();
      (await lease).release();
    };
    const load = t.scheduler.acquire(A, "completion");
    await t.flush();
    await t.finishLoads();
    (await load).release();
    t.want("broken");
    const first = t.scheduler.upgrade(A, "completion");
    await t.flush();
    await t.finishLoads(new Error("unknown model architecture"));
    await first;
    const failedAt = Date.now();
    expect(t.scheduler.runners()[0]!.failedMove).toEqual({ engine: "broken", why: expect.stringMatching(/unknown model architecture/), tries: 1, retryAt: failedAt + 60_000 });
    // Before the wait is over, requests are served on the old build and try nothing.
    vi.setSystemTime(failedAt + 59_000);
    await use();
    expect(t.retries).toHaveLength(0);
    // Once it is over, one request tries again (beside it), the others meanwhile do not.
    vi.setSystemTime(failedAt + 60_000);
    await use();
    await use();
    expect(t.retries).toHaveLength(1);
    expect(t.pending.map((p) => p.spec.engine?.name)).toEqual(["broken"]);
    await t.finishLoads(new Error("unknown model architecture"));
    expect(await t.retries[0]).toMatchObject({ kind: "failed", to: "broken" });
    const second = t.scheduler.runners()[0]!.failedMove!;
    expect(second).toMatchObject({ tries: 2, retryAt: failedAt + 60_000 + 120_000 });
    vi.setSystemTime(failedAt + 60_000 + 119_000);
    await use();
    expect(t.retries).toHaveLength(1);
    // Moved back to the build it runs: nothing failed any more, nothing is tried again.
    t.want("v1");
    expect(await t.scheduler.upgrade(A, "completion")).toMatchObject({ kind: "current" });
    expect(t.scheduler.runners()[0]!.failedMove).toBeUndefined();
    vi.setSystemTime(failedAt + 3_600_000);
    await use();
    expect(t.retries).toHaveLength(1);
    expect(t.enginesOf()).toEqual(["v1 ready"]);
  });

  it("without room for both, retires the old runner at its next idle moment; the next load uses the new build", async () => {
    const t = setup({ maxRunners: 1 });
    const first = t.scheduler.acquire(A, "completion");
    await t.flush();
    await t.finishLoads();
    const held = await first;
    t.want("v2");
    expect(await t.scheduler.upgrade(A, "completion")).toEqual({ kind: "when-idle", from: "v1", to: "v2" });
    expect(t.pending).toHaveLength(0);
    expect(t.enginesOf()).toEqual(["v1 ready"]);
    held.release();
    await t.flush();
    expect(t.started[0]!.stopped).toBe(true);
    const next = t.scheduler.acquire(A, "completion");
    await t.flush();
    expect(t.pending.map((p) => p.spec.engine?.name)).toEqual(["v2"]);
    await t.finishLoads();
    (await next).release();
  });

  it("leaves a runner on the build wanted alone", async () => {
    const t = setup();
    const first = t.scheduler.acquire(A, "completion");
    await t.flush();
    await t.finishLoads();
    (await first).release();
    expect(await t.scheduler.upgrade(A, "completion")).toEqual({ kind: "current", from: "v1", to: "v1" });
    expect(await t.scheduler.upgrade({ ...A, id: "sha256:none" }, "completion")).toEqual({ kind: "none" });
  });
});
