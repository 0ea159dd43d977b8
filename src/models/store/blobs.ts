import { mkdir, open, rename, stat, truncate, type FileHandle } from "node:fs/promises";
import { isMissing, removeIfPresent, writeFileAtomic } from "./files.ts";
import { backgroundHash, type BackgroundHash } from "./background-hash.ts";
import { acquireLock, LOCK_HEARTBEAT, type HeldLock } from "./lock-file.ts";
import type { Layout } from "./layout.ts";
import { digestOf } from "./manifests.ts";
import { missingBytes, readProgress, splitBlob, withPrefix, writeProgress, writtenPrefix, type Part, type PartSettings } from "./parts.ts";
import { pipelinedWriter } from "./pipelined-writer.ts";
import { downloadParts, RangeIgnored } from "./ranged-download.ts";
import { CorruptBlobError, DigestMismatchError, type BlobSource } from "./source.ts";
import { moveOutOfReach } from "./takeover.ts";
import type { Heartbeat } from "./owner.ts";

// Content-addressed blobs. A download goes to `<hex>.incomplete`, hashed on the way; only a file
// whose sha256 (and size) match is renamed to `<hex>`. A large blob comes in ranged parts, several
// at once, into a file of its full length, with each part's progress in `<hex>.parts` (see
// parts.ts); a smaller one, or one from a server that ignores Range, in one stream appended to
// the file. Either way an interrupted download keeps its bytes, and the next attempt asks the
// source only for what is missing (HTTP Range requests). Every write and every change of a name
// is made only once the blob's lock is seen to be still ours (`Held`): a holder that stalled long
// enough to be judged gone stops, and renames nothing.

export { CorruptBlobError, DigestMismatchError, rangeAnswer, type BlobSource, type ByteRange } from "./source.ts";

export type BlobDownload = {
  digest: string;
  size?: number;
  source: BlobSource;
  signal: AbortSignal;
  /** Called with the bytes on disk so far (resumed bytes included). */
  onProgress?: (bytes: number) => void;
  /** How a large blob is split into parallel ranged parts; absent: one stream. */
  parts?: PartSettings;
};

export async function hasBlob(layout: Layout, digest: string): Promise<boolean> {
  try {
    return (await stat(layout.blob(digest))).isFile();
  } catch (error) {
    if (isMissing(error)) return false;
    throw error;
  }
}

const exists = (path: string) => stat(path).then(() => true, (error: unknown) => (isMissing(error) ? false : Promise.reject(error)));

/** Bytes of a blob of `size` still to download: all of them, less what an interrupted pull left. */
export async function bytesToDownload(layout: Layout, digest: string, size: number): Promise<number> {
  if (await hasBlob(layout, digest)) return 0;
  const saved = await readProgress(layout.blobProgress(digest), size);
  if (saved) return missingBytes(saved);
  if (await exists(layout.blobProgress(digest))) return size;
  const partial = await sizeOf(layout.incompleteBlob(digest));
  // A partial file longer than the blob is not resumed from: the download starts over.
  return partial <= size ? size - partial : size;
}

async function sizeOf(path: string): Promise<number> {
  try {
    return (await stat(path)).size;
  } catch (error) {
    if (isMissing(error)) return 0;
    throw error;
  }
}

/** The blob's lock, as the download asks it: still ours? (else a LockLostError) */
type Held = Pick<HeldLock, "confirm">;

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

async function copyBody(body: ReadableStream<Uint8Array>, file: FileHandle, hash: BackgroundHash, written: number, download: BlobDownload, lock: Held) {
  let bytes = written;
  const reader = body.getReader();
  // Each chunk is hashed once it is written: it then moves to the hashing thread, uncopied.
  const writer = pipelinedWriter(file, (parts) => hash.update(parts), undefined, () => lock.confirm());
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

/** Removes what an interrupted download left. */
async function discard(layout: Layout, digest: string, lock: Held): Promise<void> {
  await lock.confirm();
  await removeIfPresent(layout.incompleteBlob(digest));
  await removeIfPresent(layout.blobProgress(digest));
}

/** Renames the verified partial file to the blob's name, once the lock is seen to be ours right before. */
async function publish(layout: Layout, digest: string, lock: Held): Promise<void> {
  await lock.confirm({ fresh: true });
  await rename(layout.incompleteBlob(digest), layout.blob(digest));
}

/** One stream into `<hex>.incomplete`, appended after what it holds, verified, renamed. */
async function downloadStream(layout: Layout, download: BlobDownload, lock: Held): Promise<void> {
  const { digest, signal } = download;
  const partial = layout.incompleteBlob(digest);
  let offset = await sizeOf(partial);
  if (download.size !== undefined && offset > download.size) offset = 0;
  const { body, start } = await download.source({ start: offset }, signal);
  const hash = backgroundHash();
  let bytes: number;
  let onDisk: number;
  let actual: string;
  try {
    if (start > 0) await hashExisting(partial, hash, signal);
    download.onProgress?.(start);
    await lock.confirm();
    const file = await openAt(partial, start);
    try {
      bytes = await copyBody(body, file, hash, start, download, lock);
      onDisk = (await file.stat()).size;
    } finally {
      await file.close();
    }
    actual = await hash.digest();
  } catch (error) {
    await body.cancel().catch(() => {}); // a no-op once the copy has released it
    await hash.close();
    if (error instanceof CorruptBlobError) await discard(layout, digest, lock);
    throw error;
  }
  if (actual !== digest || onDisk !== bytes || (download.size !== undefined && bytes !== download.size)) {
    // Bytes that hash wrong cannot be resumed from: start over next time.
    await discard(layout, digest, lock);
    // The file itself must hold what was hashed: as many bytes as were counted, no more.
    if (onDisk !== bytes) throw new CorruptBlobError(`the partial file of blob ${digest} holds ${onDisk} bytes where ${bytes} were written: another writer reached it, refused`);
    throw new DigestMismatchError(digest, actual);
  }
  signal.throwIfAborted();
  await publish(layout, digest, lock);
}

/** The parts to fetch, resumed from a record or from a one-stream partial file; undefined: one stream. */
async function partsToFetch(layout: Layout, download: BlobDownload, lock: Held): Promise<Part[] | undefined> {
  const { digest, size } = download;
  const fresh = size !== undefined && download.parts ? splitBlob(size, download.parts) : undefined;
  if (!fresh || size === undefined) return undefined;
  const saved = await readProgress(layout.blobProgress(digest), size);
  if (saved) return saved;
  // A record that cannot be read leaves a file with holes in unknown places: start over.
  if (await exists(layout.blobProgress(digest))) await discard(layout, digest, lock);
  const prefix = await sizeOf(layout.incompleteBlob(digest));
  return withPrefix(fresh, prefix <= size ? prefix : 0);
}

/** A file left by a parted download is cut to its written prefix, which one stream can resume. */
async function toPrefix(layout: Layout, download: BlobDownload, lock: Held): Promise<void> {
  const progress = layout.blobProgress(download.digest);
  if (!(await exists(progress))) return;
  const saved = download.size !== undefined ? await readProgress(progress, download.size) : undefined;
  if (!saved) return discard(layout, download.digest, lock);
  await lock.confirm();
  await truncate(layout.incompleteBlob(download.digest), writtenPrefix(saved)).catch((error: unknown) => {
    if (!isMissing(error)) throw error;
  });
  await removeIfPresent(progress);
}

async function downloadRanged(layout: Layout, download: BlobDownload & { size: number; parts: PartSettings }, parts: Part[], lock: Held): Promise<void> {
  const { digest, size } = download;
  const path = layout.incompleteBlob(digest);
  const progressPath = layout.blobProgress(digest);
  await lock.confirm();
  // The record first, then the file's full length: a crash between leaves a record that is true of the shorter file.
  await writeProgress(progressPath, size, parts);
  await (await open(path, "a")).close();
  await truncate(path, size);
  let actual: string;
  try {
    const target = { path, progressPath, size, parts, source: download.source, streams: download.parts.streams, signal: download.signal, lock };
    actual = await downloadParts({ ...target, ...(download.onProgress ? { onProgress: download.onProgress } : {}) });
  } catch (error) {
    if (error instanceof CorruptBlobError) await discard(layout, digest, lock);
    throw error;
  }
  if (actual !== digest) {
    await discard(layout, digest, lock);
    throw new DigestMismatchError(digest, actual);
  }
  download.signal.throwIfAborted();
  await lock.confirm();
  await removeIfPresent(progressPath);
  await publish(layout, digest, lock);
}

/** Downloads, verifies, renames. Returns at once when the blob is present. */
async function download(layout: Layout, download: BlobDownload, lock: Held): Promise<void> {
  if (await hasBlob(layout, download.digest)) return;
  const parts = await partsToFetch(layout, download, lock);
  if (parts) {
    try {
      return await downloadRanged(layout, download as BlobDownload & { size: number; parts: PartSettings }, parts, lock);
    } catch (error) {
      if (!(error instanceof RangeIgnored)) throw error;
      // The whole blob is coming from its first byte: it is read as one stream, over what was there.
      await discard(layout, download.digest, lock);
      const body = error.body;
      return downloadStream(layout, { ...download, source: async () => ({ body, start: 0, ranged: false }) }, lock);
    }
  }
  await toPrefix(layout, download, lock);
  return downloadStream(layout, download, lock);
}

// One writer per blob: within this process, a second download of a blob joins the first; across
// processes on the store, the blob's lock file (`<hex>.lock`) goes to one of them, and the others
// wait (showing the holder's progress on disk) until it is theirs: the blob is then there, or its
// holder is gone and they resume from what it left. Whether the blob is there is asked only under
// its lock, the lock under which a collection (collect.ts) removes blobs.
const running = new Map<string, Promise<void>>();

/** Polls of a blob another process downloads: a few a second, each a stat and a small read. */
const BLOB_LOCK_POLL_MS = 250;

/** While another process holds the blob's lock: its progress on disk is shown as ours. */
function showOthersProgress(layout: Layout, request: BlobDownload): () => Promise<boolean> {
  return async () => {
    if (request.size !== undefined && request.onProgress) request.onProgress(request.size - (await bytesToDownload(layout, request.digest, request.size)));
    return false;
  };
}

async function downloadAlone(layout: Layout, request: BlobDownload, heartbeat: Heartbeat): Promise<void> {
  await mkdir(layout.blobsDir, { recursive: true });
  const waiting = showOthersProgress(layout, request);
  const lock = (await acquireLock(layout.blobLock(request.digest), { signal: request.signal, pollMs: BLOB_LOCK_POLL_MS, heartbeat, waiting }))!;
  try {
    // A holder judged gone may still be alive and write into the partial file it has open.
    if (lock.takenOver) await moveOutOfReach(layout, request.digest, request.size);
    await lock.forgetTakeover();
    await download(layout, { ...request, signal: AbortSignal.any([request.signal, lock.lost]) }, lock);
  } finally {
    await lock.release();
  }
}

/** `heartbeat`: how this process keeps the blob's lock, and judges another's (the same for every process on the store). */
export async function downloadBlob(layout: Layout, request: BlobDownload, heartbeat: Heartbeat = LOCK_HEARTBEAT): Promise<void> {
  const path = layout.blob(request.digest);
  for (let current = running.get(path); current; current = running.get(path)) await current.catch(() => {});
  const job = downloadAlone(layout, request, heartbeat);
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
