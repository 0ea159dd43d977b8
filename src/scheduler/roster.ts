import type { RunnerSnapshot } from "./launch-plan.ts";
import type { Runner } from "./runner.ts";
import type { ModelRef } from "./types.ts";
import { runnerSnapshot } from "./views.ts";

// The runners the scheduler holds: in service (one per runner key), leaving (out of service until
// gone) and the successors loading beside the runner they replace (engine-upgrade.ts). Apart from
// scheduler.ts so that its closure keeps the decisions, and this where they look runners up.

export class Roster {
  /** Runner key -> the runner in service for it. */
  readonly active = new Map<string, Runner>();
  /** Taken out of service: unloading, or replaced and finishing its requests; listed until gone. */
  readonly leaving = new Set<Runner>();
  private readonly loading: () => Iterable<Runner>;

  constructor(loading: () => Iterable<Runner>) {
    this.loading = loading;
  }

  /** Every runner held, as the plans and listings see them. */
  all(): Runner[] {
    return [...this.active.values(), ...this.leaving, ...this.loading()];
  }

  /** The runner a plan names. */
  named(name: string): Runner | undefined {
    return this.all().find((r) => r.options.spec.name === name);
  }

  /** The model's runners among `runners` (by default those in service). */
  ofModel(model: ModelRef, runners: Iterable<Runner> = this.active.values()): Runner[] {
    return [...runners].filter((r) => r.options.modelId === model.id);
  }

  snapshot(r: Runner): RunnerSnapshot {
    return runnerSnapshot(r, this.leaving.has(r));
  }

  /** The state as the plans see it: read, decided on and acted upon in one synchronous step. */
  snapshots(): RunnerSnapshot[] {
    return this.all().map((r) => this.snapshot(r));
  }

  /** Out of service: new requests for its (model, mode) get a fresh runner; it stays listed until gone. */
  retire(runner: Runner): void {
    if (this.active.get(runner.options.key) === runner) this.active.delete(runner.options.key);
    this.leaving.add(runner);
  }

  /** It stopped for good: no longer held. */
  gone(runner: Runner): void {
    if (this.active.get(runner.options.key) === runner) this.active.delete(runner.options.key);
    this.leaving.delete(runner);
  }
}
