import type { RunnerInfo } from "../../src/scheduler/scheduler.ts";

/** A ready runner as the scheduler lists it, for tests of what is rendered from that list. */
export const runnerInfo = (model: string, mode: RunnerInfo["mode"], waiting: number, inUse: number): RunnerInfo => ({
  model,
  modelId: `sha256:${model}`,
  mode,
  state: "ready",
  inUse,
  waiting,
  lastUsed: 0,
  keepAlive: "5m",
  threads: 1,
  pinned: false,
});
