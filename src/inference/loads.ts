import type { RunnerSpec, StartRunner } from "../scheduler/types.ts";

// Swaps you can see: each load as it happens (queued for room, starting, restoring a cache) for
// the status page and `GET /engines/events`, how long each model's last loads took, and the
// histogram of load times by model and whether a cache was restored for `/metrics`. A load's
// time is the runner's start: spawn to healthy, its slots restored.

export type LoadPhase = "queued" | "starting" | "restoring";

type Loading = { model: string; mode: string; phase: LoadPhase; since: number };
type LastLoad = { mode: string; seconds: number; cache_restored: boolean; at: number };
type Histogram = { labels: string; buckets: number[]; sum: number; count: number };

/** Seconds: a tiny model loads in a tenth, a large one from a slow disk in minutes. */
const BUCKETS = [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];
/** Loads kept per model for the page. */
const KEPT = 5;

export const LOAD_HISTOGRAM = "llamadock_runner_load_duration_seconds";
export const LOAD_HISTOGRAM_HELP = "Runner load time (spawn to healthy, caches restored), by model, mode and whether a prompt cache was restored.";

export type Loads = ReturnType<typeof createLoads>;

export function createLoads(now: () => number = Date.now) {
  /** Requests waiting for room to launch, by model and mode. */
  const queued = new Map<string, Loading>();
  /** Runners starting, by their spec's name. */
  const loading = new Map<string, Loading & { restored: number }>();
  const last = new Map<string, LastLoad[]>();
  const histograms = new Map<string, Histogram>();

  function record(spec: RunnerSpec, ms: number, restored: number): void {
    const model = spec.alias ?? spec.name;
    const entry = { mode: spec.mode, seconds: ms / 1000, cache_restored: restored > 0, at: now() };
    last.set(model, [entry, ...(last.get(model) ?? [])].slice(0, KEPT));
    const labels = `model="${escape(model)}",mode="${spec.mode}",cache_restored="${entry.cache_restored}"`;
    const h = histograms.get(labels) ?? { labels, buckets: BUCKETS.map(() => 0), sum: 0, count: 0 };
    BUCKETS.forEach((bound, i) => void (entry.seconds <= bound && h.buckets[i]!++));
    h.sum += entry.seconds;
    h.count++;
    histograms.set(labels, h);
  }

  return {
    /** The scheduler's count of requests waiting for room to launch a model's runner. */
    waitingForRoom(model: string, mode: string, waiting: number): void {
      const key = `${model}/${mode}`;
      if (waiting <= 0) queued.delete(key);
      else if (!queued.has(key)) queued.set(key, { model, mode, phase: "queued", since: now() });
    },
    /** Starts runners through `start`, timing each load. */
    track(start: StartRunner): StartRunner {
      return async (spec, signal) => {
        const began = now();
        loading.set(spec.name, { model: spec.alias ?? spec.name, mode: spec.mode, phase: "starting", since: began, restored: 0 });
        try {
          const runner = await start(spec, signal);
          record(spec, now() - began, loading.get(spec.name)?.restored ?? 0);
          return runner;
        } finally {
          loading.delete(spec.name);
        }
      };
    },
    /** The slot cache's hooks: a runner restoring its slots, and how many it restored. */
    restoring(spec: RunnerSpec): void {
      const entry = loading.get(spec.name);
      if (entry) entry.phase = "restoring";
    },
    restored(spec: RunnerSpec, slots: number): void {
      const entry = loading.get(spec.name);
      if (entry) entry.restored = slots;
    },
    /** For the page and the events stream. */
    view() {
      const inProgress = [...queued.values(), ...[...loading.values()].map(({ restored: _, ...rest }) => rest)];
      return { in_progress: inProgress, last: Object.fromEntries(last) };
    },
    histogramLines(): string[] {
      return [...histograms.values()].flatMap((h) => [
        ...BUCKETS.map((bound, i) => `${LOAD_HISTOGRAM}_bucket{${h.labels},le="${bound}"} ${h.buckets[i]}`),
        `${LOAD_HISTOGRAM}_bucket{${h.labels},le="+Inf"} ${h.count}`,
        `${LOAD_HISTOGRAM}_sum{${h.labels}} ${h.sum}`,
        `${LOAD_HISTOGRAM}_count{${h.labels}} ${h.count}`,
      ]);
    },
  };
}

const escape = (value: string) => value.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
