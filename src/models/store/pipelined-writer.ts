import type { FileHandle } from "node:fs/promises";

// Writing a large download without stalling it: chunks are gathered into batches, one batch is
// written (on the I/O thread pool) while the next is received and hashed, and what was written
// is flushed to disk in the background every so often, so that the final fsync is short. A batch
// never waits long in memory: when the source stalls or fails, what arrived is still written, and
// a later pull resumes after it.

// 1 MiB: large enough for few system calls, small enough that batches in flight cost little memory.
const BATCH_BYTES = 1 << 20;
const FLUSH_BYTES = 128 << 20;
const BATCH_WAIT_MS = 50;

export type PipelinedWriter = {
  add(chunk: Uint8Array): Promise<void>;
  /** Writes what is left and fsyncs: the file is then durable. */
  finish(): Promise<void>;
  /** Writes what is left, without an fsync (one part of a file that is made durable as a whole). */
  drain(): Promise<void>;
  /** After a failure: writes what arrived, waits for writes in flight (errors ignored). */
  settle(): Promise<void>;
};

/**
 * `written` receives each batch once it is in the file, in file order; the writer waits for it.
 * Writes go at the file's position, or from `position` on when given (one part of a larger file).
 * `ready`, when given, is awaited before each batch is written: a batch it rejects is not (the
 * writer then fails with its error).
 */
export function pipelinedWriter(
  file: FileHandle,
  written: (parts: Uint8Array[]) => Promise<void> | void,
  position?: number,
  ready?: () => Promise<void>,
): PipelinedWriter {
  let inFlight: Promise<unknown> = Promise.resolve();
  let flushing: Promise<unknown> = Promise.resolve();
  let batch: Uint8Array[] = [];
  let batched = 0;
  let sinceFlush = 0;
  let timer: ReturnType<typeof setTimeout> | undefined;

  function startWrite(): void {
    clearTimeout(timer);
    timer = undefined;
    if (batched === 0) return;
    const parts = batch;
    batch = [];
    sinceFlush += batched;
    const at = position;
    if (position !== undefined) position += batched;
    batched = 0;
    inFlight = inFlight.then(async () => {
      await ready?.();
      await file.writev(parts, at);
      await written(parts);
    });
    inFlight.catch(() => {}); // awaited by the next call; this only silences the interim
    if (sinceFlush >= FLUSH_BYTES) {
      sinceFlush = 0;
      flushing = Promise.all([flushing, inFlight]).then(() => file.datasync());
      flushing.catch(() => {});
    }
  }

  return {
    async add(chunk) {
      batch.push(chunk);
      batched += chunk.byteLength;
      if (batched >= BATCH_BYTES) {
        await inFlight; // one batch in flight at most: memory stays flat
        startWrite();
      } else {
        timer ??= setTimeout(startWrite, BATCH_WAIT_MS);
      }
    },
    async finish() {
      startWrite();
      await inFlight;
      await flushing;
      await file.sync();
    },
    async drain() {
      startWrite();
      await inFlight;
    },
    async settle() {
      startWrite();
      await Promise.allSettled([inFlight, flushing]);
    },
  };
}
