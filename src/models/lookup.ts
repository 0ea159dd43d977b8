import type { IRequest } from "itty-router";
import { badRequest } from "../http/errors.ts";
import { modelNotFound } from "./errors.ts";
import type { ModelStore, StoredModel } from "./store/store.ts";

// Finding the model a request names, shared by the model API and the OpenAI-compatible one.

/** The `:reference+` path parameter, decoded; a malformed escape (`%E0%A4%A`) is the client's error. */
export function referenceParam(request: IRequest): string {
  const raw = String(request.params.reference ?? "");
  try {
    return decodeURIComponent(raw);
  } catch {
    throw badRequest("invalid_reference", `the model reference is not a valid URL path segment: ${raw}`);
  }
}

/**
 * How recent a look at the store's index a request to serve a model accepts. Within it, a model
 * another process deleted may still be served once from its loaded runner (as a moment earlier);
 * one it added is found at once (a miss looks again). The model API looks every event-loop turn.
 */
export const SERVING_LOOK_MS = 10;

export function resolveOr404(store: Pick<ModelStore, "resolve">, reference: string, options?: { recentMs?: number }): Promise<StoredModel> {
  return store.resolve(reference, options).then((model) => model ?? Promise.reject(modelNotFound(reference)));
}
