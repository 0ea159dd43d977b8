import { readdir, writeFile } from "node:fs/promises";
import { hasBlob } from "./blobs.ts";
import { isMissing, removeIfPresent } from "./files.ts";
import type { Layout } from "./layout.ts";
import type { Leases } from "./leases.ts";
import { acquireLock, LOCK_HEARTBEAT, type HeldLock } from "./lock-file.ts";
import type { Heartbeat } from "./owner.ts";
import { blobsOf, readIndex } from "./model-index.ts";
import { isDigest } from "../reference.ts";

// Removing blobs no model uses any more: those of a deleted model, those a runner served once it
// stops (their model may have been deleted meanwhile, by another process) and, at start, those
// that a collection could not remove before. A blob is removed under its lock (so never while a
// pull of it runs), only when the index as it is now names it in no model and no live process
// holds it (leases.ts). One that another process still serves is marked `.orphan` instead: that
// process removes it when its runner stops, or any process at its next collection.

const ORPHAN = ".orphan";

async function markedOrphans(layout: Layout): Promise<string[]> {
  try {
    const names = await readdir(layout.blobsDir);
    return names.filter((n) => n.endsWith(ORPHAN)).map((n) => `sha256:${n.slice(0, -ORPHAN.length)}`).filter(isDigest);
  } catch (error) {
    if (isMissing(error)) return [];
    throw error;
  }
}

const mark = (layout: Layout, digest: string) => writeFile(layout.orphanMark(digest), "").catch(() => {});

/** The blob's lock if no live process holds it (a stale one is broken); undefined otherwise. */
export async function lockIfFree(layout: Layout, digest: string, heartbeat: Heartbeat = LOCK_HEARTBEAT): Promise<HeldLock | undefined> {
  try {
    return await acquireLock(layout.blobLock(digest), { pollMs: 0, heartbeat, waiting: async () => true });
  } catch (error) {
    if (isMissing(error)) return undefined; // no blobs folder: nothing to remove
    throw error;
  }
}

export async function collectBlobs(layout: Layout, leases: Leases, candidates: string[], heartbeat: Heartbeat = LOCK_HEARTBEAT): Promise<void> {
  // Most calls (a runner stopped, its model still there) end here, on the index as cached.
  const listed = new Set((await readIndex(layout)).flatMap(blobsOf));
  const digests = new Set([...candidates.filter((d) => !listed.has(d)), ...(await markedOrphans(layout))]);
  const locks = new Map<string, HeldLock>();
  try {
    for (const digest of digests) {
      const lock = await lockIfFree(layout, digest, heartbeat);
      // A process holds it to download it, or to see that it is there: a later collection decides.
      if (lock) locks.set(digest, lock);
      else await mark(layout, digest);
    }
    if (locks.size === 0) return;
    // Read once the locks are held: a pull that needs one of these blobs holds it (its lease)
    // before it takes the blob's lock to see whether the blob is there.
    const used = new Set((await readIndex(layout, { fresh: true })).flatMap(blobsOf));
    const held = await leases.held();
    for (const digest of locks.keys()) {
      if (used.has(digest)) await removeIfPresent(layout.orphanMark(digest));
      else if (!held.has(digest)) {
        await removeIfPresent(layout.blob(digest));
        await removeIfPresent(layout.orphanMark(digest));
      } else if (await hasBlob(layout, digest)) await mark(layout, digest);
    }
  } finally {
    await Promise.all([...locks.values()].map((lock) => lock.release()));
  }
}
