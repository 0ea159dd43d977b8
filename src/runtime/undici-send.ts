import { Readable } from "node:stream";
import type { IncomingHttpHeaders } from "node:http";
import type { Dispatcher } from "undici";
import { bodyFailure, type Answer, type Call } from "./node-client.ts";
import type { BodySource } from "./node-response.ts";
import { ChunkQueue, type ChunkReader } from "./chunks.ts";
import { listenForAbort } from "./abort-listener.ts";

// Node's calls (the photo service, the runners) on undici's dispatch API: the answer's bytes come
// to handler callbacks and go straight to whoever reads them (whole, or chunk by chunk). undici's
// request API, which this replaces, wraps each answer in a Node Readable and the call in an
// AsyncResource and a signal listener of its own: 10-11 µs of CPU per call more, here (one process,
// 16 at a time, a 9 KB album, alternating). Like it, dispatch sends a call once (no retries).
// An answer with a Content-Encoding is still handed on as a Readable, which node-client.ts pipes
// through the inflater.

/** How much of an answer is taken before anyone asks for it: past this, reading pauses (the socket's backpressure). */
const UNREAD_LIMIT = 64 * 1024;

/** undici's dispatch on `dispatcher`; the call's signal aborts it, before the answer or in its body. */
export const undiciSend =
  (dispatcher: Dispatcher) =>
  ({ origin, path, method, headers, body, signal }: Call): Promise<Answer> =>
    new Promise((resolve, reject) => {
      let controller: Dispatcher.DispatchController | undefined;
      let sink: Sink | undefined;
      const onAbort = () => {
        reject(signal!.reason);
        controller?.abort(signal!.reason);
      };
      const settled = () => signal?.removeEventListener("abort", onAbort);
      if (signal) listenForAbort(signal, onAbort);
      const failure = bodyFailure(signal);
      const handler: Dispatcher.DispatchHandler = {
        onRequestStart(started) {
          controller = started;
          if (signal?.aborted) started.abort(signal.reason);
        },
        onResponseStart(started, status, answerHeaders) {
          sink = answerHeaders["content-encoding"] ? new ReadableSink(started) : new WholeOrStream(started, failure);
          resolve({ status, headers: answerHeaders as IncomingHttpHeaders, body: sink.body });
        },
        // undici hands on an empty chunk each time it resumes a paused parser: passed on, it made a
        // read, a pull and a resume forever. Nothing to pass on.
        onResponseData: (_, chunk) => void (chunk.byteLength > 0 && sink!.data(chunk)),
        onResponseEnd() {
          settled();
          sink!.end();
        },
        onResponseError(_, error) {
          settled();
          if (sink) sink.fail(error);
          else reject(error);
        },
      };
      try {
        dispatcher.dispatch({ origin, path, method: method as Dispatcher.HttpMethod, headers, body }, handler);
      } catch (error) {
        settled();
        reject(error);
      }
    });

/** Where an answer's body goes as it arrives. */
type Sink = { body: BodySource | Readable; data(chunk: Buffer): void; end(): void; fail(error: Error): void };

/**
 * A body read whole, or chunk by chunk by a reader of its own, whichever its reader asks for first
 * (once). What arrives before that is kept, up to
 * UNREAD_LIMIT; read chunk by chunk, it reads on only as its reader asks.
 */
class WholeOrStream implements Sink, BodySource {
  readonly body = this;
  #kept: Buffer[] = [];
  #keptBytes = 0;
  #ended = false;
  #error: unknown;
  #whole: { resolve(bytes: Uint8Array): void; reject(error: unknown): void } | undefined;
  #queue: ChunkQueue | undefined;

  readonly #controller: Dispatcher.DispatchController;
  readonly #failure: (error: Error) => unknown;

  constructor(controller: Dispatcher.DispatchController, failure: (error: Error) => unknown) {
    this.#controller = controller;
    this.#failure = failure;
  }

  data(chunk: Buffer): void {
    if (this.#queue) return this.#queue.push(chunk);
    this.#kept.push(chunk);
    this.#keptBytes += chunk.byteLength;
    if (!this.#whole && this.#keptBytes >= UNREAD_LIMIT) this.#controller.pause();
  }

  end(): void {
    this.#ended = true;
    if (this.#whole) this.#whole.resolve(this.#joined());
    else this.#queue?.end();
  }

  fail(error: Error): void {
    this.#error = this.#failure(error);
    if (this.#whole) this.#whole.reject(this.#error);
    else this.#queue?.fail(this.#error);
  }

  whole(): Promise<Uint8Array> {
    if (this.#error !== undefined) return Promise.reject(this.#error);
    if (this.#ended) return Promise.resolve(this.#joined());
    return new Promise((resolve, reject) => {
      this.#whole = { resolve, reject };
      this.#controller.resume();
    });
  }

  reader(): ChunkReader {
    const controller = this.#controller;
    const queue = (this.#queue = new ChunkQueue({
      pause: () => controller.pause(),
      resume: () => controller.resume(),
      cancel: (reason) => controller.abort(reason instanceof Error ? reason : new Error("the answer's reader cancelled it")),
    }));
    // What was kept goes first (pausing the call, if UNREAD_LIMIT had not: a read resumes it).
    for (const chunk of this.#kept) queue.push(chunk);
    this.#kept = [];
    if (this.#error !== undefined) queue.fail(this.#error);
    else if (this.#ended) queue.end();
    return queue;
  }

  #joined(): Uint8Array {
    const kept = this.#kept;
    this.#kept = [];
    return kept.length === 1 ? kept[0]! : Buffer.concat(kept);
  }
}

/** A body as a Node Readable (for the inflater): read on as it is read, and destroying it ends the call. */
class ReadableSink implements Sink {
  readonly body: Readable;
  #over = false;
  readonly #controller: Dispatcher.DispatchController;

  constructor(controller: Dispatcher.DispatchController) {
    this.#controller = controller;
    this.body = new Readable({
      read: () => controller.resume(),
      destroy: (error, callback) => {
        if (!this.#over) controller.abort(error ?? new Error("the answer's reader destroyed it"));
        callback(error);
      },
    });
  }

  data(chunk: Buffer): void {
    if (!this.body.push(chunk)) this.#controller.pause();
  }

  end(): void {
    this.#over = true;
    this.body.push(null);
  }

  fail(error: Error): void {
    this.#over = true;
    // As undici's request API does: a turn later, so that whoever took the answer (its promise
    // settled before this) listens by then, and with a listener of its own, so that an error
    // nobody hears cannot end the process.
    queueMicrotask(() => this.body.on("error", () => {}).destroy(error));
  }
}
