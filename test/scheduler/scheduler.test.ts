import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { HttpError } from "../../src/http/errors.ts";
import { createScheduler, type SchedulerLimits } from "../../src/scheduler/scheduler.ts";
import type { ModelSettings, SettingsStore } from "../../src/scheduler/settings.ts";
import { modelName, type ModelRef, type RunnerSpec } from "../../src/scheduler/types.ts";
import { SHARED_WINDOW_MS } from "../../src/scheduler/fair-queue.ts";
import { fakeStarter, tick } from "./fake-runner.ts";

const model = (name: string): ModelRef => ({ id: `sha256:${name}`, tags: [`ai/${name}:latest`], ggufPath: `${name}.gguf` });
const A = model("a");
const B = model("b");
const C = model("c");

function memorySettings(initial: Record<string, ModelSettings> = {}): SettingsStore {
  const all = { ...initial };
  return {
    get: async (id) => all[id] ?? {},
    all: async () => ({ ...all }),
    update: async (id, changes) => (all[id] = { ...all[id], ...changes }),
  };
}

const flush = async () => {
  await vi.advanceTimersByTimeAsync(0);
  await tick();
};

function setup(limits: Partial<SchedulerLimits> = {}, settings = memorySettings(), fetchFor?: (spec: RunnerSpec) => typeof fetch) {
  const fake = fakeStarter(fetchFor);
  const scheduler = createScheduler({
    start: fake.start,
    settings,
    // Fixed threads by default: only the thread tests below share the cores (and replace runners).
    limits: { maxRunners: 2, slots: 1, queueDepth: 1, keepAlive: "5m", cpuCores: 4, threads: 1, ...limits },
  });
  /** A lease on the model's runner, its load (if one starts) let through. */
  const leaseLoaded = async (model: ModelRef, mode: "completion" | "embedding" = "completion") => {
    const lease = scheduler.acquire(model, mode);
    await flush();
    await fake.finishLoads();
    return lease;
  };
  /** The request that waited for room, a new request and a preload all get `error`; nothing loads. */
  const expectRefused = async (waiting: Promise<unknown>, model: ModelRef, error: object) => {
    await flush();
    expect(fake.pending).toHaveLength(0);
    expect(await waiting).toMatchObject(error);
    await expect(scheduler.acquire(model, "completion")).rejects.toMatchObject(error);
    scheduler.preload(model, "completion");
    await flush();
    expect(fake.pending).toHaveLength(0);
  };
  return { ...fake, scheduler, leaseLoaded, expectRefused };
}

describe("scheduler", () => {
  beforeEach(() => void vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] }));
  afterEach(() => void vi.useRealTimers());

  it("starts a model's runner with its weights and its multimodal projector", async () => {
    const { scheduler, pending } = setup();
    void scheduler.acquire({ ...A, mmprojPath: "a-mmproj.gguf" }, "completion");
    void scheduler.acquire(B, "completion");
    await flush();
    expect(pending.map((p) => [p.spec.modelPath, p.spec.mmprojPath])).toEqual([
      ["a.gguf", "a-mmproj.gguf"],
      ["b.gguf", undefined],
    ]);
  });

  it("shares one load between concurrent requests for a model", async () => {
    const { scheduler, pending, finishLoads, started } = setup({ slots: 2 });
    const requests = [scheduler.acquire(A, "completion"), scheduler.acquire(A, "completion")];
    await flush();
    expect(pending).toHaveLength(1);
    void finishLoads();
    await flush();
    const leases = await Promise.all(requests);
    expect(started).toHaveLength(1);
    expect(scheduler.runners()[0]).toMatchObject({ state: "ready", inUse: 2 });
    leases.forEach((l) => l.release());
  });

  it("runs one runner per (model, mode)", async () => {
    const { scheduler, pending } = setup();
    void scheduler.acquire(A, "completion");
    void scheduler.acquire(A, "embedding");
    await flush();
    expect(pending.map((p) => p.spec.mode)).toEqual(["completion", "embedding"]);
  });

  it("answers a failed load with 503 carrying the runner's error, and loads afresh next time", async () => {
    const { scheduler, pending, finishLoads } = setup();
    const request = scheduler.acquire(A, "completion");
    await flush();
    void finishLoads(new Error("unknown model architecture: 'qwen9'"));
    const error = await request.catch((e: unknown) => e);
    expect(error).toBeInstanceOf(HttpError);
    expect(error).toMatchObject({ status: 503, message: expect.stringContaining("unknown model architecture") });
    expect(scheduler.runners()).toEqual([]);
    void scheduler.acquire(A, "completion");
    await flush();
    expect(pending).toHaveLength(1);
  });

  it("queues beyond the slots in FIFO order and answers 503 with Retry-After when the queue is full", async () => {
    const { scheduler, leaseLoaded } = setup({ slots: 1, queueDepth: 2 });
    const lease1 = await leaseLoaded(A);
    const order: number[] = [];
    const second = scheduler.acquire(A, "completion").then((l) => (order.push(2), l));
    const third = scheduler.acquire(A, "completion").then((l) => (order.push(3), l));
    await flush();
    const full = await scheduler.acquire(A, "completion").catch((e: HttpError) => e);
    expect(full).toMatchObject({ status: 503, code: "queue_full", headers: { "retry-after": "1" } });
    lease1.release();
    (await second).release();
    (await third).release();
    expect(order).toEqual([2, 3]);
  });

  it("hands up to runnerQueue waiting requests to llama-server's own queue, within the queue depth", async () => {
    const { scheduler, leaseLoaded } = setup({ slots: 1, queueDepth: 3, runnerQueue: 2 });
    const first = await leaseLoaded(A);
    // One slot and two ahead: three at the runner at once, the fourth waits with us, the fifth is refused.
    const second = await scheduler.acquire(A, "completion");
    const third = await scheduler.acquire(A, "completion");
    let fourthGranted = false;
    const fourth = scheduler.acquire(A, "completion").then((l) => ((fourthGranted = true), l));
    await flush();
    expect(fourthGranted).toBe(false);
    await expect(scheduler.acquire(A, "completion")).rejects.toMatchObject({ code: "queue_full" });
    first.release();
    (await fourth).release();
    second.release();
    third.release();
  });

  it("regression: while a session's request holds its slot, none goes to llama-server's own queue, however long since sessions last came", async () => {
    // A leader's long prompt outlasted the window: the requests then granted went unplaced to
    // llama-server's queue, which gave them slots holding other sessions' conversations.
    const { scheduler, leaseLoaded } = setup({ slots: 1, queueDepth: 3, runnerQueue: 2 });
    await leaseLoaded(A).then((l) => l.release());
    const session = (name: string) => scheduler.acquire(A, "completion", undefined, { caller: "k", session: name, prefix: "p" });
    const a = await session("a");
    expect(a.slot).toBe(0);
    const granted: string[] = [];
    const b = session("b").then((l) => (granted.push("b"), l));
    const c = session("c").then((l) => (granted.push("c"), l));
    await vi.advanceTimersByTimeAsync(3 * SHARED_WINDOW_MS);
    expect(granted).toEqual([]);
    a.release();
    await flush();
    expect(granted).toEqual(["b"]);
    expect((await b).slot).toBe(0);
    (await b).release();
    await flush();
    expect((await c).slot).toBe(0);
    (await c).release();
  });

  it("a runner stopped tells its process which session's conversation each slot holds now (to park them), by key", async () => {
    const { scheduler, leaseLoaded, started } = setup({ slots: 2 });
    await leaseLoaded(A).then((l) => l.release());
    const session = (caller: string, name: string) => scheduler.acquire(A, "completion", undefined, { caller, session: name, prefix: "p" });
    const a = await session("k", "a");
    const other = await session("other", "a");
    a.release();
    other.release();
    // Given the slot k's "a" held (the least recently used): "a" is parked then, and no slot holds it.
    const b = await session("k", "b");
    b.release();
    expect(b.slot).toBe(a.slot);
    expect(await scheduler.unload(() => true)).toBe(1);
    expect(started[0]!.heldAtStop).toEqual(new Map([[b.slot!, "k\u0000b"], [other.slot!, "other\u0000a"]]));
  });

  it("runnerQueue never goes past the queue depth; llama-server gets an HTTP thread for each request it holds", async () => {
    const { scheduler, leaseLoaded, started } = setup({ slots: 2, queueDepth: 1, runnerQueue: 8 });
    const first = await leaseLoaded(A);
    const second = await scheduler.acquire(A, "completion");
    const third = await scheduler.acquire(A, "completion");
    await expect(scheduler.acquire(A, "completion")).rejects.toMatchObject({ code: "queue_full" });
    for (const lease of [first, second, third]) lease.release();
    expect(started[0]!.spec.extraArgs).toContain(String(2 + 1 + 8));
  });

  it("regression: a request held back for another key waited, a slot free, until its key's running request ended; it starts once the other key has been quiet for the window", async () => {
    const { scheduler, finishLoads } = setup({ slots: 2, runnerQueue: 0 });
    const as = (caller: string) => scheduler.acquire(A, "completion", undefined, { caller });
    // Key a holds a slot for a long generation; key b's request comes and ends.
    const first = as("a");
    await flush();
    await finishLoads();
    const long = await first;
    (await as("b")).release();
    vi.advanceTimersByTime(1_000);
    // a's next request is held back: the last free slot is kept for b while the runner is shared.
    let started = false;
    const next = as("a").then((lease) => ((started = true), lease));
    await flush();
    expect(started).toBe(false);
    // Once b has been quiet for the window, nothing comes to grant it but the window's end.
    await vi.advanceTimersByTimeAsync(SHARED_WINDOW_MS);
    await flush();
    expect(started).toBe(true);
    expect(scheduler.runners()[0]).toMatchObject({ inUse: 2, waiting: 0 });
    (await next).release();
    long.release();
  });

  it("drops a queued request whose client went away", async () => {
    const { scheduler, leaseLoaded } = setup({ slots: 1, queueDepth: 1 });
    const lease = await leaseLoaded(A);
    const abort = new AbortController();
    const queued = scheduler.acquire(A, "completion", abort.signal);
    abort.abort(new Error("client gone"));
    await expect(queued).rejects.toThrow("client gone");
    expect(scheduler.runners()[0]).toMatchObject({ inUse: 1, waiting: 0 });
    // The queue has room again.
    const next = scheduler.acquire(A, "completion");
    lease.release();
    (await next).release();
  });

  it("unloads the least recently used idle runner to make room, never one in use", async () => {
    const { scheduler, started, leaseLoaded } = setup({ maxRunners: 2 });
    (await leaseLoaded(A)).release();
    vi.advanceTimersByTime(10);
    const leaseB = await leaseLoaded(B);
    (await leaseLoaded(C)).release();
    expect(started[0]!.stopped).toBe(true); // A: idle and oldest
    expect(started[1]!.stopped).toBe(false); // B: in use
    expect(scheduler.runners().map((r) => r.model).sort()).toEqual(["ai/b:latest", "ai/c:latest"]);
    leaseB.release();
  });

  it("waits for a runner to go idle when every runner is in use", async () => {
    const { scheduler, finishLoads, pending, leaseLoaded } = setup({ maxRunners: 1 });
    const leaseA = await leaseLoaded(A);
    const b = scheduler.acquire(B, "completion");
    await flush();
    expect(pending).toHaveLength(0);
    leaseA.release();
    await flush();
    expect(pending.map((p) => p.spec.modelPath)).toEqual(["b.gguf"]);
    await finishLoads();
    (await b).release();
  });

  it("unloads an idle runner after its keep-alive, timed from the end of its last request", async () => {
    const { scheduler, started, leaseLoaded } = setup({ keepAlive: "5m" });
    const lease = await leaseLoaded(A);
    vi.advanceTimersByTime(10 * 60_000);
    expect(started[0]!.stopped).toBe(false);
    lease.release();
    vi.advanceTimersByTime(5 * 60_000 - 1);
    expect(started[0]!.stopped).toBe(false);
    vi.advanceTimersByTime(1);
    await flush();
    expect(started[0]!.stopped).toBe(true);
    expect(scheduler.runners()).toEqual([]);
  });

  it.each([
    ["0", true],
    ["-1", false],
  ])("applies a per-model keep_alive of %s", async (keepAlive, stopped) => {
    const settings = memorySettings({ [A.id]: { keepAlive } });
    const { started, leaseLoaded } = setup({}, settings);
    (await leaseLoaded(A)).release();
    vi.advanceTimersByTime(24 * 3_600_000);
    await flush();
    expect(started[0]!.stopped).toBe(stopped);
  });

  it("starts a fresh runner after a crash", async () => {
    const { scheduler, started, pending, leaseLoaded } = setup();
    const lease = await leaseLoaded(A);
    started[0]!.crash("SIGKILL");
    await flush();
    lease.release();
    expect(scheduler.runners()).toEqual([]);
    void scheduler.acquire(A, "completion");
    await flush();
    expect(pending).toHaveLength(1);
  });

  it("applies settings on load: context size, slots, flags", async () => {
    const settings = memorySettings({ [A.id]: { contextSize: 2048, slots: 3, runtimeFlags: ["--threads", "1"] } });
    const { scheduler, pending } = setup({}, settings);
    void scheduler.acquire(A, "embedding");
    await flush();
    expect(pending[0]!.spec).toEqual({
      name: "a-embedding-1",
      alias: modelName(A),
      modelPath: "a.gguf",
      mode: "embedding",
      contextSize: 2048,
      parallel: 3,
      pooling: "mean",
      extraArgs: ["--threads", "1", "--threads-http", "11", "--threads", "1"],
    });
  });

  it("unload leaves a runner in use alone; whileDeleting refuses with 409", async () => {
    const { scheduler, leaseLoaded } = setup();
    const lease = await leaseLoaded(A);
    expect(await scheduler.unload(() => true)).toBe(0);
    await expect(scheduler.whileDeleting(A, async () => "removed")).rejects.toMatchObject({ status: 409 });
    lease.release();
    expect(await scheduler.unload(() => true)).toBe(1);
    expect(scheduler.runners()).toEqual([]);
  });

  it("reload lets the old runner finish, and sends new requests to a fresh one", async () => {
    const { scheduler, finishLoads, started, leaseLoaded } = setup({ maxRunners: 4 });
    const lease = await leaseLoaded(A);
    scheduler.reload(A);
    const fresh = scheduler.acquire(A, "completion");
    await flush();
    await finishLoads();
    expect(started).toHaveLength(2);
    expect(started[0]!.stopped).toBe(false);
    lease.release();
    await flush();
    expect(started[0]!.stopped).toBe(true);
    (await fresh).release();
  });

  it("a request's context (Ollama's num_ctx) loads a runner with it after the old one's requests, keeping the settings", async () => {
    const settings = memorySettings({ [A.id]: { contextSize: 512 } });
    const { scheduler, finishLoads, started, leaseLoaded } = setup({ maxRunners: 4 }, settings);
    const held = await leaseLoaded(A);
    const wanted = scheduler.acquire(A, "completion", undefined, { contextSize: 1024 });
    await flush();
    await finishLoads();
    (await wanted).release();
    expect(started.map((r) => r.spec.contextSize)).toEqual([512, 1024]);
    // The first runner drains: it stops once the request it serves ends.
    expect(started[0]!.stopped).toBe(false);
    held.release();
    await flush();
    expect(started[0]!.stopped).toBe(true);
    // The same wish again, and a request with none, take the runner loaded: no reload.
    (await scheduler.acquire(A, "completion", undefined, { contextSize: 1024 })).release();
    (await scheduler.acquire(A, "completion")).release();
    expect(started).toHaveLength(2);
    expect(await settings.get(A.id)).toEqual({ contextSize: 512 });
  });

  const threadsOf = (spec: RunnerSpec) => Number(spec.extraArgs![spec.extraArgs!.indexOf("--threads") + 1]);

  it("B17.2: shares the cores among the runners loaded; a runner above its new share is replaced after its requests", async () => {
    const { scheduler, started, leaseLoaded } = setup({ cpuCores: 2, threads: undefined });
    const first = await leaseLoaded(A);
    expect(threadsOf(started[0]!.spec)).toBe(2);
    (await leaseLoaded(B)).release();
    expect(threadsOf(started[1]!.spec)).toBe(1);
    // A serves on with its two threads until its request ends; then it stops, and A loads with one.
    await flush();
    expect(started[0]!.stopped).toBe(false);
    first.release();
    await flush();
    expect(started[0]!.stopped).toBe(true);
    (await leaseLoaded(A)).release();
    expect(threadsOf(started[2]!.spec)).toBe(1);
    expect(scheduler.runners().map((r) => [r.model, r.threads]).sort()).toEqual([["ai/a:latest", 1], ["ai/b:latest", 1]]);
    expect(started[1]!.stopped).toBe(false);
  });

  it("B17.2: a replaced runner still serving does not hold up a load: an idle runner is unloaded instead", async () => {
    const { scheduler, started, leaseLoaded } = setup({ cpuCores: 2, threads: undefined });
    const long = await leaseLoaded(A);
    (await leaseLoaded(B)).release(); // A is replaced, but serves on
    await flush();
    (await leaseLoaded(C)).release();
    expect(started.map((p) => [p.spec.modelPath, p.stopped])).toEqual([["a.gguf", false], ["b.gguf", true], ["c.gguf", false]]);
    long.release();
    await flush();
    expect(started[0]!.stopped).toBe(true);
    expect(scheduler.runners().map((r) => r.model)).toEqual(["ai/c:latest"]);
  });

  it.each<[string, Partial<SchedulerLimits>, ModelSettings]>([
    ["the model's threads setting", { threads: undefined }, { threads: 2 }],
    ["the model's --threads flag", { threads: undefined }, { runtimeFlags: ["--threads=2"] }],
    ["the global setting", { threads: 2 }, {}],
  ])("B17.2: threads fixed by %s are kept and never replaced", async (_, limits, settings) => {
    const { started, leaseLoaded } = setup({ cpuCores: 2, ...limits }, memorySettings({ [A.id]: settings, [B.id]: settings }));
    (await leaseLoaded(A)).release();
    (await leaseLoaded(B)).release();
    await flush();
    expect(started.map((p) => threadsOf(p.spec))).toEqual([2, 2]);
    expect(started.map((p) => p.stopped)).toEqual([false, false]);
  });

  it("B2: an idle runner is leased in the step that finds it, so a request for another model cannot evict it first", async () => {
    const { scheduler, started, pending, finishLoads, leaseLoaded } = setup({ maxRunners: 1 });
    (await leaseLoaded(A)).release();
    const a = scheduler.acquire(A, "completion");
    const b = scheduler.acquire(B, "completion");
    await flush();
    // B waits for A to go idle; A is not unloaded and reloaded under it.
    expect(pending).toHaveLength(0);
    expect(started[0]!.stopped).toBe(false);
    (await a).release();
    await flush();
    expect(pending.map((p) => p.spec.name)).toEqual(["b-completion-2"]);
    await finishLoads();
    (await b).release();
  });

  it("batch work never evicts a runner an interactive user used within batchEvictAfterMs: it waits, then loads once the runner was left alone that long", async () => {
    const { scheduler, started, pending, finishLoads } = setup({ maxRunners: 1, batchEvictAfterMs: 60_000 });
    const user = () => scheduler.acquire(A, "completion", undefined, { caller: "user" });
    const first = user();
    await flush();
    await finishLoads();
    (await first).release();
    vi.advanceTimersByTime(1_000);
    // A batch line for another model: A is idle between two turns of its user, and stays.
    let served = false;
    const line = scheduler.acquire(B, "completion", undefined, { caller: "batcher", lane: "batch" }).then((l) => ((served = true), l));
    await flush();
    expect([pending.length, started[0]!.stopped]).toEqual([0, false]);
    // The user's next turn finds its runner loaded: no wait, no reload; it is kept from its end on.
    vi.advanceTimersByTime(30_000);
    (await user()).release();
    await vi.advanceTimersByTimeAsync(60_000 - 1);
    await flush();
    expect([served, pending.length, started[0]!.stopped]).toEqual([false, 0, false]);
    // Left alone for the whole time: the batch line evicts it and loads its model.
    await vi.advanceTimersByTimeAsync(1);
    await flush();
    expect(started[0]!.stopped).toBe(true);
    expect(pending.map((p) => p.spec.modelPath)).toEqual(["b.gguf"]);
    await finishLoads();
    (await line).release();
    expect(started).toHaveLength(2);
  });

  it("a batch request waiting for room goes after an interactive one that came later", async () => {
    const { scheduler, pending, finishLoads } = setup({ maxRunners: 1 });
    const batch = (model: ModelRef) => scheduler.acquire(model, "completion", undefined, { caller: "batcher", lane: "batch" });
    const busy = batch(A);
    await flush();
    await finishLoads();
    const lineA = await busy;
    const lineB = batch(B);
    await flush();
    const interactive = scheduler.acquire(C, "completion", undefined, { caller: "user" });
    await flush();
    // A frees: the interactive request's model loads, though the batch line waited first.
    lineA.release();
    await flush();
    expect(pending.map((p) => p.spec.modelPath)).toEqual(["c.gguf"]);
    await finishLoads();
    (await interactive).release();
    await flush();
    // Then the batch line's (the setting is 0 here: C is not kept for its user).
    expect(pending.map((p) => p.spec.modelPath)).toEqual(["b.gguf"]);
    await finishLoads();
    (await lineB).release();
  });

  it("B2: a request whose loading runner is reloaded away twice gets a 503, not a 500", async () => {
    const { scheduler, pending } = setup();
    const request = scheduler.acquire(A, "completion");
    const outcome = request.catch((e: unknown) => e);
    await flush();
    scheduler.reload(A);
    await flush();
    expect(pending).toHaveLength(2); // the retry, on a fresh runner
    scheduler.reload(A);
    const error = await outcome;
    expect(error).toBeInstanceOf(HttpError);
    expect(error).toMatchObject({ status: 503, type: "unavailable_error" });
  });

  it("B3: a request that waited for room loads its runner with the settings of that moment", async () => {
    const settings = memorySettings();
    const { scheduler, pending, finishLoads, leaseLoaded } = setup({ maxRunners: 1 }, settings);
    const leaseA = await leaseLoaded(A);
    const b = scheduler.acquire(B, "completion");
    await flush();
    await settings.update(B.id, { contextSize: 1024 });
    scheduler.reload(B);
    leaseA.release();
    await flush();
    expect(pending.map((p) => p.spec.contextSize)).toEqual([1024]);
    await finishLoads();
    (await b).release();
  });

  it("B8: after stopAll no runner starts: a request waiting for room and later ones get 503", async () => {
    const { scheduler, leaseLoaded, expectRefused } = setup({ maxRunners: 1 });
    const leaseA = await leaseLoaded(A);
    const waiting = scheduler.acquire(B, "completion").catch((e: unknown) => e);
    await flush();
    await scheduler.stopAll();
    await expectRefused(waiting, C, { status: 503, code: "shutting_down" });
    leaseA.release();
  });

  it("B13: a request aborted while an idle runner unloads to make room for it gives up at once", async () => {
    const { scheduler, started, pending, leaseLoaded } = setup({ maxRunners: 1 });
    (await leaseLoaded(A)).release();
    let stopA!: () => void;
    started[0]!.stop = () => new Promise((resolve) => (stopA = resolve));
    const abort = new AbortController();
    const outcome = scheduler.acquire(B, "completion", abort.signal).then(
      () => "leased",
      (e: Error) => e.message,
    );
    await flush();
    abort.abort(new Error("client gone"));
    await flush();
    expect(await Promise.race([outcome, Promise.resolve("still waiting")])).toBe("client gone");
    stopA();
    await flush();
    expect(pending).toHaveLength(0);
  });

  it("B12: no runner of a model launches while its delete runs; a failed delete leaves it usable", async () => {
    const { scheduler, started, leaseLoaded, expectRefused } = setup({ maxRunners: 1 });
    (await leaseLoaded(A)).release();
    const leaseB = await leaseLoaded(B);
    // A request for A waits for room (B is busy) when A's delete begins.
    const waiting = scheduler.acquire(A, "completion").catch((e: unknown) => e);
    await flush();
    let failRemove!: (error: Error) => void;
    const deletion = scheduler.whileDeleting(A, () => new Promise((_, reject) => (failRemove = reject))).catch((e: Error) => e.message);
    await flush();
    expect(started[0]!.stopped).toBe(true);
    leaseB.release();
    await expectRefused(waiting, A, { status: 404, code: "model_not_found" });
    failRemove(new Error("disk gone"));
    expect(await deletion).toBe("disk gone");
    (await leaseLoaded(A)).release();
    expect(started.map((p) => p.spec.modelPath)).toEqual(["a.gguf", "b.gguf", "a.gguf"]);
  });
});

describe("scheduler scrape", () => {
  it("B9: leaves out a runner whose /metrics never answers, after a time limit", async () => {
    // Like a wedged llama-server: the request hangs until its signal aborts it.
    const wedged = ((_: unknown, init?: RequestInit) =>
      new Promise((_resolve, reject) => init?.signal?.addEventListener("abort", () => reject(init.signal!.reason)))) as typeof fetch;
    const { scheduler, finishLoads } = setup({}, memorySettings(), (spec) =>
      spec.modelPath === "b.gguf" ? wedged : ((async () => new Response("metrics of a")) as unknown as typeof fetch),
    );
    const leases = [scheduler.acquire(A, "completion"), scheduler.acquire(B, "completion")];
    await tick();
    await finishLoads();
    (await Promise.all(leases)).forEach((l) => l.release());
    expect(await scheduler.scrape("/metrics")).toEqual([{ model: "ai/a:latest", mode: "completion", text: "metrics of a" }]);
  });
});
