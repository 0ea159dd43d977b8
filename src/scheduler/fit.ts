import { boundContext, sizeLaunch, type MemoryLimits, type Sizing } from "./memory/sizing.ts";
import { pickEviction, type EvictionPlan, type RunnerView } from "./policy.ts";
import type { ModelSettings } from "./settings.ts";
import type { ModelRef } from "./types.ts";

// The launch decision, pure: for a runner that is not loaded, the context and memory it gets and
// whether there is room for it, which idle runners must go first, or whether it must wait. A real
// launch and the "will it fit?" answer both call `decideLaunch`, so that the answer is what a load
// would do. A model that cannot fit even alone throws its 507 (`ModelTooLarge`).

export type LaunchInputs = {
  model: ModelRef;
  settings: ModelSettings;
  slots: number;
  /** Bytes of the model's weights as stored (0 when memory is not counted). */
  weights: number;
  /** The budget; none: runners are only counted. */
  memory: MemoryLimits | undefined;
  /** Every runner loaded or on its way out, as eviction weighs them. */
  views: RunnerView[];
  maxRunners: number;
  /** A context one request asks for (Ollama's num_ctx), bounded by what fits. */
  wanted?: number;
};

export type LaunchDecision = {
  /** The settings the runner starts with (a wished context bounded into them). */
  settings: ModelSettings;
  sizing: Sizing | undefined;
  plan: EvictionPlan;
};

export function decideLaunch({ model, settings, slots, weights, memory, views, maxRunners, wanted }: LaunchInputs): LaunchDecision {
  if (wanted !== undefined) settings = { ...settings, contextSize: boundContext(model, settings, slots, weights, memory, wanted) };
  // Sized beside the runners that stay (those stopping give their memory back soon).
  const others = views.reduce((sum, v) => sum + (v.stopping ? 0 : (v.bytes ?? 0)), 0);
  const sizing = memory && sizeLaunch(model, settings, slots, weights, others, memory);
  const need = sizing && memory ? { bytes: sizing.estimate.total, budget: memory.budget.bytes } : undefined;
  return { settings, sizing, plan: pickEviction(views, maxRunners, need) };
}

/** What a load of the model would do now, as `GET /engines/fit` tells it. */
export type FitAnswer =
  | { action: "loaded"; runner: { contextSize?: number; memory?: Sizing["estimate"] & { where: Sizing["where"] } } }
  | {
      action: "load" | "evict" | "wait";
      contextSize: number | undefined;
      memory: (Sizing["estimate"] & { where: Sizing["where"] }) | undefined;
      /** The runners that stay loaded beside it. */
      beside: FitRunner[];
      /** The idle runners unloaded first (evict). */
      evicts: FitRunner[];
      /** The busy runners it would wait for (wait): serving, loading, or on their way out. */
      waitsFor: FitRunner[];
    };

export type FitRunner = { model: string; mode: string; bytes: number };

/** The decision as an answer: names instead of runner keys. */
export function fitAnswer(decision: LaunchDecision, views: RunnerView[], named: (key: string) => FitRunner | undefined): FitAnswer {
  const { plan, sizing } = decision;
  const runners = (keys: Iterable<string>) => [...keys].flatMap((key) => named(key) ?? []);
  const evicted = new Set(plan.kind === "evict" ? plan.keys : []);
  const staying = views.filter((v) => !v.stopping && !evicted.has(v.key));
  const blocking = plan.kind === "wait" ? views.filter((v) => v.busy || v.stopping || v.pinned) : [];
  return {
    action: plan.kind === "room" ? "load" : plan.kind,
    // As the runner's spec takes it: the sized context, else the configured one.
    contextSize: sizing?.contextSize ?? decision.settings.contextSize,
    memory: sizing && { ...sizing.estimate, where: sizing.where },
    beside: runners(staying.map((v) => v.key)),
    evicts: runners(evicted),
    waitsFor: runners(blocking.map((v) => v.key)),
  };
}
