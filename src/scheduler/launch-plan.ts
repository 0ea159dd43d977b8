import { runnerSpec } from "../../sidecar/index.ts";
import type { HttpError } from "../http/errors.ts";
import { queueFull } from "./errors.ts";
import type { PromptCacheLimits } from "./memory/estimate.ts";
import { boundContext, sizeLaunch, type MemoryLimits, type Sizing } from "./memory/sizing.ts";
import { embeddingPooling, pickEviction, runnerKey, threadShare, threadsInFlags, type MemoryNeed, type RunnerView } from "./policy.ts";
import type { RunnerOptions, RunnerState } from "./runner.ts";
import type { ModelSettings } from "./settings.ts";
import type { SchedulerLimits } from "./api.ts";
import { modelName, type EngineBuild, type Lane, type Mode, type ModelRef } from "./types.ts";

// The launch decisions, pure: whether a loaded runner serves a request, and, for a runner that is
// not loaded, what to do: launch it (with this context, these threads, this memory), unload these
// idle runners first, wait for room, or refuse. The scheduler reads the snapshot and applies the
// plan in one synchronous step.
//
// Batch work takes no room from people: a batch launch never evicts a runner that interactive
// requests used within `batchEvictAfterMs` (the user between two turns of a conversation would
// find it gone, and wait for the batch line and then a reload), and takes no room while
// interactive requests wait for some. It waits instead, until the runner has been left alone long
// enough (`until`) or room frees.

/** One runner as the plans see it. */
export type RunnerSnapshot = {
  /** Its spec's name: unique per runner (a replaced runner still draining shares its key). */
  name: string;
  /** Its (model, mode). */
  key: string;
  state: RunnerState;
  /** Serving, with requests queued, or loading. */
  busy: boolean;
  /** Taken out of service: unloading, or replaced and finishing its requests. */
  leaving: boolean;
  lastUsed: number;
  /** When an interactive request last came to it or ended on it; never: undefined. */
  lastInteractive?: number;
  /** Its estimated memory; 0 when none is counted. */
  bytes: number;
  /** Its host caches beside a GPU budget; 0 otherwise. */
  hostBytes?: number;
  threads: number;
  threadsFixed: boolean;
  /** The context it runs with, when known; the one a request asked for when it launched it. */
  contextSize?: number;
  requestedContext?: number;
};

export type LaunchSnapshot = {
  /** Every runner: in service and leaving. */
  runners: RunnerSnapshot[];
  /** Runner keys that `pin` keeps loaded. */
  pinned: Keys;
  limits: SchedulerLimits;
  /** The model's settings, read for this decision. */
  settings: ModelSettings;
  /** The context this request asks for (see `wantedContext`); none: the settings'. */
  wantedContext?: number;
  /** The memory budget and the model's weights; none: runners are only counted. */
  memory?: { limits: MemoryLimits; weights: number };
  /** Requests already waiting for room to launch this runner. */
  waitingForRoom: number;
  /** Whose work the launch is for (see the top of this file), and the time it is decided at. */
  lane: Lane;
  now: number;
  /** Interactive requests waiting for room to launch any runner: a batch launch goes after them. */
  interactiveWaitingForRoom: number;
  /** The serial number the launch takes: it names the runner's socket and log. */
  serial: number;
  /** The llama.cpp build it launches on; none: the supervisor's own. */
  engine?: EngineBuild;
};

/** A set of runner keys, as a Set or the keys of a Map. */
export type Keys = { has(key: string): boolean };

/**
 * `runner` in evict and wait: what it would launch once there is room, as decided now (the fit
 * answer reports it; the scheduler plans afresh after the unloads or the wait). `until` in wait:
 * when a runner kept for interactive users may go to batch work, if no event comes before.
 */
export type LaunchPlan =
  | { kind: "launch"; runner: RunnerOptions }
  | { kind: "evict"; names: string[]; runner: RunnerOptions }
  | { kind: "wait"; waitsFor: string[]; runner: RunnerOptions; until?: number }
  | { kind: "refuse"; error: HttpError };

/**
 * The context a request asks of its runner (Ollama's `num_ctx`), if any. A pinned runner keeps its
 * context: a request's wish would reload it back and forth.
 */
export const wantedContext = (pinned: boolean, wish: number | undefined): number | undefined => (pinned ? undefined : wish);

/**
 * What a request does with the runner loaded for its (model, mode): use it, replace it (its requests
 * end first; this one goes to a runner launched with the context it asks for), or launch one (none
 * is loaded). A request without a wish takes the runner loaded, whatever its context; one with a
 * wish takes a runner launched for that context, as asked or as it came out after bounding.
 */
export function planServe(loaded: Pick<RunnerSnapshot, "contextSize" | "requestedContext"> | undefined, wanted: number | undefined): "use" | "replace" | "launch" {
  if (!loaded) return "launch";
  if (wanted === undefined || loaded.requestedContext === wanted || loaded.contextSize === wanted) return "use";
  return "replace";
}

export function planLaunch(snapshot: LaunchSnapshot, model: ModelRef, mode: Mode): LaunchPlan {
  const { limits, wantedContext: wanted } = snapshot;
  const memory = withCaches(snapshot);
  const slots = snapshot.settings.slots ?? limits.slots;
  // A wished context replaces the configured one for this runner only, bounded by what can fit.
  const settings = wanted === undefined ? snapshot.settings : { ...snapshot.settings, contextSize: boundContext(model, snapshot.settings, slots, memory?.weights ?? 0, memory?.limits, wanted) };
  const views = snapshot.runners.map((r) => evictionView(r, snapshot.pinned, keptUntil(snapshot, r)));
  // Sized beside the runners that stay (those stopping give their memory back soon); a model that
  // cannot fit even alone is refused here, before anything is unloaded.
  const others = views.reduce((sum, v) => sum + (v.stopping ? 0 : (v.bytes ?? 0)), 0);
  const sized = memory && sizeLaunch(model, settings, slots, memory.weights, others, memory.limits);
  if (sized?.kind === "refuse") return sized;
  const sizing = sized?.sizing;
  const need = sizing && memory && memoryNeed(sizing, memory.limits);
  const afterPeople = snapshot.lane === "batch" && snapshot.interactiveWaitingForRoom > 0;
  const eviction = afterPeople ? ({ kind: "wait" } as const) : pickEviction(views, limits.maxRunners, need);
  const runner = runnerOptions({ ...snapshot, settings }, model, mode, slots, sizing);
  if (eviction.kind === "evict") return { kind: "evict", names: eviction.keys, runner };
  if (eviction.kind === "wait") {
    // Those waiting for room are bounded by the queue rules, as those waiting at a runner are.
    if (snapshot.waitingForRoom >= slots + limits.queueDepth) return { kind: "refuse", error: queueFull(modelName(model)) };
    // What holds the room: runners serving, loading, on their way out, pinned, or kept for people.
    const waitsFor = views.filter((v) => v.busy || v.stopping || v.pinned || v.keptUntil !== undefined).map((v) => v.key);
    // Kept runners free at their time, with no event to say so: the earliest one is woken for.
    const kept = views.flatMap((v) => (v.keptUntil !== undefined && !v.busy && !v.stopping && !v.pinned ? [v.keptUntil] : []));
    return { kind: "wait", waitsFor, runner, ...(kept.length > 0 ? { until: Math.min(...kept) } : {}) };
  }
  return { kind: "launch", runner };
}

/** The host caches the runner is launched with: the defaults, its model's `cacheRam` over them. */
function promptCacheOf({ limits, settings }: Pick<LaunchSnapshot, "limits" | "settings">): PromptCacheLimits | undefined {
  if (!limits.promptCache) return undefined;
  return settings.cacheRam === undefined ? limits.promptCache : { ...limits.promptCache, bytes: settings.cacheRam };
}

/** The memory limits with the host caches the runner is launched with, counted in its estimate. */
function withCaches(snapshot: LaunchSnapshot): LaunchSnapshot["memory"] {
  const { memory } = snapshot;
  const promptCache = promptCacheOf(snapshot);
  if (!memory || !promptCache) return memory;
  return { ...memory, limits: { ...memory.limits, promptCache } };
}

/** What the launch takes of the budget, and beside a GPU budget of the host's. */
function memoryNeed({ estimate }: Sizing, { budget }: MemoryLimits): MemoryNeed {
  const host = budget.hostBytes !== undefined ? { host: { bytes: estimate.host, budget: budget.hostBytes } } : {};
  return { bytes: estimate.total, budget: budget.bytes, ...host };
}

/**
 * Until when batch work leaves `r` alone for the interactive requests that used it: within
 * `batchEvictAfterMs` of their last; undefined for interactive work, or once that has passed.
 */
export function keptUntil({ lane, now, limits }: Pick<LaunchSnapshot, "lane" | "now" | "limits">, r: RunnerSnapshot): number | undefined {
  if (lane !== "batch" || r.lastInteractive === undefined) return undefined;
  const until = r.lastInteractive + (limits.batchEvictAfterMs ?? 0);
  return until > now ? until : undefined;
}

/**
 * A runner as eviction weighs it. A replaced runner still serving (draining) frees its room only
 * when its requests end, which may be long: it counts as busy, so an idle runner is evicted rather
 * than waited for.
 */
export const evictionView = (r: RunnerSnapshot, pinned: Keys, keptUntil?: number): RunnerView => ({
  key: r.name,
  busy: r.busy,
  stopping: r.leaving && !(r.state === "draining" && r.busy),
  lastUsed: r.lastUsed,
  pinned: pinned.has(r.key),
  bytes: r.bytes,
  ...(r.hostBytes ? { hostBytes: r.hostBytes } : {}),
  ...(keptUntil !== undefined ? { keptUntil } : {}),
});

/** What the runner starts with: slots, threads, keep-alive, and the context and memory sized for it. */
function runnerOptions(snapshot: LaunchSnapshot, model: ModelRef, mode: Mode, slots: number, sizing: Sizing | undefined): RunnerOptions {
  const { settings, limits } = snapshot;
  const key = runnerKey(model.id, mode);
  const keepAlive = snapshot.pinned.has(key) ? "-1" : (settings.keepAlive ?? limits.keepAlive);
  const fixedThreads = settings.threads ?? threadsInFlags(settings.runtimeFlags) ?? limits.threads;
  const staying = snapshot.runners.filter((r) => !r.leaving).length;
  const threads = fixedThreads ?? threadShare(limits.cpuCores, staying + 1);
  const ahead = Math.min(limits.runnerQueue ?? 0, limits.queueDepth);
  const pooling = mode === "embedding" ? embeddingPooling(model, settings.pooling) : undefined;
  const promptCache = promptCacheOf(snapshot);
  const launch = { slots, threads, ahead, alias: modelName(model), pooling, ...(promptCache ? { promptCache } : {}), ...gpuAndContext(settings, sizing) };
  return {
    key,
    modelId: model.id,
    model: modelName(model),
    mode,
    spec: { ...runnerSpec(model, mode, settings, launch, snapshot.serial), ...(snapshot.engine ? { engine: snapshot.engine } : {}) },
    slots,
    ahead,
    threads,
    threadsFixed: fixedThreads !== undefined,
    queueDepth: limits.queueDepth,
    keepAlive,
    ...(sizing ? { memory: { ...sizing.estimate, where: sizing.where } } : {}),
    ...(limits.watch ? { watch: limits.watch } : {}),
    ...(snapshot.wantedContext !== undefined ? { requestedContext: snapshot.wantedContext } : {}),
  };
}

/** On a GPU budget, every layer on the GPU unless the model's flags say otherwise; the chosen context. */
function gpuAndContext(settings: ModelSettings, sizing: Sizing | undefined) {
  const flags = settings.runtimeFlags ?? [];
  const offload = sizing?.where === "gpu" && !flags.some((f) => /^(-ngl|--n-gpu-layers)(=|$)/.test(f));
  return { ...(offload ? { gpuLayers: "all" } : {}), ...(sizing?.contextSize !== undefined ? { contextSize: sizing.contextSize } : {}) };
}
