import { formatSize } from "../../models/gguf.ts";
import { ModelTooLarge } from "../errors.ts";
import type { HttpError } from "../../http/errors.ts";
import type { MemoryBudget } from "./budget.ts";
import { estimateMemory, flagValue, largestFittingContext, shapeOf, type Estimate, type PromptCacheLimits } from "./estimate.ts";
import type { ModelSettings } from "../settings.ts";
import type { ModelRef } from "../types.ts";

// The context a launch gets and what it will cost: the configured context, else the model's own
// for each slot, capped to what fits beside the runners loaded (at least the floor for each slot).
// Pure: part of the launch plan (see ../launch-plan.ts).

export type MemoryLimits = {
  budget: MemoryBudget;
  /** The smallest context a model without a configured one is given. */
  minContext: number;
  /** The host caches each runner is launched with (see estimate.ts); none: not counted. */
  promptCache?: PromptCacheLimits;
};

export type Sizing = {
  /** The context the runner starts with (undefined: llama-server's default, no header to go by). */
  contextSize: number | undefined;
  estimate: Estimate;
  where: "gpu" | "cpu";
};

/** Whether the runner's layers go to the GPU: a GPU budget, unless its flags keep them off. */
export function runsOnGpu(budget: MemoryBudget, flags: string[] = []): boolean {
  return budget.where === "gpu" && flagValue(flags, "-ngl", "--n-gpu-layers") !== "0";
}

/** The sizing, or the 507 of a model that cannot fit even alone. */
export type SizingOutcome = { kind: "fits"; sizing: Sizing } | { kind: "refuse"; error: HttpError };

export function sizeLaunch(
  model: ModelRef,
  settings: ModelSettings,
  slots: number,
  weights: number,
  /** Bytes of the runners that stay loaded beside it. */
  others: number,
  limits: MemoryLimits,
): SizingOutcome {
  const flags = settings.runtimeFlags ?? [];
  const where = runsOnGpu(limits.budget, flags) ? "gpu" : "cpu";
  const shape = shapeOf(model.config?.gguf ?? {}, model.config?.architecture);
  const configured = settings.contextSize === 0 ? shape?.trainedContext : settings.contextSize;
  if (!shape) {
    // No header to read: the weights are all that is known.
    const estimate = { weights, kvCache: 0, compute: 0, promptCache: 0, checkpoints: 0, total: weights, host: 0, contextSize: configured ?? 0 };
    return check(model, { contextSize: settings.contextSize, estimate, where }, limits, undefined);
  }
  const run = runOptions(slots, flags, where, limits);
  // Unconfigured, each slot gets the model's trained context, as llama-server itself sizes it
  // (--ctx-size is shared by the slots): the ceiling is that for every slot, the floor the minimum
  // for every slot.
  const perSlot = shape.trainedContext ?? limits.minContext;
  const ceiling = configured ?? perSlot * slots;
  let contextSize = configured;
  if (contextSize === undefined) {
    const floor = Math.min(limits.minContext, perSlot) * slots;
    const beside = largestFittingContext(shape, weights, run, limits.budget.bytes - others, ceiling);
    contextSize = Math.max(floor, beside ?? 0);
  }
  const estimate = estimateMemory(shape, weights, { ...run, contextSize });
  const fitting = () => largestFittingContext(shape, weights, run, limits.budget.bytes, ceiling);
  return check(model, { contextSize, estimate, where }, limits, fitting);
}

/** The run as the estimate takes it: its caches in host memory apart from a GPU budget. */
const runOptions = (slots: number, flags: string[], where: "gpu" | "cpu", limits: MemoryLimits) => ({
  slots,
  flags,
  ...(limits.promptCache ? { promptCache: limits.promptCache } : {}),
  hostApart: where === "gpu",
});

/** A model that cannot fit even alone is refused at once (507), naming the numbers. */
function check(model: ModelRef, sizing: Sizing, limits: MemoryLimits, fitting: (() => number | undefined) | undefined): SizingOutcome {
  const hostBudget = limits.budget.hostBytes ?? Infinity;
  if (sizing.estimate.host > hostBudget) return { kind: "refuse", error: hostTooSmall(model, sizing.estimate, hostBudget) };
  if (sizing.estimate.total <= limits.budget.bytes) return { kind: "fits", sizing };
  const { weights, kvCache, compute, total, contextSize } = sizing.estimate;
  const context = fitting?.();
  const caches = sizing.estimate.host === 0 && sizing.estimate.promptCache + sizing.estimate.checkpoints > 0 ? `, prompt cache ${formatSize(sizing.estimate.promptCache + sizing.estimate.checkpoints)}` : "";
  const parts = `weights ${formatSize(weights)}, KV cache ${formatSize(kvCache)} for ${contextSize} tokens, compute ${formatSize(compute)}${caches}`;
  const hint = context ? `a context size of ${context} tokens would fit` : "it does not fit with any context size";
  const name = model.tags[0] ?? model.id;
  const where = sizing.where === "gpu" ? "GPU memory" : "memory";
  const message = `model ${name} needs ${formatSize(total)} (${parts}) but the ${where} budget is ${formatSize(limits.budget.bytes)}; ${hint}`;
  return { kind: "refuse", error: new ModelTooLarge(message, { totalBytes: total, contextSize, budgetBytes: limits.budget.bytes, fittingContext: context }) };
}

/** The host caches beside a GPU budget exceed the host's memory: no context size helps. */
function hostTooSmall(model: ModelRef, estimate: Estimate, hostBudget: number): HttpError {
  const name = model.tags[0] ?? model.id;
  const message = `model ${name} needs ${formatSize(estimate.host)} of host memory for its prompt cache and context checkpoints but the host memory budget is ${formatSize(hostBudget)}; lower INFERENCE_CACHE_RAM or INFERENCE_CTX_CHECKPOINTS`;
  return new ModelTooLarge(message, { totalBytes: estimate.total, contextSize: estimate.contextSize, budgetBytes: hostBudget, fittingContext: undefined });
}

/**
 * A context one request asks for (Ollama's `num_ctx`), bounded: at most the model's trained context
 * for each slot (llama-server caps each slot there, yet would allocate the cache for all of it), and
 * at most what fits in the whole budget (the runners beside it are unloaded to make room, as for any
 * launch). When not even the smallest context fits, the launch refuses it with the usual 507.
 */
export function boundContext(model: ModelRef, settings: ModelSettings, slots: number, weights: number, limits: MemoryLimits | undefined, wanted: number): number {
  const shape = shapeOf(model.config?.gguf ?? {}, model.config?.architecture);
  if (!shape) return wanted;
  const trained = shape.trainedContext !== undefined ? Math.min(wanted, shape.trainedContext * slots) : wanted;
  if (!limits) return trained;
  const flags = settings.runtimeFlags ?? [];
  const run = runOptions(slots, flags, runsOnGpu(limits.budget, flags) ? "gpu" : "cpu", limits);
  return largestFittingContext(shape, weights, run, limits.budget.bytes, trained) ?? trained;
}
