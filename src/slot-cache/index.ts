import { basename } from "node:path";
import type { RunnerSpec, StartRunner } from "../scheduler/types.ts";
import { createSlotFolder } from "./folder.ts";
import { withSlotCache, type SlotCacheHooks } from "./runner.ts";

// Prompt caches across eviction and restart (see runner.ts and folder.ts), as the server wires them.

export type SlotCacheSettings = {
  /** The folder; llama-server reads and writes there. */
  path: string;
  /** Bytes the folder may hold; 0: no cache is saved or restored. */
  budgetBytes: number;
  /** How long the saves of one stopping runner may take. */
  saveTimeoutMs: number;
  /** Prompts kept per key (per-key.ts): entries keep whose prompts they hold. */
  perKey?: boolean;
  /** Conversations displaced from their slots parked in the folder (parking.ts). */
  parking?: boolean;
};

export type SlotCache = {
  /** Runners started with their slots restored, and saved when they stop. */
  wrap(start: StartRunner, engine: (spec?: RunnerSpec) => Promise<string>, observe?: Pick<SlotCacheHooks, "restoring" | "restored">): StartRunner;
  /** On SIGTERM: saves made from now on end by `deadline` (ms since the epoch), or are dropped. */
  shutdownBy(deadline: number): void;
  /** A deleted model's saved caches go with it (its weights' path, as runners are given it). */
  forget(modelPath: string): Promise<void>;
};

export function createSlotCache(settings: SlotCacheSettings): SlotCache | undefined {
  if (settings.budgetBytes <= 0) return undefined;
  const folder = createSlotFolder(settings.path, settings.budgetBytes);
  let deadline = Infinity;
  return {
    wrap: (start, engine, observe = {}) =>
      withSlotCache(start, { folder, engine, saveWithinMs: () => Math.min(settings.saveTimeoutMs, deadline - Date.now()), perKey: settings.perKey ?? false, parking: settings.parking ?? true, ...observe }),
    shutdownBy(at) {
      deadline = Math.min(deadline, at);
    },
    forget: (modelPath) => folder.forget(basename(modelPath)),
  };
}
