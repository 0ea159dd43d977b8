import { HttpError } from "../http/errors.ts";
import { upstreamFailure } from "./errors.ts";

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
