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

export function resolveOr404(store: Pick<ModelStore, "resolve">, reference: string): Promise<StoredModel> {
  return store.resolve(reference).then((model) => model ?? Promise.reject(modelNotFound(reference)));
}
