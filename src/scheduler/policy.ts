import type { PoolingType } from "../../sidecar/index.ts";
import type { Mode, ModelRef } from "./types.ts";

// Pure policy: which runner to unload to make room, and how long an idle runner lives. Decisions
// only; the scheduler carries them out.

export type RunnerView = {
  key: string;
  /** Serving or waiting requests, or still loading: never evicted. */
  busy: boolean;
  /** Already on its way out: occupies room until it has stopped. */
  stopping: boolean;
  lastUsed: number;
  /** Pinned (PINNED_MODELS): kept loaded for good, never evicted. */
  pinned?: boolean;
  /** Kept for interactive users until then, out of this (batch) launch's reach: not evicted. */
  keptUntil?: number;
  /** Its estimated memory; 0 when memory is not counted. */
  bytes?: number;
  /** Its host caches beside a GPU budget (see MemoryNeed's `host`). */
  hostBytes?: number;
};

export type EvictionPlan = { kind: "room" } | { kind: "evict"; keys: string[] } | { kind: "wait" };

/**
 * The launch's estimated memory and the budget all runners share; on a GPU budget also its host
 * caches and the host's budget, which must hold as well.
 */
export type MemoryNeed = { bytes: number; budget: number; host?: { bytes: number; budget: number } };

/**
 * Room for one more runner, under `maxRunners` and (when given) within the memory budget? Else the
 * least recently used idle runners to unload until there is, as one decision; or wait: for a runner
 * already stopping (its room comes back soon), or for busy ones to go idle when unloading every idle
 * one would still not make room. A model too big even alone is the caller's to refuse.
 */
export function pickEviction(running: RunnerView[], maxRunners: number, memory?: MemoryNeed): EvictionPlan {
  const used = (views: RunnerView[], part: (r: RunnerView) => number | undefined) => views.reduce((sum, r) => sum + (part(r) ?? 0), 0);
  const hostFits = (staying: RunnerView[]) => !memory?.host || used(staying, (r) => r.hostBytes) + memory.host.bytes <= memory.host.budget;
  const fits = (staying: RunnerView[]) =>
    staying.length < maxRunners && (!memory || used(staying, (r) => r.bytes) + memory.bytes <= memory.budget) && hostFits(staying);
  if (fits(running)) return { kind: "room" };
  if (running.some((r) => r.stopping)) return { kind: "wait" };
  const idle = running.filter((r) => !r.busy && !r.pinned && r.keptUntil === undefined).sort((a, b) => a.lastUsed - b.lastUsed);
  const evicted = new Set<string>();
  for (const runner of idle) {
    evicted.add(runner.key);
    if (fits(running.filter((r) => !evicted.has(r.key)))) return { kind: "evict", keys: [...evicted] };
  }
  return { kind: "wait" };
}

/** `"5m"`, `"1h30m"`, `"90s"`, `"500ms"`, `"0"`, `"-1"`, or a number of seconds. */
export const KEEP_ALIVE_PATTERN = /^-?(?:\d+(?:\.\d+)?|(?:\d+(?:\.\d+)?(?:ms|s|m|h))+)$/;

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** Milliseconds an idle runner is kept; `Infinity` when negative (never unloaded). */
export function keepAliveMs(value: string | number): number {
  const text = String(value).trim();
  if (!KEEP_ALIVE_PATTERN.test(text)) throw new Error(`invalid keep_alive "${text}"`);
  const negative = text.startsWith("-");
  const body = negative ? text.slice(1) : text;
  let ms = 0;
  if (/^\d+(?:\.\d+)?$/.test(body)) ms = Number(body) * 1000;
  else for (const [, n, unit] of body.matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h)/g)) ms += Number(n) * UNIT_MS[unit!]!;
  if (negative && ms > 0) return Infinity;
  return ms;
}

/**
 * The pooling an embedding runner starts with: the configured one, else none given (the model's
 * own) when the GGUF declares one, else mean. Most chat models (Llama, Qwen, SmolLM...) declare
 * none, and llama-server refuses OpenAI embeddings without pooling ("Pooling type 'none' is not
 * OAI compatible"); mean pooling is what Ollama and LM Studio give them.
 */
export function embeddingPooling(model: ModelRef, configured?: PoolingType): PoolingType | undefined {
  if (configured) return configured;
  const header = model.config?.gguf ?? {};
  const architecture = model.config?.architecture ?? header["general.architecture"];
  const declared = architecture ? header[`${architecture}.pooling_type`] : undefined;
  // llama.cpp's enum: -1 unspecified, 0 none, 1 mean, 2 cls, 3 last, 4 rank.
  return declared !== undefined && Number(declared) > 0 ? undefined : "mean";
}

/**
 * Threads for each of `runners` runners sharing `cores`: llama.cpp's compute threads spin at their
 * barriers, so runners whose threads add up to more than the cores slow each other down by far more
 * than their share (measured: two runners with every core each served 2.4 requests/s where one
 * thread each served 978).
 */
export const threadShare = (cores: number, runners: number): number => Math.max(1, Math.floor(cores / Math.max(1, runners)));

/** The thread count a model's own flags give (`-t N`, `--threads=N`), which then stays as set. */
export function threadsInFlags(flags: string[] = []): number | undefined {
  let found: number | undefined;
  flags.forEach((token, i) => {
    const [flag, inline] = token.includes("=") ? token.split("=", 2) : [token, undefined];
    if (flag === "-t" || flag === "--threads") {
      const value = Number(inline ?? flags[i + 1]);
      if (Number.isInteger(value) && value > 0) found = value;
    }
  });
  return found;
}

export const runnerKey = (modelId: string, mode: Mode): string => `${modelId}/${mode}`;
