import type { RunnerInfo } from "./api.ts";
import type { RunnerSnapshot } from "./launch-plan.ts";
import type { FailedMove } from "./engine-upgrade.ts";
import type { Runner, RunnerOptions } from "./runner.ts";
import type { Mode } from "./types.ts";

// A runner as others see it: as listings (and `unload`'s match) do, and as the plans do; and what
// the runners hold and report together (their memory, their metrics).

export const runnerInfo = (runner: Runner, pinned: boolean, failedMove?: FailedMove): RunnerInfo => ({
  model: runner.options.model,
  modelId: runner.options.modelId,
  mode: runner.options.mode,
  state: runner.state,
  inUse: runner.inUse,
  waiting: runner.waiting,
  lastUsed: runner.lastUsed,
  keepAlive: runner.keepAlive,
  threads: runner.options.threads,
  pinned,
  ...(runner.options.spec.contextSize !== undefined ? { contextSize: runner.options.spec.contextSize } : {}),
  ...(runner.options.spec.parallel !== undefined ? { slots: runner.options.spec.parallel } : {}),
  ...(runner.options.memory ? { memory: runner.options.memory } : {}),
  ...engineOf(runner),
  ...(failedMove ? { failedMove: { ...failedMove } } : {}),
});

const engineOf = ({ options: { spec } }: Runner) => (spec.engine ? { engine: { name: spec.engine.name, version: spec.engine.version, ...(spec.engine.digest ? { digest: spec.engine.digest } : {}) } } : {});

/** `leaving`: taken out of service (unloading, or replaced and finishing its requests). */
export const runnerSnapshot = (r: Runner, leaving: boolean): RunnerSnapshot => ({
  name: r.options.spec.name,
  key: r.options.key,
  state: r.state,
  busy: r.busy,
  leaving,
  lastUsed: r.lastUsed,
  ...(r.lastInteractive !== undefined ? { lastInteractive: r.lastInteractive } : {}),
  bytes: r.options.memory?.total ?? 0,
  ...(r.options.memory?.host ? { hostBytes: r.options.memory.host } : {}),
  threads: r.options.threads,
  threadsFixed: r.options.threadsFixed,
  ...runnerContexts(r),
});

/** The contexts of a runner that decide whether it serves a wished one (planServe): its own, and the one asked for at its launch. */
export const runnerContexts = (r: Runner): Pick<RunnerSnapshot, "contextSize" | "requestedContext"> => ({
  ...(r.options.spec.contextSize !== undefined ? { contextSize: r.options.spec.contextSize } : {}),
  ...(r.options.requestedContext !== undefined ? { requestedContext: r.options.requestedContext } : {}),
});

/** The memory the runners' estimates add up to: all of it, and what lives in host memory. */
export function memoryInUse(runners: Runner[]): { usedBytes: number; hostUsedBytes: number } {
  const used = (part: (m: NonNullable<RunnerOptions["memory"]>) => number) => runners.reduce((sum, r) => sum + (r.options.memory ? part(r.options.memory) : 0), 0);
  return { usedBytes: used((m) => m.total), hostUsedBytes: used((m) => m.host) };
}

/** A GET of `path` on each runner; runners not ready (or gone meanwhile) answer undefined and are left out. */
export async function scrapeRunners(runners: Runner[], path: string): Promise<{ model: string; mode: Mode; text: string }[]> {
  const texts = await Promise.all(runners.map((r) => r.scrape(path).catch(() => undefined)));
  return runners.flatMap((r, i) => {
    const text = texts[i];
    return text === undefined ? [] : [{ model: r.options.model, mode: r.options.mode, text }];
  });
}
