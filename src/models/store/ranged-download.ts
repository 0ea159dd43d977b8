import { open, type FileHandle } from "node:fs/promises";
import type { HeldLock } from "./lock-file.ts";
import { writeProgress, writtenPrefix, type Part } from "./parts.ts";
import { pipelinedWriter } from "./pipelined-writer.ts";
import { prefixHash, type PrefixHash } from "./prefix-hash.ts";
import type { BlobSource } from "./source.ts";

// Downloads the missing bytes of a blob's parts into its preallocated partial file, `streams`
// ranged requests at a time, each part written in place from where it stopped. Every second the
// file is flushed and then the parts' progress written beside it, so that after a crash (even of
// the machine) the record never claims bytes the file does not hold. The sha256 is computed on
// the way (see prefix-hash.ts). Memory is a few batches per stream, whatever the blob's size.

const CHECKPOINT_MS = 1_000;

/** The server sent the whole blob for the first ranged request: the caller reads `body` as one stream. */
export class RangeIgnored extends Error {
  readonly body: ReadableStream<Uint8Array>;
  constructor(body: ReadableStream<Uint8Array>) {
    super("the server ignores Range");
    this.body = body;
  }
}

export type RangedTarget = {
  /** The partial file, already `size` bytes long. */
  path: string;
  /** Where the parts' progress is recorded. */
  progressPath: string;
  size: number;
  parts: Part[];
  source: BlobSource;
  streams: number;
  signal: AbortSignal;
  /** The blob's lock: seen to be ours before each write and each record written. */
  lock: Pick<HeldLock, "confirm">;
  onProgress?: (bytes: number) => void;
};

type Shared = { target: RangedTarget; file: FileHandle; hash: PrefixHash; signal: AbortSignal; report(): void };

async function openPart(source: BlobSource, part: Part, signal: AbortSignal, first: boolean) {
  const opened = await source({ start: part.start + part.done, end: part.end }, signal);
  if (opened.ranged) return opened.body;
  if (first) throw new RangeIgnored(opened.body);
  await opened.body.cancel().catch(() => {});
  throw new Error("the server stopped answering ranged requests");
}

/**
 * Frees a chunk's memory once it is written, rather than at the next garbage collection, which
 * with several streams may be a hundred megabytes later. Only a chunk that is its whole buffer:
 * the rest of a shared one is not ours.
 */
function release(chunk: Uint8Array): void {
  const buffer = chunk.buffer as ArrayBuffer & { transfer?(length: number): ArrayBuffer };
  if (chunk.byteOffset === 0 && chunk.byteLength === buffer.byteLength && !(buffer instanceof SharedArrayBuffer)) buffer.transfer?.(0);
}

/** Writes one part's answer in place; its progress moves as each batch lands in the file. */
async function copyPart(shared: Shared, part: Part, body: ReadableStream<Uint8Array>): Promise<void> {
  const { parts } = shared.target;
  const reader = body.getReader();
  const length = part.end - part.start;
  let received = part.done;
  const landed = (chunks: Uint8Array[]) => {
    for (const chunk of chunks) {
      part.done += chunk.byteLength;
      release(chunk);
    }
    shared.hash.advance(writtenPrefix(parts));
    shared.report();
  };
  const writer = pipelinedWriter(shared.file, landed, part.start + part.done, () => shared.target.lock.confirm());
  try {
    for (let next = await reader.read(); !next.done; next = await reader.read()) {
      received += next.value.byteLength;
      // Cut off before writing: a longer answer would overwrite the next part.
      if (received > length) throw new Error(`the answer for bytes ${part.start}-${part.end - 1} is longer than the range`);
      await writer.add(next.value);
    }
    if (received < length) throw new Error(`the answer for bytes ${part.start}-${part.end - 1} ended ${length - received} bytes early`);
    await writer.drain();
  } catch (error) {
    // Releases the connection; what arrived is written, for the checkpoint to record.
    await reader.cancel().catch(() => {});
    await writer.settle();
    throw error;
  }
}

/** One stream: parts from the shared queue, one after the other, until none is left. */
async function stream(shared: Shared, queue: Part[], first?: { part: Part; body: ReadableStream<Uint8Array> }): Promise<void> {
  for (let job = first; ; job = undefined) {
    if (!job) {
      const part = queue.shift();
      if (!part) return;
      job = { part, body: await openPart(shared.target.source, part, shared.signal, false) };
    }
    await copyPart(shared, job.part, job.body);
  }
}

function checkpoints(file: FileHandle, target: RangedTarget) {
  let chain = Promise.resolve();
  const save = () => {
    chain = chain
      .catch(() => {})
      .then(async () => {
        // What the record claims is taken before the flush, so the flush covers all of it.
        const snapshot = target.parts.map((p) => ({ ...p }));
        await file.datasync();
        await target.lock.confirm();
        await writeProgress(target.progressPath, target.size, snapshot);
      });
    return chain;
  };
  const timer = setInterval(() => void save().catch(() => {}), CHECKPOINT_MS);
  return {
    save,
    stop: async () => {
      clearInterval(timer);
      await chain.catch(() => {});
    },
  };
}

/** Runs the streams; on the first failure the others stop, and all have ended when it throws. */
async function runStreams(shared: Shared, queue: Part[], first: { part: Part; body: ReadableStream<Uint8Array> }, failed: AbortController) {
  const count = Math.min(shared.target.streams, queue.length + 1);
  const runs = Array.from({ length: count }, (_, i) =>
    stream(shared, queue, i === 0 ? first : undefined).catch((error: unknown) => {
      if (!failed.signal.aborted) failed.abort(error);
      throw error;
    }),
  );
  const results = await Promise.allSettled(runs);
  if (results.some((r) => r.status === "rejected")) throw failed.signal.reason;
}

/** Downloads what the parts lack; returns the sha256 of the whole file. Throws `RangeIgnored` before writing anything. */
export async function downloadParts(target: RangedTarget): Promise<string> {
  const failed = new AbortController();
  const signal = AbortSignal.any([target.signal, failed.signal]);
  const queue = target.parts.filter((p) => p.done < p.end - p.start);
  const firstPart = queue.shift();
  const file = await open(target.path, "r+");
  const hash = prefixHash(target.path);
  const report = () => target.onProgress?.(target.parts.reduce((sum, p) => sum + p.done, 0));
  let saved: ReturnType<typeof checkpoints> | undefined;
  let digest: string | undefined;
  try {
    hash.advance(writtenPrefix(target.parts)); // bytes kept from before are hashed again
    report();
    // The first request alone: it tells whether Range is honoured (and learns a redirect) before the others go.
    const first = firstPart && { part: firstPart, body: await openPart(target.source, firstPart, signal, true) };
    saved = checkpoints(file, target);
    if (first) {
      try {
        await runStreams({ target, file, hash, signal, report }, queue, first, failed);
      } catch (error) {
        await saved.save().catch(() => {});
        throw error;
      }
    }
    digest = await hash.digest(target.size);
    await file.sync();
    return digest;
  } finally {
    await saved?.stop();
    if (digest === undefined) await hash.close();
    await file.close();
  }
}
