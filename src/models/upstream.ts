import { readAtMost } from "../http/body.ts";
import { HttpError } from "../http/errors.ts";
import { notInRegistry, unauthorized, upstreamFailure } from "./errors.ts";

// A registry, its token service or the Hub that cannot be reached, or that cuts a connection while we
// read an answer, is an upstream failure, never an unexplained 500. An abort stays what it is: the
// caller went away, and nobody reads that error.
//
// Nor may one that misbehaves take the server down or hang a pull: every read from upstream fails
// once nothing has come for `stallMs`, and the small documents we read whole (manifests, configs,
// token answers, file lists) are refused past a size bound instead of filling memory.

/** The most a manifest, a config, a token answer or a Hub file list may weigh. */
export const DOCUMENT_LIMIT = 4 << 20;
export const DOCUMENT_LIMIT_TEXT = "4 MiB";

/** How long an upstream may send nothing before its read fails. */
export const DEFAULT_STALL_MS = 30_000;

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

/** One read from upstream, for its time limit and its messages: `who` sends `what`. */
export type Transfer = { who: string; what: string; stallMs: number; signal: AbortSignal };

export const formatDuration = (ms: number) => (ms % 1000 === 0 ? `${ms / 1000} s` : `${ms} ms`);

const stalled = (t: Transfer) => upstreamFailure(`${t.who} stopped sending ${t.what} for ${formatDuration(t.stallMs)}`);

/**
 * Sends a request whose answer must begin within `stallMs`: a server that accepts the connection
 * and then says nothing would otherwise hold the pull forever. Network errors are left to the caller.
 */
export async function fetchWithin(fetch: typeof globalThis.fetch, url: string | URL, init: RequestInit, t: Transfer): Promise<Response> {
  const silence = new AbortController();
  const timer = setTimeout(() => silence.abort(upstreamFailure(`${t.who} did not answer the request for ${t.what} within ${formatDuration(t.stallMs)}`)), t.stallMs);
  try {
    return await fetch(url, { ...init, signal: AbortSignal.any([t.signal, silence.signal]) });
  } catch (error) {
    // Runtimes differ in what an aborted fetch rejects with; ours is the reason we gave.
    if (silence.signal.aborted && !t.signal.aborted) throw silence.signal.reason;
    throw error;
  } finally {
    clearTimeout(timer);
  }
}

/**
 * `body`, failing once a read has waited `stallMs` for the next bytes. Only upstream's silence
 * counts: while our consumer is busy (writing to disk), nothing is read and no clock runs. On a
 * stall the source is cancelled, which drops the connection.
 *
 * The transfer's signal cancels the body too. The fetch was given it, but under Deno an abort
 * after the answer began did not always reach a pending read: its fetch follows our signal with
 * one of its own, held weakly, and once that was collected the pull of a client that had left
 * went on downloading (it depended on when collection came).
 */
export function stallGuarded(body: ReadableStream<Uint8Array>, t: Transfer): ReadableStream<Uint8Array> {
  const reader = body.getReader();
  let stall: HttpError | undefined;
  const abort = () => void reader.cancel(t.signal.reason).catch(() => {});
  if (t.signal.aborted) abort();
  else t.signal.addEventListener("abort", abort, { once: true });
  const stop = () => t.signal.removeEventListener("abort", abort);
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        // Cancelling settles the pending read as done; `stall` tells that end from a real one.
        const timer = setTimeout(() => void reader.cancel((stall = stalled(t))).catch(() => {}), t.stallMs);
        try {
          const next = await reader.read();
          if (stall) throw stall;
          if (t.signal.aborted) throw t.signal.reason;
          if (!next.done) return controller.enqueue(next.value);
          stop();
          controller.close();
        } finally {
          clearTimeout(timer);
        }
      },
      cancel: (reason) => {
        stop();
        return reader.cancel(reason);
      },
    },
    { highWaterMark: 0 },
  );
}

/** Whether two URLs share scheme, host and port (credentials go only where they came from). */
export const sameOrigin = (a: string, b: string) => new URL(a).origin === new URL(b).origin;

/**
 * Sends blob requests where the first answer led: registries and the Hub often redirect a blob
 * GET to a CDN, and the ranged requests for its other parts go straight there instead of being
 * redirected each time. `viaOrigin` sends a request to the registry (which may redirect);
 * `direct` sends one to the URL it led to. A URL that stops working (a signed URL that expired:
 * 401 or 403) is forgotten, and the origin asked again.
 */
export function followOnce(
  viaOrigin: (headers: Record<string, string>, t: Transfer) => Promise<Response>,
  direct: (url: string, headers: Record<string, string>, t: Transfer) => Promise<Response>,
): (headers: Record<string, string>, t: Transfer) => Promise<Response> {
  let location: string | undefined;
  return async (headers, t) => {
    if (location) {
      const response = await direct(location, headers, t);
      if (response.status !== 401 && response.status !== 403) return response;
      await response.body?.cancel().catch(() => {});
      location = undefined;
    }
    const response = await viaOrigin(headers, t);
    if (response.redirected && response.ok) location = response.url;
    return response;
  };
}

/**
 * The whole body of an answer, at most `limit` bytes: a declared length over it is refused before
 * reading, an undeclared one as soon as it crosses it, and a stall fails it. `limitText` names the
 * limit in the refusal: `4 MiB`, or `its 1234 bytes` for a blob whose descriptor gives its size.
 */
export async function readBounded(response: Response, limit: number, t: Transfer, limitText: string): Promise<Uint8Array> {
  const refuse = () => upstreamFailure(`${t.who} sent ${t.what} larger than ${limitText}: refused`);
  const declared = Number(response.headers.get("content-length") ?? NaN);
  if (declared > limit) {
    await response.body?.cancel().catch(() => {});
    throw refuse();
  }
  if (!response.body) return new Uint8Array();
  return readAtMost(stallGuarded(response.body, t).getReader(), limit, refuse);
}

