import { HttpError } from "../http/errors.ts";
import type { Endpoint } from "./requests.ts";

// What one request may take of a runner shared by many: its time, the tokens it generates, and how
// long its client may leave a stream unread (see relay.ts). Each with a default a desktop user
// does not meet.

export type Bounds = {
  /** A request's time at its runner, from sending it to the end of its answer. */
  timeoutMs: number;
  /** The most tokens one generation may ask for; a request that asks for none or more gets this. */
  maxTokens: number;
  /** How long a streamed answer may stay unread by its client before its generation is cancelled. */
  clientStallMs: number;
};

export const requestTimedOut = (model: string, ms: number) =>
  new HttpError(504, "timeout_error", "request_timeout", `the request to model ${model} ran past its time limit of ${ms / 1000} s (INFERENCE_REQUEST_TIMEOUT_MS)`);

/**
 * The fields that bound a generation, by endpoint, the first one the field added when none is
 * given. llama-server reads `n_predict`, else `max_completion_tokens`, else `max_tokens` (its
 * Responses API maps `max_output_tokens` onto `max_tokens`): every one present is bounded, so
 * whichever it reads is.
 */
const TOKEN_FIELDS: Partial<Record<Endpoint, string[]>> = {
  "chat/completions": ["max_tokens", "max_completion_tokens", "n_predict"],
  completions: ["max_tokens", "max_completion_tokens", "n_predict"],
  responses: ["max_output_tokens", "max_tokens", "max_completion_tokens", "n_predict"],
};

/**
 * The body with its token limits at most `ceiling` (a negative or null one, "no limit" to
 * llama-server, becomes the ceiling), and the ceiling added where it asks for none; the same object
 * when nothing changes. Any other value that is not a number is left for llama-server to refuse.
 */
export function boundTokens(endpoint: Endpoint, body: unknown, ceiling: number): unknown {
  const added = tokenFieldAdded(endpoint, body);
  if (added !== undefined) return { ...(body as Record<string, unknown>), [added]: ceiling };
  const fields = TOKEN_FIELDS[endpoint];
  if (!fields || typeof body !== "object" || body === null || Array.isArray(body)) return body;
  const given = body as Record<string, unknown>;
  let bounded: Record<string, unknown> | undefined;
  for (const field of fields) {
    const value = given[field];
    if (value === undefined) continue;
    const unbounded = value === null || (typeof value === "number" && (value > ceiling || value < 0));
    if (unbounded) (bounded ??= { ...given })[field] = ceiling;
  }
  return bounded ?? body;
}

/**
 * The field boundTokens adds to `body` (at the ceiling), which asks for no token limit; undefined
 * where it asks for one (or the endpoint has none): only that change can be spliced into the
 * body's bytes instead of writing the body again (see withLeadingField).
 */
export function tokenFieldAdded(endpoint: Endpoint, body: unknown): string | undefined {
  const fields = TOKEN_FIELDS[endpoint];
  if (!fields || typeof body !== "object" || body === null || Array.isArray(body)) return undefined;
  return fields.some((field) => (body as Record<string, unknown>)[field] !== undefined) ? undefined : fields[0];
}
