import { modelInUse, RunnerGone } from "./errors.ts";
import { keepAliveMs, pickEviction, runnerKey } from "./policy.ts";
import { Runner, type Lease, type RunnerEvents, type RunnerState } from "./runner.ts";
import type { ModelSettings, SettingsStore } from "./settings.ts";
import { modelName, type Mode, type ModelRef, type RunnerSpec, type StartRunner } from "./types.ts";

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
  /** Default keep-alive, e.g. "5m". */
  keepAlive: string;
};

export type SchedulerDeps = {
  start: StartRunner;
  settings: SettingsStore;
  limits: SchedulerLimits;
  observe?: SchedulerObserver;
};

/** Hooks for metrics: loads, their time, crashes. */
export type SchedulerObserver = {
  loaded?(model: string, mode: Mode, ms: number): void;
  loadFailed?(model: string, mode: Mode): void;
  crashed?(model: string, mode: Mode): void;
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
};

export interface Scheduler {
  /** A slot on the model's runner for `mode`, loading it first if needed. */
  acquire(model: ModelRef, mode: Mode, signal?: AbortSignal): Promise<Lease>;
  /** Loads the runner in the background (after configure), if it is not loaded. */
  preload(model: ModelRef, mode: Mode): void;
  runners(): RunnerInfo[];
  /** Unloads the idle runners that match; returns how many. A runner in use is left alone. */
  unload(match: (info: RunnerInfo) => boolean): Promise<number>;
  /** Before a model is deleted: unloads its runners; 409 if one is serving. */
  unloadModel(model: ModelRef): Promise<void>;
  /** After its settings changed: new requests get a runner loaded with them. */
  reload(model: ModelRef): void;
  /** Fetches each ready runner's `/metrics`, with its model and mode. */
  scrape(path: string): Promise<{ model: string; mode: Mode; text: string }[]>;
  stopAll(): Promise<void>;
}

export function createScheduler(deps: SchedulerDeps): Scheduler {
  const active = new Map<string, Runner>();
  const leaving = new Set<Runner>();
  let serial = 0;
  let capacityWaiters: (() => void)[] = [];

  const notifyCapacity = () => {
    const waiters = capacityWaiters;
    capacityWaiters = [];
    for (const wake of waiters) wake();
  };

  const events: RunnerEvents = {
    idle: notifyCapacity,
    expired: (runner) => void unloadRunner(runner),
    loaded: (runner, ms) => deps.observe?.loaded?.(runner.options.model, runner.options.mode, ms),
    loadFailed: (runner) => deps.observe?.loadFailed?.(runner.options.model, runner.options.mode),
    gone(runner, crashed) {
      if (active.get(runner.options.key) === runner) active.delete(runner.options.key);
      leaving.delete(runner);
      if (crashed) deps.observe?.crashed?.(runner.options.model, runner.options.mode);
      notifyCapacity();
    },
  };

  function unloadRunner(runner: Runner): Promise<void> {
    if (active.get(runner.options.key) === runner) active.delete(runner.options.key);
    leaving.add(runner);
    return runner.stop();
  }

  function waitForCapacity(signal?: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      const onAbort = () => reject(signal!.reason);
      signal?.addEventListener("abort", onAbort, { once: true });
      capacityWaiters.push(() => (signal?.removeEventListener("abort", onAbort), resolve()));
    });
  }

  async function runnerFor(model: ModelRef, mode: Mode, signal?: AbortSignal): Promise<Runner> {
    const key = runnerKey(model.id, mode);
    const settings = await deps.settings.get(model.id);
    for (;;) {
      signal?.throwIfAborted();
      const existing = active.get(key);
      if (existing) return existing;
      const views = [...active.values(), ...leaving].map((r) => ({
        key: r.options.key,
        busy: r.busy,
        stopping: leaving.has(r),
        lastUsed: r.lastUsed,
      }));
      const plan = pickEviction(views, deps.limits.maxRunners);
      if (plan.kind === "room") return launch(model, mode, settings);
      if (plan.kind === "evict") await unloadRunner(active.get(plan.key)!);
      else await waitForCapacity(signal);
    }
  }

  function launch(model: ModelRef, mode: Mode, settings: ModelSettings): Runner {
    const slots = settings.slots ?? deps.limits.slots;
    const keepAlive = settings.keepAlive ?? deps.limits.keepAlive;
    const options = {
      key: runnerKey(model.id, mode),
      modelId: model.id,
      model: modelName(model),
      mode,
      spec: runnerSpec(model, mode, settings, slots, ++serial),
      slots,
      queueDepth: deps.limits.queueDepth,
      keepAlive,
      keepAliveMs: keepAliveMs(keepAlive),
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
    keepAlive: runner.options.keepAlive,
  });

  const ofModel = (model: ModelRef, runners: Iterable<Runner> = active.values()) =>
    [...runners].filter((r) => r.options.modelId === model.id);

  return {
    async acquire(model, mode, signal) {
      // A runner that dies while this request waits in its queue: one more try on a fresh one.
      for (let attempt = 0; ; attempt++) {
        const runner = await runnerFor(model, mode, signal);
        try {
          return await runner.acquire(signal);
        } catch (error) {
          if (!(error instanceof RunnerGone) || attempt >= 1) throw error;
        }
      }
    },
    preload(model, mode) {
      void runnerFor(model, mode).catch(() => {});
    },
    runners: () => [...active.values(), ...leaving].map(info),
    async unload(match) {
      const idle = [...active.values()].filter((r) => !r.busy && match(info(r)));
      await Promise.all(idle.map(unloadRunner));
      return idle.length;
    },
    async unloadModel(model) {
      const runners = ofModel(model, [...active.values(), ...leaving]);
      if (runners.some((r) => r.busy)) throw modelInUse(modelName(model));
      await Promise.all(runners.map(unloadRunner));
    },
    reload(model) {
      for (const runner of ofModel(model)) {
        active.delete(runner.options.key);
        leaving.add(runner);
        runner.drain();
      }
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
      await Promise.all([...active.values(), ...leaving].map(unloadRunner));
    },
  };
}

/** What the sidecar starts for a model in a mode with its settings. */
export function runnerSpec(model: ModelRef, mode: Mode, settings: ModelSettings, slots: number, serial: number): RunnerSpec {
  return {
    // Names the runner's socket and log: unique, even while a reloaded runner still drains.
    name: `${model.id.replace(/^sha256:/, "").slice(0, 12)}-${mode}-${serial}`,
    modelPath: model.ggufPath,
    mode,
    contextSize: settings.contextSize,
    parallel: slots,
    // llama-server serves each keep-alive connection on one HTTP thread until it closes: with
    // fewer threads than our open connections (a slot each, plus metrics), a request would wait
    // for another connection's keep-alive to time out. The model's own flags come after and win.
    extraArgs: ["--threads-http", String(slots + HTTP_THREADS_SPARE), ...(settings.runtimeFlags ?? [])],
  };
}

/** HTTP threads beyond one per slot: metrics scrapes, and connections still closing. */
const HTTP_THREADS_SPARE = 8;
