import type { Readable } from "node:stream";
import { idleClock, type IdleClock } from "./body-deadline.ts";
import { ChunkQueue, type ChunkReader } from "./chunks.ts";

// A Node stream as a web stream that reads on only as its reader asks: paused once the reader's
// queue is full, resumed on its next read; or read whole, when nothing needs a stream. Both directions of Node's and Deno's HTTP use it (a
// request's body in node-exchange.ts, a runner's or the photo service's answer in node-client.ts).

export type PacedHooks = {
  /** The source ended or failed (whether or not the reader had cancelled). */
  settled?(): void;
  /** What the reader gets for the source's error; default: the error itself. */
  failure?(error: Error): unknown;
  /** The reader cancelled: nothing more is handed on. */
  cancel(reason: unknown): void;
  /**
   * The source silent for `ms` while the reader waits (not while it is paused for a full queue):
   * the reader gets `stalled()`, and the source stays paused.
   */
  idle?: { ms: number; stalled(): unknown };
};

/** A Buffer as a plain Uint8Array over the same bytes (no copy). */
export const viewOf = (buffer: Buffer): Uint8Array<ArrayBuffer> => new Uint8Array(buffer.buffer as ArrayBuffer, buffer.byteOffset, buffer.byteLength);

export function pacedStream(source: Readable, hooks: PacedHooks): ReadableStream<Uint8Array> {
  let cancelled = false;
  let clock: IdleClock | undefined;
  return new ReadableStream<Uint8Array>(
    {
      start(controller) {
        const { idle } = hooks;
        if (idle) {
          clock = idleClock(idle.ms, () => {
            cancelled = true;
            source.pause();
            controller.error(idle.stalled());
          });
          clock.wait(); // the data listener below makes the source flow
        }
        source.on("data", (chunk: Buffer) => {
          if (cancelled) return;
          controller.enqueue(viewOf(chunk));
          if ((controller.desiredSize ?? 0) > 0) return clock?.wait();
          source.pause();
          clock?.hold();
        });
        source.once("end", () => {
          clock?.stop();
          hooks.settled?.();
          if (!cancelled) controller.close();
        });
        source.once("error", (error) => {
          clock?.stop();
          hooks.settled?.();
          if (!cancelled) controller.error(hooks.failure ? hooks.failure(error) : error);
        });
      },
      pull() {
        clock?.wait();
        source.resume();
      },
      cancel(reason) {
        cancelled = true;
        clock?.stop();
        hooks.cancel(reason);
      },
    },
    { highWaterMark: 1 },
  );
}

/**
 * `source` read chunk by chunk, without a web stream: paused while a chunk waits for its reader,
 * resumed on its next read. `failure` is what the reader gets for the source's error.
 */
export function pacedReader(source: Readable, { settled, failure, cancel }: Omit<PacedHooks, "idle">): ChunkReader {
  const queue = new ChunkQueue({ pause: () => source.pause(), resume: () => source.resume(), cancel });
  source.on("data", (chunk: Buffer) => queue.push(viewOf(chunk)));
  source.once("end", () => (settled?.(), queue.end()));
  source.once("error", (error) => (settled?.(), queue.fail(failure ? failure(error) : error)));
  return queue;
}

/** `source` read to its end in one buffer (no web stream in between); rejects with its error. */
export function readWhole(source: Readable): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    source.on("data", (chunk: Buffer) => chunks.push(chunk));
    source.once("end", () => resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)));
    source.once("error", reject);
  });
}
