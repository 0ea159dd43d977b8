import { describe, expect, it } from "vitest";
import { planLaunch, planServe, wantedContext, type LaunchSnapshot, type RunnerSnapshot } from "../../src/scheduler/launch-plan.ts";
import { keepAliveAfterRequest, planAfter, planDelete, planRebalance, unloadable, type AfterEvent, type RunnerEvent } from "../../src/scheduler/lifecycle-plan.ts";
import type { MemoryBudget } from "../../src/scheduler/memory/budget.ts";
import { estimateMemory, shapeOf } from "../../src/scheduler/memory/estimate.ts";
import type { ModelSettings } from "../../src/scheduler/settings.ts";
import type { Mode, ModelRef } from "../../src/scheduler/types.ts";
import { tinyLlamaHeader } from "../support/tiny-gguf.ts";

// The scheduler's decisions as pure functions of a snapshot, table-tested without processes: each
// case is a snapshot, a request, and the plan it must give.

const MIB = 1024 * 1024;
const model = (name: string, context?: number): ModelRef => ({
  id: `sha256:${name}`,
  tags: [`ai/${name}:latest`],
  ggufPath: `${name}.gguf`,
  ...(context ? { config: { architecture: "llama", gguf: tinyLlamaHeader(context) } } : {}),
});
const A = model("a");
/** A model with a GGUF header (a trained context of 4096), so its memory can be estimated. */
const SIZED = model("sized", 4096);
const cost = (contextSize: number) => estimateMemory(shapeOf(tinyLlamaHeader(4096))!, MIB, { contextSize, slots: 1 }).total;

/** An idle runner in service, used at `lastUsed`. */
const runner = (name: string, lastUsed: number, extra: Partial<RunnerSnapshot> = {}): RunnerSnapshot => ({
  name,
  key: `sha256:${name}/completion`,
  state: "ready",
  busy: false,
  leaving: false,
  lastUsed,
  bytes: 0,
  threads: 1,
  threadsFixed: true,
  ...extra,
});
const busy = { busy: true };

const snapshot = (extra: Partial<LaunchSnapshot> = {}): LaunchSnapshot => ({
  runners: [],
  pinned: new Set(),
  limits: { maxRunners: 2, slots: 1, queueDepth: 1, keepAlive: "5m", cpuCores: 4 },
  settings: {},
  waitingForRoom: 0,
  lane: "interactive",
  now: 1_000,
  interactiveWaitingForRoom: 0,
  serial: 3,
  ...extra,
});
const budget = (bytes: number, where: "gpu" | "cpu" = "cpu"): LaunchSnapshot["memory"] => ({
  limits: { budget: { where, bytes, source: "setting", reserveBytes: 0, devices: [] } satisfies MemoryBudget, minContext: 1024 },
  weights: MIB,
});
const settings = (s: ModelSettings) => ({ settings: s });

describe("planLaunch: evict, wait or refuse", () => {
  it.each<[string, Partial<LaunchSnapshot>, object]>([
    ["room: launch", {}, { kind: "launch" }],
    ["room beside one runner", { runners: [runner("x", 1)] }, { kind: "launch" }],
    ["full: the least recently used idle runner goes", { runners: [runner("x", 5), runner("y", 1)] }, { kind: "evict", names: ["y"] }],
    ["full: one in use stays, the idle one goes", { runners: [runner("x", 1, busy), runner("y", 5)] }, { kind: "evict", names: ["y"] }],
    ["full and every runner busy: wait", { runners: [runner("x", 1, busy), runner("y", 2, busy)] }, { kind: "wait" }],
    [
      "full and waiting for room as many as the slots and queue hold: refuse, 503",
      { runners: [runner("x", 1, busy), runner("y", 2, busy)], waitingForRoom: 2 },
      { kind: "refuse", error: { status: 503, code: "queue_full", headers: { "retry-after": "1" } } },
    ],
    [
      "the bound on waiting follows the model's slots",
      { runners: [runner("x", 1, busy), runner("y", 2, busy)], waitingForRoom: 2, ...settings({ slots: 2 }) },
      { kind: "wait" },
    ],
    ["full with one already stopping: wait for its room", { runners: [runner("x", 1), runner("y", 2, { leaving: true, state: "stopping" })] }, { kind: "wait" }],
    [
      "a replaced runner still serving counts as busy: an idle one goes rather than be waited for",
      { runners: [runner("x", 1, { leaving: true, state: "draining", busy: true }), runner("y", 2)] },
      { kind: "evict", names: ["y"] },
    ],
    ["a pinned runner is never evicted, however old", { runners: [runner("x", 1), runner("y", 5)], pinned: new Set(["sha256:x/completion"]) }, { kind: "evict", names: ["y"] }],
    [
      "every idle runner pinned: wait",
      { runners: [runner("x", 1), runner("y", 5)], pinned: new Set(["sha256:x/completion", "sha256:y/completion"]) },
      { kind: "wait" },
    ],
  ])("%s", (_, given, plan) => {
    expect(planLaunch(snapshot(given), A, "completion")).toMatchObject(plan);
  });
});

describe("planLaunch: batch work takes no room from interactive users", () => {
  // now is 1000; runners kept for 500 ms after an interactive request's last use.
  const limits = { ...snapshot().limits, batchEvictAfterMs: 500 };
  const batch = (given: Partial<LaunchSnapshot>) => snapshot({ lane: "batch", limits, ...given });
  const talkedTo = (name: string, at: number, extra: Partial<RunnerSnapshot> = {}) => runner(name, at, { lastInteractive: at, ...extra });
  it.each<[string, LaunchSnapshot, object]>([
    ["used by a user 100 ms ago: kept, the batch request waits until it ages out", batch({ runners: [talkedTo("x", 900), runner("y", 2, busy)] }), { kind: "wait", waitsFor: ["x", "y"], until: 1400 }],
    ["the same runner for an interactive request: evicted", snapshot({ limits, runners: [talkedTo("x", 900), runner("y", 2, busy)] }), { kind: "evict", names: ["x"] }],
    ["used by a user longer ago than the setting: evicted", batch({ runners: [talkedTo("x", 500), runner("y", 2, busy)] }), { kind: "evict", names: ["x"] }],
    ["a runner only batch work used goes, though the kept one is older", batch({ runners: [talkedTo("x", 800, { lastUsed: 1 }), runner("y", 5)] }), { kind: "evict", names: ["y"] }],
    ["served by batch work since its user's last turn: still kept", batch({ runners: [talkedTo("x", 900, { lastUsed: 990 }), runner("y", 2, busy)] }), { kind: "wait", until: 1400 }],
    ["several kept: woken for the earliest", batch({ runners: [talkedTo("x", 900), talkedTo("y", 700)] }), { kind: "wait", waitsFor: ["x", "y"], until: 1200 }],
    ["room beside a kept runner: launched", batch({ runners: [talkedTo("x", 900)], limits: { ...limits, maxRunners: 3 } }), { kind: "launch" }],
    ["the setting left at 0: evicted as by any request", batch({ runners: [talkedTo("x", 999), runner("y", 2, busy)], limits: snapshot().limits }), { kind: "evict", names: ["x"] }],
    ["interactive requests wait for room: the batch request waits behind them, room or not", batch({ interactiveWaitingForRoom: 1 }), { kind: "wait", waitsFor: [] }],
    ["an interactive request is not held back by others waiting for room", snapshot({ interactiveWaitingForRoom: 1 }), { kind: "launch" }],
    [
      "a batch request waiting behind is bounded like any: 503 once the queue is full",
      batch({ runners: [talkedTo("x", 900), runner("y", 2, busy)], waitingForRoom: 2 }),
      { kind: "refuse", error: { status: 503, code: "queue_full" } },
    ],
  ])("%s", (_, given, plan) => {
    const planned = planLaunch(given, A, "completion");
    expect(planned).toMatchObject(plan);
    if (!("until" in plan)) expect(planned).not.toHaveProperty("until");
  });

  it("kept within a memory budget too: the user's runner stays, the batch model waits for it", () => {
    // A budget that holds one runner: the smallest context does not fit beside x.
    const given = batch({ memory: budget(Math.floor(1.5 * cost(1024))), limits: { ...limits, maxRunners: 8 }, runners: [talkedTo("x", 900, { bytes: cost(1024) })] });
    expect(planLaunch(given, SIZED, "completion")).toMatchObject({ kind: "wait", waitsFor: ["x"], until: 1400 });
    expect(planLaunch({ ...given, now: 1400 }, SIZED, "completion")).toMatchObject({ kind: "evict", names: ["x"] });
  });
});

describe("planLaunch: evict and wait tell what they launch once there is room, and what holds the room", () => {
  it.each<[string, Partial<LaunchSnapshot>, object]>([
    [
      "evict: the runner it then launches, as decided now",
      { runners: [runner("x", 5), runner("y", 1)], ...settings({ contextSize: 2048 }) },
      { kind: "evict", names: ["y"], runner: { key: "sha256:a/completion", spec: { contextSize: 2048 } } },
    ],
    ["wait for busy runners: names them", { runners: [runner("x", 1, busy), runner("y", 2, busy)] }, { kind: "wait", waitsFor: ["x", "y"], runner: { key: "sha256:a/completion" } }],
    [
      "wait for one stopping: names it, and the busy one",
      { runners: [runner("x", 1, busy), runner("y", 2, { leaving: true, state: "stopping" })] },
      { kind: "wait", waitsFor: ["x", "y"] },
    ],
    ["wait for pinned idle runners: names them", { runners: [runner("x", 1), runner("y", 2)], pinned: new Set(["sha256:x/completion", "sha256:y/completion"]) }, { kind: "wait", waitsFor: ["x", "y"] }],
    [
      "a replaced runner still serving holds its room: named",
      { limits: { ...snapshot().limits, maxRunners: 1 }, runners: [runner("x", 1, { busy: true, leaving: true, state: "draining" })] },
      { kind: "wait", waitsFor: ["x"] },
    ],
  ])("%s", (_, given, plan) => {
    expect(planLaunch(snapshot(given), A, "completion")).toMatchObject(plan);
  });

  it("evict and wait carry the estimate the launch would have", () => {
    const plan = planLaunch(snapshot({ memory: budget(cost(4096)), limits: { ...snapshot().limits, maxRunners: 1 }, runners: [runner("x", 1, busy)] }), SIZED, "completion");
    expect(plan).toMatchObject({ kind: "wait", waitsFor: ["x"], runner: { spec: { contextSize: 4096 }, memory: { total: cost(4096), where: "cpu" } } });
  });
});

describe("planLaunch: what a launch starts with", () => {
  const launched = (given: Partial<LaunchSnapshot>, mode: Mode = "completion", m = A) => {
    const plan = planLaunch(snapshot(given), m, mode);
    if (plan.kind !== "launch") throw new Error(`expected a launch, got ${JSON.stringify(plan)}`);
    return plan.runner;
  };

  it.each<[string, Partial<LaunchSnapshot>, object]>([
    [
      "the defaults: every core when alone, the configured keep-alive, the serial in its name",
      {},
      { key: "sha256:a/completion", model: "ai/a:latest", slots: 1, threads: 4, threadsFixed: false, keepAlive: "5m", ahead: 0, spec: { name: "a-completion-3", parallel: 1 } },
    ],
    ["the cores shared with the runners in service", { runners: [runner("x", 1)] }, { threads: 2, threadsFixed: false }],
    ["a leaving runner takes no share", { runners: [runner("x", 1, { leaving: true, state: "stopping" })] }, { threads: 4 }],
    ["threads set for the model", settings({ threads: 3 }), { threads: 3, threadsFixed: true }],
    ["threads in the model's flags", settings({ runtimeFlags: ["-t", "2"] }), { threads: 2, threadsFixed: true }],
    ["threads set for every runner", { limits: { ...snapshot().limits, threads: 1 } }, { threads: 1, threadsFixed: true }],
    ["the model's keep-alive and slots", settings({ keepAlive: "0", slots: 3 }), { keepAlive: "0", slots: 3, spec: { parallel: 3 } }],
    ["pinned: kept for good", { pinned: new Set(["sha256:a/completion"]) }, { keepAlive: "-1" }],
    ["requests ahead in llama-server's queue, within the queue depth", { limits: { ...snapshot().limits, runnerQueue: 5, queueDepth: 2 } }, { ahead: 2 }],
    ["the configured context, without a budget", settings({ contextSize: 2048 }), { spec: { contextSize: 2048 } }],
  ])("%s", (_, given, expected) => {
    expect(launched(given)).toMatchObject(expected);
  });

  it("an embedding runner of a model that declares no pooling gets mean pooling", () => {
    expect(launched({}, "embedding").spec).toMatchObject({ mode: "embedding", pooling: "mean" });
  });
});

describe("planLaunch with a memory budget", () => {
  const plan = (given: Partial<LaunchSnapshot>) => planLaunch(snapshot(given), SIZED, "completion");

  it.each<[string, Partial<LaunchSnapshot>, object]>([
    [
      "the model's trained context when it fits, with its estimate",
      { memory: budget(cost(4096)) },
      { kind: "launch", runner: { spec: { contextSize: 4096 }, memory: { total: cost(4096), where: "cpu" } } },
    ],
    ["a smaller context when only that fits beside the others", { memory: budget(cost(4096)), runners: [runner("x", 1, { bytes: cost(4096) - cost(2048) })] }, { kind: "launch", runner: { spec: { contextSize: 2048 } } }],
    [
      "as many idle runners evicted as the estimate needs, least recently used first",
      { memory: budget(cost(1024) + 10), limits: { ...snapshot().limits, maxRunners: 8 }, runners: [runner("x", 1, { bytes: 10 }), runner("y", 2, { bytes: 10 }), runner("z", 3, { bytes: 10 })] },
      { kind: "evict", names: ["x", "y"] },
    ],
    ["every layer on the GPU on a GPU budget", { memory: budget(cost(4096), "gpu") }, { kind: "launch", runner: { spec: { gpuLayers: "all" }, memory: { where: "gpu" } } }],
    [
      "a model that cannot fit even alone: refused (507), nothing evicted",
      { memory: budget(cost(256) - 1), runners: [runner("x", 1, { bytes: 10 })] },
      { kind: "refuse", error: { status: 507, code: "model_too_large", message: expect.stringContaining("it does not fit with any context size") } },
    ],
    [
      "too large with the configured context: refused, naming one that fits",
      { memory: budget(cost(2048)), ...settings({ contextSize: 4096 }) },
      { kind: "refuse", error: { status: 507, message: expect.stringContaining("a context size of 2048 tokens would fit") } },
    ],
  ])("%s", (_, given, expected) => {
    expect(plan(given)).toMatchObject(expected);
  });

  it("on a GPU budget, the layers the model's flags give, and none of ours", () => {
    const launch = plan({ memory: budget(cost(4096), "gpu"), ...settings({ runtimeFlags: ["--n-gpu-layers=1"] }) });
    expect(launch).toMatchObject({ kind: "launch", runner: { memory: { where: "gpu" } } });
    const spec = launch.kind === "launch" ? launch.runner.spec : undefined;
    expect(spec?.gpuLayers).toBeUndefined();
    expect(spec?.extraArgs).toContain("--n-gpu-layers=1");
  });
});

describe("a request's context (Ollama's num_ctx)", () => {
  it.each<[string, boolean, number | undefined, number | undefined]>([
    ["none asked", false, undefined, undefined],
    ["asked", false, 2048, 2048],
    ["a pinned runner keeps its context", true, 2048, undefined],
  ])("wantedContext: %s", (_, pinned, wish, wanted) => {
    expect(wantedContext(pinned, wish)).toBe(wanted);
  });

  it.each<[string, Pick<RunnerSnapshot, "contextSize" | "requestedContext"> | undefined, number | undefined, string]>([
    ["none loaded: launch", undefined, 2048, "launch"],
    ["no wish: the runner loaded, whatever its context", { contextSize: 4096 }, undefined, "use"],
    ["launched with that context", { contextSize: 2048 }, 2048, "use"],
    ["launched for that wish, bounded to less", { contextSize: 1024, requestedContext: 999999 }, 999999, "use"],
    ["another context: replaced (its requests end first)", { contextSize: 4096 }, 2048, "replace"],
    ["launched for another wish: replaced", { contextSize: 1024, requestedContext: 4096 }, 2048, "replace"],
    ["its context unknown: replaced", {}, 2048, "replace"],
  ])("planServe: %s", (_, loaded, wanted, plan) => {
    expect(planServe(loaded, wanted)).toBe(plan);
  });

  const launched = (given: Partial<LaunchSnapshot>, m = SIZED) => {
    const plan = planLaunch(snapshot(given), m, "completion");
    if (plan.kind !== "launch") throw new Error(`expected a launch, got ${JSON.stringify(plan)}`);
    return plan.runner;
  };

  it.each<[string, Partial<LaunchSnapshot>, object]>([
    ["asked within the trained context: as asked", { wantedContext: 2048 }, { requestedContext: 2048, spec: { contextSize: 2048 } }],
    ["asked over the trained context: bounded to it for each slot", { wantedContext: 999999 }, { requestedContext: 999999, spec: { contextSize: 4096 } }],
    ["two slots: twice the trained context", { wantedContext: 999999, ...settings({ slots: 2 }) }, { spec: { contextSize: 8192, parallel: 2 } }],
    ["the wish wins over the configured context", { wantedContext: 1024, ...settings({ contextSize: 4096 }) }, { spec: { contextSize: 1024 } }],
    ["bounded by what fits in the budget", { wantedContext: 4096, memory: budget(cost(2048)) }, { requestedContext: 4096, spec: { contextSize: 2048 } }],
  ])("planLaunch: %s", (_, given, expected) => {
    expect(launched(given)).toMatchObject(expected);
  });

  it("a model without a GGUF header: the wish as it is", () => {
    expect(launched({ wantedContext: 999999 }, A)).toMatchObject({ requestedContext: 999999, spec: { contextSize: 999999 } });
  });

  it("no wish: no requested context, the settings' own", () => {
    const runner = launched(settings({ contextSize: 2048 }));
    expect(runner.requestedContext).toBeUndefined();
    expect(runner.spec.contextSize).toBe(2048);
  });

  it("the watchdog's limits go to every runner launched", () => {
    const watch = { healthTimeoutMs: 1000, stallMs: 5000, promptStallMs: 10000 };
    expect(launched({ limits: { ...snapshot().limits, watch } }, A).watch).toEqual(watch);
    expect(launched({}, A).watch).toBeUndefined();
  });
});

describe("planAfter: what follows an event in a runner's life", () => {
  it.each<[RunnerEvent, { pinned: boolean; closed: boolean }, AfterEvent]>([
    ["expired", { pinned: false, closed: false }, "unload"],
    // Loaded before it was pinned, it still has its keep-alive timer.
    ["expired", { pinned: true, closed: false }, "nothing"],
    ["crashed", { pinned: false, closed: false }, "nothing"],
    ["crashed", { pinned: true, closed: false }, "relaunch"],
    ["crashed", { pinned: true, closed: true }, "nothing"],
    ["replaced", { pinned: false, closed: false }, "nothing"],
    ["replaced", { pinned: true, closed: false }, "relaunch"],
    ["replaced", { pinned: true, closed: true }, "nothing"],
    // A failed load would fail again at once: not retried here.
    ["stopped", { pinned: true, closed: false }, "nothing"],
    // Killed for not answering: its end comes as a crash, which relaunches a pinned one.
    ["unresponsive", { pinned: false, closed: false }, "nothing"],
    ["unresponsive", { pinned: true, closed: false }, "nothing"],
  ])("%s, %o: %s", (event, facts, plan) => {
    expect(planAfter(event, facts)).toBe(plan);
  });
});

describe("planRebalance: runners above their share of the cores are replaced", () => {
  const auto = (name: string, threads: number, extra: Partial<RunnerSnapshot> = {}) => runner(name, 1, { threads, threadsFixed: false, ...extra });
  it.each<[string, RunnerSnapshot[], number, string[]]>([
    ["alone with every core: kept", [auto("x", 4)], 4, []],
    ["a second runner halves the share: the first is replaced", [auto("x", 4), auto("y", 2)], 4, ["x"]],
    ["threads that were set are kept", [auto("x", 4, { threadsFixed: true }), auto("y", 2)], 4, []],
    ["a runner still loading is left to finish", [auto("x", 4, { state: "loading" }), auto("y", 2)], 4, []],
    ["one leaving takes no share", [auto("x", 4), auto("y", 2, { leaving: true, state: "draining" })], 4, []],
    ["at least one thread each", [auto("x", 1), auto("y", 1), auto("z", 1)], 2, []],
  ])("%s", (_, runners, cores, replaced) => {
    expect(planRebalance(runners, cores)).toEqual(replaced);
  });
});

describe("keepAliveAfterRequest", () => {
  it.each<[boolean, string | undefined, string, string | undefined]>([
    [false, undefined, "5m", "5m"],
    [false, "0", "5m", "0"],
    [false, "-1", "5m", "-1"],
    [true, "0", "-1", undefined],
  ])("pinned %s, asked %s, configured %s: %s", (pinned, requested, configured, kept) => {
    expect(keepAliveAfterRequest(pinned, requested, configured)).toBe(kept);
  });
});

describe("unload and delete", () => {
  const pins = new Set(["sha256:p/completion"]);
  it.each<[string, RunnerSnapshot, boolean]>([
    ["an idle runner", runner("x", 1), true],
    ["one in use", runner("x", 1, busy), false],
    ["a pinned one", runner("p", 1), false],
    ["one already leaving", runner("x", 1, { leaving: true, state: "stopping" }), false],
  ])("unload takes %s: %s", (_, r, taken) => {
    expect(unloadable(r, pins)).toBe(taken);
  });

  it.each<[string, RunnerSnapshot[], boolean, object]>([
    ["unloads every runner of the model, leaving ones too", [runner("x", 1), runner("y", 1, { leaving: true, state: "stopping" })], false, { kind: "unload", names: ["x", "y"] }],
    ["none loaded", [], false, { kind: "unload", names: [] }],
    ["refuses while one serves (409)", [runner("x", 1), runner("y", 1, busy)], false, { kind: "refuse", error: { status: 409, code: "model_in_use" } }],
    ["refuses a pinned model (409)", [], true, { kind: "refuse", error: { status: 409, code: "model_pinned" } }],
  ])("delete: %s", (_, runners, pinned, plan) => {
    expect(planDelete(runners, pinned, "ai/x:latest")).toMatchObject(plan);
  });
});
