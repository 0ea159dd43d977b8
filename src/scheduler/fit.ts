import { evictionView, type Keys, type LaunchPlan, type RunnerSnapshot } from "./launch-plan.ts";
import type { FitAnswer, FitRunner } from "./api.ts";

// "Will it fit?": the launch plan (planLaunch, the very decision a load applies) told as an answer,
// with runners named by model and mode instead of runner names. A refusal is not an answer: the
// scheduler throws its error (the 507 of a model too large even alone) as the load would. The
// answer's types are in api.ts, with the scheduler's other public types.

/** The plan of a launch that is not refused, as an answer; `named` finds a runner by its name. */
export function fitAnswer(plan: Exclude<LaunchPlan, { kind: "refuse" }>, runners: RunnerSnapshot[], pinned: Keys, named: (name: string) => FitRunner | undefined): FitAnswer {
  const list = (names: Iterable<string>) => [...names].flatMap((name) => named(name) ?? []);
  const evicted = new Set(plan.kind === "evict" ? plan.names : []);
  // Those stopping give their room back; a replaced runner still serving keeps it meanwhile.
  const staying = runners.map((r) => evictionView(r, pinned)).filter((v) => !v.stopping && !evicted.has(v.key));
  return {
    action: plan.kind === "launch" ? "load" : plan.kind,
    contextSize: plan.runner.spec.contextSize,
    slots: plan.runner.spec.parallel,
    memory: plan.runner.memory,
    beside: list(staying.map((v) => v.key)),
    evicts: list(evicted),
    waitsFor: list(plan.kind === "wait" ? plan.waitsFor : []),
  };
}

/**
 * The runners as a launch after a reload for changed settings sees them: the replaced runner
 * (`replaced`, its name) leaves; idle, it is gone by then; busy, it keeps its room while it drains.
 */
export function fitRunners(runners: RunnerSnapshot[], replaced: string | undefined): RunnerSnapshot[] {
  return runners.flatMap((r) => (r.name !== replaced ? [r] : r.busy ? [{ ...r, leaving: true, state: "draining" as const }] : []));
}
