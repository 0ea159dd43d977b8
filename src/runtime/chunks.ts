// A body read one chunk at a time, as a web stream's reader reads it (read, cancel), but had without
// a web stream where the runtime can. Under node:http (Node and Deno) a relayed answer went through
// two web streams (the runner's answer, the relay) and a reader of the second: about 40 µs of CPU per
// short answer in Node, where its floor pipes Node streams. There the runner's answer hands out a
// reader of its own, the relay is one, and node-exchange.ts reads it: no web stream at all. Where the
// Response is the runtime's own (Bun, Deno.serve), the same code reads and answers web streams.
// Runtime-agnostic: handlers use it (src/inference/forward.ts).

/** A body's chunks, one per read; `cancel` ends a pending read as done, and any read after it. */
export type ChunkReader = {
  read(): Promise<ReadableStreamReadResult<Uint8Array>>;
  cancel(reason?: unknown): Promise<void>;
  /**
   * What a read would get now, taken without a promise: a chunk at hand, or the end; undefined
   * when a read would wait or fail (then `read` tells). A short answer's chunks come in one socket
   * read: taken in one loop, not one promise and one job each on each reader along the way.
   */
  take?(): ReadableStreamReadResult<Uint8Array> | undefined;
};

/** On a Response: its body's own reader, where it has one (undefined: read its `body`). */
export const ownReader = Symbol("the body's own chunk reader");
/** On a Response class: a Response whose body is a reader's chunks, handed on as it is. */
export const fromReader = Symbol("a Response from a chunk reader");

type WithOwnReader = { [ownReader]?(): ChunkReader | undefined };
type WithFromReader = { [fromReader]?(reader: ChunkReader, init: ResponseInit): Response };

/** A reader of `response`'s body (none for a body-less one), made without a web stream where the Response can. */
export function bodyReader(response: Response): ChunkReader | undefined {
  return (response as WithOwnReader)[ownReader]?.() ?? response.body?.getReader();
}

/** A Response whose body is `reader`'s chunks: the reader itself where the global Response takes one, else its web stream. */
export function readerResponse(reader: ChunkReader, init: ResponseInit): Response {
  const make = (Response as unknown as WithFromReader)[fromReader];
  return make ? make(reader, init) : new Response(streamOf(reader), init);
}

/** What a read gets at the end. */
export const DONE: ReadableStreamReadResult<Uint8Array> = { done: true, value: undefined };

/** `reader`'s chunks as a web stream, each read only when its reader asks (high-water mark 0). */
export function streamOf(reader: ChunkReader): ReadableStream<Uint8Array> {
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        const chunk = await reader.read();
        if (chunk.done) controller.close();
        else controller.enqueue(chunk.value);
      },
      cancel: (reason) => reader.cancel(reason),
    },
    { highWaterMark: 0 },
  );
}

/** How a queue's producer is slowed, sped and stopped. */
export type Flow = { pause(): void; resume(): void; cancel(reason: unknown): void };

/**
 * How much a queue keeps ahead of its reader before it pauses the producer (Node streams' default
 * high-water mark). A short answer's few chunks, arriving in one socket read, are then kept without
 * pausing and resuming the parser between them: kept to one chunk (as a web stream of high-water
 * mark 1 keeps them), that pause and resume came on most of Node's short streams.
 */
export const KEPT_BYTES = 16 * 1024;

/**
 * Chunks as they arrive, handed to reads: up to `keptBytes` kept ahead of its reader (then the
 * producer is paused, until reads take enough of them).
 */
export class ChunkQueue implements ChunkReader {
  #kept: Uint8Array[] = [];
  #keptBytes = 0;
  // A pending read's settling functions, kept apart (not in an object made per read).
  #resolve: ((chunk: ReadableStreamReadResult<Uint8Array>) => void) | undefined;
  #reject: ((error: unknown) => void) | undefined;
  /** Keeps a pending read's settling functions: made once per queue, not once per read. */
  readonly #wait = (resolve: (chunk: ReadableStreamReadResult<Uint8Array>) => void, reject: (error: unknown) => void) => {
    this.#resolve = resolve;
    this.#reject = reject;
  };
  #ended = false;
  #error: unknown;
  #failed = false;
  #cancelled = false;
  #paused = false;
  readonly #flow: Flow;
  readonly #limit: number;

  constructor(flow: Flow, keptBytes = KEPT_BYTES) {
    this.#flow = flow;
    this.#limit = keptBytes;
  }

  push(chunk: Uint8Array): void {
    if (this.#cancelled) return;
    const resolve = this.#resolve;
    if (resolve) {
      this.#resolve = this.#reject = undefined;
      return resolve({ done: false, value: chunk });
    }
    this.#kept.push(chunk);
    this.#keptBytes += chunk.byteLength;
    if (this.#keptBytes >= this.#limit && !this.#paused) {
      this.#paused = true;
      this.#flow.pause();
    }
  }

  end(): void {
    this.#ended = true;
    this.#settle();
  }

  fail(error: unknown): void {
    if (this.#ended) return;
    this.#failed = true;
    this.#error = error;
    this.#settle();
  }

  read(): Promise<ReadableStreamReadResult<Uint8Array>> {
    const now = this.take();
    if (now) return Promise.resolve(now);
    if (this.#failed && !this.#cancelled) return Promise.reject(this.#error);
    this.#wanted();
    return new Promise(this.#wait);
  }

  take(): ReadableStreamReadResult<Uint8Array> | undefined {
    if (this.#kept.length > 0) {
      const value = this.#kept.shift()!;
      this.#keptBytes -= value.byteLength;
      if (this.#kept.length === 0 || this.#keptBytes < this.#limit) this.#wanted();
      return { done: false, value };
    }
    if (this.#failed && !this.#cancelled) return undefined;
    return this.#ended || this.#cancelled ? DONE : undefined;
  }

  cancel(reason?: unknown): Promise<void> {
    if (this.#cancelled) return Promise.resolve();
    this.#cancelled = true;
    this.#kept = [];
    this.#keptBytes = 0;
    if (!this.#ended && !this.#failed) this.#flow.cancel(reason);
    this.#settle();
    return Promise.resolve();
  }

  /** A pending read learns the end: done, or the error (never after a cancel, which reads as done). */
  #settle(): void {
    const resolve = this.#resolve;
    const reject = this.#reject;
    if (!resolve || !reject || this.#kept.length > 0) return;
    this.#resolve = this.#reject = undefined;
    if (this.#failed && !this.#cancelled) reject(this.#error);
    else resolve(DONE);
  }

  #wanted(): void {
    if (!this.#paused || this.#ended || this.#failed) return;
    this.#paused = false;
    this.#flow.resume();
  }
}

/** A reader whose body failed before anyone read it. */
export function failedReader(error: unknown): ChunkReader {
  const queue = new ChunkQueue({ pause() {}, resume() {}, cancel() {} });
  queue.fail(error);
  return queue;
}
