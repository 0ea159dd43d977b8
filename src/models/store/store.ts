import { bareName, idPrefix, parseReference, type ReferenceOptions } from "../reference.ts";
import { bytesToDownload, downloadBlob, hasBlob, putBlob, type BlobDownload } from "./blobs.ts";
import { freeSpace, removeIfPresent } from "./files.ts";
import { layout as layoutOf, type Layout } from "./layout.ts";
import { putManifest, removeManifest } from "./manifests.ts";
import { readIndex, updateIndex, type IndexEntry, type ModelConfig } from "./model-index.ts";

// The model store: blobs, manifests and the index behind one object. Models are added only after
// all their blobs are verified on disk; deleting removes the index entry first, then the files no
// other model (and no running pull) still uses.

export type { ModelConfig } from "./model-index.ts";

export type StoredModel = {
  id: string;
  tags: string[];
  created: number;
  config: ModelConfig;
  /** Absolute path of the weights blob, read in place. */
  ggufPath: string;
  mmprojPath?: string;
};

export type NewModel = Omit<IndexEntry, "id" | "tags"> & { manifest: Uint8Array; tag: string };

export type Removal = { untagged: string[]; deleted?: string };

export type StoreOptions = {
  /** Free bytes on the filesystem of `path`, undefined when unknown; statfs by default (tests give their own). */
  freeSpace?: (path: string) => Promise<number | undefined>;
};

export type ModelStore = {
  readonly root: string;
  readonly layout: Layout;
  readonly referenceOptions: ReferenceOptions;
  /** Finds a model by name (normalised as the API does), id or short id; throws 400 on a malformed name. */
  resolve(reference: string): Promise<StoredModel | undefined>;
  list(): Promise<StoredModel[]>;
  hasBlob(digest: string): Promise<boolean>;
  downloadBlob(download: BlobDownload): Promise<void>;
  /** Bytes still to download for these blobs: absent ones, less what their partial files hold (parts included). */
  bytesMissing(blobs: { digest: string; size: number }[]): Promise<number>;
  /** Free bytes where the store writes, undefined when that cannot be known. */
  freeSpace(): Promise<number | undefined>;
  putBlob(data: Uint8Array): Promise<string>;
  /** Keeps blobs from being collected while a pull that needs them runs. */
  pin(digests: string[]): () => void;
  /** Records a model whose blobs are all present; the tag moves to it from any other model. */
  add(model: NewModel): Promise<StoredModel>;
  addTag(id: string, tag: string): Promise<StoredModel>;
  /** Untags `tag`, or every tag when `tag` is undefined; deletes the model once it has no tags. */
  remove(id: string, tag: string | undefined): Promise<Removal>;
};

function toStored(layout: Layout, entry: IndexEntry): StoredModel {
  return {
    id: entry.id,
    tags: [...entry.tags],
    created: entry.created,
    config: entry.config,
    ggufPath: layout.blob(entry.files.gguf[0]!),
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

const blobsOf = (entry: IndexEntry) =>
  [entry.files.gguf, entry.files.mmproj, entry.files.chatTemplate, entry.files.license].flat().filter((d): d is string => !!d);

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
  const pins = new Map<string, number>();
  // Every inference request resolves the name it was sent: answered from the index as last read
  // (a new index, after any change, starts afresh), without parsing the name again.
  const resolved = new WeakMap<IndexEntry[], Map<string, StoredModel | undefined>>();

  async function collect(removed: IndexEntry, remaining: IndexEntry[]): Promise<void> {
    const used = new Set(remaining.flatMap(blobsOf));
    for (const digest of blobsOf(removed)) {
      if (!used.has(digest) && !pins.has(digest)) await removeIfPresent(layout.blob(digest));
    }
    if (!remaining.some((m) => m.id === removed.id)) await removeManifest(layout, removed.id);
  }

  return {
    root,
    layout,
    referenceOptions,
    async resolve(reference) {
      const models = await readIndex(layout);
      let found = resolved.get(models);
      if (!found) resolved.set(models, (found = new Map()));
      if (found.has(reference)) return found.get(reference);
      const entry = findEntry(models, reference, referenceOptions);
      const model = entry && frozen(toStored(layout, entry));
      if (found.size < RESOLVED_PER_INDEX) found.set(reference, model);
      return model;
    },
    async list() {
      return (await readIndex(layout)).map((entry) => toStored(layout, entry));
    },
    hasBlob: (digest) => hasBlob(layout, digest),
    downloadBlob: (download) => downloadBlob(layout, download),
    async bytesMissing(blobs) {
      let missing = 0;
      for (const { digest, size } of new Map(blobs.map((b) => [b.digest, b])).values()) missing += await bytesToDownload(layout, digest, size);
      return missing;
    },
    freeSpace: () => (options.freeSpace ?? freeSpace)(layout.blobsDir),
    putBlob: (data) => putBlob(layout, data),
    pin(digests) {
      for (const d of digests) pins.set(d, (pins.get(d) ?? 0) + 1);
      return () => {
        for (const d of digests) {
          const count = (pins.get(d) ?? 1) - 1;
          if (count > 0) pins.set(d, count);
          else pins.delete(d);
        }
      };
    },
    async add({ manifest, tag, ...rest }) {
      const id = await putManifest(layout, manifest);
      for (const digest of blobsOf({ ...rest, id, tags: [] })) {
        if (!(await hasBlob(layout, digest))) throw new Error(`blob ${digest} is missing: the model is not recorded`);
      }
      return updateIndex(layout, (models) => {
        const others = models.filter((m) => m.id !== id).map((m) => ({ ...m, tags: m.tags.filter((t) => t !== tag) }));
        const existing = models.find((m) => m.id === id);
        const entry: IndexEntry = { ...rest, id, created: existing?.created ?? rest.created, tags: [...new Set([...(existing?.tags ?? []), tag])] };
        return { models: [...others, entry], result: toStored(layout, entry) };
      });
    },
    addTag(id, tag) {
      return updateIndex(layout, (models) => {
        const target = models.find((m) => m.id === id);
        if (!target) throw new Error(`model ${id} vanished`);
        const updated = models.map((m) =>
          m.id === id ? { ...m, tags: [...new Set([...m.tags, tag])] } : { ...m, tags: m.tags.filter((t) => t !== tag) },
        );
        return { models: updated, result: toStored(layout, updated.find((m) => m.id === id)!) };
      });
    },
    async remove(id, tag) {
      let removed: IndexEntry | undefined;
      let remaining: IndexEntry[] = [];
      const result = await updateIndex(layout, (models) => {
        const entry = models.find((m) => m.id === id);
        if (!entry) return { models, result: { untagged: [] } as Removal };
        const untagged = tag === undefined ? entry.tags : entry.tags.filter((t) => t === tag);
        const tags = entry.tags.filter((t) => !untagged.includes(t));
        if (tags.length > 0) {
          return { models: models.map((m) => (m === entry ? { ...m, tags } : m)), result: { untagged } };
        }
        removed = entry;
        remaining = models.filter((m) => m !== entry);
        return { models: remaining, result: { untagged, deleted: id } };
      });
      if (removed) await collect(removed, remaining);
      return result;
    },
  };
}
