import { modelNotFound } from "../models/errors.ts";
import { modelInUse, modelPinned, queueFull, RunnerGone, runnerGone, shuttingDown } from "./errors.ts";
import { unlessAborted } from "../http/abort.ts";
import { decideLaunch, fitAnswer, type FitAnswer } from "./fit.ts";
import { embeddingPooling, runnerKey, threadShare, threadsInFlags } from "./policy.ts";
import { Runner, type Lease, type RunnerEvents, type RunnerState } from "./runner.ts";
import type { WatchLimits } from "./watchdog.ts";
import type { ModelSettings, SettingsStore } from "./settings.ts";
import { modelBytes } from "./memory/detect.ts";
import type { MemoryLimits, Sizing } from "./memory/sizing.ts";
import { modelName, type Mode, type ModelRef, type RunnerSpec, type RunnerWish, type StartRunner } from "./types.ts";

// The coordinator: at most one runner per (model, mode), at most `maxRunners` in all, the least
// recently used idle one unloaded to make room, idle ones unloaded after their keep-alive. Every
// decision and the change it leads to happen in one synchronous step, so no await separates a
// check from its effect.

export type SchedulerLimits = {
  maxRunners: number;
  /** Default slots per runner (llama-server's --parallel). */
  slots: number;
  /** Requests that may wait per runner once its slots are taken. */
  queueDepth: number;
  /** Of those, how many wait in llama-server's own queue rather than ours (default 0). */
  runnerQueue?: number;
  /** Default keep-alive, e.g. "5m". */
  keepAlive: string;
  /** CPU cores the runners share (affinity and cgroup quota). */
  cpuCores: number;
  /** Threads per runner, fixed; default: the cores shared among the runners loaded. */
  threads?: number;
  /** How a runner that stopped answering is noticed (then killed and replaced); none: never. */
  watch?: WatchLimits;
};

export type SchedulerDeps = {
  start: StartRunner;
  settings: SettingsStore;
  limits: SchedulerLimits;
  observe?: SchedulerObserver;
  /**
   * The memory budget the runners' estimates must fit in, read once (the devices are queried);
   * none: runners are only counted.
   */
  memory?: () => Promise<MemoryLimits | undefined>;
  /** Bytes of a model's files as stored; default: their sizes on disk. */
  modelBytes?: (model: ModelRef) => Promise<number>;
  /**
   * The serial of the first runner (its name's last part; default 1). A process gives its start
   * time in ms, so that its runners' names, sockets and logs follow the previous run's instead
   * of repeating them (the newest log of a model is the one with the highest serial).
   */
  firstSerial?: number;
};

/** Hooks for metrics: loads, their time, crashes. */
export type SchedulerObserver = {
  loaded?(model: string, mode: Mode, ms: number): void;
  loadFailed?(model: string, mode: Mode): void;
  crashed?(model: string, mode: Mode): void;
  /** Requests now waiting for room to launch the model's runner (0: none any more). */
  waitingForRoom?(model: string, mode: Mode, waiting: number): void;
};

export type RunnerInfo = {
  model: string;
  modelId: string;
  mode: Mode;
  state: RunnerState;
  inUse: number;
  waiting: number;
  lastUsed: number;
  keepAlive: string;
  threads: number;
  /** Pinned with `pin`: never evicted, never expires, relaunched when it crashes. */
  pinned: boolean;
  /** The context it runs with, when the scheduler chose or knows it. */
  contextSize?: number;
  /** Its estimated memory and where that is, when a budget is kept. */
  memory?: Sizing["estimate"] & { where: Sizing["where"] };
};

export interface Scheduler {
  /** A slot on the model's runner for `mode`, loading it first if needed. */
  acquire(model: ModelRef, mode: Mode, signal?: AbortSignal, wish?: RunnerWish): Promise<Lease>;
  /** Loads the runner in the background (after configure), if it is not loaded. */
  preload(model: ModelRef, mode: Mode): void;
  /**
   * Pins the model's runner for `mode`: loaded now (resolves once it is ready), never evicted, never
   * unloaded for its keep-alive or by `unload`, and launched again when it crashes or is replaced.
   */
  pin(model: ModelRef, mode: Mode): Promise<void>;
  runners(): RunnerInfo[];
  /** Unloads the idle runners that match; returns how many. A runner in use is left alone. */
  unload(match: (info: RunnerInfo) => boolean): Promise<number>;
  /**
   * Deletes a model: unloads its runners (409 if one is serving), then runs `remove`. Until `remove`
   * settles no runner of the model launches (a request for it gets the 404 of a missing model), so
   * none opens a blob that is being unlinked; a failed delete leaves the model usable.
   */
  whileDeleting<T>(model: ModelRef, remove: () => Promise<T>): Promise<T>;
  /** After its settings changed: new requests get a runner loaded with them. */
  reload(model: ModelRef): void;
  /** The memory budget and what the runners use of it; undefined when none is kept. */
  memory(): Promise<{ budget: MemoryLimits["budget"]; usedBytes: number } | undefined>;
  /**
   * What a load of the model for `mode` would do now, with these settings changed (as configure
   * would change them, which reloads its runner), without doing it: the launch's own decision.
   * Throws what the load would: the 507 of a model too large even alone, the 404 of one being deleted.
   */
  fit(model: ModelRef, mode: Mode, changes?: ModelSettings): Promise<FitAnswer>;
  /** Fetches each ready runner's `/metrics`, with its model and mode. */
  scrape(path: string): Promise<{ model: string; mode: Mode; text: string }[]>;
  stopAll(): Promise<void>;
}

export function createScheduler(deps: SchedulerDeps): Scheduler {
  const active = new Map<string, Runner>();
  const leaving = new Set<Runner>();
  const capacityWaiters = new Set<() => void>();
  /** Runner key -> requests waiting for room to launch it: as many as its slots and queue hold. */
  const waitingForRoom = new Map<string, number>();
  /** Model id -> deletes in progress: no runner of these launches. */
  const deleting = new Map<string, number>();
  /** Runner key -> what `pin` asked to keep loaded. */
  const pinned = new Map<string, { model: ModelRef; mode: Mode }>();
  let serial = (deps.firstSerial ?? 1) - 1;
  /** Set by stopAll: no runner starts after it, so none outlives the process. */
  let closed = false;

  const notifyCapacity = () => {
    const waiters = [...capacityWaiters];
    capacityWaiters.clear();
    for (const wake of waiters) wake();
  };

  const events: RunnerEvents = {
    idle: notifyCapacity,
    // A runner loaded before it was pinned still has its keep-alive timer: pinned, it stays.
    expired: (runner) => void (pinned.has(runner.options.key) || unloadRunner(runner)),
    loaded(runner, ms) {
      deps.observe?.loaded?.(runner.options.model, runner.options.mode, ms);
      rebalance();
    },
    loadFailed: (runner) => deps.observe?.loadFailed?.(runner.options.model, runner.options.mode),
    gone(runner, crashed) {
      if (active.get(runner.options.key) === runner) active.delete(runner.options.key);
      leaving.delete(runner);
      if (crashed) deps.observe?.crashed?.(runner.options.model, runner.options.mode);
      notifyCapacity();
      // A load that failed is not retried here (it would fail again at once); readiness asks again.
      if (crashed) repin(runner.options.key);
    },
    unresponsive(runner) {
      if (active.get(runner.options.key) === runner) active.delete(runner.options.key);
      leaving.add(runner);
    },
  };

  function unloadRunner(runner: Runner): Promise<void> {
    if (active.get(runner.options.key) === runner) active.delete(runner.options.key);
    leaving.add(runner);
    return runner.stop();
  }

  /** Takes a runner out of service: it finishes what it serves and has queued; new requests get a fresh one. */
  function replace(runner: Runner): void {
    if (active.get(runner.options.key) === runner) active.delete(runner.options.key);
    leaving.add(runner);
    runner.drain();
    repin(runner.options.key);
  }

  /** A pinned runner that went away comes back at once (not on the next request). */
  function repin(key: string): void {
    const pin = pinned.get(key);
    if (pin && !closed) preload(pin.model, pin.mode);
  }

  function preload(model: ModelRef, mode: Mode): void {
    void withRunner(model, mode, undefined, {}, () => {}).catch(() => {});
  }

  /**
   * The cores are shared among the runners loaded: one whose automatic thread count is above its
   * share now that another runner joined is replaced (it finishes its requests first; the next
   * request loads it with its share). A lasting oversubscription costs far more than one reload.
   */
  function rebalance(): void {
    const share = threadShare(deps.limits.cpuCores, active.size);
    for (const runner of [...active.values()]) {
      if (runner.state === "ready" && !runner.options.threadsFixed && runner.options.threads > share) replace(runner);
    }
  }

  function waitForCapacity(signal?: AbortSignal): Promise<void> {
    let wake!: () => void;
    const woken = new Promise<void>((resolve) => (wake = resolve));
    capacityWaiters.add(wake);
    return unlessAborted(woken, signal, () => capacityWaiters.delete(wake));
  }

  /**
   * Finds (or launches) the model's runner and hands it to `use` in the same synchronous step, so
   * that what `use` does (take a lease, join the queue) makes the runner busy before anything else
   * can evict it.
   */
  async function withRunner<T>(model: ModelRef, mode: Mode, signal: AbortSignal | undefined, wish: RunnerWish, use: (runner: Runner) => T): Promise<T> {
    const key = runnerKey(model.id, mode);
    // A pinned runner keeps its context: a request's wish would reload it back and forth.
    const wanted = pinned.has(key) ? undefined : wish.contextSize;
    // Read only when a launch is considered: a request for a loaded runner pays no stat.
    let budget: { memory: MemoryLimits | undefined; weights: number } | undefined;
    const loaded = () => {
      signal?.throwIfAborted();
      if (closed) throw shuttingDown();
      if (deleting.has(model.id)) throw modelNotFound(modelName(model));
      const runner = active.get(key);
      if (!runner || wanted === undefined || hasContext(runner, wanted)) return runner;
      replace(runner); // its requests end first; this one goes to a runner with the context it asks for
      return undefined;
    };
    for (;;) {
      // A loaded runner is used at once (most requests): only a launch needs the settings.
      const existing = loaded();
      if (existing) return use(existing);
      // Read on every pass: a wait for room may be long, and the model reconfigured meanwhile.
      let settings = await deps.settings.get(model.id);
      if (loaded()) continue;
      if (!budget) {
        const memory = await deps.memory?.();
        budget = { memory, weights: memory ? await (deps.modelBytes ?? modelBytes)(model) : 0 };
        continue; // what was read above may have changed meanwhile: decide afresh
      }
      const { memory, weights } = budget;
      const slots = settings.slots ?? deps.limits.slots;
      const decision = decideLaunch({ model, settings, slots, weights, memory, views: runnerViews(), maxRunners: deps.limits.maxRunners, wanted });
      const { plan, sizing } = decision;
      settings = decision.settings;
      if (plan.kind === "room") return use(launch(model, mode, settings, sizing, wanted));
      // The unloads go on if the client leaves; only the wait for them ends.
      if (plan.kind === "evict") await unlessAborted(Promise.all(plan.keys.map((key) => unloadRunner(runnerByKey(key)!))), signal);
      else await waitForRoom(key, slots, model, mode, signal);
    }
  }

  const runnerViews = () =>
    [...active.values(), ...leaving].map((r) => ({
      // Unique per runner: a replaced runner still draining shares its (model, mode) key.
      key: r.options.spec.name,
      busy: r.busy,
      // A replaced runner still serving (draining) frees its room only when its requests end,
      // which may be long: it counts as busy, so an idle runner is evicted rather than waited for.
      stopping: leaving.has(r) && !(r.state === "draining" && r.busy),
      lastUsed: r.lastUsed,
      pinned: pinned.has(r.options.key),
      bytes: r.options.memory?.total ?? 0,
    }));

  const runnerByKey = (name: string) => [...active.values(), ...leaving].find((r) => r.options.spec.name === name);

  /** Waits for room to launch; the queue rules bound how many may wait for one runner. */
  async function waitForRoom(key: string, slots: number, model: ModelRef, mode: Mode, signal?: AbortSignal): Promise<void> {
    const waiting = waitingForRoom.get(key) ?? 0;
    if (waiting >= slots + deps.limits.queueDepth) throw queueFull(modelName(model));
    waitingForRoom.set(key, waiting + 1);
    deps.observe?.waitingForRoom?.(modelName(model), mode, waiting + 1);
    try {
      await waitForCapacity(signal);
    } finally {
      const left = waitingForRoom.get(key)! - 1;
      if (left > 0) waitingForRoom.set(key, left);
      else waitingForRoom.delete(key);
      deps.observe?.waitingForRoom?.(modelName(model), mode, left);
    }
  }

  function launch(model: ModelRef, mode: Mode, settings: ModelSettings, sizing: Sizing | undefined, requestedContext: number | undefined): Runner {
    const slots = settings.slots ?? deps.limits.slots;
    const keepAlive = pinned.has(runnerKey(model.id, mode)) ? "-1" : (settings.keepAlive ?? deps.limits.keepAlive);
    const fixedThreads = settings.threads ?? threadsInFlags(settings.runtimeFlags) ?? deps.limits.threads;
    const threads = fixedThreads ?? threadShare(deps.limits.cpuCores, active.size + 1);
    const ahead = Math.min(deps.limits.runnerQueue ?? 0, deps.limits.queueDepth);
    const options = {
      key: runnerKey(model.id, mode),
      modelId: model.id,
      model: modelName(model),
      mode,
      spec: runnerSpec(model, mode, settings, { slots, threads, ahead, ...gpuAndContext(settings, sizing) }, ++serial),
      slots,
      ahead,
      threads,
      threadsFixed: fixedThreads !== undefined,
      queueDepth: deps.limits.queueDepth,
      keepAlive,
      ...(sizing ? { memory: { ...sizing.estimate, where: sizing.where } } : {}),
      ...(deps.limits.watch ? { watch: deps.limits.watch } : {}),
      ...(requestedContext !== undefined ? { requestedContext } : {}),
    };
    const runner = new Runner(options, deps.start, events);
    active.set(options.key, runner);
    return runner;
  }

  const info = (runner: Runner): RunnerInfo => ({
    model: runner.options.model,
    modelId: runner.options.modelId,
    mode: runner.options.mode,
    state: runner.state,
    inUse: runner.inUse,
    waiting: runner.waiting,
    lastUsed: runner.lastUsed,
    keepAlive: runner.keepAlive,
    threads: runner.options.threads,
    pinned: pinned.has(runner.options.key),
    ...(runner.options.spec.contextSize !== undefined ? { contextSize: runner.options.spec.contextSize } : {}),
    ...(runner.options.memory ? { memory: runner.options.memory } : {}),
  });

  /** On a GPU budget, every layer on the GPU unless the model's flags say otherwise; the chosen context. */
  function gpuAndContext(settings: ModelSettings, sizing: Sizing | undefined) {
    const flags = settings.runtimeFlags ?? [];
    const offload = sizing?.where === "gpu" && !flags.some((f) => /^(-ngl|--n-gpu-layers)(=|$)/.test(f));
    return { ...(offload ? { gpuLayers: "all" } : {}), ...(sizing?.contextSize !== undefined ? { contextSize: sizing.contextSize } : {}) };
  }

  /** Whether the runner was launched for this context, as asked or as it came out. */
  const hasContext = (runner: Runner, context: number) => runner.options.requestedContext === context || runner.options.spec.contextSize === context;

  const ofModel = (model: ModelRef, runners: Iterable<Runner> = active.values()) =>
    [...runners].filter((r) => r.options.modelId === model.id);

  return {
    async acquire(model, mode, signal, wish = {}) {
      // A runner that goes away while this request waits in its queue (crash, reload, unload): one
      // more try on a fresh one, then a 503 the client may retry.
      for (let attempt = 0; ; attempt++) {
        try {
          return await withRunner(model, mode, signal, wish, (runner) => {
            // A pinned runner never expires: a request's keep_alive does not apply to it.
            if (!pinned.has(runner.options.key)) runner.keepFor(wish.keepAlive ?? runner.options.keepAlive);
            return runner.acquire(signal);
          });
        } catch (error) {
          if (!(error instanceof RunnerGone)) throw error;
          if (attempt >= 1) throw runnerGone(modelName(model));
        }
      }
    },
    preload,
    async pin(model, mode) {
      pinned.set(runnerKey(model.id, mode), { model, mode });
      // Waits for the runner like a request would, then gives the slot straight back.
      (await this.acquire(model, mode)).release();
    },
    runners: () => [...active.values(), ...leaving].map(info),
    async memory() {
      const budget = (await deps.memory?.())?.budget;
      if (!budget) return undefined;
      const usedBytes = [...active.values(), ...leaving].reduce((sum, r) => sum + (r.options.memory?.total ?? 0), 0);
      return { budget, usedBytes };
    },
    async unload(match) {
      const idle = [...active.values()].filter((r) => !r.busy && !pinned.has(r.options.key) && match(info(r)));
      await Promise.all(idle.map(unloadRunner));
      return idle.length;
    },
    async whileDeleting(model, remove) {
      // The check, the guard and taking the runners out of `active` are one synchronous step.
      const runners = ofModel(model, [...active.values(), ...leaving]);
      if ([...pinned.values()].some((p) => p.model.id === model.id)) throw modelPinned(modelName(model));
      if (runners.some((r) => r.busy)) throw modelInUse(modelName(model));
      deleting.set(model.id, (deleting.get(model.id) ?? 0) + 1);
      try {
        await Promise.all(runners.map(unloadRunner));
        return await remove();
      } finally {
        const left = deleting.get(model.id)! - 1;
        if (left > 0) deleting.set(model.id, left);
        else deleting.delete(model.id);
      }
    },
    reload(model) {
      for (const runner of ofModel(model)) replace(runner);
    },
    async fit(model, mode, changes = {}) {
      const settings = { ...(await deps.settings.get(model.id)), ...changes };
      const memory = await deps.memory?.();
      const weights = memory ? await (deps.modelBytes ?? modelBytes)(model) : 0;
      if (closed) throw shuttingDown();
      if (deleting.has(model.id)) throw modelNotFound(modelName(model));
      const runner = active.get(runnerKey(model.id, mode));
      // Changed settings reload a loaded runner: idle, it gives its room back (the launch waits
      // for that); busy, it keeps its room until its requests end, as a draining runner does.
      const replaced = runner && Object.keys(changes).length > 0 ? runner.options.spec.name : undefined;
      if (runner && !replaced) return { action: "loaded", runner: info(runner) };
      const views = runnerViews().filter((v) => v.key !== replaced || v.busy);
      const slots = settings.slots ?? deps.limits.slots;
      const decision = decideLaunch({ model, settings, slots, weights, memory, views, maxRunners: deps.limits.maxRunners });
      return fitAnswer(decision, views, (name) => {
        const r = runnerByKey(name);
        return r && { model: r.options.model, mode: r.options.mode, bytes: r.options.memory?.total ?? 0 };
      });
    },
    async scrape(path) {
      // Runners not ready (or gone meanwhile) answer undefined and are left out.
      const runners = [...active.values()];
      const texts = await Promise.all(runners.map((r) => r.scrape(path).catch(() => undefined)));
      return runners.flatMap((r, i) => {
        const text = texts[i];
        return text === undefined ? [] : [{ model: r.options.model, mode: r.options.mode, text }];
      });
    },
    async stopAll() {
      closed = true;
      // Those waiting for room wake, find the scheduler closed, and fail.
      notifyCapacity();
      await Promise.all([...active.values(), ...leaving].map(unloadRunner));
    },
  };
}

/** What the sidecar starts for a model in a mode with its settings. */
export function runnerSpec(
  model: ModelRef,
  mode: Mode,
  settings: ModelSettings,
  {
    slots,
    threads,
    ahead = 0,
    gpuLayers,
    contextSize,
  }: { slots: number; threads: number; ahead?: number; gpuLayers?: string; contextSize?: number },
  serial: number,
): RunnerSpec {
  const pooling = mode === "embedding" ? embeddingPooling(model, settings.pooling) : undefined;
  return {
    // Names the runner's socket and log: unique, even while a reloaded runner still drains.
    name: `${model.id.replace(/^sha256:/, "").slice(0, 12)}-${mode}-${serial}`,
    // Answers name the model as people know it, not the runner (which changes on every reload).
    alias: modelName(model),
    modelPath: model.ggufPath,
    ...(model.mmprojPath ? { mmprojPath: model.mmprojPath } : {}),
    mode,
    contextSize: contextSize ?? settings.contextSize,
    parallel: slots,
    ...(gpuLayers ? { gpuLayers } : {}),
    ...(pooling ? { pooling } : {}),
    // llama-server serves each keep-alive connection on one HTTP thread until it closes: with
    // fewer threads than our open connections (a slot each, plus metrics), a request would wait
    // for another connection's keep-alive to time out. The model's own flags come after and win.
    // Compute threads: the runner's share of the cores (batch threads follow: same as --threads).
    extraArgs: [
      "--threads",
      String(threads),
      "--threads-http",
      String(slots + ahead + HTTP_THREADS_SPARE),
      ...settingFlags(settings),
      ...(settings.runtimeFlags ?? []),
    ],
  };
}

/** llama-server flags for the settings that have their own fields (the draft's path is ours, from the store). */
function settingFlags({ reasoningBudget, speculative }: ModelSettings): string[] {
  const flags: string[] = [];
  if (reasoningBudget !== undefined) flags.push("--reasoning-budget", String(reasoningBudget));
  if (speculative) {
    flags.push("--model-draft", speculative.draftPath);
    if (speculative.numTokens !== undefined) flags.push("--spec-draft-n-max", String(speculative.numTokens));
    if (speculative.minAcceptanceRate !== undefined) flags.push("--spec-draft-p-min", String(speculative.minAcceptanceRate));
  }
  return flags;
}

/** HTTP threads beyond one per slot: metrics scrapes, and connections still closing. */
const HTTP_THREADS_SPARE = 8;
