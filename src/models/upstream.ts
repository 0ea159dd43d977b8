import { HttpError } from "../http/errors.ts";
import { notInRegistry, unauthorized, upstreamFailure } from "./errors.ts";

// A registry, its token service or the Hub that cannot be reached, or that cuts a connection while we
// read an answer, is an upstream failure, never an unexplained 500. An abort stays what it is: the
// caller went away, and nobody reads that error.

/** Runs `exchange` (a fetch, or the reading of its answer) with network errors told as `failure: why`. */
export async function upstream<T>(signal: AbortSignal, failure: string, exchange: () => Promise<T>): Promise<T> {
  try {
    return await exchange();
  } catch (error) {
    if (error instanceof HttpError || signal.aborted) throw error;
    throw upstreamFailure(`${failure}: ${error instanceof Error ? error.message : String(error)}`);
  }
}

/** Who answered, for messages: its name, and where a missing thing is not (`in the registry`). */
export type UpstreamService = { name: string; where: string };

/** An error status from a registry or the Hub as our error: 401/403 refused, 404 absent, else a failure. */
export function statusError(status: number, what: string, service: UpstreamService): HttpError {
  if (status === 401 || status === 403) return unauthorized(`${service.name} refused access to ${what} (${status})`);
  if (status === 404) return notInRegistry(`${what} not found ${service.where}`);
  return upstreamFailure(`${service.name} answered ${status} for ${what}`);
}
