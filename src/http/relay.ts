import { unlessAborted } from "./abort.ts";

// Passing a stream on, one chunk per pull, so that a slow reader slows its source (nothing is
// buffered in our process) and whoever holds a place for it learns when it ends.

/**
 * A stream that reads `source` only as fast as the client takes it (high-water mark 0), calls
 * `done` once at its end, on error or on cancel, and may end a failed stream with a last chunk.
 * `died` fails a pending read: a runtime's body stream may not notice a peer that died.
 * `clientGone` ends it at once, read or not: a server adapter does not always cancel the body of a
 * client that left (the load test caught Node's leaving a few abandoned streams uncancelled, their
 * slots taken for good, and the queue behind them stuck).
 */
export function relay(
  source: ReadableStream<Uint8Array>,
  { died, clientGone }: { died: AbortSignal; clientGone: AbortSignal },
  done: () => void,
  lastWords: (error: unknown) => Promise<Uint8Array | undefined>,
  /** Shown each chunk as it passes (metrics: the first byte, the last events). */
  seen?: (chunk: Uint8Array) => void,
): ReadableStream<Uint8Array> {
  const reader = source.getReader();
  const leave = () => {
    finish();
    reader.cancel(clientGone.reason).catch(() => {});
  };
  const finish = () => {
    clientGone.removeEventListener("abort", leave);
    done();
  };
  if (clientGone.aborted) leave();
  else clientGone.addEventListener("abort", leave, { once: true });
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        let chunk: Awaited<ReturnType<typeof reader.read>>;
        try {
          chunk = await unlessAborted(reader.read(), died);
        } catch (error) {
          reader.cancel(error).catch(() => {});
          finish();
          const tail = await lastWords(error);
          if (!tail) return controller.error(error);
          controller.enqueue(tail);
          return controller.close();
        }
        if (!chunk.done) {
          seen?.(chunk.value);
          return controller.enqueue(chunk.value);
        }
        finish();
        controller.close();
      },
      cancel(reason) {
        finish();
        return reader.cancel(reason);
      },
    },
    { highWaterMark: 0 },
  );
}
