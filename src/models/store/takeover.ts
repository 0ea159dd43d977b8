import { open, rename, stat } from "node:fs/promises";
import { isMissing, removeIfPresent, temporaryName } from "./files.ts";
import type { Layout } from "./layout.ts";
import { readProgress } from "./parts.ts";

// A blob's lock taken over from a holder judged gone (see lock-file.ts), which may be alive: only
// stalled (a paused container, SIGSTOP, a frozen VM), with the partial file open and writes in
// flight. When it wakes, those writes land in the file it has open, wherever that file is named
// by then: resuming in it, even checking the whole file's digest before the rename, would not do,
// as a late write can land after the check, in the renamed blob itself. So the new holder moves
// the partial file aside, copies the bytes it resumes from into a fresh file (a new inode, which
// the stalled holder never opened), and removes the old one: the stalled holder's late writes
// land in an orphan that nothing reads, and its next look at the lock, before any write or
// rename, finds it lost (blobs.ts). The copy is local and costs the bytes kept, read and written
// once: far less than downloading them again, and only on a takeover.

const CHUNK = 1 << 20;

/** `[start, start + length)` of the partial file, kept. */
type Region = [start: number, length: number];

async function sizeOf(path: string): Promise<number> {
  return (await stat(path)).size;
}

/** What of a partial file may be resumed from: the parts its record says are written, or its prefix; none when the record is unreadable. */
async function keptRegions(layout: Layout, digest: string, aside: string, size: number | undefined): Promise<{ regions: Region[]; length?: number }> {
  const record = layout.blobProgress(digest);
  const saved = size === undefined ? undefined : await readProgress(record, size);
  if (saved) return { regions: saved.filter((p) => p.done > 0).map((p): Region => [p.start, p.done]), length: size! };
  const recorded = await stat(record).then(() => true, (error: unknown) => (isMissing(error) ? false : Promise.reject(error)));
  if (recorded) return { regions: [] }; // holes in unknown places: the download starts over
  const prefix = await sizeOf(aside);
  return { regions: size === undefined || prefix <= size ? [[0, prefix]] : [] };
}

/** Copies `regions` of `from` into the new file `to`, `length` bytes long when given (a parted download's file). */
async function copyRegions(from: string, to: string, regions: Region[], length: number | undefined): Promise<void> {
  const source = await open(from, "r");
  try {
    const target = await open(to, "wx");
    try {
      if (length !== undefined) await target.truncate(length);
      const buffer = new Uint8Array(CHUNK);
      for (const [start, size] of regions) {
        for (let at = start; at < start + size; ) {
          const { bytesRead } = await source.read(buffer, 0, Math.min(CHUNK, start + size - at), at);
          if (bytesRead === 0) break;
          await target.write(buffer, 0, bytesRead, at);
          at += bytesRead;
        }
      }
      await target.sync();
    } finally {
      await target.close();
    }
  } finally {
    await source.close();
  }
}

/**
 * Puts the blob's partial file out of reach of the holder judged gone: what it may resume from is
 * in a fresh file under the same name, with its parts' record (or none).
 */
export async function moveOutOfReach(layout: Layout, digest: string, size: number | undefined): Promise<void> {
  const partial = layout.incompleteBlob(digest);
  const aside = temporaryName(partial);
  try {
    await rename(partial, aside);
  } catch (error) {
    if (!isMissing(error)) throw error;
    await removeIfPresent(layout.blobProgress(digest)); // a record without its file
    return;
  }
  try {
    const { regions, length } = await keptRegions(layout, digest, aside, size);
    if (length === undefined) await removeIfPresent(layout.blobProgress(digest));
    await copyRegions(aside, partial, regions, length).catch(async (error: unknown) => {
      // A copy cut short (a full disk) is not resumed from: the download starts over.
      await removeIfPresent(partial);
      await removeIfPresent(layout.blobProgress(digest));
      throw error;
    });
  } finally {
    await removeIfPresent(aside);
  }
}
