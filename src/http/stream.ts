// Answers we write to as things happen (a pull's progress, the live state), whose client may leave
// at any moment. Once it has (the runtime cancelled the stream) `controller.enqueue` and `close`
// throw, and thrown from a callback that outlives the request (a pull ending after its client
// left) that error was unhandled and took the whole server down under Bun. Here a write to a
// stream that is over is dropped: the producer learns that it is over from `over`, in one place.

export type Outlet = {
  /** Sends a chunk (text goes as UTF-8); nothing once the stream is over. */
  send(chunk: Uint8Array | string): void;
  /** Ends the stream; nothing once it is over. */
  end(): void;
  /** Ends the stream as failed: `failed` is told of `error` (a bug of ours: nobody else can hear it). */
  fail(error: unknown): void;
  /** Aborts once the stream is over: ended, failed, its client gone, or `until` aborted. */
  readonly over: AbortSignal;
};

export type PushOptions = {
  /** Ends the stream (cleanly) when it aborts: the client's signal, or the server's end. */
  until?: AbortSignal;
  /**
   * Told of an error of the producer's (thrown by `start`, or given to `fail`), to log and count;
   * what it returns is sent as the stream's last words (an error event the client can read), and
   * the stream ends. Without last words the stream errors: the client sees its connection cut.
   */
  failed?: (error: unknown) => Uint8Array | string | undefined;
};

const encoder = new TextEncoder();

/** A byte stream that `start` writes to through an outlet that never throws. */
export function pushStream(start: (out: Outlet) => void, { until, failed }: PushOptions = {}): ReadableStream<Uint8Array> {
  const over = new AbortController();
  let controller!: ReadableStreamDefaultController<Uint8Array>;
  /** Marks the stream over (once); `settle` runs only if it was not over already. */
  const finish = (settle?: () => void) => {
    if (over.signal.aborted) return;
    until?.removeEventListener("abort", end);
    over.abort();
    try {
      settle?.();
    } catch {
      // The runtime closed the stream under us (its client left): nothing is left to settle.
    }
  };
  const end = () => finish(() => controller.close());
  const fail = (error: unknown) => {
    if (over.signal.aborted) return;
    const last = failed?.(error);
    if (last === undefined) return finish(() => controller.error(error));
    out.send(last);
    end();
  };
  const out: Outlet = {
    send(chunk) {
      if (over.signal.aborted) return;
      try {
        controller.enqueue(typeof chunk === "string" ? encoder.encode(chunk) : chunk);
      } catch {
        finish(); // cancelled without our hearing of it yet
      }
    },
    end,
    fail,
    over: over.signal,
  };
  return new ReadableStream<Uint8Array>({
    start(given) {
      controller = given;
      if (until?.aborted) return end();
      until?.addEventListener("abort", end, { once: true });
      try {
        start(out);
      } catch (error) {
        fail(error);
      }
    },
    cancel: () => finish(),
  });
}
