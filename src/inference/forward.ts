import { HttpError } from "../http/errors.ts";
import { withLeadingField } from "../http/body.ts";
import { anySignal } from "../http/abort.ts";
import { systemClock } from "../http/clock.ts";
import { relay } from "../http/relay.ts";
import { bodyReader, readerResponse, type ChunkReader } from "../runtime/chunks.ts";
import type { Lease } from "../scheduler/runner.ts";
import type { RequestTimer } from "./latency.ts";
import { requestTimedOut, type Bounds } from "./bounds.ts";
import { KEY_HEADER } from "../slot-cache/per-key.ts";
import { openingTooLong } from "./context-error.ts";
import { countedAnswer, countedStream, prefillBody, processedIn } from "./prefill.ts";
import { failed, failure } from "./runner-failure.ts";
import { edges, meteredText, TAIL_BYTES } from "./metered-text.ts";

// Forwarding one request to its runner: the body as we received it, the response as the runner
// sends it; an SSE stream chunk by chunk (never buffered, never re-framed). The lease is released
// when the response body ends or the client leaves, not when the handler returns.

/** Headers that describe one connection, not the message: never copied across the proxy. */
const HOP_BY_HOP = ["connection", "keep-alive", "transfer-encoding", "content-encoding", "content-length"];

/** Statuses whose answers have no body (a Response refuses one, even empty). */
const NULL_BODY_STATUSES = new Set([101, 103, 204, 205, 304]);

export type Forwarded = {
  lease: Lease;
  model: string;
  path: string;
  body: Uint8Array<ArrayBuffer>;
  request: Request;
  /** The client asked for an SSE stream (`"stream": true`). */
  stream: boolean;
  /** The last event of a stream that failed, in the client's dialect (default: OpenAI's). */
  errorEvent?: ErrorEvent;
  /** When the request arrived, and how long it then waited for its slot (or the load), in ms. */
  clock?: { startedAt: number; waitedMs: number };
  /** Times the answer for the latency histograms. */
  timer?: RequestTimer;
  /** The request's time limit and how long its client may leave a stream unread. */
  bounds?: Pick<Bounds, "timeoutMs" | "clientStallMs">;
  /** The key's name, told to a runner that keeps prompt caches per key (src/slot-cache/per-key.ts). */
  key?: string | undefined;
  /** A dialect's rewrite of a streamed answer: applied before it is timed and counted. */
  reshape?: Reshape;
};

/** Questions to the runner a request's answer came from, about that request. */
export type RunnerQuestions = {
  /** Posts the request's body to another path (e.g. to count its prompt). */
  post(path: string): Promise<Response>;
  /** Gets a path (e.g. the slots' state). */
  get(path: string): Promise<Response>;
};

/** Rewrites a streamed answer of the runner, which it may ask about the request (see RunnerQuestions). */
export type Reshape = (answer: ReadableStream<Uint8Array>, runner: RunnerQuestions) => ReadableStream<Uint8Array>;

/**
 * The time our process spent on a request, outside the runner: from its arrival to the answer's
 * headers, less the wait for a slot (or a load: the runner's capacity, not our cost) and less the
 * runner's own time (a stream's until its first bytes; a whole answer's until its last).
 * Gateways report the same, so users can see what the proxy costs them in production.
 */
export const OVERHEAD_HEADER = "x-llamadock-overhead-ms";

export type ErrorEvent = (error: HttpError) => Uint8Array;

export async function forward(forwarded: Forwarded): Promise<Response> {
  const { lease, request } = forwarded;
  // It stops listening once the answer is over.
  const call = callSignal(forwarded);
  const release = () => {
    call.clear();
    lease.release();
  };
  let upstream: Response;
  /** What a leader's prefill processed of its prompt (its answer counts it as processed, not cached). */
  let prefilled = 0;
  const sentAt = performance.now();
  try {
    // A follower's copy of the slot that processed its prompt's start, restored first (see
    // src/scheduler/affinity.ts); only then is it sent, and watched: its wait for the leader's
    // answer is no silence of the runner's.
    if (lease.ready) await lease.ready(call.signal).catch((error: unknown) => failed(forwarded, error, call.signal));
    lease.sending(forwarded.stream);
    if (lease.prefilled) prefilled = await prefill(forwarded, lease.prefilled, call.signal);
    upstream = await send(lease.slot === undefined ? forwarded : { ...forwarded, body: inSlot(forwarded.body, lease.slot) }, call.signal);
  } catch (error) {
    release();
    throw error;
  }
  lease.heard();
  const answeredAt = performance.now();
  const headers = new Headers(upstream.headers);
  // The body is relayed as decoded bytes: the runner's length and encoding no longer describe it.
  for (const name of HOP_BY_HOP) headers.delete(name);
  const init = { status: upstream.status, statusText: upstream.statusText, headers };
  const { timer } = forwarded;
  // The type first: reading `body` makes some runtimes (Bun) wrap a buffered answer in a JS stream.
  if (!headers.get("content-type")?.startsWith("text/event-stream")) {
    // A JSON answer: llama-server writes it in one piece once it is complete, so it is read whole
    // and the slot released at once; passing it on as one buffer also spares a stream per request.
    // Read here rather than in a function of its own: a nested async frame cost 1.6–4.6 µs of CPU
    // per request on the album's path. Not raced against the call's signal: each runtime's runner
    // fetch fails the body's read itself when that signal aborts (a dying or hung runner, a client
    // that left), which spares a promise and a listener per request.
    let answer: Uint8Array<ArrayBuffer>;
    try {
      answer = await upstream.bytes();
    } catch (error) {
      throw await failure(forwarded, error, call.signal);
    } finally {
      release();
    }
    stamp(headers, forwarded, performance.now() - sentAt);
    if (prefilled > 0 && upstream.ok) answer = countedAnswer(answer, prefilled);
    timer?.end(upstream.ok, edges(answer));
    if (upstream.status === 400) answer = openingTooLong(forwarded.model, forwarded.path, forwarded.body, answer) ?? answer;
    return new Response(NULL_BODY_STATUSES.has(upstream.status) ? null : answer, init);
  }
  const source = streamedSource(upstream, forwarded, prefilled);
  if (!source) {
    release();
    timer?.end(upstream.ok, "");
    return new Response(null, init);
  }
  stamp(headers, forwarded, answeredAt - sentAt);
  // The first chunk (Anthropic's counts the prompt there) and the last ones only: the stream itself
  // is never buffered.
  let head: Uint8Array | undefined;
  const tail: Uint8Array[] = [];
  let chunks = 0;
  const seen = (chunk: Uint8Array) => {
    lease.heard(chunk);
    if (!timer) return;
    if (chunks++ === 0) {
      timer.firstByte();
      head = chunk.subarray(0, TAIL_BYTES);
    }
    tail.push(chunk);
    if (tail.length > 3) tail.shift();
  };
  const done = () => {
    release();
    timer?.end(upstream.ok, meteredText(head, tail, chunks));
  };
  const relayed = relay(
    source,
    { died: call.signal, clientGone: request.signal, ...(forwarded.bounds ? { clientStallMs: forwarded.bounds.clientStallMs } : {}) },
    done,
    async (error) => {
      if (request.signal.aborted) return undefined;
      // Mid-stream, the status is sent: the error goes as an SSE event, the way llama-server sends its own.
      return (forwarded.errorEvent ?? sseError)(await failure(forwarded, error, call.signal));
    },
    seen,
  );
  return readerResponse(relayed, init);
}

/**
 * A streamed answer's chunks as the client gets them: the runner's own (read without a web stream
 * where the runtime can: the common stream), or rewritten (prompt counts, a dialect's events).
 */
function streamedSource(upstream: Response, forwarded: Forwarded, prefilled: number): ChunkReader | undefined {
  if (prefilled === 0 && !forwarded.reshape) return bodyReader(upstream);
  if (!upstream.body) return undefined;
  const body = prefilled > 0 ? upstream.body.pipeThrough(countedStream(prefilled)) : upstream.body;
  return (forwarded.reshape ? forwarded.reshape(body, questions(forwarded)) : body).getReader();
}

/**
 * The call's signal: aborts when its client leaves, when the runner dies, or when the request's
 * time is up, with the error the client gets as reason (a client that left is told apart by its
 * request's own signal). One controller for the three, not one per cause joined by another:
 * signals are among the costlier objects a request makes under Node.
 */
function callSignal({ lease, model, request, bounds }: Forwarded): { signal: AbortSignal; clear(): void } {
  const call = anySignal([request.signal, lease.died]);
  if (!bounds) return { signal: call.signal, clear: call.dispose };
  // Every request's limit has one length: one timer for all of them (a timer set and cleared per
  // request cost Deno 10-16 µs of CPU each with 32 in flight; see http/clock.ts).
  const cancel = systemClock.after(bounds.timeoutMs, () => call.abort(requestTimedOut(model, bounds.timeoutMs)));
  return { signal: call.signal, clear: () => (cancel(), call.dispose()) };
}

/**
 * Sends the request; an error before any answer is retried once when the runner still runs.
 *
 * llama-server closes a connection after a streamed answer although it announced keep-alive (and
 * any idle one after its keep-alive timeout), so a pooled connection may be dead when the next
 * request takes it: that request fails at once, never having reached the runner. Streams are sent
 * with `Connection: close`, so their connection is never pooled; what remains (a keep-alive timeout
 * racing a new request) is retried once. A retry cannot run a generation twice: a connection the
 * runner had already closed delivered nothing it read; and had it read the request, llama-server
 * cancels a task whose connection closes before its answer, so no second answer could come of it.
 * A runner that died is not retried: its death is the answer, at once.
 */
function send(forwarded: Forwarded, signal: AbortSignal): Promise<Response> {
  const { lease, path, body, request, stream } = forwarded;
  const headers: Record<string, string> = { "content-type": "application/json", accept: request.headers.get("accept") ?? "*/*" };
  if (stream) headers.connection = "close";
  if (forwarded.key !== undefined) headers[KEY_HEADER] = forwarded.key;
  const call = () => lease.fetch(`http://runner${path}`, { method: "POST", headers, body, signal });
  const fail = (error: unknown) => failed(forwarded, error, signal);
  // Callbacks, not an async frame with a loop: most requests go once, and pay for no frame.
  return call().catch((error: unknown) => (!signal.aborted && lease.running() ? call().catch(fail) : fail(error)));
}

/**
 * A leader's prompt processed alone in its slot first, generating nothing (`n_predict: 0`), then
 * its followers told (see src/scheduler/prefix-copies.ts): they copy the start now, while this
 * request answers. Its own answer then reuses the whole prompt; the tokens the prefill processed
 * are answered (src/inference/prefill.ts). A prefill that fails (the prompt too long, say) is no
 * failure of the request: it is sent all the same, and answered as it would be.
 */
async function prefill(forwarded: Forwarded, prefilled: (signal: AbortSignal) => Promise<void>, signal: AbortSignal): Promise<number> {
  const { lease, path, body } = forwarded;
  try {
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (forwarded.key !== undefined) headers[KEY_HEADER] = forwarded.key;
    const answer = await lease.fetch(`http://runner${path}`, { method: "POST", headers, body: inSlot(prefillBody(body), lease.slot!), signal });
    const processed = await processedIn(answer);
    lease.heard();
    return processed;
  } catch (error) {
    if (signal.aborted) throw await failure(forwarded, error, signal);
    return 0;
  } finally {
    await prefilled(signal).catch(() => {});
  }
}

/**
 * The body sent to one slot: `"id_slot":N` first in its object (see withLeadingField). A client's
 * own `id_slot` (only -1 passes the body policy) comes later and wins: that request is left to
 * llama-server's choice.
 */
export const inSlot = (body: Uint8Array<ArrayBuffer>, slot: number): Uint8Array<ArrayBuffer> => withLeadingField(body, "id_slot", slot);

/** Side questions to the request's runner (never retried: they are not the answer), dropped if its client leaves. */
function questions({ lease, body, request }: Forwarded): RunnerQuestions {
  const { signal } = request;
  return {
    post: (path) => lease.fetch(`http://runner${path}`, { method: "POST", headers: { "content-type": "application/json" }, body, signal }),
    get: (path) => lease.fetch(`http://runner${path}`, { signal }),
  };
}

function stamp(headers: Headers, { clock }: Forwarded, runnerMs: number): void {
  if (!clock) return;
  const overhead = performance.now() - clock.startedAt - clock.waitedMs - runnerMs;
  headers.set(OVERHEAD_HEADER, Math.max(0, overhead).toFixed(2));
}

function sseError(error: HttpError): Uint8Array {
  const event = { error: { message: error.message, type: error.type, code: error.code } };
  return new TextEncoder().encode(`data: ${JSON.stringify(event)}\n\n`);
}

