import type { PromptCacheLimits } from "./memory/estimate.ts";
import type { MemoryLimits, Sizing } from "./memory/sizing.ts";
import type { Lease, RunnerState } from "./runner.ts";
import type { ModelSettings, SettingsStore } from "./settings.ts";
import type { EngineBuild, Mode, ModelRef, RunnerWish, StartRunner } from "./types.ts";
import type { WatchLimits } from "./watchdog.ts";

// The scheduler as the rest of the server sees it: what it is built from, what it answers, what it
// reports. Its workings are in scheduler.ts (the single writer) and the plans it applies.

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
  /**
   * How long after an interactive request's last use a runner is left alone by batch work (not
   * evicted for a batch launch); default 0: batch work evicts as any request does.
   */
  batchEvictAfterMs?: number;
  /** CPU cores the runners share (affinity and cgroup quota). */
  cpuCores: number;
  /** Threads per runner, fixed; default: the cores shared among the runners loaded. */
  threads?: number;
  /** How a runner that stopped answering is noticed (then killed and replaced); none: never. */
  watch?: WatchLimits;
  /**
   * llama-server's host prompt cache and context checkpoints, passed to every runner and counted
   * in its estimate; none: llama-server's defaults, uncounted.
   */
  promptCache?: PromptCacheLimits;
  /** The wait before a failed move to another build is tried again by a request (doubled after each failure); default 1 min. */
  engineMoveRetryMs?: number;
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
  /**
   * The llama.cpp build a model's runners launch on, read at each launch (see engine-upgrade.ts);
   * none, or undefined from it: the supervisor's own.
   */
  engineFor?: (model: ModelRef, settings: ModelSettings) => Promise<EngineBuild | undefined>;
  /**
   * Tries again, in the background, the move of the model's runner whose move to another build
   * failed (`upgrade`, with its outcome told as the first try's was): called by a request for the
   * model once the wait since the failure is over.
   */
  retryMove?: (model: ModelRef, mode: Mode) => void;
};

/**
 * What `upgrade` did with a loaded runner: nothing (`current`: it runs the build wanted; `none`: no
 * runner), moved it to the build wanted (`upgraded`: the new runner serves, the old one finishes its
 * requests and stops), left it to retire at its first idle moment (`when-idle`: no room for both),
 * or kept it serving because the new build failed to load (`failed`, with why).
 */
export type UpgradeOutcome = { kind: "none" | "current" | "upgraded" | "when-idle"; from?: string; to?: string } | { kind: "failed"; from?: string; to?: string; why: string };

/** Hooks for metrics: loads, their time, crashes. */
export type SchedulerObserver = {
  loaded?(model: string, mode: Mode, ms: number): void;
  loadFailed?(model: string, mode: Mode): void;
  crashed?(model: string, mode: Mode): void;
  /** Requests now waiting for room to launch the model's runner (0: none any more). */
  waitingForRoom?(model: string, mode: Mode, waiting: number): void;
};

/**
 * Whose conversation a runner's slot holds, by the slot table: a key's session (its name as the
 * client sent it), a key's anonymous conversation (its opening's digest), or only a start no one
 * named (what a session left behind when it moved, or a prompt with no message after its start).
 */
export type SlotHolder = { key: string; session: string } | { key: string; opening: string } | { start: true };

/** A runner's slots (busy: a request placed there runs now) and the sessions it parked, per key. */
export type SlotsView = { slots: { busy: boolean; holder?: SlotHolder }[]; parked: { key: string; session: string }[] };

/** A runner (as `runners()` lists it) and its slot table. */
export type RunnerSlots = { model: string; mode: Mode; state: RunnerState } & SlotsView;

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
  /** Its slots (llama-server's --parallel), which share that context: one request gets its share. */
  slots?: number;
  /** Its estimated memory and where that is, when a budget is kept. */
  memory?: Sizing["estimate"] & { where: Sizing["where"] };
  /** The llama.cpp build it runs, when one was chosen for it (else the supervisor's own). */
  engine?: { name: string; version: string; digest?: string };
  /** Its move to another build that failed: that build, why, how many tries failed, from when a request tries again (ms). */
  failedMove?: { engine: string; why: string; tries: number; retryAt: number };
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
  /** Each runner's slots and parked sessions (in `runners()`' order), for the status page: apart, as they are longer to make. */
  slotTables(): RunnerSlots[];
  /**
   * Moves the model's loaded runner to the build `engineFor` names now, never cutting a request: a
   * runner on the new build loads beside it and takes over once ready, the old one finishing what
   * it serves; without room for both, the old one retires when next idle. See UpgradeOutcome.
   */
  upgrade(model: ModelRef, mode: Mode): Promise<UpgradeOutcome>;
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
  memory(): Promise<{ budget: MemoryLimits["budget"]; usedBytes: number; hostUsedBytes: number } | undefined>;
  /**
   * What a load of the model for `mode` would do now, with these settings changed (as configure
   * would change them, which reloads its runner), without doing it: the launch's own plan on the
   * same snapshot. Throws what the load would: the 507 of a model too large even alone, the 404 of
   * one being deleted, the 503 of a full queue.
   */
  fit(model: ModelRef, mode: Mode, changes?: ModelSettings): Promise<FitAnswer>;
  /** Fetches each ready runner's `/metrics`, with its model and mode. */
  scrape(path: string): Promise<{ model: string; mode: Mode; text: string }[]>;
  stopAll(): Promise<void>;
}

/** What a load of the model would do now, as `GET /engines/fit` tells it. */
export type FitAnswer =
  | { action: "loaded"; runner: { contextSize?: number; slots?: number; memory?: Sizing["estimate"] & { where: Sizing["where"] } } }
  | {
      action: "load" | "evict" | "wait";
      contextSize: number | undefined;
      slots: number | undefined;
      memory: (Sizing["estimate"] & { where: Sizing["where"] }) | undefined;
      /** The runners that stay loaded beside it. */
      beside: FitRunner[];
      /** The idle runners unloaded first (evict). */
      evicts: FitRunner[];
      /** The runners it would wait for (wait): serving, loading, on their way out, or pinned. */
      waitsFor: FitRunner[];
    };

export type FitRunner = { model: string; mode: string; bytes: number };
