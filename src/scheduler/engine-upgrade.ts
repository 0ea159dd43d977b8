import type { UpgradeOutcome } from "./api.ts";
import type { LaunchPlan } from "./launch-plan.ts";
import type { Runner, RunnerOptions } from "./runner.ts";
import type { EngineBuild } from "./types.ts";

// An upgrade: a loaded runner moved to another llama.cpp build without dropping a request. A
// successor loads beside it and takes over once ready while the old one finishes what it serves;
// one that fails to load (or goes) leaves the old one serving, and the caller hears why; without
// room for both, the old one retires at its next idle moment. A failed move is kept on the runner
// it left serving (listings show it) and tried again by a request for the model once its wait is
// over (`retryMs`, doubled after each failure up to an hour): a build fixed or pulled again since
// takes over without anyone configuring the model again. Apart from scheduler.ts, which owns the
// runners in service and calls each step here in its own synchronous step.

// A build is its binary (a pulled build's folder is named by its digest, so one path is one
// build). A runner launched with no build named runs the supervisor's own, which is `builtin`.
export const sameBuild = (a: EngineBuild | undefined, b: EngineBuild | undefined): boolean => (a?.path ?? "builtin") === (b?.path ?? "builtin") || (a === undefined && b?.name === "builtin") || (b === undefined && a?.name === "builtin");

export const buildName = (build: EngineBuild | undefined): string => build?.name ?? "builtin";

/** What the succession is lent by the scheduler: the runners in service, and its ways to end or start one. */
export type SuccessionDeps = {
  /** Runner key -> the runner in service. */
  active: Map<string, Runner>;
  /** Out of service: it finishes what it serves, then stops. */
  replace(runner: Runner): void;
  /** Out of service and stopped now. */
  unload(runner: Runner): void;
  /** A runner launched on `options`, not (yet) in service. */
  start(options: RunnerOptions): Runner;
  /** The wait before a failed move is tried again, doubled after each failure. */
  retryMs: number;
};

/** A runner's move to another build that failed: the build, why, failures so far, and from when a request tries it again. */
export type FailedMove = { engine: string; why: string; tries: number; retryAt: number };

/** The longest wait between two tries of a failed move. */
const MAX_RETRY_MS = 60 * 60 * 1000;

export type Succession = ReturnType<typeof createSuccession>;

export function createSuccession(deps: SuccessionDeps) {
  /** Runners loading on a new build, each to take over from the old one once ready. */
  const successors = new Map<Runner, { old: Runner; done(outcome: UpgradeOutcome): void }>();
  /** Runners whose build changed with no room for a successor beside them: retired when next idle. */
  const retireWhenIdle = new Set<Runner>();
  /** Runners in service whose move failed; forgotten with the runner. */
  const failedMoves = new WeakMap<Runner, FailedMove>();
  const wait = (tries: number) => Math.min(deps.retryMs * 2 ** (tries - 1), MAX_RETRY_MS);
  const moving = (old: Runner) => [...successors.values()].some((u) => u.old === old);

  const names = (old: Runner, successor: EngineBuild | undefined) => ({ from: buildName(old.options.spec.engine), to: buildName(successor) });

  /** A successor ready: it serves from now on, the runner it replaces finishes its requests and stops. */
  function takeOver(successor: Runner, old: Runner, done: (outcome: UpgradeOutcome) => void): void {
    successors.delete(successor);
    failedMoves.delete(old);
    const key = successor.options.key;
    const current = deps.active.get(key);
    if (current === old) deps.replace(old);
    // Another runner took the place meanwhile (a reload): it is kept, this one goes.
    if (current !== undefined && current !== old) deps.unload(successor);
    else deps.active.set(key, successor);
    done({ kind: "upgraded", ...names(old, successor.options.spec.engine) });
  }

  return {
    /** The successors loading: runners the scheduler holds, though none is in service yet. */
    loading: () => successors.keys(),

    /**
     * The upgrade's decision for `old` (the runner in service) to `engine`, in one synchronous
     * step: keep it, launch a successor as `plan` says, or retire it when idle.
     */
    begin(old: Runner | undefined, engine: EngineBuild | undefined, plan: (old: Runner) => LaunchPlan): UpgradeOutcome | Promise<UpgradeOutcome> {
      if (!old || old.state !== "ready" || moving(old)) return { kind: "none" };
      // The build wanted is the one it runs (the model was moved back): nothing failed any more.
      if (sameBuild(old.options.spec.engine, engine)) {
        failedMoves.delete(old);
        return { kind: "current", ...names(old, engine) };
      }
      retireWhenIdle.delete(old);
      const launch = plan(old);
      if (launch.kind !== "launch") {
        if (old.busy) retireWhenIdle.add(old);
        else deps.replace(old);
        return { kind: "when-idle", ...names(old, engine) };
      }
      const successor = deps.start(launch.runner);
      return new Promise((done) => successors.set(successor, { old, done }));
    },

    /** A runner went idle: one waiting to retire is replaced, after its idle moment's own bookkeeping (its keep-alive timer, which the stop cancels). */
    idle(runner: Runner): void {
      if (retireWhenIdle.delete(runner)) queueMicrotask(() => deps.replace(runner));
    },

    /** The move `runner` failed to make, if it did. */
    failedMove: (runner: Runner): FailedMove | undefined => failedMoves.get(runner),

    /**
     * Whether a request for `runner` now should try its failed move again. Yes at most once per
     * wait: the next try is pushed back at once, so the requests meanwhile (and a try that ends
     * without a load, the build gone) start no other.
     */
    retryDue(runner: Runner): boolean {
      const failed = failedMoves.get(runner);
      if (!failed || Date.now() < failed.retryAt || moving(runner)) return false;
      failed.retryAt = Date.now() + wait(failed.tries);
      return true;
    },

    /** A runner is ready: a successor takes over. */
    loaded(runner: Runner): void {
      const upgrade = successors.get(runner);
      if (upgrade) takeOver(runner, upgrade.old, upgrade.done);
    },

    /** A successor that failed to load, or went: the old runner serves on, and the caller hears why. */
    failed(successor: Runner, why: string): void {
      const upgrade = successors.get(successor);
      if (!upgrade) return;
      successors.delete(successor);
      const tries = (failedMoves.get(upgrade.old)?.tries ?? 0) + 1;
      failedMoves.set(upgrade.old, { engine: buildName(successor.options.spec.engine), why, tries, retryAt: Date.now() + wait(tries) });
      upgrade.done({ kind: "failed", ...names(upgrade.old, successor.options.spec.engine), why });
    },
  };
}
