import { bareName, idPrefix, parseReference, type ReferenceOptions } from "../reference.ts";
import { bytesToDownload, downloadBlob, hasBlob, putBlob, type BlobDownload } from "./blobs.ts";
import { collectBlobs } from "./collect.ts";
import { freeSpace } from "./files.ts";
import { layout as layoutOf, type Layout } from "./layout.ts";
import { createLeases } from "./leases.ts";
import { LOCK_HEARTBEAT, lockHeartbeat, withLock } from "./lock-file.ts";
import { putManifest, removeManifest } from "./manifests.ts";
import { blobsOf, knownIndex, loadIndex, readIndex, updateIndex, type IndexEntry, type ModelConfig } from "./model-index.ts";
import { findUnused, removeUnused, type Unused, type UnusedRule } from "./sweep.ts";

// The model store: blobs, manifests and the index behind one object, shared with any other
// process on the same folder. Models are added only after all their blobs are verified on disk;
// deleting removes the index entry first, then the blobs that no model names and no process (a
// pull, a runner, here or in another process on the store) still uses.

export type { ModelConfig } from "./model-index.ts";

export type StoredModel = {
  id: string;
  tags: string[];
  created: number;
  config: ModelConfig;
  /** Absolute path of the weights blob, read in place. */
  ggufPath: string;
  /** Weights split in several GGUF files: the others, in order (absolute blob paths). */
  shardPaths?: string[];
  mmprojPath?: string;
};

/** A model to record; without a tag it is listed untagged (a load whose client tags it next, as DMR's does). */
export type NewModel = Omit<IndexEntry, "id" | "tags"> & { manifest: Uint8Array; tag: string | undefined };

export type Removal = { untagged: string[]; deleted?: string };

export type StoreOptions = {
  /** Free bytes on the filesystem of `path`, undefined when unknown; statfs by default (tests give their own). */
  freeSpace?: (path: string) => Promise<number | undefined>;
  /**
   * How long a lock's holder may stay silent before another process judges it gone and takes the
   * lock over (30 s by default); every process on the store must use the same.
   */
  lockStaleMs?: number;
};

export type ModelStore = {
  readonly root: string;
  readonly layout: Layout;
  readonly referenceOptions: ReferenceOptions;
  /**
   * Finds a model by name (normalised as the API does), id or short id; throws 400 on a malformed
   * name. `recentMs`: the index as looked at that recently will do (a request to serve; see
   * SERVING_LOOK_MS), and a name not found there is looked for again at once.
   */
  resolve(reference: string, options?: { recentMs?: number }): Promise<StoredModel | undefined>;
  list(): Promise<StoredModel[]>;
  hasBlob(digest: string): Promise<boolean>;
  downloadBlob(download: BlobDownload): Promise<void>;
  /** Bytes still to download for these blobs: absent ones, less what their partial files hold (parts included). */
  bytesMissing(blobs: { digest: string; size: number }[]): Promise<number>;
  /** Free bytes where the store writes, undefined when that cannot be known. */
  freeSpace(): Promise<number | undefined>;
  putBlob(data: Uint8Array): Promise<string>;
  /** Keeps blobs from being collected, by any process on the store, while a pull that needs them runs. */
  pin(digests: string[]): Promise<() => void>;
  /**
   * Marks a runner's files (those of its paths that are blobs of the store) as served until the
   * returned function is called; rejects when one is gone (its model was deleted meanwhile). Once
   * released, a blob whose model was deleted while it was served is removed.
   */
  serve(paths: string[]): Promise<() => void>;
  /** Removes blobs that earlier collections had to leave (another process served them then). */
  collectOrphans(): Promise<void>;
  /** Drops this store's holds (its lease), when the process stops. */
  close(): Promise<void>;
  /** Records a model whose blobs are all present; the tag moves to it from any other model. */
  add(model: NewModel): Promise<StoredModel>;
  addTag(id: string, tag: string): Promise<StoredModel>;
  /** Untags `tag`, or every tag when `tag` is undefined; deletes the model once it has no tags. */
  remove(id: string, tag: string | undefined): Promise<Removal>;
  /** What no model uses and no operation here holds (see sweep.ts); incomplete downloads count once this old. */
  unused(incompleteOlderThanMs: number): Promise<Unused>;
  /** Removes what `unused` counts, in turn with the index's other changes. */
  removeUnused(incompleteOlderThanMs: number): Promise<Unused>;
};

function toStored(layout: Layout, entry: IndexEntry): StoredModel {
  return {
    id: entry.id,
    tags: [...entry.tags],
    created: entry.created,
    config: entry.config,
    ggufPath: layout.blob(entry.files.gguf[0]!),
    ...(entry.files.gguf.length > 1 ? { shardPaths: entry.files.gguf.slice(1).map(layout.blob) } : {}),
    ...(entry.files.mmproj ? { mmprojPath: layout.blob(entry.files.mmproj) } : {}),
  };
}

/** Names remembered per index: enough for every name in use, bounded against a client sending random ones. */
const RESOLVED_PER_INDEX = 1024;

/** A model handed to many requests at once: none may change it for the others. */
function frozen(model: StoredModel): StoredModel {
  Object.freeze(model.tags);
  return Object.freeze(model);
}

/** Id, then exact tag, then (for a name without `/`) a unique model with that bare repository name. */
export function findEntry(models: IndexEntry[], reference: string, options: ReferenceOptions): IndexEntry | undefined {
  const id = idPrefix(reference);
  if (id) {
    const matches = models.filter((m) => m.id.startsWith(id));
    if (matches.length === 1) return matches[0];
  }
  const { key } = parseReference(reference, options);
  const tagged = models.find((m) => m.tags.includes(key));
  if (tagged || reference.includes("/")) return tagged;
  // `smollm2` finds `myorg/smollm2:v1`; `smollm2:v1` must match the tag too.
  const [bare, tag] = reference.trim().toLowerCase().split(/[:@]/);
  const byName = models.filter((m) => m.tags.some((t) => bareName(t) === bare && (!tag || t.toLowerCase().endsWith(`:${tag}`))));
  return byName.length === 1 ? byName[0] : undefined;
}

export function createModelStore(root: string, referenceOptions: ReferenceOptions = {}, options: StoreOptions = {}): ModelStore {
  const layout = layoutOf(root);
  const leases = createLeases(layout.leasesDir);
  const heartbeat = options.lockStaleMs === undefined ? LOCK_HEARTBEAT : lockHeartbeat(options.lockStaleMs);
  // Every inference request resolves the name it was sent: answered from the index as last read
  // (a new index, after any change, starts afresh), without parsing the name again.
  const resolved = new WeakMap<IndexEntry[], Map<string, StoredModel | undefined>>();

  const resolveIn = (models: IndexEntry[], reference: string): StoredModel | undefined => {
    let found = resolved.get(models);
    if (!found) resolved.set(models, (found = new Map()));
    if (found.has(reference)) return found.get(reference);
    const entry = findEntry(models, reference, referenceOptions);
    const model = entry && frozen(toStored(layout, entry));
    if (found.size < RESOLVED_PER_INDEX) found.set(reference, model);
    return model;
  };

  /** Whether the blob is there, asked under its lock: a collection does not remove it meanwhile. */
  const stillThere = (digest: string) => withLock(layout.blobLock(digest), { pollMs: 50, heartbeat }, () => hasBlob(layout, digest));

  const unusedRule = async (models: IndexEntry[], incompleteOlderThanMs: number): Promise<UnusedRule> => ({
    referenced: new Set(models.flatMap((m) => [m.id, ...blobsOf(m)])),
    held: await leases.held(),
    incompleteOlderThanMs,
    now: Date.now(),
  });

  return {
    root,
    layout,
    referenceOptions,
    // The index as last read, when the file still holds it, answers without a read's async frames;
    // else the file is read (not looked at a second time first).
    resolve(reference, { recentMs = 0 } = {}) {
      let known: IndexEntry[] | undefined;
      try {
        known = knownIndex(layout, false, recentMs);
        // Not there as recently looked at: another process may have added it since.
        if (known && recentMs > 0 && !resolveIn(known, reference)) known = knownIndex(layout, true);
      } catch (error) {
        return Promise.reject(error); // a stat that failed (EACCES...), as a read's failure
      }
      return known ? Promise.resolve(resolveIn(known, reference)) : loadIndex(layout).then((models) => resolveIn(models, reference));
    },
    async list() {
      return (await readIndex(layout)).map((entry) => toStored(layout, entry));
    },
    hasBlob: (digest) => hasBlob(layout, digest),
    downloadBlob: (download) => downloadBlob(layout, download, heartbeat),
    async bytesMissing(blobs) {
      let missing = 0;
      for (const { digest, size } of new Map(blobs.map((b) => [b.digest, b])).values()) missing += await bytesToDownload(layout, digest, size);
      return missing;
    },
    freeSpace: () => (options.freeSpace ?? freeSpace)(layout.blobsDir),
    putBlob: (data) => putBlob(layout, data),
    pin: (digests) => leases.hold(digests),
    async serve(paths) {
      const digests = paths.map(layout.digestOfBlob).filter((d): d is string => d !== undefined);
      const release = await leases.hold(digests);
      const served = () => {
        release();
        // A collection that fails leaves the blob marked, for the next one.
        void collectBlobs(layout, leases, digests, heartbeat).catch(() => {});
      };
      for (const digest of digests) {
        if (!(await stillThere(digest).catch(() => false))) {
          served();
          throw new Error(`the model's file ${layout.blob(digest)} is gone: the model was deleted, or the file removed (pull the model again)`);
        }
      }
      return served;
    },
    async collectOrphans() {
      await leases.held(); // which also removes the leases of processes gone
      await collectBlobs(layout, leases, [], heartbeat);
    },
    close: () => leases.close(),
    add({ manifest, tag, ...rest }) {
      // Under the index's lock: a delete of the same model (which removes its manifest) waits.
      return updateIndex(layout, async (models) => {
        const id = await putManifest(layout, manifest);
        for (const digest of blobsOf({ ...rest, id, tags: [] })) {
          if (!(await hasBlob(layout, digest))) throw new Error(`blob ${digest} is missing: the model is not recorded`);
        }
        const others = models.filter((m) => m.id !== id).map((m) => ({ ...m, tags: m.tags.filter((t) => t !== tag) }));
        const existing = models.find((m) => m.id === id);
        const tags = [...new Set([...(existing?.tags ?? []), ...(tag === undefined ? [] : [tag])])];
        const entry: IndexEntry = { ...rest, id, created: existing?.created ?? rest.created, tags };
        return { models: [...others, entry], result: toStored(layout, entry) };
      }, heartbeat);
    },
    addTag(id, tag) {
      return updateIndex(layout, (models) => {
        const target = models.find((m) => m.id === id);
        if (!target) throw new Error(`model ${id} vanished`);
        const updated = models.map((m) =>
          m.id === id ? { ...m, tags: [...new Set([...m.tags, tag])] } : { ...m, tags: m.tags.filter((t) => t !== tag) },
        );
        return { models: updated, result: toStored(layout, updated.find((m) => m.id === id)!) };
      }, heartbeat);
    },
    async remove(id, tag) {
      let removed: IndexEntry | undefined;
      const result = await updateIndex(layout, async (models) => {
        const entry = models.find((m) => m.id === id);
        if (!entry) return { models, result: { untagged: [] } as Removal };
        const untagged = tag === undefined ? entry.tags : entry.tags.filter((t) => t === tag);
        const tags = entry.tags.filter((t) => !untagged.includes(t));
        if (tags.length > 0) {
          return { models: models.map((m) => (m === entry ? { ...m, tags } : m)), result: { untagged } };
        }
        removed = entry;
        await removeManifest(layout, id);
        return { models: models.filter((m) => m !== entry), result: { untagged, deleted: id } };
      }, heartbeat);
      if (removed) await collectBlobs(layout, leases, blobsOf(removed), heartbeat);
      return result;
    },
    unused: async (age) => findUnused(layout, await unusedRule(await readIndex(layout, { fresh: true }), age)),
    // Under the index's lock: no model is recorded meanwhile that would name a blob judged unused.
    removeUnused: (age) =>
      updateIndex(layout, async (models) => ({ models, result: await removeUnused(layout, leases, await unusedRule(models, age), heartbeat) }), heartbeat),
  };
}
