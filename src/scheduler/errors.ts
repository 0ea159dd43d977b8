import { HttpError } from "../http/errors.ts";
import { formatSize } from "../models/gguf.ts";
import type { RunnerOptions } from "./runner-options.ts";

// The scheduler's failures, each with the status a client gets.

export const loadFailed = (model: string, cause: unknown, note?: string) =>
  new HttpError(503, "unavailable_error", "model_load_failed", `model ${model} failed to load: ${describe(cause)}${note ? `; ${note}` : ""}`);

/** Beside an out-of-memory at load, what we had estimated the runner needs. */
export function estimateNote(error: unknown, memory: RunnerOptions["memory"]): string | undefined {
  if ((error as { code?: unknown } | undefined)?.code !== "out_of_memory" || !memory) return undefined;
  return `its estimate was ${formatSize(memory.total)} of ${memory.where === "gpu" ? "GPU memory" : "memory"}`;
}

export const queueFull = (model: string) =>
  new HttpError(503, "unavailable_error", "queue_full", `too many requests waiting for model ${model}; retry shortly`, {
    "retry-after": "1",
  });

export const modelInUse = (model: string) =>
  new HttpError(409, "conflict_error", "model_in_use", `model ${model} is serving requests; retry when it is idle`);

/** A pinned model is what its replica serves: deleting it would leave the replica unready for good. */
export const modelPinned = (model: string) =>
  new HttpError(409, "conflict_error", "model_pinned", `model ${model} is pinned (PINNED_MODELS) and cannot be deleted while the server runs`);

export const runnerFailed = (model: string, cause: unknown) =>
  new HttpError(502, "upstream_error", "runner_failed", `the runner of model ${model} failed: ${describe(cause)}`);

/** The runner stopped answering (see watchdog.ts) and was killed; the next request gets a fresh one. */
export const runnerUnresponsive = (model: string, why: string) =>
  new HttpError(502, "upstream_error", "runner_unresponsive", `the runner of model ${model} stopped answering (${why}) and was restarted; retry the request`);

/** The request's runner went away (reloaded, unloaded) more than once while it waited. */
export const runnerGone = (model: string) =>
  new HttpError(503, "unavailable_error", "runner_gone", `the runner of model ${model} stopped while the request waited; retry shortly`, {
    "retry-after": "1",
  });

export const shuttingDown = () =>
  new HttpError(503, "unavailable_error", "shutting_down", "the server is shutting down");

export const badSettingsFile = (file: string, reason: string) =>
  new HttpError(500, "server_error", "invalid_settings_file", `model settings file ${file} cannot be used (fix or remove it): ${reason}`);

/** A runner went away while a request waited for it: the scheduler retries on a fresh runner. */
export class RunnerGone extends Error {}

export function describe(cause: unknown): string {
  if (!(cause instanceof Error)) return String(cause);
  // undici says only "fetch failed"; the socket's error code is in its cause.
  const code = (cause.cause as { code?: unknown } | undefined)?.code;
  return typeof code === "string" && !cause.message.includes(code) ? `${cause.message}: ${code}` : cause.message;
}

/**
 * A model whose estimate exceeds the whole memory budget: no eviction can make room. It keeps the
 * numbers its message names, for answers that give them as fields (the fit answer).
 */
export class ModelTooLarge extends HttpError {
  readonly need: TooLarge;
  constructor(message: string, need: TooLarge) {
    super(507, "unavailable_error", "model_too_large", message);
    this.need = need;
  }
}

/** The estimate at the context asked for, the budget, and the largest context that fits alone (none: no context does). */
export type TooLarge = { totalBytes: number; contextSize: number; budgetBytes: number; fittingContext: number | undefined };
