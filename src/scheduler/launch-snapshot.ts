import type { SchedulerDeps, SchedulerLimits } from "./api.ts";
import type { Keys, LaunchSnapshot, RunnerSnapshot } from "./launch-plan.ts";
import { modelBytes } from "./memory/detect.ts";
import type { MemoryLimits } from "./memory/sizing.ts";
import type { ModelSettings } from "./settings.ts";
import type { EngineBuild, Lane, ModelRef } from "./types.ts";

// What a launch decides on, gathered: the memory budget and the model's weights (read only once a
// launch is considered: a request for a loaded runner pays no stat), and the snapshot of the
// scheduler's state that launch-plan.ts is given. Apart from scheduler.ts, which only says what it
// holds and what the launch asks.

/** The memory budget and the model's weights, read once a launch is considered. */
export type Budget = { memory: MemoryLimits | undefined; weights: number };

export const readBudget = async (deps: Pick<SchedulerDeps, "memory" | "modelBytes">, model: ModelRef): Promise<Budget> => {
  const memory = await deps.memory?.();
  return { memory, weights: memory ? await (deps.modelBytes ?? modelBytes)(model) : 0 };
};

/** What the scheduler holds at the moment of the decision. */
export type Held = {
  runners: RunnerSnapshot[];
  pinned: Keys;
  limits: SchedulerLimits;
  /** Those waiting for room (see room-waits.ts). */
  room: { waitingFor(key: string): number; interactiveWaiting(): number };
  /** The serial number the last runner launched took. */
  serial: number;
};

/** What one launch asks for: its runner key, lane, the model's settings, the context a request wants, and the build. */
export type LaunchAsk = { key: string; lane: Lane; settings: ModelSettings; wanted: number | undefined; budget: Budget; engine?: EngineBuild | undefined };

export const launchSnapshot = ({ runners, pinned, limits, room, serial }: Held, { key, lane, settings, wanted, budget: { memory, weights }, engine }: LaunchAsk): LaunchSnapshot => ({
  runners,
  pinned,
  limits,
  settings,
  ...(wanted !== undefined ? { wantedContext: wanted } : {}),
  ...(memory ? { memory: { limits: memory, weights } } : {}),
  waitingForRoom: room.waitingFor(key),
  lane,
  now: Date.now(),
  interactiveWaitingForRoom: room.interactiveWaiting(),
  serial: serial + 1,
  ...(engine ? { engine } : {}),
});
