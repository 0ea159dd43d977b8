import type { Mode } from "./types.ts";

// Pure policy: which runner to unload to make room, and how long an idle runner lives. Decisions
// only; the scheduler carries them out.

export type RunnerView = {
  key: string;
  /** Serving or waiting requests, or still loading: never evicted. */
  busy: boolean;
  /** Already on its way out: occupies room until it has stopped. */
  stopping: boolean;
  lastUsed: number;
};

export type EvictionPlan = { kind: "room" } | { kind: "evict"; key: string } | { kind: "wait" };

/**
 * Room for one more runner under `maxRunners`? Else the least recently used idle runner to unload,
 * or wait: for a runner already stopping (its room comes back soon) or for a busy one to go idle.
 */
export function pickEviction(running: RunnerView[], maxRunners: number): EvictionPlan {
  if (running.length < maxRunners) return { kind: "room" };
  if (running.some((r) => r.stopping)) return { kind: "wait" };
  const idle = running.filter((r) => !r.busy).sort((a, b) => a.lastUsed - b.lastUsed);
  return idle[0] ? { kind: "evict", key: idle[0].key } : { kind: "wait" };
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

export const runnerKey = (modelId: string, mode: Mode): string => `${modelId}/${mode}`;
