import { statSync, type Stats } from "node:fs";
import { mkdir, open, stat, type FileHandle } from "node:fs/promises";
import { setImmediate } from "node:timers";
import * as z from "zod";
import { isMissing, writeFileAtomic } from "./files.ts";
import type { Layout } from "./layout.ts";
import { LOCK_HEARTBEAT, withLock, type HeldLock } from "./lock-file.ts";
import type { Heartbeat } from "./owner.ts";

// The index (`models.json`): which models the store holds, their tags, configs and blobs. It is
// only ever replaced whole (temporary file, then rename), after every blob it names is in place,
// so a crash at any moment leaves the old index or the new one, and every model it lists loads.

const Digest = z.string().regex(/^sha256:[0-9a-f]{64}$/);

export const ModelConfig = z.looseObject({
  format: z.string().optional(),
  quantization: z.string().optional(),
  parameters: z.string().optional(),
  architecture: z.string().optional(),
  size: z.string().optional(),
  context_size: z.number().optional(),
  gguf: z.record(z.string(), z.string()).optional(),
});
export type ModelConfig = z.infer<typeof ModelConfig>;

const Entry = z.object({
  id: Digest,
  tags: z.array(z.string()),
  created: z.number(),
  config: ModelConfig,
  files: z.object({
    gguf: z.array(Digest).min(1),
    mmproj: Digest.optional(),
    chatTemplate: Digest.optional(),
    license: Digest.optional(),
    /** The artifact's config blob, kept so that the model can be pushed as it was pulled. */
    config: Digest.optional(),
  }),
});
export type IndexEntry = z.infer<typeof Entry>;

/** Every blob a model's record names. */
export const blobsOf = (entry: IndexEntry) =>
  [entry.files.gguf, entry.files.mmproj, entry.files.chatTemplate, entry.files.license, entry.files.config].flat().filter((d): d is string => !!d);

const IndexFile = z.object({ version: z.literal(1), models: z.array(Entry) });

// The index as last read, per store root, with the file's identity then. Every inference request
// resolves its model here, so it must not cost a read and a parse each time; yet other processes
// may change the file (replicas on one volume), so each call looks at the file's identity: a
// rename over it (how every writer replaces it) changes its inode, and any write its size, mtime
// or ctime. Callers do not mutate what they get.
const cache = new Map<string, { identity: Identity; models: IndexEntry[] }>();

const NONE: IndexEntry[] = Object.freeze([]) as unknown as IndexEntry[];

type Identity = Pick<Stats, "ino" | "size" | "mtimeMs" | "ctimeMs">;

const identityOf = ({ ino, size, mtimeMs, ctimeMs }: Stats): Identity => ({ ino, size, mtimeMs, ctimeMs });
// Compared field by field: no string is built on every request.
const same = (a: Identity, b: Stats) => a.ino === b.ino && a.size === b.size && a.mtimeMs === b.mtimeMs && a.ctimeMs === b.ctimeMs;

// Roots whose file was looked at in this turn of the event loop: requests handled in one turn
// arrived together, and share one look (under load, many do).
const lookedAt = new Set<string>();
const forgetLooks = () => lookedAt.clear();
// When each root's file was last looked at and found unchanged (performance.now()), for lookups
// that accept a look that recent (see knownIndex's `recentMs`).
const lookedAtMs = new Map<string, number>();

/** The index as the file holds it; `fresh`: looked at now, even if it was in this turn (a decision to change the store rests on it). */
export async function readIndex(layout: Layout, { fresh = false } = {}): Promise<IndexEntry[]> {
  return knownIndex(layout, fresh) ?? loadIndex(layout);
}

/**
 * The index as last read, when the file still holds it (or was looked at in this turn), without a
 * promise: what every inference request asks. Undefined when the file must be read (again); the
 * empty index when there is no file. `fresh`: as readIndex's. `recentMs`: a look that recent will
 * do too. Under Bun, which handles about one request a turn, a look per turn (a stat and the turn's
 * setImmediate) cost 11-17 µs of the main thread per request (docs/benchmarks.md).
 */
export function knownIndex(layout: Layout, fresh = false, recentMs = 0): IndexEntry[] | undefined {
  const cached = cache.get(layout.root);
  if (cached && !fresh && (lookedAt.has(layout.root) || lookedRecently(layout.root, recentMs))) return cached.models;
  // A synchronous stat: through the thread pool (async) it costs ten times the CPU of the stat
  // itself. On NFS it is answered from the attribute cache (see the docs).
  const stats = statSync(layout.indexFile, { throwIfNoEntry: false });
  if (!stats) return NONE;
  if (!cached || !same(cached.identity, stats)) return undefined;
  if (lookedAt.size === 0) setImmediate(forgetLooks);
  lookedAt.add(layout.root);
  lookedAtMs.set(layout.root, performance.now());
  return cached.models;
}

const lookedRecently = (root: string, recentMs: number) => recentMs > 0 && performance.now() - (lookedAtMs.get(root) ?? Number.NEGATIVE_INFINITY) < recentMs;

/** Reads the file and its identity from one open file, so that the two agree (where knownIndex has no answer). */
export async function loadIndex(layout: Layout): Promise<IndexEntry[]> {
  let file: FileHandle;
  try {
    file = await open(layout.indexFile, "r");
  } catch (error) {
    if (isMissing(error)) return NONE;
    throw error;
  }
  try {
    const identity = identityOf(await file.stat());
    const models = IndexFile.parse(JSON.parse(await file.readFile("utf8"))).models;
    cache.set(layout.root, { identity, models });
    return models;
  } finally {
    await file.close();
  }
}

/** Replaces the file, the index's lock seen to be ours right before the rename (else a LockLostError, the file untouched). */
async function writeIndex(layout: Layout, models: IndexEntry[], lock: HeldLock): Promise<void> {
  const beforeRename = () => lock.confirm({ fresh: true });
  await writeFileAtomic(layout.indexFile, `${JSON.stringify({ version: 1, models }, null, 2)}\n`, { beforeRename });
  // Under the lock no other process writes it: what is there now is what was written.
  cache.set(layout.root, { identity: identityOf(await stat(layout.indexFile)), models });
}

// Read-modify-write of the index: queued per store root within this process, and under the
// index's lock across processes, reading the file afresh once the lock is held, so that no two
// writers (pulls, deletes, tags, here or in another process) lose each other's change. A writer
// that stalled while holding the lock (judged gone, its lock broken and another change written
// meanwhile) finds its lock lost before it renames, and its change is refused (a LockLostError):
// it would replace a file it did not read. No mark of the takeover is kept: writing is all the
// stalled writer could still do.
const queues = new Map<string, Promise<unknown>>();

/** The index lock is held for a read and a write of a small file: looked at often. */
const INDEX_LOCK_POLL_MS = 20;

export function updateIndex<T>(
  layout: Layout,
  change: (models: IndexEntry[]) => { models: IndexEntry[]; result: T } | Promise<{ models: IndexEntry[]; result: T }>,
  heartbeat: Heartbeat = LOCK_HEARTBEAT,
): Promise<T> {
  const previous = queues.get(layout.root) ?? Promise.resolve();
  const next = previous.catch(() => {}).then(async () => {
    await mkdir(layout.root, { recursive: true });
    return withLock(layout.indexLock, { pollMs: INDEX_LOCK_POLL_MS, heartbeat }, async (lock) => {
      await lock.forgetTakeover();
      // A copy: a change that throws half-way must not leave its edits in the cache.
      const { models, result } = await change(structuredClone(await readIndex(layout, { fresh: true })));
      await writeIndex(layout, models, lock);
      return result;
    });
  });
  queues.set(layout.root, next);
  void next.finally(() => {
    if (queues.get(layout.root) === next) queues.delete(layout.root);
  }).catch(() => {});
  return next;
}
