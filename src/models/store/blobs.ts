import { mkdir, open, rename, stat, truncate, type FileHandle } from "node:fs/promises";
import { isMissing, removeIfPresent, writeFileAtomic } from "./files.ts";
import { backgroundHash, type BackgroundHash } from "./background-hash.ts";
import type { Layout } from "./layout.ts";
import { digestOf } from "./manifests.ts";
import { pipelinedWriter } from "./pipelined-writer.ts";

// Content-addressed blobs. A download goes to `<hex>.incomplete`, hashed on the way; only a file
// whose sha256 (and size) match is renamed to `<hex>`. An interrupted download keeps its
// `.incomplete` bytes, and the next attempt asks the source for the rest (an HTTP Range request).

/** Opens the blob's bytes from `offset`; `start` says where the body really begins (0 if the source ignored the offset). */
export type BlobSource = (offset: number, signal: AbortSignal) => Promise<{ body: ReadableStream<Uint8Array>; start: number }>;

export type BlobDownload = {
  digest: string;
  size?: number;
  source: BlobSource;
  signal: AbortSignal;
  /** Called with the bytes on disk so far (resumed bytes included). */
  onProgress?: (bytes: number) => void;
};

/**
 * Where a response to `Range: bytes=<offset>-` really starts: `offset` for a 206 whose
 * Content-Range says so, 0 for a full 200 answer. Any other 206 cannot be appended safely.
 */
export function resumedAt(response: Response, offset: number): number {
  if (response.status !== 206) return 0;
  const start = /^bytes (\d+)-/.exec(response.headers.get("content-range") ?? "")?.[1];
  if (Number(start) !== offset) throw new Error(`the server answered a range request from ${offset} with ${response.headers.get("content-range")}`);
  return offset;
}

/** Bytes that cannot be the blob: resuming after them would only fail again, so they are dropped. */
export class CorruptBlobError extends Error {}

export class DigestMismatchError extends CorruptBlobError {
  constructor(expected: string, actual: string) {
    super(`downloaded content does not match its digest: expected ${expected}, got ${actual}`);
  }
}

export async function hasBlob(layout: Layout, digest: string): Promise<boolean> {
  try {
    return (await stat(layout.blob(digest))).isFile();
  } catch (error) {
    if (isMissing(error)) return false;
    throw error;
  }
}

/** Bytes of the blob already downloaded by an earlier, interrupted pull. */
export const partialSize = (layout: Layout, digest: string) => sizeOf(layout.incompleteBlob(digest));

async function sizeOf(path: string): Promise<number> {
  try {
    return (await stat(path)).size;
  } catch (error) {
    if (isMissing(error)) return 0;
    throw error;
  }
}

/** Hashes the bytes already downloaded, read into buffers of our own, since each moves to the hashing thread. */
async function hashExisting(path: string, hash: BackgroundHash, signal: AbortSignal): Promise<void> {
  const file = await open(path, "r");
  try {
    for (;;) {
      signal.throwIfAborted();
      const chunk = new Uint8Array(1 << 20);
      const { bytesRead } = await file.read(chunk, 0, chunk.byteLength, null);
      if (bytesRead === 0) return;
      await hash.update([chunk.subarray(0, bytesRead)]);
    }
  } finally {
    await file.close();
  }
}

async function copyBody(body: ReadableStream<Uint8Array>, file: FileHandle, hash: BackgroundHash, written: number, download: BlobDownload) {
  let bytes = written;
  const reader = body.getReader();
  // Each chunk is hashed once it is written: it then moves to the hashing thread, uncopied.
  const writer = pipelinedWriter(file, (parts) => hash.update(parts));
  try {
    for (let next = await reader.read(); !next.done; next = await reader.read()) {
      // Counted before it is handed over: once written, the chunk moves to the hashing thread.
      bytes += next.value.byteLength;
      // Cut off before writing: a source that sends more than the descriptor says cannot fill the disk.
      if (download.size !== undefined && bytes > download.size) throw new CorruptBlobError(`blob ${download.digest} is larger than its ${download.size} bytes: refused`);
      await writer.add(next.value);
      download.onProgress?.(bytes);
    }
    await writer.finish();
  } catch (error) {
    // Releases the connection; the bytes written so far stay for a resume.
    await reader.cancel().catch(() => {});
    await writer.settle();
    throw error;
  }
  return bytes;
}

/** Opens the partial file for appending after its first `start` bytes (all of it when 0). */
async function openAt(path: string, start: number): Promise<FileHandle> {
  if (start === 0) return open(path, "w");
  await truncate(path, start);
  return open(path, "a");
}

/** Downloads into `<hex>.incomplete`, verifies, renames. Returns at once when the blob is present. */
async function download(layout: Layout, download: BlobDownload): Promise<void> {
  const { digest, signal } = download;
  if (await hasBlob(layout, digest)) return;
  await mkdir(layout.blobsDir, { recursive: true });
  const partial = layout.incompleteBlob(digest);
  let offset = await sizeOf(partial);
  if (download.size !== undefined && offset > download.size) offset = 0;
  const { body, start } = await download.source(offset, signal);
  const hash = backgroundHash();
  let bytes: number;
  let actual: string;
  try {
    if (start > 0) await hashExisting(partial, hash, signal);
    download.onProgress?.(start);
    const file = await openAt(partial, start);
    try {
      bytes = await copyBody(body, file, hash, start, download);
    } finally {
      await file.close();
    }
    actual = await hash.digest();
  } catch (error) {
    await body.cancel().catch(() => {}); // a no-op once the copy has released it
    await hash.close();
    if (error instanceof CorruptBlobError) await removeIfPresent(partial);
    throw error;
  }
  if (actual !== digest || (download.size !== undefined && bytes !== download.size)) {
    // Bytes that hash wrong cannot be resumed from: start over next time.
    await removeIfPresent(partial);
    throw new DigestMismatchError(digest, actual);
  }
  await rename(partial, layout.blob(digest));
}

// Two pulls that share a layer must not write the same `.incomplete` file at once.
const running = new Map<string, Promise<void>>();

export async function downloadBlob(layout: Layout, request: BlobDownload): Promise<void> {
  const path = layout.blob(request.digest);
  for (let current = running.get(path); current; current = running.get(path)) await current.catch(() => {});
  const job = download(layout, request);
  running.set(path, job);
  try {
    await job;
  } finally {
    if (running.get(path) === job) running.delete(path);
  }
}

/** Stores bytes already in memory (a config, a generated manifest's config). */
export async function putBlob(layout: Layout, data: Uint8Array): Promise<string> {
  const digest = digestOf(data);
  if (!(await hasBlob(layout, digest))) await writeFileAtomic(layout.blob(digest), data);
  return digest;
}
