import { DONE, type ChunkReader } from "../runtime/chunks.ts";
import { systemClock } from "./clock.ts";
import { listenForAbort } from "../runtime/abort-listener.ts";

// Passing a stream on, one chunk per read, so that a slow reader slows its source (nothing is
// buffered in our process) and whoever holds a place for it learns when it ends.

/**
 * A reader of `source` that reads it only as fast as the client takes it (one read each), calls
 * `done` once at its end, on error or on cancel, and may end a failed stream with a last chunk.
 * A reader, not a web stream: where the runtime's Response takes one (node:http's), it is written
 * out as it is (see src/runtime/chunks.ts).
 * `died` fails a pending read: a runtime's body stream may not notice a peer that died. It is
 * heard by one listener for the relay's life, which cancels the source (a pending read then ends),
 * not by one per chunk: adding and removing a listener on each read was the largest item of a
 * relayed chunk in Bun's profile.
 * `clientGone` ends it at once, read or not: a server adapter does not always cancel the body of a
 * client that left (the load test caught Node's leaving a few abandoned streams uncancelled, their
 * slots taken for good, and the queue behind them stuck).
 * `clientStallMs`: a chunk the client has not taken for that long ends it too (the source is
 * cancelled, the client's next read fails): the source's producer may not feel our back-pressure
 * (llama-server keeps generating into its own memory for a client that stopped reading).
 */
export function relay(
  source: ChunkReader,
  { died, clientGone, clientStallMs }: { died: AbortSignal; clientGone: AbortSignal; clientStallMs?: number },
  done: () => void,
  lastWords: (error: unknown) => Promise<Uint8Array | undefined>,
  /** Shown each chunk as it passes (metrics: the first byte, the last events). */
  seen?: (chunk: Uint8Array) => void,
): ChunkReader {
  /**
   * Why the client's next read fails (it stalled, or the source failed), or that it ends: the last
   * words went out, or it was cancelled (as a web stream's reads after a cancel, they end, never fail).
   */
  let after: { error: unknown } | "ended" | undefined;
  /** Cancelled (by its reader, or its client left): reads end from here, the source is cancelled. */
  const end = (reason: unknown) => {
    after = "ended";
    finish();
    return source.cancel(reason);
  };
  const leave = () => void end(clientGone.reason).catch(() => {});
  const stalled = unreadWatch(clientStallMs, () => {
    const reason = new Error(`the client read nothing for ${clientStallMs} ms`);
    finish();
    source.cancel(reason).catch(() => {});
    after = { error: reason };
  });
  const stopReading = () => void source.cancel(died.reason).catch(() => {});
  // Once, whichever comes first: a client that leaves while a read waits ends that read too.
  let finished = false;
  const finish = () => {
    if (finished) return;
    finished = true;
    stalled.stop();
    clientGone.removeEventListener("abort", leave);
    died.removeEventListener("abort", stopReading);
    done();
  };
  if (clientGone.aborted) leave();
  else listenForAbort(clientGone, leave);
  if (died.aborted) stopReading();
  else listenForAbort(died, stopReading);
  /** A failed read (the source's, or the runner died): the last words go out as a last chunk, or the error. */
  const failed = async (error: unknown): Promise<ReadableStreamReadResult<Uint8Array>> => {
    if (after === "ended") return DONE;
    source.cancel(error).catch(() => {});
    finish();
    const tail = await lastWords(error);
    after = tail ? "ended" : { error };
    if (!tail) throw error;
    return { done: false, value: tail };
  };
  const arrived = (chunk: ReadableStreamReadResult<Uint8Array>): ReadableStreamReadResult<Uint8Array> | Promise<ReadableStreamReadResult<Uint8Array>> => {
    if (after === "ended") return DONE; // cancelled while it waited
    // A read that ends because the runner died (its source cancelled) is the failure it is.
    if (chunk.done && died.aborted) return failed(died.reason);
    if (chunk.done) {
      finish();
      return chunk;
    }
    seen?.(chunk.value);
    stalled.handedOver();
    return chunk;
  };
  return {
    // Not an async function: one made per chunk (its frame kept while the read waits) was the
    // largest thing a streamed chunk allocated under Node. The callbacks are made once per relay.
    read() {
      if (after === "ended") return Promise.resolve(DONE);
      if (after) return Promise.reject(after.error);
      stalled.read();
      return source.read().then(arrived, failed);
    },
    cancel: end,
    // A chunk at hand passes as a read's would; a failure (the runner died) is left to `read`.
    take() {
      if (after !== undefined || died.aborted || !source.take) return undefined;
      const chunk = source.take();
      if (!chunk) return undefined;
      stalled.read();
      return arrived(chunk) as ReadableStreamReadResult<Uint8Array>;
    },
  };
}

/**
 * Whether a chunk handed over stays unread past `ms`: one watch on the queued clock per stream,
 * started at each hand-over and stopped at the client's next read (one runtime timer for every
 * stream's waits, not one per stream: a timer set and cleared cost Deno 10-16 µs; and no wait made
 * per chunk: see clock.ts).
 */
function unreadWatch(ms: number | undefined, onStall: () => void) {
  const watch = ms ? systemClock.watch(ms, onStall) : undefined;
  let stopped = false;
  return {
    read: () => watch?.stop(),
    handedOver() {
      if (!stopped) watch?.start();
    },
    stop() {
      stopped = true;
      watch?.stop();
    },
  };
}
